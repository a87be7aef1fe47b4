#!/usr/bin/env python3
"""Reference fixtures for Kiln's model numerics, produced with HF transformers' Qwen3.5.

Builds three tiny random Qwen3.5 text models (see CONFIGS), saves each as an HF-style
checkpoint, and records float32 logits for whole-sequence prefills and for token-by-token
decode continuing from the model's cache. Runs on the accelerator machine (needs torch and
transformers with Qwen3.5; no network), but computes on the CPU in float32 so that the
result is deterministic and independent of GPU kernels.

    python3 tools/make_reference.py --out DIR [--seed 0]

Output (see tools/README.md):
    DIR/manifest.json
    DIR/<config>/config.json            HF config (nested under text_config for nested_mha)
    DIR/<config>/model.safetensors      float32 weights with HF tensor names
    DIR/<config>/reference.safetensors  ids, prefill_{n}, decode_after_{n}, prefill_200_f64 (+ metadata)
"""

import argparse
import inspect
import json
import math
import os
import shlex
import sys

# Offline machine: never try the hub. Set before transformers is imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# transformers routes the Gated DeltaNet kernels to `fla` / `causal_conv1d` (Triton/CUDA) and to
# hub `kernels` whenever those packages import. We want the plain-torch reference path on the
# CPU, so make those imports fail: a None entry in sys.modules turns `import x` into ImportError
# and makes importlib.util.find_spec(x) return None.
BLOCKED_FAST_PATH_PACKAGES = ("fla", "causal_conv1d", "kernels")
for _name in BLOCKED_FAST_PATH_PACKAGES:
    sys.modules.setdefault(_name, None)

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

PREFILL_LENGTHS = (1, 63, 64, 65, 200)
DECODE_AFTER = (1, 63, 64, 65)
DECODE_STEPS = 8
NUM_IDS = 200
# Printed checks only. float32 rounding puts decode-vs-prefill at ~1e-5 x the largest |logit|
# and the float64 spec re-implementation at ~2e-5 x; a real bug shows up at 1e-2 or more.
DECODE_REL_TOLERANCE = 1e-4
SPEC_REL_TOLERANCE = 1e-3

# Random weight distributions (every parameter is overwritten; HF's init is not used).
ORACLE_NOISE_LIMIT = 4e-5  # max |transformers f32 - float64 spec| accepted for a fixture
ORACLE_ATTEMPTS = 12
EMBED_STD_TIMES_SQRT_H = 1.0  # embed ~ N(0, 1/sqrt(H)): tied logits come out O(1), so f32 noise stays ~1e-5
NORM_OFFSET_STD = 0.3  # "(1 + w)" RMSNorm weights ~ N(0, 0.3)
GATED_NORM_STD = 0.3  # GDN gated-norm weight (plain w) ~ 1 + N(0, 0.3)
A_RANGE = (1.0, 16.0)  # A_log ~ log(U(1, 16))
# dt_bias ~ N(-4, 1) rather than N(0, 1): with A in [1, 16] a zero-mean dt_bias gives per-token
# decays exp(g) of ~1e-3, i.e. a recurrent state that forgets everything after one token, which
# would leave chunk boundaries and state hand-offs untested. Mean -4 (Mamba-style dt of
# ~0.02) spreads exp(g) over roughly 0.4 .. 0.999, so the state carries tens of tokens.
DT_BIAS_MEAN = -4.0
DT_BIAS_STD = 1.0
CONV_STD = 0.5  # conv1d.weight ~ N(0, 0.5)


def _layer_types(n_layers, full_at):
    return ["full_attention" if i in full_at else "linear_attention" for i in range(n_layers)]


# Together these cover: GQA and MHA, GDN value heads > key heads (x2, x3) and == key heads,
# partial rotary (0.25, 0.5), the attention output gate, tied and untied LM heads, dk != dv,
# and the multimodal checkpoint layout.
CONFIGS = [
    dict(
        name="gqa_untied",
        layout="flat",
        rope_style="as_saved",  # config.json exactly as transformers writes it (rope_parameters)
        vocab_size=300, hidden_size=64, intermediate_size=128,
        layer_types=_layer_types(4, {3}), full_attention_interval=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        partial_rotary_factor=0.25, rope_theta=10000.0,
        linear_num_key_heads=2, linear_key_head_dim=16,
        linear_num_value_heads=4, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=False,
    ),
    dict(
        name="tied_dk_ne_dv",
        layout="flat",
        rope_style="top_level",  # older form: top-level rope_theta / partial_rotary_factor only
        vocab_size=300, hidden_size=48, intermediate_size=96,
        layer_types=_layer_types(6, {2, 5}), full_attention_interval=3,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        partial_rotary_factor=0.5, rope_theta=1e6,
        linear_num_key_heads=2, linear_key_head_dim=16,
        linear_num_value_heads=2, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=True,
    ),
    dict(
        name="nested_mha",
        layout="nested",  # rewritten into the multimodal (Qwen3_5ForConditionalGeneration) layout
        rope_style="rope_parameters",  # rope_theta / partial_rotary_factor only in rope_parameters
        vocab_size=300, hidden_size=64, intermediate_size=160,
        layer_types=_layer_types(4, {1, 3}), full_attention_interval=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=32,
        partial_rotary_factor=0.25, rope_theta=1e7,
        linear_num_key_heads=1, linear_key_head_dim=16,
        linear_num_value_heads=3, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=False,
    ),
]


