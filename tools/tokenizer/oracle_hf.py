#!/usr/bin/env python3
"""Cross-checks Kiln's tokenizer fixtures against real Hugging Face `tokenizers` and
`transformers` (run where they are installed, e.g. the accelerator machine), and measures HF's
encode throughput on the same corpus, optionally side by side with `kiln tokenize --bench`.

  python3 tools/tokenizer/oracle_hf.py [--tokenizer DIR] [--kiln PATH] [--report FILE] [--write]

Checks, each against the committed fixture under tests/fixtures/tokenizer/:
  corpus      tokenizers.Tokenizer.encode(s).ids            == corpus_expected.jsonl "ids"
              Tokenizer.decode(ids)                         == corpus_expected.jsonl "normalized"
  variants    the patched tokenizer.json variants           == variants_expected.json
  templates   AutoTokenizer.apply_chat_template(...)        == chat_template_expected.jsonl
  jinja       apply_chat_template(chat_template=each case)  == jinja_cases.json
  families    Llama 3.1 / Gemma 3 / DeepSeek V3 templates   == other_templates.json
--write rewrites corpus_expected.jsonl, variants_expected.json and chat_template_expected.jsonl
from HF. (On the CPU-only machine the ids come from HF tokenizers' npm bindings and the renders
from Python Jinja2 set up as transformers sets it up; this script checks both against the Python
libraries themselves.) Exit status 1 when anything differs (and --write was not given).
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import time
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizer")


def load_corpus():
    texts = []
    with open(os.path.join(FIXTURES, "corpus.jsonl"), encoding="utf-8") as f:
        for line in f:  # not splitlines(): U+2028 inside a string is not a line break here
            line = line.rstrip("\n")
            if not line:
                continue
            e = json.loads(line)
            texts.append(bytes.fromhex(e["hex"]).decode("utf-8", "replace") if "hex" in e else e["text"])
    return texts


def read_jsonl(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def apply_patch(base, patch):
    """The same patch semantics as applyPatch() in tools/tokenizer/fixtures.js."""
    out = copy.deepcopy(base)
    for key in ("normalizer", "pre_tokenizer"):
        if key in patch:
            out[key] = patch[key]
    if "model" in patch:
        out["model"].update(patch["model"])
    if patch.get("merges_as_strings"):
        out["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in out["model"]["merges"]]
    for content, flags in patch.get("added_tokens", {}).items():
        for t in out["added_tokens"]:
            if t["content"] == content:
                t.update(flags)
    return out


def check_corpus(tokenizers, tok_dir, texts, write, report):
    tok = tokenizers.Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    expected = read_jsonl("corpus_expected.jsonl")
    assert len(expected) == len(texts), "corpus.jsonl and corpus_expected.jsonl differ in length"
    id_diffs, decode_diffs, rows = [], [], []
    for i, (text, want) in enumerate(zip(texts, expected)):
        ids = tok.encode(text, add_special_tokens=True).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        if ids != want["ids"]:
            id_diffs.append({"line": i + 1, "text": text[:80], "hf": ids[:40], "fixture": want["ids"][:40]})
        if decoded != want["normalized"]:
            decode_diffs.append({"line": i + 1, "hf": decoded[:80], "fixture": want["normalized"][:80]})
        if decoded != unicodedata.normalize("NFC", text):
            decode_diffs.append({"line": i + 1, "note": "HF decode != NFC(text)"})
        rows.append({"ids": ids, "normalized": unicodedata.normalize("NFC", text)})
    report["corpus"] = {"strings": len(texts), "id_mismatches": len(id_diffs), "decode_mismatches": len(decode_diffs),
                        "first_id_mismatches": id_diffs[:10], "first_decode_mismatches": decode_diffs[:10]}
    if write:
        with open(os.path.join(FIXTURES, "corpus_expected.jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
    return not id_diffs and not decode_diffs


def check_variants(tokenizers, tok_dir, texts, write, report):
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        base = json.load(f)
    with open(os.path.join(FIXTURES, "variants_expected.json"), encoding="utf-8") as f:
        variants = json.load(f)
    stride = variants[0]["stride"]
    sample = texts[::stride]
    results, ok = {}, True
    for v in variants[1:]:
        tok = tokenizers.Tokenizer.from_str(json.dumps(apply_patch(base, v["patch"])))
        ids = [tok.encode(s, add_special_tokens=True).ids for s in sample]
        diffs = [i * stride + 1 for i, (a, b) in enumerate(zip(ids, v["ids"])) if a != b]
        results[v["name"]] = {"mismatches": len(diffs), "first_lines": diffs[:10]}
        ok = ok and not diffs
        v["ids"] = ids
    report["variants"] = results
    if write:
        with open(os.path.join(FIXTURES, "variants_expected.json"), "w", encoding="utf-8") as f:
            f.write("[\n" + ",\n".join(json.dumps(v, ensure_ascii=False, separators=(",", ":")) for v in variants) + "\n]\n")
    return ok


def render_case(hf_tok, case):
    kwargs = {}
    if "enable_thinking" in case:
        kwargs["enable_thinking"] = case["enable_thinking"]
    return hf_tok.apply_chat_template(case["messages"], tools=case.get("tools"), tokenize=False,
                                      add_generation_prompt=case["add_generation_prompt"], **kwargs)


def check_templates(hf_tok, write, report):
    with open(os.path.join(FIXTURES, "conversations.json"), encoding="utf-8") as f:
        cases = json.load(f)
    expected = read_jsonl("chat_template_expected.jsonl")
    diffs, rows = [], []
    for case, want in zip(cases, expected):
        try:
            got = {"name": case["name"], "rendered": render_case(hf_tok, case)}
        except Exception as e:
            got = {"name": case["name"], "error": f"{type(e).__name__}: {e}"}
        rows.append(got)
        same = ("error" in got and "error" in want) or got.get("rendered") == want.get("rendered")
        if not same:
            diffs.append({"name": case["name"], "hf": got, "fixture": want})
    report["templates"] = {"cases": len(cases), "mismatches": len(diffs), "first_mismatches": diffs[:5]}
    if write:
        with open(os.path.join(FIXTURES, "chat_template_expected.jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return not diffs


def check_jinja(hf_tok, report):
    with open(os.path.join(FIXTURES, "jinja_cases.json"), encoding="utf-8") as f:
        fixture = json.load(f)
    ctx = dict(fixture["context"])
    messages = ctx.pop("messages")
    diffs = []
    for case in fixture["cases"]:
        try:
            got = {"expected": hf_tok.apply_chat_template(messages, chat_template=case["template"], tokenize=False, **ctx)}
        except Exception as e:
            got = {"error": type(e).__name__}
        if "expected" in case:
            same = got.get("expected") == case["expected"]
        else:  # runtime or syntax error in Python Jinja2: HF must fail too
            same = "error" in got
        if not same:
            diffs.append({"name": case["name"], "hf": got, "fixture": {k: case.get(k) for k in ("expected", "error")}})
    report["jinja"] = {"cases": len(fixture["cases"]), "mismatches": len(diffs), "first_mismatches": diffs[:10]}
    return not diffs


def check_other_templates(hf_tok, report):
    with open(os.path.join(FIXTURES, "other_templates.json"), encoding="utf-8") as f:
        models = json.load(f)
    diffs = []
    for m in models:
        tokens = {k: (v["content"] if isinstance(v, dict) else v) for k, v in m["tokenizer_config"].items()
                  if k != "additional_special_tokens" and v is not None}
        for i, case in enumerate(m["cases"]):
            try:
                got = {"expected": hf_tok.apply_chat_template(case["messages"], chat_template=m["chat_template"], tokenize=False,
                                                              add_generation_prompt=case["add_generation_prompt"], **tokens)}
            except Exception as e:
                got = {"error": f"{type(e).__name__}: {e}"}
            same = ("error" in got and "error" in case) or got.get("expected") == case.get("expected")
            if not same:
                diffs.append({"model": m["model"], "case": i, "hf": got})
    report["families"] = {"mismatches": len(diffs), "first_mismatches": diffs[:5]}
    return not diffs


def bench(tokenizers, tok_dir, texts, rounds, kiln, report):
    tok = tokenizers.Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    result = {"corpus_bytes": nbytes, "strings": len(texts), "rounds": rounds, "cpu_count": os.cpu_count(),
              "tokenizers_version": tokenizers.__version__}
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    for t in texts:  # warm-up: fills the BPE cache, as Kiln's bench does
        tok.encode(t)
    t0 = time.perf_counter()
    for _ in range(rounds):
        for t in texts:
            tok.encode(t)
    s = time.perf_counter() - t0
    result["hf_single_thread_encode_loop"] = {"seconds": s, "mb_per_s": nbytes * rounds / s / 1e6}
    t0 = time.perf_counter()
    for _ in range(rounds):
        tok.encode_batch(texts)
    s = time.perf_counter() - t0
    result["hf_single_thread_encode_batch"] = {"seconds": s, "mb_per_s": nbytes * rounds / s / 1e6}
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    tok.encode_batch(texts)
    t0 = time.perf_counter()
    for _ in range(rounds):
        tok.encode_batch(texts)
    s = time.perf_counter() - t0
    result["hf_all_threads_encode_batch"] = {"seconds": s, "mb_per_s": nbytes * rounds / s / 1e6}
    if kiln:
        out = subprocess.run([kiln, "tokenize", "--tokenizer", tok_dir, "--bench", os.path.join(FIXTURES, "corpus.jsonl"),
                              "--rounds", str(rounds)], check=True, capture_output=True, text=True)
        result["kiln"] = json.loads(out.stdout)
    report["bench"] = result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default=os.path.join(ROOT, ".cache", "tokenizers", "qwen3"))
    parser.add_argument("--kiln", help="a kiln binary to benchmark in the same run")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--report", help="also write the JSON report here")
    parser.add_argument("--write", action="store_true", help="rewrite the fixtures from HF")
    args = parser.parse_args()

    import tokenizers
    import transformers
    from transformers import AutoTokenizer

    report = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__}
    texts = load_corpus()
    hf_tok = AutoTokenizer.from_pretrained(args.tokenizer)
    ok = check_corpus(tokenizers, args.tokenizer, texts, args.write, report)
    ok = check_variants(tokenizers, args.tokenizer, texts, args.write, report) and ok
    ok = check_templates(hf_tok, args.write, report) and ok
    ok = check_jinja(hf_tok, report) and ok
    ok = check_other_templates(hf_tok, report) and ok
    bench(tokenizers, args.tokenizer, texts, args.rounds, args.kiln, report)
    report["all_match"] = ok
    text = json.dumps(report, ensure_ascii=False, indent=2)
    print(text)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    sys.exit(0 if ok or args.write else 1)


if __name__ == "__main__":
    main()
