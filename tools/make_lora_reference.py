#!/usr/bin/env python3
"""LoRA reference fixtures: HF PEFT adapters on the tiny Qwen3.5 reference models, and the logits
of transformers + peft with the adapter applied (unmerged, as PEFT runs it).

For each config in CONFIGS the base model is read from tests/fixtures/reference/<config> (written
by make_reference.py), wrapped with a PEFT LoraConfig (r=4, lora_alpha=8, every target module of
spec/training.md), and its LoRA factors are overwritten with seeded draws: A ~ N(0, 1/sqrt(in)),
B ~ N(0, B_STD/sqrt(r)) (PEFT initialises B to zero, which would make the adapter a no-op).
Runs on the accelerator machine (torch, transformers, peft; no network), computing on the CPU in
float32.

    python3 tools/make_lora_reference.py --out DIR [--seed 0]

Output (see tools/README.md):
    DIR/manifest.json
    DIR/<config>/adapter_config.json        written by PEFT's save_pretrained, unchanged
    DIR/<config>/adapter_model.safetensors  written by PEFT's save_pretrained, unchanged
    DIR/<config>/reference.safetensors      ids, lora_65, base_65, lora_65_f64 (+ metadata)
"""

import argparse
import hashlib
import json
import os
import shlex
import sys

# Sets the offline environment and blocks the fused-kernel packages before torch/transformers load.
import make_reference as mr  # noqa: E402  (tools/ is on sys.path when this script runs)

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

CONFIGS = ("gqa_untied", "tied_dk_ne_dv")
TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj",
                  "gate_proj", "up_proj", "down_proj"]
RANK, ALPHA = 4, 8
B_STD = 0.25  # B ~ N(0, B_STD/sqrt(r)): scale * B A then has entries ~ 0.5/sqrt(in), half of W's
PROMPT = 65   # tokens: one full 64-token K/V block and one more
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE_DIR = os.path.join(REPO, "tests", "fixtures", "reference")

log = mr.log


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def lora_modules(model):
    """(name, module) of every PEFT LoRA layer in `model`, by name."""
    from peft.tuners.lora import LoraLayer

    return sorted(((n, m) for n, m in model.named_modules() if isinstance(m, LoraLayer)), key=lambda t: t[0])


def expected_modules(spec):
    names = []
    for i, kind in enumerate(spec["layer_types"]):
        p = f"model.layers.{i}."
        if kind == "full_attention":
            names += [p + "self_attn." + m for m in ("q_proj", "k_proj", "v_proj", "o_proj")]
        else:
            names += [p + "linear_attn." + m for m in ("in_proj_qkv", "in_proj_z", "out_proj")]
        names += [p + "mlp." + m for m in ("gate_proj", "up_proj", "down_proj")]
    return sorted(names)