def log(msg=""):
    print(msg, flush=True)


# --------------------------------------------------------------------------- HF classes


def import_qwen35():
    """Return (Qwen3_5ForCausalLM, Qwen3_5TextConfig), or exit with a diagnostic."""
    errors = []
    try:
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

        return Qwen3_5ForCausalLM, Qwen3_5TextConfig
    except Exception as e:  # ImportError, or a lazy-module error
        errors.append(f"from transformers: {e!r}")
    try:
        from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

        return Qwen3_5ForCausalLM, Qwen3_5TextConfig
    except Exception as e:
        errors.append(f"from transformers.models.qwen3_5: {e!r}")
    log("ERROR: cannot import Qwen3_5ForCausalLM / Qwen3_5TextConfig from transformers "
        f"{transformers.__version__} ({transformers.__file__}).")
    for e in errors:
        log(f"  {e}")
    names = sorted(n for n in dir(transformers) if "qwen3" in n.lower())
    log(f"  names in transformers containing 'Qwen3' ({len(names)}):")
    for n in names:
        log(f"    {n}")
    sys.exit(2)


def make_config(config_cls, spec):
    """Build the HF text config from a CONFIGS entry and check the values that matter."""
    kwargs = dict(
        vocab_size=spec["vocab_size"],
        hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=len(spec["layer_types"]),
        layer_types=list(spec["layer_types"]),
        num_attention_heads=spec["num_attention_heads"],
        num_key_value_heads=spec["num_key_value_heads"],
        head_dim=spec["head_dim"],
        linear_num_key_heads=spec["linear_num_key_heads"],
        linear_key_head_dim=spec["linear_key_head_dim"],
        linear_num_value_heads=spec["linear_num_value_heads"],
        linear_value_head_dim=spec["linear_value_head_dim"],
        linear_conv_kernel_dim=spec["linear_conv_kernel_dim"],
        rms_norm_eps=spec["rms_norm_eps"],
        tie_word_embeddings=spec["tie_word_embeddings"],
        hidden_act="silu",
        attention_bias=False,
        max_position_embeddings=4096,
    )
    want_rope = (spec["rope_theta"], spec["partial_rotary_factor"])
    rope = dict(rope_type="default", rope_theta=want_rope[0], partial_rotary_factor=want_rope[1])
    # transformers 5 keeps rope_theta and partial_rotary_factor in rope_parameters; older
    # signatures took them as top-level arguments. Use the first form that takes effect.
    variants = [
        ("rope_parameters", dict(rope_parameters=dict(rope))),
        ("rope_parameters + top-level", dict(rope_parameters=dict(rope), rope_theta=want_rope[0],
                                             partial_rotary_factor=want_rope[1])),
        ("top-level", dict(rope_theta=want_rope[0], partial_rotary_factor=want_rope[1])),
    ]
    cfg = None
    for label, extra in variants:
        try:
            candidate = config_cls(**kwargs, **extra)
        except (TypeError, ValueError) as e:
            log(f"  config: {label} form rejected ({e!r})")
            continue
        if rope_values(candidate) == want_rope:
            cfg = candidate
            break
        log(f"  config: {label} form gave rope_theta/partial_rotary_factor {rope_values(candidate)}")
    if cfg is None:
        raise SystemExit(f"config {spec['name']}: could not set rope_theta/partial_rotary_factor to {want_rope}")
    cfg.architectures = ["Qwen3_5ForCausalLM"]
    try:
        cfg._attn_implementation = "eager"
    except Exception as e:  # attribute handling differs across versions; set again on the model
        log(f"  config: could not set _attn_implementation ({e!r})")

    # The config must say what we asked for; a silently dropped field would make a wrong fixture.
    checks = {k: v for k, v in kwargs.items() if k not in ("max_position_embeddings",)}
    for key, want in checks.items():
        got = getattr(cfg, key, None)
        if key == "layer_types":
            got = list(got) if got is not None else None
        if got != want:
            raise SystemExit(f"config {spec['name']}: {key} = {got!r}, wanted {want!r}")
    return cfg


