#!/usr/bin/env python3
"""The peer column of `kiln bench`: HF transformers on the same checkpoint, on the same GPU.

Loads a Kiln/HF Qwen3.5 checkpoint directory (e.g. the random-weight one that
`kiln model init --preset qwen3.5-4b --out DIR` writes) with AutoModelForCausalLM in bf16 on
cuda, and times, with torch.cuda.synchronize() around each measurement:

  decode batch 1:  a 512-token prompt through the model with its cache, then 64 greedy steps,
                   one token each, reusing the cache (the steps are timed, not the prompt);
  prefill 4096:    one forward of a 4096-token prompt keeping only the last position's logits.

Each is run once to warm up, then --repeats times; the median is reported. Writes JSON to
stdout (or --out), which `kiln bench --peer-json FILE` includes as its `peer` field.

With --train, instead: LoRA SFT with PEFT, as `kiln bench train` runs it (the peer that the training
throughput target is measured beside): rank R with alpha 2R on every target Kiln trains
(q/k/v/o_proj, in_proj_qkv, in_proj_z, out_proj, gate/up/down_proj), --sequences random
sequences of --seq-tokens tokens a step with the second half as targets (the very tokens of
`kiln bench train`: the same generator, so the first losses agree), gradient checkpointing
per layer (Kiln's --checkpoint-every 1), AdamW (PEFT has no Muon; the optimizer's share of a
LoRA step is small either way). Forward, backward and optimizer step are timed per step; the
first step is left out of the median. `kiln bench train --peer-json FILE` includes the result.

    python3 tools/bench_hf_peer.py --model DIR [--out FILE] [--repeats 3]
    python3 tools/bench_hf_peer.py --model DIR --train [--sequences 4 --seq-tokens 1024 --steps 5 --lora-rank 16]

Runs on the accelerator machine only (torch, transformers; no network).
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def prompt_ids(n, vocab, salt):
    # Distinct, deterministic ids (the model is random: their values do not matter).
    return torch.tensor([[(i * 7919 + salt) % vocab for i in range(n)]], dtype=torch.long, device="cuda")


def decode_run(model, prompt, steps):
    """Prefill `prompt` with the cache, then `steps` greedy single-token steps; returns their time."""
    with torch.inference_mode():
        out = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)

        def loop():
            nonlocal past, nxt
            for _ in range(steps):
                o = model(input_ids=nxt, past_key_values=past, use_cache=True)
                past = o.past_key_values
                nxt = o.logits[:, -1].argmax(-1, keepdim=True)

        return timed(loop)


def prefill_run(model, prompt):
    with torch.inference_mode():
        return timed(lambda: model(input_ids=prompt, use_cache=False, logits_to_keep=1))


# The modules Kiln's LoRA targets (model/lora_config.cc), as PEFT's target_modules names them.
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj",
                "gate_proj", "up_proj", "down_proj"]


def kiln_train_tokens(sequences, seq_tokens, vocab):
    """The random sequences `kiln bench train` trains on (cli/cmd_bench_train.cc's generator)."""
    from bench_hf_rl_peer import kiln_token_rows

    return torch.tensor(kiln_token_rows(sequences, seq_tokens, vocab), dtype=torch.long, device="cuda")


def train_run(model, a):
    """LoRA SFT steps with PEFT; returns the per-step seconds and losses."""
    from peft import LoraConfig, get_peft_model

    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    cfg = LoraConfig(r=a.lora_rank, lora_alpha=2 * a.lora_rank, lora_dropout=0.0, target_modules=LORA_TARGETS)
    model = get_peft_model(model, cfg)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    vocab = model.config.vocab_size
    ids = kiln_train_tokens(a.sequences, a.seq_tokens, vocab)
    labels = ids.clone()
    labels[:, : a.seq_tokens // 2] = -100  # the second half are the targets
    seconds, losses = [], []

    def step():
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())

    for _ in range(a.steps):
        seconds.append(timed(step))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return seconds, losses, trainable


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--prefill", type=int, default=4096)
    ap.add_argument("--train", action="store_true", help="LoRA SFT throughput with PEFT instead")
    ap.add_argument("--sequences", type=int, default=4)
    ap.add_argument("--seq-tokens", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lora-rank", type=int, default=16)
    a = ap.parse_args()

    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).to("cuda")
    if not a.train:
        model.eval()
    load_s = time.perf_counter() - t
    vocab = model.config.vocab_size
    # Whether the GDN layers found their fused kernels (flash-linear-attention, causal-conv1d);
    # without them transformers runs its torch implementation.
    fast = {}
    for name in ("fla", "causal_conv1d"):
        try:
            __import__(name)
            fast[name] = True
        except ImportError:
            fast[name] = False
    common = {
        "device": torch.cuda.get_device_name(),
        "model_dir": a.model,
        "dtype": "bfloat16",
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "gdn_fast_path_modules": fast,
        "load_seconds": load_s,
        "command": " ".join(sys.argv),
    }
    if a.train:
        import peft

        seconds, losses, trainable = train_run(model, a)
        steady = sorted(seconds[1:] or seconds)
        step_s = steady[len(steady) // 2]
        tokens = a.sequences * a.seq_tokens
        result = {
            "framework": f"transformers {transformers.__version__}, peft {peft.__version__}, torch {torch.__version__}",
            **common,
            "train_sft": {"sequences_per_step": a.sequences, "tokens_per_sequence": a.seq_tokens,
                          "tokens_per_step": tokens, "lora_rank": a.lora_rank, "lora_alpha": 2 * a.lora_rank,
                          "target_modules": LORA_TARGETS, "trainable_parameters": trainable,
                          "gradient_checkpointing": "every layer", "optimizer": "AdamW (torch)",
                          "step_seconds": seconds, "median_step_seconds": step_s,
                          "tokens_per_s": tokens / step_s, "losses": losses},
            "peak_memory_bytes": torch.cuda.max_memory_allocated(),
        }
        write(result, a.out)
        return

    decode_s = []
    for rep in range(a.repeats + 1):
        s = decode_run(model, prompt_ids(a.prompt, vocab, 13 + rep), a.decode)
        if rep:
            decode_s.append(s)
    prefill_s = []
    for rep in range(a.repeats + 1):
        s = prefill_run(model, prompt_ids(a.prefill, vocab, 29 + rep))
        if rep:
            prefill_s.append(s)
    dec = statistics.median(decode_s)
    pre = statistics.median(prefill_s)
    result = {
        "framework": f"transformers {transformers.__version__}, torch {torch.__version__}",
        **common,
        "decode_batch1": {"prompt_tokens": a.prompt, "tokens": a.decode, "seconds": dec,
                          "tokens_per_s": a.decode / dec, "seconds_each": decode_s},
        "prefill": {"tokens": a.prefill, "seconds": pre, "tokens_per_s": a.prefill / pre,
                    "seconds_each": prefill_s},
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
        "repeats": a.repeats,
    }
    write(result, a.out)


def write(result, out):
    text = json.dumps(result, indent=2)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
