#!/usr/bin/env python3
"""Does an adapter Kiln trained and published load in PEFT and give Kiln's logits there?

Input: a folder written by Kiln's side (tests/train/peft_export_test.cc with KILN_PEFT_EXPORT_DIR
set): base/ (a float32 checkpoint, config.json + model.safetensors), adapter/ (the published
PEFT-layout adapter with train_receipt.json), kiln_logits.json (the token sequence, the shape and
the names of the logits files) and the float32 logits Kiln computed with and without the adapter.

The base is loaded with AutoModelForCausalLM (float32, eager attention, plain-torch GDN path) and
the adapter with PeftModel.from_pretrained; the sequence is run once with the adapter and once
with it disabled. Printed: max |PEFT - Kiln| and that over max |PEFT logits| for both. Exit 1 when
the adapted logits differ by more than --rtol (default 1e-4) relative to the largest |logit|,
2 when something cannot be loaded. Runs on the accelerator machine (torch, transformers, peft):

    python3 tools/check_peft_adapter.py DIR [--rtol 1e-4]
"""

import argparse
import json
import os
import sys

# Offline, and the plain-torch reference path: tools/make_reference.py sets the environment and
# blocks the fused GDN kernel packages before transformers is imported.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_reference  # noqa: E402,F401

import torch  # noqa: E402
import transformers  # noqa: E402


def load_base(path):
    last = None
    for dtype_kw in ("dtype", "torch_dtype"):  # the keyword's name changed across versions
        try:
            m = transformers.AutoModelForCausalLM.from_pretrained(
                path, attn_implementation="eager", **{dtype_kw: torch.float32})
            print(f"base model: {type(m).__name__} through AutoModelForCausalLM", flush=True)
            return m.float().eval()
        except TypeError as e:
            last = e
        except ValueError as e:  # the auto mapping does not know the model type: name the class
            print(f"AutoModelForCausalLM refused {path} ({e}); loading Qwen3_5ForCausalLM directly", flush=True)
            model_cls, _ = make_reference.import_qwen35()
            return make_reference.load_saved(model_cls, path)
    raise last


def read_f32(path, shape):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    t = torch.frombuffer(data, dtype=torch.float32)
    if t.numel() != shape[0] * shape[1]:
        raise SystemExit(f"{path}: {t.numel()} floats, expected {shape[0]} x {shape[1]}")
    return t.reshape(shape).double()


def compare(name, ours, theirs):
    diff = (ours - theirs).abs().max().item()
    peak = theirs.abs().max().item()
    rel = diff / max(peak, 1e-30)
    print(f"{name}: max |PEFT - Kiln| = {diff:.3e}, max |PEFT logit| = {peak:.3e}, relative {rel:.3e}", flush=True)
    return rel


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--rtol", type=float, default=1e-4)
    args = ap.parse_args()

    import peft
    from peft import PeftModel

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}", flush=True)
    with open(os.path.join(args.dir, "kiln_logits.json")) as f:
        manifest = json.load(f)
    shape = manifest["shape"]
    kiln = read_f32(os.path.join(args.dir, manifest["logits"]), shape)
    kiln_base = read_f32(os.path.join(args.dir, manifest["base_logits"]), shape)
    try:
        model = load_base(os.path.join(args.dir, manifest["base"]))
        peft_model = PeftModel.from_pretrained(model, os.path.join(args.dir, manifest["adapter"]))
    except Exception as e:
        print(f"ERROR: cannot load the base model or the adapter: {type(e).__name__}: {e}", flush=True)
        return 2
    peft_model.eval()
    lora_params = sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n)
    print(f"adapter loaded: {lora_params} LoRA parameters", flush=True)

    ids = torch.tensor([manifest["tokens"]], dtype=torch.long)
    with torch.no_grad():
        adapted = peft_model(input_ids=ids, use_cache=False).logits[0].double()
        with peft_model.disable_adapter():
            plain = peft_model(input_ids=ids, use_cache=False).logits[0].double()
    if list(adapted.shape) != shape:
        print(f"ERROR: PEFT logits {list(adapted.shape)}, Kiln's {shape}", flush=True)
        return 2
    rel_base = compare("base model (adapter disabled)", kiln_base, plain)
    rel = compare("with the adapter", kiln, adapted)
    moved = (adapted - plain).abs().max().item()
    print(f"the adapter moves PEFT's logits by up to {moved:.3e}", flush=True)
    ok = rel <= args.rtol
    print(f"{'PASS' if ok else 'FAIL'}: relative difference {rel:.3e} vs tolerance {args.rtol:.0e} "
          f"(base model alone: {rel_base:.3e})", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
