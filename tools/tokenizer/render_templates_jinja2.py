#!/usr/bin/env python3
"""The chat-template oracle on this machine: Python's Jinja2 configured exactly as transformers'
apply_chat_template configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, the json.dumps-based tojson, raise_exception, strftime_now), rendering each case of
tests/fixtures/tokenizer/conversations.json with the variables transformers passes (messages,
tools, documents, add_generation_prompt, the special tokens map, enable_thinking).

  python3 tools/tokenizer/render_templates_jinja2.py   writes tests/fixtures/tokenizer/chat_template_expected.jsonl

tools/tokenizer/oracle_hf.py checks the same file against real transformers (accelerator machine).
"""
import json
import os
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
TOKENIZER_DIR = os.environ.get("KILN_TOKENIZER_DIR", os.path.join(ROOT, ".cache", "tokenizers", "qwen3"))


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %} as transformers' AssistantTracker renders it when no
    assistant mask is requested: the body, unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def special_tokens_map(config):
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if value is not None:
            out[key] = value
    extra = config.get("additional_special_tokens") or []
    if extra:
        out["additional_special_tokens"] = [t["content"] if isinstance(t, dict) else t for t in extra]
    return out


def render(template, config, case):
    kwargs = dict(special_tokens_map(config))
    if "enable_thinking" in case:
        kwargs["enable_thinking"] = case["enable_thinking"]
    return template.render(messages=case["messages"], tools=case.get("tools"), documents=None,
                           add_generation_prompt=case["add_generation_prompt"], **kwargs)


def main():
    with open(os.path.join(TOKENIZER_DIR, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    template = compile_template(config["chat_template"])
    with open(os.path.join(FIXTURES, "conversations.json"), encoding="utf-8") as f:
        cases = json.load(f)
    rows = []
    for case in cases:
        try:
            rows.append({"name": case["name"], "rendered": render(template, config, case)})
        except Exception as e:  # the template (or Python) rejected the input
            rows.append({"name": case["name"], "error": f"{type(e).__name__}: {e}"})
    with open(os.path.join(FIXTURES, "chat_template_expected.jsonl"), "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    errors = sum(1 for r in rows if "error" in r)
    print(f"rendered {len(rows) - errors} cases, {errors} expected errors (jinja2 {jinja2.__version__})")


if __name__ == "__main__":
    main()