def rope_values(cfg):
    """(rope_theta, partial_rotary_factor) as the model will read them."""
    rp = getattr(cfg, "rope_parameters", None) or {}
    theta = rp.get("rope_theta", getattr(cfg, "rope_theta", None))
    factor = rp.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", None))
    return (float(theta) if theta is not None else None,
            float(factor) if factor is not None else None)


def build_model(model_cls, cfg):
    model = model_cls(cfg)
    if hasattr(model, "set_attn_implementation"):
        try:
            model.set_attn_implementation("eager")
        except Exception as e:
            log(f"  model.set_attn_implementation('eager') failed: {e!r}")
    impl = getattr(model.config, "_attn_implementation", None)
    log(f"  attention implementation: {impl}")
    if impl not in (None, "eager"):
        log("  WARNING: attention implementation is not 'eager'")
    return model.float().eval()


# --------------------------------------------------------------------------- weights


def randomise(model, gen, spec):
    """Overwrite every parameter with a seeded draw; returns the number of tensors set."""
    h = spec["hidden_size"]
    done = set()

    def normal_(p, mean, std):
        p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * std + mean)

    with torch.no_grad():
        # Norms first, by module class: Qwen3_5RMSNorm computes x * (1 + w), while the GDN's
        # Qwen3_5RMSNormGated computes w * x * silu(z), so their weights need different centres.
        for mname, module in model.named_modules():
            cls = type(module).__name__
            if not cls.endswith(("RMSNorm", "RMSNormGated")):
                continue
            pname = f"{mname}.weight"
            if cls.endswith("RMSNormGated"):
                normal_(module.weight, 1.0, GATED_NORM_STD)
            else:
                normal_(module.weight, 0.0, NORM_OFFSET_STD)
            done.add(pname)

        for pname, p in model.named_parameters():
            if pname in done:
                continue
            if pname.endswith(".A_log"):
                a = torch.rand(p.shape, generator=gen) * (A_RANGE[1] - A_RANGE[0]) + A_RANGE[0]
                p.copy_(torch.log(a))
            elif pname.endswith(".dt_bias"):
                normal_(p, DT_BIAS_MEAN, DT_BIAS_STD)
            elif pname.endswith("conv1d.weight"):
                normal_(p, 0.0, CONV_STD)
            elif pname.endswith("embed_tokens.weight"):
                normal_(p, 0.0, EMBED_STD_TIMES_SQRT_H / math.sqrt(h))
            elif p.dim() == 2:  # nn.Linear weight [out, in]: N(0, 1/sqrt(fan_in))
                normal_(p, 0.0, 1.0 / math.sqrt(p.shape[1]))
            else:
                raise SystemExit(f"randomise: no rule for parameter {pname} {tuple(p.shape)}")
            done.add(pname)

    missing = [n for n, _ in model.named_parameters() if n not in done]
    if missing:
        raise SystemExit(f"randomise: parameters not set: {missing}")
    return len(done)


def check_tying(model, tied):
    head = model.get_output_embeddings().weight
    emb = model.get_input_embeddings().weight
    same = head.data_ptr() == emb.data_ptr()
    if tied and not same:
        log("  WARNING: tie_word_embeddings=True but lm_head is a separate tensor; tying by hand")
        model.lm_head.weight = model.model.embed_tokens.weight
    if not tied and same:
        raise SystemExit("untied config but lm_head shares embed_tokens")


def weights_state_dict(model, tied):
    """HF-named float32 tensors as they go into model.safetensors (no lm_head when tied)."""
    sd = {k: v.detach().to(torch.float32).contiguous().clone() for k, v in model.state_dict().items()}
    if tied:
        sd.pop("lm_head.weight", None)
    params = {n for n, _ in model.named_parameters()}
    extra = sorted(set(sd) - params - {"lm_head.weight"})
    if extra:  # persistent buffers would surprise the C++ loader: say so
        log(f"  NOTE: state_dict has non-parameter tensors: {extra}")
    return sd


# --------------------------------------------------------------------------- forward passes


