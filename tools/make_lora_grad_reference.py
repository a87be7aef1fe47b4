#!/usr/bin/env python3
"""LoRA gradient reference: the SFT loss of transformers + peft on the tiny Qwen3.5 reference
model with the reference adapter, and the gradient of that loss with respect to every lora_A and
lora_B factor (what Kiln's LoraTrainer computes).

The base model is tests/fixtures/reference/gqa_untied (make_reference.py) and the adapter
tests/fixtures/lora_reference/gqa_untied (make_lora_reference.py: r 4, alpha 8, every target
module, B non-zero), loaded with PeftModel.from_pretrained(is_trainable=True). Two sequences cut
from the base fixture's ids are run separately (batch 1, no padding); the loss is the mean
next-token cross-entropy over the tokens marked as targets in both:

    loss = -(1 / n) * sum over target tokens t of log softmax(logits[t - 1])[ids[t]]

Computed on the CPU in float64 (the model and adapter converted), and once in float32 to report
the oracle's own f32 noise. Runs on the accelerator machine (torch, transformers, peft).

    python3 tools/make_lora_grad_reference.py --out DIR

Output:
    DIR/manifest.json
    DIR/gqa_untied/grad_reference.safetensors
        ids_0, ids_1 (i32), targets_0, targets_1 (i32, 1 where the token is a target), loss (f32 [1]),
        and per factor its PEFT name ("base_model.model.model.layers.0.linear_attn.in_proj_qkv.lora_A.weight")
        holding d loss / d factor in f32 (computed in float64)
"""

import argparse
import json
import os
import shlex
import sys

import make_reference as mr  # noqa: E402  (sets the offline environment, blocks fused kernels)

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

CONFIG = "gqa_untied"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE_DIR = os.path.join(REPO, "tests", "fixtures", "reference", CONFIG)
LORA_DIR = os.path.join(REPO, "tests", "fixtures", "lora_reference", CONFIG)
# (first id, length, first target position): the second sequence is shorter, and longer than a
# 64-token block is not needed for the gradient path; targets start after a "prompt".
SEQUENCES = ((0, 70, 20), (70, 33, 9))
log = mr.log


def sequences(ids):
    out = []
    for start, n, first_target in SEQUENCES:
        toks = ids[start:start + n]
        targets = [1 if t >= first_target else 0 for t in range(n)]
        out.append((toks, targets))
    return out


def loss_and_grads(peft_model, base_model, seqs, dtype):
    peft_model.to(dtype)
    peft_model.zero_grad(set_to_none=True)
    runner = mr.Runner(base_model)  # only for its reading of the forward's signature
    n_targets = sum(sum(t) for _, t in seqs)
    total = None
    for toks, targets in seqs:
        ids = torch.tensor([toks], dtype=torch.long)
        kwargs = dict(position_ids=torch.arange(len(toks)).unsqueeze(0))
        if runner.takes_cache_position:
            kwargs["cache_position"] = torch.arange(len(toks))
        logits = peft_model(input_ids=ids, use_cache=False, **kwargs).logits[0].to(dtype)
        logp = torch.log_softmax(logits[:-1], dim=-1)  # position t - 1 predicts token t
        nxt = torch.tensor(toks[1:], dtype=torch.long)
        mask = torch.tensor(targets[1:], dtype=dtype)
        picked = logp.gather(1, nxt.unsqueeze(1)).squeeze(1)
        part = -(picked * mask).sum() / n_targets
        total = part if total is None else total + part
    total.backward()
    grads = {}
    for name, p in peft_model.named_parameters():
        if "lora_" in name:
            if p.grad is None:
                raise SystemExit(f"no gradient for {name}")
            grads[name] = p.grad.detach().clone()
    return total.detach().item(), grads


def peft_name(param_name):
    # named_parameters: base_model.model.model.layers.0.mlp.up_proj.lora_A.default.weight
    return param_name.replace(".default.weight", ".weight")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import peft
    import safetensors
    from peft import PeftModel

    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                "safetensors": safetensors.__version__, "python": sys.version.split()[0]}
    log("versions: " + json.dumps(versions))
    model_cls, _ = mr.import_qwen35()
    torch.use_deterministic_algorithms(True, warn_only=True)

    ids = load_file(os.path.join(BASE_DIR, "reference.safetensors"))["ids"].tolist()
    seqs = sequences(ids)
    model = mr.load_saved(model_cls, BASE_DIR)
    peft_model = PeftModel.from_pretrained(model, LORA_DIR, is_trainable=True)
    peft_model.train()  # lora_dropout is 0: train mode changes nothing but enables grads
    for name, p in peft_model.named_parameters():
        p.requires_grad_("lora_" in name)

    loss32, g32 = loss_and_grads(peft_model, model, seqs, torch.float32)
    dtype = "float64"
    try:
        loss64, g64 = loss_and_grads(peft_model, model, seqs, torch.float64)
    except Exception as e:  # a float32-only op in the reference path: keep the f32 oracle
        log(f"float64 pass failed ({type(e).__name__}: {e}); the fixture holds the float32 gradients")
        dtype, loss64, g64 = "float32", loss32, g32
    worst = 0.0
    for k in g64:
        scale = g64[k].abs().max().item()
        d = (g32[k].double() - g64[k]).abs().max().item() / max(scale, 1e-30)
        worst = max(worst, d)
    log(f"loss f64 {loss64:.10f}  f32 {loss32:.10f}; factors {len(g64)}; worst relative f32-vs-f64 grad diff {worst:.2e}")
    for k in sorted(g64)[:6]:
        log(f"  {peft_name(k)} {list(g64[k].shape)} max |g| {g64[k].abs().max().item():.3e}")

    out_dir = os.path.join(os.path.abspath(args.out), CONFIG)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {"loss": torch.tensor([loss64], dtype=torch.float32)}
    for i, (toks, targets) in enumerate(seqs):
        tensors[f"ids_{i}"] = torch.tensor(toks, dtype=torch.int32)
        tensors[f"targets_{i}"] = torch.tensor(targets, dtype=torch.int32)
    for k, g in g64.items():
        tensors[peft_name(k)] = g.to(torch.float32)
    meta = {"config": CONFIG, "dtype": dtype, "loss": "mean next-token CE over target tokens",
            "torch": versions["torch"], "transformers": versions["transformers"], "peft": versions["peft"]}
    mr.save_safetensors(os.path.join(out_dir, "grad_reference.safetensors"), tensors, meta)
    manifest = {
        "generator": "tools/make_lora_grad_reference.py",
        "command": "python3 " + shlex.join(sys.argv),
        "versions": versions,
        "base_model": f"tests/fixtures/reference/{CONFIG}",
        "adapter": f"tests/fixtures/lora_reference/{CONFIG}",
        "sequences": [{"first_id": s, "length": n, "first_target": f} for s, n, f in SEQUENCES],
        "dtype": dtype, "loss_f64": loss64, "loss_f32": loss32, "factors": len(g64),
        "worst_relative_f32_vs_f64_grad_diff": worst,
    }
    mr.write_json(os.path.join(os.path.abspath(args.out), "manifest.json"), manifest)
    log(f"total size: {mr.dir_bytes(os.path.abspath(args.out))} bytes")


if __name__ == "__main__":
    main()
