#!/usr/bin/env python3
"""The peer column of `kiln bench train --method grpo|opd`: the same online iteration with HF
transformers + PEFT on the same checkpoint and GPU (generate, then train).

One iteration, as Kiln's:
  sampling:         --prompts random-token prompts of --prompt-tokens tokens (the very tokens of
                    `kiln bench train`: the same generator and seed), each --group times, through
                    model.generate with the LoRA adapter active, temperature 1, no top-k or top-p,
                    exactly --max-tokens new tokens each (min_new_tokens = max_new_tokens: no stop
                    at end-of-text), one batch of prompts x group rows;
  scoring (grpo):   the reward Kiln's bench uses: the fraction of a completion's token ids that are even;
  teacher (opd):    the base model (adapter disabled) scores every completion token
                    (log-probabilities of prompt + completion, one group per forward);
  forward/backward: one group per micro-batch, the policy's log-probabilities of the completion
                    tokens (logits_to_keep: only the completion's positions), the loss (GRPO:
                    Dr. GRPO's advantage r - mean(group) times the ratio exp(logp - logp.detach());
                    OPD: the teacher - student advantage per token likewise), summed over tokens
                    and divided by the iteration's completion tokens, gradients accumulated over the
                    groups; gradient checkpointing per layer (Kiln's --checkpoint-every 1);
  optimizer:        the global norm clipped to 1, AdamW (PEFT has no Muon), gradients zeroed.
The old policy's log-probabilities that Kiln takes before each step are not taken here: with one
step per rollout the ratio is 1 in value, which the detached log-probabilities give for free (so
the peer does less work than Kiln, never more). Every phase is timed with torch.cuda.synchronize()
around it; one warm-up iteration, then --iterations, whose means are reported.

    python3 tools/bench_hf_rl_peer.py --model DIR --method grpo|opd [--out FILE]
        [--prompts 8 --group 8 --max-tokens 256 --prompt-tokens 64 --iterations 3 --lora-rank 16 --seed 0]
    python3 tools/bench_hf_rl_peer.py --model DIR --method grpo --dry-run   # the plan, no torch needed

`kiln bench train --method grpo|opd --peer-json FILE` includes the result as its `peer` field. Runs on
the accelerator machine (torch, transformers, peft; no network).
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def kiln_token_rows(rows, length, vocab, seed=0):
    """The random tokens of `kiln bench train`: its SFT sequences (seed 0) and its grpo/opd prompts
    (cli/cmd_bench_train.cc and cli/bench_train_online.cc share the generator)."""
    x, out = (2024 + seed) % (1 << 32), []
    for _ in range(rows):
        row = []
        for _ in range(length):
            x = (x * 1664525 + 1013904223) % (1 << 32)
            row.append((x >> 7) % vocab)
        out.append(row)
    return out


def even_token_reward(completion):
    """Kiln's built-in reward: the fraction of the completion's token ids that are even (a 1-D tensor)."""
    return (completion % 2 == 0).float().mean().item()


def model_vocab(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    return c.get("vocab_size") or c["text_config"]["vocab_size"]


def completion_logp(model, ids, completion_tokens):
    """Log-probabilities of the last `completion_tokens` tokens of each row of `ids` under `model`."""
    import torch

    logits = model(input_ids=ids, use_cache=False, logits_to_keep=completion_tokens + 1).logits[:, :-1].float()
    target = ids[:, -completion_tokens:]
    return torch.log_softmax(logits, dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)


def iteration(model, opt, a, prompts, phases):
    """One online iteration; adds each phase's seconds to `phases`."""
    import torch
    from bench_hf_peer import timed

    rows = torch.tensor([p for p in prompts for _ in range(a.group)], dtype=torch.long, device="cuda")
    eos = model.config.eos_token_id
    pad = (eos[0] if isinstance(eos, list) else eos) or 0
    state = {}

    def sample():
        model.eval()
        with torch.no_grad():
            state["ids"] = model.generate(input_ids=rows, attention_mask=torch.ones_like(rows), do_sample=True,
                                          temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=a.max_tokens,
                                          min_new_tokens=a.max_tokens, use_cache=True,
                                          pad_token_id=pad).clone()

    phases["sampling"] += timed(sample)
    ids = state["ids"]
    assert ids.shape == (a.prompts * a.group, a.prompt_tokens + a.max_tokens), ids.shape
    groups = ids.view(a.prompts, a.group, -1)
    adv = []  # per group: [group, max_tokens] advantages

    def score():
        for g in range(a.prompts):
            r = torch.tensor([even_token_reward(groups[g, i, a.prompt_tokens:]) for i in range(a.group)], device="cuda")
            adv.append((r - r.mean()).unsqueeze(-1).expand(-1, a.max_tokens))

    def teacher():
        with torch.no_grad(), model.disable_adapter():
            for g in range(a.prompts):
                adv.append(completion_logp(model, groups[g], a.max_tokens).clone())

    if a.method == "grpo":
        phases["scoring"] += timed(score)
    else:
        phases["teacher_scoring"] += timed(teacher)
    n = a.prompts * a.group * a.max_tokens

    def forward_backward():
        model.train()
        for g in range(a.prompts):
            logp = completion_logp(model, groups[g], a.max_tokens)
            g_adv = adv[g] if a.method == "grpo" else adv[g] - logp.detach()
            loss = -(g_adv * torch.exp(logp - logp.detach())).sum() / n
            loss.backward()

    def step():
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    phases["forward_backward"] += timed(forward_backward)
    phases["optimizer"] += timed(step)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--method", choices=["grpo", "opd"], required=True)
    ap.add_argument("--out")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print the iteration's plan and prompts; load nothing")
    a = ap.parse_args()
    for name in ("prompts", "group", "max_tokens", "prompt_tokens", "iterations", "lora_rank"):
        if getattr(a, name) < (2 if name == "group" else 1):
            ap.error(f"--{name.replace('_', '-')} {getattr(a, name)} is too small")

    prompts = kiln_token_rows(a.prompts, a.prompt_tokens, model_vocab(a.model), a.seed)
    plan = {"method": a.method, "prompts": a.prompts, "group_size": a.group, "max_tokens": a.max_tokens,
            "prompt_tokens": a.prompt_tokens, "iterations": a.iterations, "warmup_iterations": 1,
            "lora_rank": a.lora_rank, "lora_alpha": 2 * a.lora_rank, "sampled_tokens": a.prompts * a.group * a.max_tokens}
    if a.dry_run:
        print(json.dumps({**plan, "first_prompt_tokens": prompts[0][:8]}, indent=2))
        return

    import peft
    import torch
    import transformers
    from bench_hf_peer import LORA_TARGETS, write
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(a.seed)
    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).to("cuda")
    load_s = time.perf_counter() - t
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = get_peft_model(model, LoraConfig(r=a.lora_rank, lora_alpha=2 * a.lora_rank, lora_dropout=0.0,
                                             target_modules=LORA_TARGETS))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    names = ["sampling", "scoring" if a.method == "grpo" else "teacher_scoring", "forward_backward", "optimizer"]
    phases = {k: 0.0 for k in names}
    seconds_each = []
    for i in range(a.iterations + 1):
        before = dict(phases)
        iteration(model, opt, a, prompts, phases)
        if i == 0:  # the warm-up
            phases = {k: 0.0 for k in names}
        else:
            seconds_each.append(sum(phases[k] - before[k] for k in names))
    tokens = {"sampling": plan["sampled_tokens"], "scoring": plan["sampled_tokens"],
              "teacher_scoring": a.prompts * a.group * (a.prompt_tokens + a.max_tokens),
              "forward_backward": a.prompts * a.group * (a.prompt_tokens + a.max_tokens),
              "optimizer": a.prompts * a.group * (a.prompt_tokens + a.max_tokens)}
    out = {}
    for k in names:
        s = phases[k] / a.iterations
        out[k] = {"seconds": s, "tokens": tokens[k], "tokens_per_s": tokens[k] / s if s > 0 else 0.0}
    it = sum(seconds_each) / len(seconds_each)
    result = {
        "framework": f"transformers {transformers.__version__}, peft {peft.__version__}, torch {torch.__version__}",
        "device": torch.cuda.get_device_name(),
        "model_dir": a.model,
        "dtype": "bfloat16",
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "load_seconds": load_s,
        "command": " ".join(sys.argv),
        f"train_{a.method}": {**plan, "target_modules": LORA_TARGETS, "optimizer": "AdamW (torch)",
                              "gradient_checkpointing": "every layer", "phases": out,
                              "iteration": {"seconds": it, "seconds_each": seconds_each,
                                            "sampled_tokens_per_s": plan["sampled_tokens"] / it}},
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
    }
    write(result, a.out)


if __name__ == "__main__":
    main()