class Runner:
    """Wraps the HF model's forward for prefill and cached decode (batch 1, CPU, float32)."""

    def __init__(self, model):
        self.model = model
        self.takes_cache_position = "cache_position" in inspect.signature(model.forward).parameters

    def forward(self, tokens, start, cache=None, use_cache=False):
        ids = torch.tensor([tokens], dtype=torch.long)
        # Absolute positions are passed explicitly so that RoPE never depends on how a given
        # transformers version derives them from the hybrid cache. Older versions also take
        # cache_position (and the GDN layers require it to use their cached state).
        kwargs = dict(position_ids=torch.arange(start, start + len(tokens)).unsqueeze(0))
        if self.takes_cache_position:
            kwargs["cache_position"] = torch.arange(start, start + len(tokens))
        out = self.model(input_ids=ids, past_key_values=cache, use_cache=use_cache, **kwargs)
        return out.logits[0].to(torch.float32), out.past_key_values

    def prefill(self, tokens):
        return self.forward(tokens, 0)[0]

    def decode_after(self, ids, n):
        """Prefill ids[:n] with a cache, then feed ids[n .. n+7] one at a time."""
        logits, cache = self.forward(ids[:n], 0, use_cache=True)
        if cache is None:
            raise SystemExit("the model returned no past_key_values with use_cache=True")
        prefill_last = logits[-1]
        rows = []
        for j in range(DECODE_STEPS):
            logits, cache = self.forward([ids[n + j]], n + j, cache=cache, use_cache=True)
            rows.append(logits[-1])
        return torch.stack(rows), prefill_last, type(cache).__name__


# --------------------------------------------------------------------------- spec re-implementation


def spec_logits(sd, spec, ids):
    """Straight float64 transcription of spec/model-qwen35.md (recurrent GDN, naive attention).

    Independent of transformers; used only as a printed cross-check that the spec Kiln
    implements says the same thing as the HF reference.
    """
    W = {k: v.to(torch.float64) for k, v in sd.items()}
    eps = spec["rms_norm_eps"]
    H, T = spec["hidden_size"], len(ids)
    hq, hkv, hd = spec["num_attention_heads"], spec["num_key_value_heads"], spec["head_dim"]
    nk, dk = spec["linear_num_key_heads"], spec["linear_key_head_dim"]
    nv, dv = spec["linear_num_value_heads"], spec["linear_value_head_dim"]
    K = spec["linear_conv_kernel_dim"]
    rd = int(hd * spec["partial_rotary_factor"])
    half = rd // 2

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)

    def silu(x):
        return x * torch.sigmoid(x)

    def l2norm(x):
        return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)

    def attention(x, p):
        qg = (x @ W[p + "q_proj.weight"].T).view(T, hq, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:].reshape(T, hq * hd)
        k = (x @ W[p + "k_proj.weight"].T).view(T, hkv, hd)
        v = (x @ W[p + "v_proj.weight"].T).view(T, hkv, hd)
        q, k = rms(q, W[p + "q_norm.weight"]), rms(k, W[p + "k_norm.weight"])
        inv = spec["rope_theta"] ** (-torch.arange(half, dtype=torch.float64) * 2.0 / rd)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]

        def rope(t):
            x1, x2 = t[..., :half], t[..., half:rd]
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, t[..., rd:]], dim=-1)

        q, k = rope(q), rope(k)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        out = torch.empty(T, hq, hd, dtype=torch.float64)
        for j in range(hq):
            kv = j // (hq // hkv)
            s = (q[:, j] @ k[:, kv].T) / math.sqrt(hd)
            s = s.masked_fill(~mask, float("-inf"))
            out[:, j] = torch.softmax(s, dim=-1) @ v[:, kv]
        return (out.reshape(T, hq * hd) * torch.sigmoid(gate)) @ W[p + "o_proj.weight"].T

    def gated_delta_net(x, p):
        mixed = x @ W[p + "in_proj_qkv.weight"].T  # [T, C]
        z = (x @ W[p + "in_proj_z.weight"].T).view(T, nv, dv)
        a = x @ W[p + "in_proj_a.weight"].T
        b = x @ W[p + "in_proj_b.weight"].T
        cw = W[p + "conv1d.weight"][:, 0, :]  # [C, K]; tap K-1 multiplies the current token
        padded = torch.cat([torch.zeros(K - 1, mixed.shape[1], dtype=torch.float64), mixed])
        conv = sum(padded[i:i + T] * cw[:, i] for i in range(K))
        conv = silu(conv)
        q = conv[:, :nk * dk].view(T, nk, dk)
        k = conv[:, nk * dk:2 * nk * dk].view(T, nk, dk)
        v = conv[:, 2 * nk * dk:].view(T, nv, dv)
        q, k = l2norm(q) / math.sqrt(dk), l2norm(k)
        beta = torch.sigmoid(b)
        g = -torch.exp(W[p + "A_log"]) * torch.nn.functional.softplus(a + W[p + "dt_bias"])
        o = torch.empty(T, nv, dv, dtype=torch.float64)
        for h in range(nv):
            kh = h // (nv // nk)
            S = torch.zeros(dk, dv, dtype=torch.float64)
            for t in range(T):
                S = torch.exp(g[t, h]) * S
                S = S + torch.outer(k[t, kh], beta[t, h] * (v[t, h] - S.T @ k[t, kh]))
                o[t, h] = S.T @ q[t, kh]
        y = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps) * W[p + "norm.weight"] * silu(z)
        return y.reshape(T, nv * dv) @ W[p + "out_proj.weight"].T

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    for i, kind in enumerate(spec["layer_types"]):
        p = f"model.layers.{i}."
        y = rms(x, W[p + "input_layernorm.weight"])
        if kind == "full_attention":
            x = x + attention(y, p + "self_attn.")
        else:
            x = x + gated_delta_net(y, p + "linear_attn.")
        y = rms(x, W[p + "post_attention_layernorm.weight"])
        m = p + "mlp."
        x = x + (silu(y @ W[m + "gate_proj.weight"].T) * (y @ W[m + "up_proj.weight"].T)) @ W[m + "down_proj.weight"].T
    x = rms(x, W["model.norm.weight"])
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
    assert x.shape == (T, H)
    return x @ head.T