def draw_factors(modules, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, m in modules:
            a, b = m.lora_A["default"].weight, m.lora_B["default"].weight  # [r, in], [out, r]
            a.copy_(torch.randn(a.shape, generator=gen) / a.shape[1] ** 0.5)
            b.copy_(torch.randn(b.shape, generator=gen) * (B_STD / b.shape[1] ** 0.5))


def merged_f64(sd_base, modules):
    """Base weights with every delta merged in float64: W + scaling * B A."""
    sd = {k: v.to(torch.float64) for k, v in sd_base.items()}
    for name, m in modules:
        a = m.lora_A["default"].weight.detach().to(torch.float64)
        b = m.lora_B["default"].weight.detach().to(torch.float64)
        sd[name + ".weight"] = sd[name + ".weight"] + m.scaling["default"] * (b @ a)
    return sd


def make_one(name, index, seed, out_dir, versions, model_cls):
    from peft import LoraConfig, PeftModel, get_peft_model

    log(f"\n=== {name} ===")
    spec = next(c for c in mr.CONFIGS if c["name"] == name)
    base_dir = os.path.join(BASE_DIR, name)
    base_ref = load_file(os.path.join(base_dir, "reference.safetensors"))
    ids = base_ref["ids"][:PROMPT].tolist()

    model = mr.load_saved(model_cls, base_dir)
    runner = mr.Runner(model)
    with torch.no_grad():
        base = runner.prefill(ids).contiguous()
    same = torch.equal(base, base_ref[f"prefill_{PROMPT}"])
    log(f"  base model from {base_dir}: logits equal reference prefill_{PROMPT} bit for bit: {same}")
    if not same:
        raise SystemExit(f"{name}: the base model does not reproduce its own fixture")
    sd_base = mr.weights_state_dict(model, spec["tie_word_embeddings"])

    lcfg = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=list(TARGET_MODULES), lora_dropout=0.0,
                      bias="none", task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lcfg)
    # The written config would otherwise record this machine's absolute path.
    peft_model.peft_config["default"].base_model_name_or_path = f"tests/fixtures/reference/{name}"
    peft_model.eval()
    modules = lora_modules(model)
    got = [n for n, _ in modules]
    want = expected_modules(spec)
    log(f"  LoRA layers: {len(got)} (expected {len(want)})")
    if got != want:
        raise SystemExit(f"{name}: PEFT wrapped {got}, expected {want}")
    scalings = {m.scaling["default"] for _, m in modules}
    log(f"  scaling: {sorted(scalings)} (alpha / r = {ALPHA / RANK})")

    best = None
    for attempt in range(mr.ORACLE_ATTEMPTS):
        s = seed * 1000 + 17 * index + 3 + 100 * attempt
        draw_factors(modules, s)
        with torch.no_grad():
            lora = runner.prefill(ids).contiguous()
            with peft_model.disable_adapter():
                off = runner.prefill(ids).contiguous()
        f64 = mr.spec_logits(merged_f64(sd_base, modules), spec, ids)
        noise = (f64 - lora.double()).abs().max().item()
        delta = (lora - base).abs().max().item()
        log(f"  draw seed {s}: max |lora - base| {delta:.3f}, |lora| max {lora.abs().max().item():.3f}, "
            f"f64 merged spec vs peft {noise:.3e}, adapter disabled == base: {torch.equal(off, base)}")
        if best is None or noise < best["noise"]:
            best = dict(seed=s, noise=noise, delta=delta, lora=lora, f64=f64.float().contiguous(),
                        disabled_equal=bool(torch.equal(off, base)))
        if noise <= mr.ORACLE_NOISE_LIMIT:
            break
    if best["seed"] != s:
        draw_factors(modules, best["seed"])
    if best["noise"] > mr.ORACLE_NOISE_LIMIT:
        log(f"  WARNING: best draw has oracle noise {best['noise']:.2e} > {mr.ORACLE_NOISE_LIMIT:.0e}")

    cdir = os.path.join(out_dir, name)
    os.makedirs(cdir, exist_ok=True)
    peft_model.save_pretrained(cdir, save_embedding_layers=False)
    for extra in ("README.md",):  # the model card PEFT writes beside the adapter
        if os.path.exists(os.path.join(cdir, extra)):
            os.remove(os.path.join(cdir, extra))
    log(f"  files: {sorted(os.listdir(cdir))}")
    with open(os.path.join(cdir, "adapter_config.json")) as f:
        log("  adapter_config.json: " + json.dumps(json.load(f), sort_keys=True))
    saved = load_file(os.path.join(cdir, "adapter_model.safetensors"))
    log(f"  adapter_model.safetensors: {len(saved)} tensors, dtypes {sorted({str(t.dtype) for t in saved.values()})}")
    for k in sorted(saved)[:4]:
        log(f"    {k} {list(saved[k].shape)}")

    # PEFT's own loader on a fresh base model must give the same logits bit for bit.
    fresh = mr.load_saved(model_cls, base_dir)
    reloaded = PeftModel.from_pretrained(fresh, cdir)
    reloaded.eval()
    with torch.no_grad():
        again = mr.Runner(fresh).prefill(ids)
    reload_diff = (again - best["lora"]).abs().max().item()
    log(f"  PeftModel.from_pretrained round trip: max diff {reload_diff:.3e}")

    meta = {
        "config": name, "seed": str(best["seed"]), "dtype": "float32", "rank": str(RANK), "lora_alpha": str(ALPHA),
        "base_model_sha256": sha256(os.path.join(base_dir, "model.safetensors")),
        "torch": versions["torch"], "transformers": versions["transformers"], "peft": versions["peft"],
    }
    ref = {"ids": torch.tensor(ids, dtype=torch.int32), f"lora_{PROMPT}": best["lora"],
           f"base_{PROMPT}": base, f"lora_{PROMPT}_f64": best["f64"]}
    mr.save_safetensors(os.path.join(cdir, "reference.safetensors"), ref, meta)
    return dict(name=name, seed=best["seed"], lora_modules=len(got),
                checks=dict(max_spec_diff=best["noise"], max_lora_minus_base=best["delta"],
                            adapter_disabled_equals_base=best["disabled_equal"], reload_diff=reload_diff),
                files=["adapter_config.json", "adapter_model.safetensors", "reference.safetensors"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (created; known files overwritten)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import peft
    import safetensors

    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                "safetensors": safetensors.__version__, "python": sys.version.split()[0]}
    log("versions: " + json.dumps(versions))
    model_cls, _ = mr.import_qwen35()
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True, warn_only=True)

    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    results = [make_one(name, i, args.seed, out_dir, versions, model_cls) for i, name in enumerate(CONFIGS)]
    manifest = {
        "generator": "tools/make_lora_reference.py",
        "command": "python3 " + shlex.join(sys.argv),
        "versions": versions,
        "base_models": "tests/fixtures/reference/<config> (make_reference.py)",
        "lora": {"r": RANK, "lora_alpha": ALPHA, "target_modules": TARGET_MODULES,
                 "A": "N(0, 1/sqrt(in))", "B": f"N(0, {B_STD}/sqrt(r))"},
        "prompt": f"ids[:{PROMPT}] of the base fixture",
        "configs": results,
    }
    mr.write_json(os.path.join(out_dir, "manifest.json"), manifest)
    log("\n=== summary ===")
    for r in results:
        c = r["checks"]
        log(f"  {r['name']:14s} lora layers {r['lora_modules']:3d}  spec-vs-peft {c['max_spec_diff']:.2e}  "
            f"lora-vs-base {c['max_lora_minus_base']:.3f}  reload {c['reload_diff']:.1e}")
    log(f"  total size of {out_dir}: {mr.dir_bytes(out_dir)} bytes")


if __name__ == "__main__":
    main()
