#!/usr/bin/env python3
"""A tiny random Qwen3_5ForConditionalGeneration (vision tower included), saved as the released
Qwen3.5 dense checkpoints are: config with text_config and vision_config, text weights under
model.language_model.*, the vision tower under model.visual.*, sharded behind
model.safetensors.index.json; MTP tensors (mtp.*, which transformers neither builds nor saves)
are added to the first shard as the releases carry them. Writes the greedy continuation
transformers computes, so Kiln's text model can be checked on the real layout:

    python3 tools/make_qwen35_multimodal.py --out /tmp/qwen35-mm
    build/kiln generate --model /tmp/qwen35-mm --backend cpu --prompt-ids <ids> --max-tokens 8

and compare with expected.json's `greedy` (the script prints the exact command). Runs on a
machine with torch and transformers 5.x; touches no network. tests/fixtures/qwen35_multimodal is
this script's output (transformers 5.17.0, torch 2.11.0, seed 0), checked by
MultimodalLayout.ACheckpointTransformersWroteGivesTransformersGreedyTokens.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
for _name in ("fla", "causal_conv1d", "kernels"):  # the plain-torch GDN path, as make_reference.py
    sys.modules.setdefault(_name, None)

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def model_classes():
    try:
        from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration
        return Qwen3_5Config, Qwen3_5ForConditionalGeneration
    except ImportError:
        from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5Config
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForConditionalGeneration
        return Qwen3_5Config, Qwen3_5ForConditionalGeneration


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard-size", default="200KB", help="max_shard_size for save_pretrained (forces shards)")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    config_cls, model_cls = model_classes()
    text = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                linear_num_key_heads=2, linear_key_head_dim=16, linear_num_value_heads=4,
                linear_value_head_dim=16, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
                layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
                max_position_embeddings=4096, tie_word_embeddings=False)
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64, in_channels=3)
    cfg = config_cls(text_config=text, vision_config=vision, tie_word_embeddings=False)
    cfg.architectures = ["Qwen3_5ForConditionalGeneration"]
    model = model_cls(cfg).eval().to(torch.float32)
    with torch.no_grad():  # every parameter random, norm weights included
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.02 if p.dim() > 1 else 0.3)
            if name.endswith("A_log"):
                p.uniform_(0.0, 2.7)
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, max_shard_size=args.shard_size, safe_serialization=True)

    index_path = os.path.join(args.out, "model.safetensors.index.json")
    if not os.path.exists(index_path):
        raise SystemExit("save_pretrained wrote no index: lower --shard-size")
    index = json.load(open(index_path))
    names = list(index["weight_map"])
    visual = [n for n in names if n.startswith("model.visual.")]
    text_names = [n for n in names if n.startswith("model.language_model.")]
    log(f"{len(names)} tensors: {len(text_names)} text, {len(visual)} vision; "
        f"{len(set(index['weight_map'].values()))} shards")
    if not visual or not text_names:
        raise SystemExit("unexpected tensor names: the layout changed; see the index")
    first = sorted(set(index["weight_map"].values()))[0]
    shard = load_file(os.path.join(args.out, first))
    h = text["hidden_size"]
    shard["mtp.fc.weight"] = torch.randn(h, 2 * h)
    shard["mtp.norm.weight"] = torch.randn(h)
    save_file(shard, os.path.join(args.out, first), metadata={"format": "pt"})
    index["weight_map"]["mtp.fc.weight"] = first
    index["weight_map"]["mtp.norm.weight"] = first
    json.dump(index, open(index_path, "w"), indent=2)

    ids = [(i * 37 + 11) % text["vocab_size"] for i in range(12)]
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    greedy = out[0, len(ids):].tolist()
    expected = {"prompt_ids": ids, "greedy": greedy, "transformers": transformers.__version__,
                "torch": torch.__version__, "seed": args.seed}
    json.dump(expected, open(os.path.join(args.out, "expected.json"), "w"), indent=2)
    prompt = ",".join(map(str, ids))
    print(f"kiln generate --model {args.out} --backend cpu --prompt-ids {prompt} --max-tokens 8 --ignore-eos")
    print("expected: " + ",".join(map(str, greedy)))


if __name__ == "__main__":
    main()