# --------------------------------------------------------------------------- files


# Generic PretrainedConfig keys that real Qwen3.5 checkpoints do not carry.
GENERIC_CONFIG_KEYS = ("output_hidden_states", "output_attentions", "return_dict", "chunk_size_feed_forward",
                       "is_encoder_decoder", "id2label", "label2id", "problem_type", "torch_dtype")


def config_dict(cfg, spec):
    """Full config.json content (to_dict, not the diff against defaults), in spec's rope_style."""
    d = json.loads(json.dumps(cfg.to_dict(), default=str))
    d = {k: v for k, v in d.items() if not k.startswith("_") and k not in GENERIC_CONFIG_KEYS}
    d["architectures"] = ["Qwen3_5ForCausalLM"]
    d["model_type"] = d.get("model_type") or "qwen3_5_text"
    d["dtype"] = "float32"
    # Keys real Qwen3.5 checkpoints carry that this transformers version may not model.
    d.setdefault("attn_output_gate", True)
    d.setdefault("full_attention_interval", spec["full_attention_interval"])
    d.setdefault("layer_types", list(spec["layer_types"]))
    theta, factor = spec["rope_theta"], spec["partial_rotary_factor"]
    style = spec["rope_style"]
    if style == "top_level":
        d.pop("rope_parameters", None)
        d["rope_theta"], d["partial_rotary_factor"] = theta, factor
    else:
        rp = dict(d.get("rope_parameters") or {})
        rp.setdefault("rope_type", "default")
        rp["rope_theta"], rp["partial_rotary_factor"] = theta, factor
        d["rope_parameters"] = rp
        if style == "rope_parameters":
            d.pop("rope_theta", None)
            d.pop("partial_rotary_factor", None)
    return d


def nested_config_dict(flat, spec):
    """The multimodal layout: the text config under text_config, plus a vision section."""
    text = dict(flat)
    text.pop("architectures", None)
    text["model_type"] = "qwen3_5_text"
    # A tiny, self-consistent vision section: Kiln must ignore it.
    vision = dict(model_type="qwen3_5_vision", depth=1, hidden_size=16, num_heads=2,
                  intermediate_size=32, out_hidden_size=spec["hidden_size"], patch_size=16,
                  temporal_patch_size=2, spatial_merge_size=2, in_channels=3,
                  num_position_embeddings=16)
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "tie_word_embeddings": text.get("tie_word_embeddings", False),
        "text_config": text,
        "vision_config": vision,
        "transformers_version": text.get("transformers_version", transformers.__version__),
    }


def nested_tensor_names(sd):
    out = {}
    for k, v in sd.items():
        if k.startswith("model."):
            out["model.language_model." + k[len("model."):]] = v
        else:
            out[k] = v  # lm_head.weight
    out["model.visual.dummy.weight"] = torch.zeros(4, 4, dtype=torch.float32)
    return out


SAFETENSORS_DTYPES = {torch.float32: "F32", torch.int32: "I32"}


