#!/usr/bin/env python3
"""Kiln's Hugging Face cache against huggingface_hub and transformers, both ways, on a machine
with no network: the tests' mock Hub (build/tests/hub/kiln_mock_hub) serves the random-weight tiny-chat
model on loopback and HF_ENDPOINT points at it.

  A. huggingface_hub.snapshot_download fills a cache; Kiln reads it offline (`kiln model list`,
     `kiln generate --model ORG/NAME` with HF_HUB_OFFLINE=1, the same ids as from the folder).
  B. `kiln model pull` fills another cache; huggingface_hub's scan_cache_dir reads it without
     warnings, try_to_load_from_cache sees its .no_exist markers, and transformers loads config, tokenizer and model from it with
     local_files_only=True (its greedy tokens are printed beside Kiln's).

    python3 tools/hub_interop.py --kiln build/kiln --mock-hub build/tests/hub/kiln_mock_hub \
        --tokenizer-dir .cache/tokenizers/qwen3

Exits non-zero at the first check that fails, naming it.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = "org/tiny-chat"
IDS = "1,2,3,4,5"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, env, check=True):
    log("$ " + " ".join(cmd))
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise SystemExit(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--mock-hub", required=True)
    ap.add_argument("--tokenizer-dir", required=True, help="folder with the Qwen3 tokenizer.json and tokenizer_config.json")
    ap.add_argument("--work", default=None, help="working folder (default: a temporary one, removed)")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="kiln-hub-interop-")
    base = dict(os.environ)
    for k in ("HF_TOKEN", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        base.pop(k, None)

    model = os.path.join(work, "model")
    run([args.kiln, "model", "init", "--preset", "tiny-chat", "--out", model], base)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.tokenizer_dir, f), model)
    hub = subprocess.Popen([args.mock_hub, "--repo", f"{REPO}={model}"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        line = hub.stdout.readline().split()
        if len(line) != 2 or line[0] != "endpoint":
            raise SystemExit(f"the mock hub did not start: {line}")
        endpoint = line[1]
        log(f"mock hub at {endpoint}")
        direct = run([args.kiln, "generate", "--model", model, "--backend", "cpu", "--prompt-ids", IDS,
                      "--max-tokens", "4"], base).stdout.strip()

        # A. Python fetches, Kiln reads.
        env_a = dict(base, HF_ENDPOINT=endpoint, HF_HUB_CACHE=os.path.join(work, "cache-python"))
        os.environ.update(env_a)
        import huggingface_hub
        snap = huggingface_hub.snapshot_download(REPO)
        log(f"A: snapshot_download -> {snap} (huggingface_hub {huggingface_hub.__version__})")
        offline_a = dict(env_a, HF_HUB_OFFLINE="1")
        listed = json.loads(run([args.kiln, "model", "list", "--json"], offline_a).stdout)
        entry = [e for e in listed if e["model"] == REPO]
        if len(entry) != 1 or not entry[0]["servable"] or os.path.realpath(entry[0]["path"]) != os.path.realpath(snap):
            raise SystemExit(f"A: kiln model list does not show {REPO} as servable at {snap}: {listed}")
        via_name = run([args.kiln, "generate", "--model", REPO, "--backend", "cpu", "--prompt-ids", IDS,
                        "--max-tokens", "4"], offline_a).stdout.strip()
        if via_name != direct:
            raise SystemExit(f"A: kiln generate by name gave {via_name!r}, from the folder {direct!r}")
        log(f"A: ok (kiln generate by name from the python-filled cache: {via_name})")

        # B. Kiln pulls, Python reads.
        cache_b = os.path.join(work, "cache-kiln")
        env_b = dict(base, HF_ENDPOINT=endpoint, HF_HUB_CACHE=cache_b)
        snap_b = run([args.kiln, "model", "pull", REPO], env_b).stdout.strip()
        info = huggingface_hub.scan_cache_dir(cache_b)
        if info.warnings:
            raise SystemExit(f"B: scan_cache_dir warns about Kiln's cache: {info.warnings}")
        repos = [r for r in info.repos if r.repo_id == REPO]
        if len(repos) != 1 or not any("main" in rev.refs for rev in repos[0].revisions):
            raise SystemExit(f"B: scan_cache_dir does not see {REPO}@main: {info.repos}")
        # huggingface_hub read its environment at import (part A's): name this cache explicitly.
        # Kiln's .no_exist markers read as huggingface_hub's own: known absent, not merely uncached.
        from huggingface_hub.file_download import _CACHED_NO_EXIST
        for name in ("generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
                     "chat_template.jinja", "chat_template.json"):
            if os.path.exists(os.path.join(model, name)):
                continue
            cached = huggingface_hub.try_to_load_from_cache(REPO, name, cache_dir=cache_b)
            if cached is not _CACHED_NO_EXIST:
                raise SystemExit(f"B: try_to_load_from_cache({name}) -> {cached!r}, not the no-exist marker")
        got = huggingface_hub.snapshot_download(REPO, cache_dir=cache_b, local_files_only=True)
        if os.path.realpath(got) != os.path.realpath(snap_b):
            raise SystemExit(f"B: snapshot_download(local_files_only) -> {got}, kiln pulled {snap_b}")
        import torch
        import transformers
        cfg = transformers.AutoConfig.from_pretrained(REPO, cache_dir=cache_b, local_files_only=True)
        tok = transformers.AutoTokenizer.from_pretrained(REPO, cache_dir=cache_b, local_files_only=True)
        m = transformers.AutoModelForCausalLM.from_pretrained(REPO, cache_dir=cache_b, local_files_only=True,
                                                           dtype=torch.float32).eval()
        ids = [int(x) for x in IDS.split(",")]
        with torch.no_grad():
            out = m.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0)
        log(f"B: ok (transformers {transformers.__version__}: {cfg.architectures}, vocabulary {len(tok)}; "
            f"greedy {out[0, len(ids):].tolist()} beside kiln's {direct})")
    finally:
        hub.stdin.close()
        hub.wait(timeout=10)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print("hub interop: both directions ok")


if __name__ == "__main__":
    main()
