#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/conversations.json: chat-template cases for the Qwen3 template.

Each base conversation is rendered under every combination of add_generation_prompt (true/false)
and enable_thinking (absent/true/false), so the fixture covers the template's branches: system
prompts, tools, tool calls (dict and string arguments, with and without the "function" wrapper),
consecutive tool responses, reasoning_content and <think> in content, multi-step tool use, and
non-ASCII / JSON-escaping content.
"""
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "conversations.json")

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web — returns snippets (UTF-8: 日本語, emoji 🔍).\nSecond line\twith tab.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "top_k": {"type": "integer", "minimum": 1, "maximum": 10.0, "default": 3},
                "threshold": {"type": "number", "default": 0.25, "exclusiveMaximum": 1e-7},
                "filters": {"type": "object", "properties": {"site": {"type": ["string", "null"]}},
                            "additionalProperties": False},
                "path": {"type": "string", "pattern": "^C:\\\\Users\\\\[a-z]+$"},
            },
            "required": ["query"],
        },
    },
}
FLAT_TOOL = {"name": "calculator", "description": "Evaluate an arithmetic expression.",
             "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}

BASES = {
    "single_user": [
        {"role": "user", "content": "Hello!"},
    ],
    "system_user": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2 + 2?"},
    ],
    "multi_turn": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another one?"},
    ],
    "multi_turn_reasoning_field": [
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No, 91 = 7 × 13."},
        {"role": "user", "content": "And 97?"},
        {"role": "assistant", "reasoning_content": "\nCheck divisors up to 9.\n", "content": "\nYes, 97 is prime."},
    ],
    "multi_turn_think_in_content": [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "<think>\nEasy question.\n</think>\n\nParis."},
        {"role": "user", "content": "And of Japan?"},
        {"role": "assistant", "content": "<think>\nTokyo, since 1868.\n</think>\n\n\nTokyo."},
    ],
    "think_in_content_then_user": [
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "<think>reasoning without newlines</think>Hi!"},
        {"role": "user", "content": "Again."},
    ],
    "tools_no_system": [
        {"role": "user", "content": "What's the weather in Paris?"},
    ],
    "tools_with_system": [
        {"role": "system", "content": "You can use tools."},
        {"role": "user", "content": "Search for the tallest building."},
    ],
    "tool_call_round_trip": [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Tokyo", "unit": "celsius"}}},
        ]},
        {"role": "tool", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
        {"role": "tool", "content": "{\"temp\": 18.0, \"sky\": \"rain\"}"},
        {"role": "assistant", "content": "Paris: 21.5 °C, clear. Tokyo: 18 °C, rain."},
    ],
    "tool_call_pending": [
        {"role": "user", "content": "Weather in Berlin?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Berlin\"}"}},
        ]},
        {"role": "tool", "content": "{\"temp\": 9}"},
    ],
    "tool_call_with_reasoning": [
        {"role": "user", "content": "Compute 17 * 23 with the calculator."},
        {"role": "assistant", "reasoning_content": "I should call the calculator.", "content": "", "tool_calls": [
            {"name": "calculator", "arguments": {"expr": "17 * 23"}},
        ]},
        {"role": "tool", "content": "391"},
        {"role": "assistant", "reasoning_content": "The tool said 391.", "content": "17 × 23 = 391."},
    ],
    "multi_step_tools": [
        {"role": "user", "content": "Find the population of the capital of Australia."},
        {"role": "assistant", "content": "<think>\nFirst find the capital.\n</think>\n\n", "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"query": "capital of Australia"}}},
        ]},
        {"role": "tool", "content": "Canberra"},
        {"role": "assistant", "content": "<think>\nNow the population.\n</think>\n\n", "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"query": "population of Canberra", "top_k": 1}}},
        ]},
        {"role": "tool", "content": "About 470,000 people."},
    ],
    "user_message_looks_like_tool_response": [
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "<think>\nthinking\n</think>\n\nanswer"},
        {"role": "user", "content": "<tool_response>\nfake\n</tool_response>"},
        {"role": "assistant", "content": "<think>\nmore\n</think>\n\nok"},
    ],
    "system_in_the_middle": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "system", "content": "From now on answer in French."},
        {"role": "user", "content": "How are you?"},
    ],
    "unicode_and_specials": [
        {"role": "system", "content": "Réponds en 中文 😀 — with <|im_end|> inside and \"quotes\"."},
        {"role": "user", "content": "  leading spaces\n\nand\ttabs\r\nCRLF  "},
        {"role": "assistant", "content": "\n\n好的！👍🏽"},
        {"role": "user", "content": "<think>not really thinking</think>"},
    ],
    "assistant_last_prefill": [
        {"role": "user", "content": "Write a haiku."},
        {"role": "assistant", "content": "Autumn moonlight—"},
    ],
    "assistant_last_with_reasoning": [
        {"role": "user", "content": "Pick a colour."},
        {"role": "assistant", "reasoning_content": "Blue is common.", "content": "Blue."},
    ],
    "empty_system": [
        {"role": "system", "content": ""},
        {"role": "user", "content": ""},
    ],
}

TOOLS = {
    "tools_no_system": [WEATHER_TOOL],
    "tools_with_system": [SEARCH_TOOL, WEATHER_TOOL],
    "tool_call_round_trip": [WEATHER_TOOL],
    "tool_call_pending": [WEATHER_TOOL],
    "tool_call_with_reasoning": [FLAT_TOOL],
    "multi_step_tools": [SEARCH_TOOL],
}

# Cases HF's own template rendering rejects (Python raises); Kiln must fail on them too.
ERROR_CASES = [
    {"name": "error_tool_call_with_null_content", "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
    ], "tools": [WEATHER_TOOL], "add_generation_prompt": False},
    {"name": "error_user_content_null", "messages": [{"role": "user", "content": None}], "add_generation_prompt": True},
]


def main():
    cases = []
    for name, messages in BASES.items():
        for add_generation_prompt in (True, False):
            for thinking in (None, True, False):
                case = {
                    "name": f"{name}/gen={'yes' if add_generation_prompt else 'no'}"
                            f"/thinking={'unset' if thinking is None else str(thinking).lower()}",
                    "messages": messages,
                    "add_generation_prompt": add_generation_prompt,
                }
                if name in TOOLS:
                    case["tools"] = TOOLS[name]
                if thinking is not None:
                    case["enable_thinking"] = thinking
                cases.append(case)
    cases.extend(ERROR_CASES)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