def save_safetensors(path, tensors, metadata):
    """Write a .safetensors file with a canonical header (sorted keys, tensors in name order).

    safetensors.torch.save_file orders the metadata from a hash map, so identical content gives
    different bytes from run to run; this keeps regenerated fixtures byte-identical.
    """
    header, blobs, offset = {"__metadata__": dict(metadata)}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        data = t.numpy().tobytes()  # little-endian on the machines we run on
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header with spaces to 8 bytes
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for data in blobs:
            f.write(data)
    back = load_file(path)  # read back with the real library: a broken file fails here
    if set(back) != set(tensors) or not all(torch.equal(back[k], tensors[k]) for k in tensors):
        raise SystemExit(f"{path}: read-back mismatch")


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")


def dir_bytes(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


# --------------------------------------------------------------------------- per config


def load_saved(model_cls, path):
    """from_pretrained on our files, float32, eager (kwarg names vary across versions)."""
    last = None
    for dtype_kw in ("dtype", "torch_dtype"):
        try:
            m = model_cls.from_pretrained(path, attn_implementation="eager", **{dtype_kw: torch.float32})
            return m.float().eval()
        except TypeError as e:
            last = e
    raise last


def make_one(model_cls, config_cls, spec, index, seed, out_dir, versions):
    name = spec["name"]
    log(f"\n=== {name} ===")
    cfg = make_config(config_cls, spec)
    theta, factor = rope_values(cfg)
    log(f"  layer_types: {list(cfg.layer_types)}")
    log(f"  rope_theta {theta}, partial_rotary_factor {factor}, tie_word_embeddings {cfg.tie_word_embeddings}")

    torch.manual_seed(seed + index)
    model = build_model(model_cls, cfg)
    check_tying(model, spec["tie_word_embeddings"])

    gen = torch.Generator().manual_seed(seed * 1000 + 17 * index + 1)
    randomise(model, gen, spec)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"  parameters ({n_params} values):")
    for pname, p in model.named_parameters():
        log(f"    {pname:55s} {list(p.shape)}  mean {p.mean().item():+.3f} std {p.std().item() if p.numel() > 1 else 0.0:.3f}")

    # RoPE as the model will apply it: rotary_dim/2 frequencies theta^(-2i/rotary_dim).
    rd = int(spec["head_dim"] * spec["partial_rotary_factor"])
    inv = getattr(getattr(model.model, "rotary_emb", None), "inv_freq", None)
    if inv is not None:
        want = spec["rope_theta"] ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
        ok = inv.numel() == rd // 2 and torch.allclose(inv.double(), want, rtol=1e-5)
        log(f"  rotary inv_freq: {inv.numel()} values (rotary_dim {rd}) {'OK' if ok else 'MISMATCH'}")
        if not ok:
            raise SystemExit(f"{name}: rotary inv_freq {inv.tolist()} != {want.tolist()}")

    ids = torch.randint(0, spec["vocab_size"], (NUM_IDS,),
                        generator=torch.Generator().manual_seed(seed * 1000 + 17 * index + 2))
    id_list = ids.tolist()
    runner = Runner(model)
    log(f"  forward takes cache_position: {runner.takes_cache_position}")

    ref = {"ids": ids.to(torch.int32)}
    checks = {}
    with torch.no_grad():
        for n in PREFILL_LENGTHS:
            ref[f"prefill_{n}"] = runner.prefill(id_list[:n]).contiguous()
        full = ref[f"prefill_{NUM_IDS}"]
        scale = max(1.0, full.abs().max().item())  # tolerances below are relative to this

        again = runner.prefill(id_list)
        checks["deterministic"] = bool(torch.equal(again, full))
        log(f"  deterministic (two prefill_{NUM_IDS} runs bit-identical): {checks['deterministic']}")
        causal = max((ref[f"prefill_{n}"] - full[:n]).abs().max().item() for n in PREFILL_LENGTHS)
        checks["max_prefill_prefix_diff"] = causal
        log(f"  max |prefill_n - prefill_{NUM_IDS}[:n]| = {causal:.3e}")

        worst = 0.0
        for n in DECODE_AFTER:
            rows, prefill_last, cache_cls = runner.decode_after(id_list, n)
            ref[f"decode_after_{n}"] = rows.contiguous()
            diff = (rows - full[n:n + DECODE_STEPS]).abs().max().item()
            pdiff = (prefill_last - full[n - 1]).abs().max().item()
            worst = max(worst, diff)
            flag = "" if diff < DECODE_REL_TOLERANCE * scale else "   <-- CHECK FAILED"
            log(f"  decode_after_{n:<3d} max |decode - prefill_{NUM_IDS}| = {diff:.3e}"
                f"   (cached prefill last row {pdiff:.3e}, cache {cache_cls}){flag}")
        checks["max_decode_diff"] = worst
        checks["decode_ok"] = worst < DECODE_REL_TOLERANCE * scale

        logits_std = full.std().item()
        row_spread = (full.max(dim=-1).values - full.min(dim=-1).values).mean().item()
        checks["logits_std"] = logits_std
        log(f"  logits: std {logits_std:.3f}, mean max-min per row {row_spread:.3f}, "
            f"|max| {full.abs().max().item():.3f}")

        for key, t in ref.items():
            if t.is_floating_point() and not torch.isfinite(t).all():
                raise SystemExit(f"{name}: {key} has non-finite values")

        sd = weights_state_dict(model, spec["tie_word_embeddings"])
        spec_full = spec_logits(sd, spec, id_list)
        sdiff = (spec_full - full.double()).abs().max().item()
        # A second oracle: the spec's math evaluated in float64 (rounded to f32 when saved), so
        # tests can tell the CPU backend's own error from the f32 rounding inside transformers.
        ref[f"prefill_{NUM_IDS}_f64"] = spec_full.float().contiguous()
        checks["max_spec_diff"] = sdiff
        checks["spec_ok"] = sdiff < SPEC_REL_TOLERANCE * scale
        flag = "" if checks["spec_ok"] else "   <-- CHECK FAILED (spec and HF disagree)"
        log(f"  spec/model-qwen35.md re-implementation (f64) vs HF: max diff {sdiff:.3e}{flag}")
        log_decay_stats(model, sd, spec, id_list)

    # ---- files
    cdir = os.path.join(out_dir, name)
    os.makedirs(cdir, exist_ok=True)
    flat_cfg = config_dict(cfg, spec)
    weights_path = os.path.join(cdir, "model.safetensors")
    save_safetensors(weights_path, sd, {"format": "pt"})
    write_json(os.path.join(cdir, "config.json"), flat_cfg)

    # Round trip through HF's own loader: proves the files (and the missing lm_head when tied)
    # mean the same model to transformers.
    try:
        reloaded = load_saved(model_cls, cdir)
        with torch.no_grad():
            rt = (Runner(reloaded).prefill(id_list[:65]) - ref["prefill_65"]).abs().max().item()
        checks["reload_diff"] = rt
        log(f"  from_pretrained round trip: max diff {rt:.3e}{'' if rt == 0.0 else '   <-- CHECK FAILED (expected bit-identical)'}")
    except Exception as e:
        checks["reload_diff"] = None
        log(f"  WARNING: from_pretrained round trip failed: {e!r}")

    if spec["layout"] == "nested":
        save_safetensors(weights_path, nested_tensor_names(sd), {"format": "pt"})
        write_json(os.path.join(cdir, "config.json"), nested_config_dict(flat_cfg, spec))
        try:  # informational only: whether this transformers reads the multimodal layout itself
            reloaded = load_saved(model_cls, cdir)
            with torch.no_grad():
                rt = (Runner(reloaded).prefill(id_list[:65]) - ref["prefill_65"]).abs().max().item()
            log(f"  (info) Qwen3_5ForCausalLM.from_pretrained on the nested layout: max diff {rt:.3e}")
        except Exception as e:
            log(f"  (info) Qwen3_5ForCausalLM.from_pretrained on the nested layout failed: {e!r}")

    meta = {
        "config": name,
        "seed": str(seed),
        "dtype": "float32",
        "torch": versions["torch"],
        "transformers": versions["transformers"],
        "prefill_lengths": ",".join(map(str, PREFILL_LENGTHS)),
        "decode_after": ",".join(map(str, DECODE_AFTER)),
        "decode_steps": str(DECODE_STEPS),
        "decode_row_meaning": "row j = logits after feeding ids[n+j], i.e. the prediction for position n+j+1",
    }
    save_safetensors(os.path.join(cdir, "reference.safetensors"), ref, meta)

    names = load_file(weights_path)
    log(f"  wrote {cdir}: {len(names)} weight tensors, lm_head.weight present: {'lm_head.weight' in names}")
    for k in sorted(names):
        log(f"    {k:60s} {list(names[k].shape)}")

    return dict(
        name=name,
        layout=spec["layout"],
        weights_seed=seed * 1000 + 17 * index + 1,
        ids_seed=seed * 1000 + 17 * index + 2,
        parameters=n_params,
        spec={k: v for k, v in spec.items() if k not in ("name", "layout", "rope_style")},
        rope_style=spec["rope_style"],
        checks=checks,
        files=["config.json", "model.safetensors", "reference.safetensors"],
    )


def log_decay_stats(model, sd, spec, ids):
    """Per-token GDN decay exp(g) of layer 0 on the real inputs, for the log (says how far back
    the recurrent state reaches)."""
    if spec["layer_types"][0] != "linear_attention":
        return
    p = "model.layers.0.linear_attn."
    x = model.model.embed_tokens(torch.tensor([ids]))[0]
    x = model.model.layers[0].input_layernorm(x)
    a = x @ sd[p + "in_proj_a.weight"].T
    g = -torch.exp(sd[p + "A_log"]) * torch.nn.functional.softplus(a + sd[p + "dt_bias"])
    d = torch.exp(g)
    q = torch.quantile(d.flatten(), torch.tensor([0.1, 0.5, 0.9])).tolist()
    log(f"  GDN layer 0 per-token decay exp(g): p10 {q[0]:.3f}  median {q[1]:.3f}  p90 {q[2]:.3f}")


# --------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (created; known files overwritten)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "python": sys.version.split()[0]}
    try:
        import safetensors
        versions["safetensors"] = safetensors.__version__
    except Exception:
        pass
    log(f"python {versions['python']}, torch {versions['torch']}, transformers {versions['transformers']}, "
        f"safetensors {versions.get('safetensors', '?')}")
    log(f"blocked fast-path packages (torch reference path forced): {', '.join(BLOCKED_FAST_PATH_PACKAGES)}")

    model_cls, config_cls = import_qwen35()
    log(f"using {model_cls.__module__}.{model_cls.__name__}, {config_cls.__module__}.{config_cls.__name__}")

    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(args.seed)

    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    # An oracle is only useful when its own error is well below the tests' tolerance (1e-4):
    # redraw a config's weights and ids until transformers' f32 logits sit within
    # ORACLE_NOISE_LIMIT of the float64 evaluation of the spec at every position.
    results = []
    for i, spec in enumerate(CONFIGS):
        for attempt in range(ORACLE_ATTEMPTS):
            seed = args.seed + 100 * attempt
            r = make_one(model_cls, config_cls, spec, i, seed, out_dir, versions)
            r["seed"] = seed
            if r["checks"]["max_spec_diff"] <= ORACLE_NOISE_LIMIT:
                break
            log(f"  {spec['name']}: transformers' f32 noise {r['checks']['max_spec_diff']:.2e} > "
                f"{ORACLE_NOISE_LIMIT:.0e}; redrawing (attempt {attempt + 2}/{ORACLE_ATTEMPTS})")
        else:
            raise SystemExit(f"{spec['name']}: no draw kept transformers' f32 noise under {ORACLE_NOISE_LIMIT}")
        results.append(r)

    manifest = {
        "generator": "tools/make_reference.py",
        "command": "python3 " + shlex.join(sys.argv),
        "versions": versions,
        "seed": args.seed,
        "dtype": "float32",
        "device": "cpu",
        "ids_length": NUM_IDS,
        "prefill_lengths": list(PREFILL_LENGTHS),
        "decode_after": list(DECODE_AFTER),
        "decode_steps": DECODE_STEPS,
        "weight_init": {
            "linear": "N(0, 1/sqrt(fan_in))",
            "embed_tokens": f"N(0, {EMBED_STD_TIMES_SQRT_H}/sqrt(hidden_size))",
            "rmsnorm_offset": f"N(0, {NORM_OFFSET_STD})",
            "gdn_gated_norm": f"1 + N(0, {GATED_NORM_STD})",
            "A_log": f"log(U{A_RANGE})",
            "dt_bias": f"N({DT_BIAS_MEAN}, {DT_BIAS_STD})",
            "conv1d": f"N(0, {CONV_STD})",
        },
        "configs": results,
    }
    write_json(os.path.join(out_dir, "manifest.json"), manifest)

    log("\n=== summary ===")
    for r in results:
        c = r["checks"]
        log(f"  {r['name']:14s} params {r['parameters']:7d}  max decode-vs-prefill {c['max_decode_diff']:.2e}  "
            f"spec-vs-HF {c['max_spec_diff']:.2e}  logits std {c['logits_std']:.3f}  "
            f"deterministic {c['deterministic']}")
    total = dir_bytes(out_dir)
    log(f"  total size of {out_dir}: {total} bytes ({total / 2**20:.2f} MiB)")
    bad = [r["name"] for r in results
           if not (r["checks"]["decode_ok"] and r["checks"]["spec_ok"] and r["checks"]["deterministic"])
           or r["checks"].get("reload_diff") != 0.0]
    log("  all checks passed" if not bad else f"  CHECKS FAILED for: {', '.join(bad)} (see above)")


if __name__ == "__main__":
    main()
