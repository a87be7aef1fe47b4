#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/jinja_cases.json: small templates covering the Jinja subset
(whitespace control, expressions, filters, tests, methods, loops, macros, namespaces, errors),
each rendered by Python Jinja2 configured as transformers configures it
(render_templates_jinja2.compile_template). Rows hold the expected output, or the error type and,
for syntax errors, Jinja2's line number ("column" is Kiln's own addition, set by hand here).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from render_templates_jinja2 import FIXTURES, compile_template  # noqa: E402

import jinja2  # noqa: E402

CTX = {
    "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Hi <there> & \"you\""},
        {"role": "assistant", "content": "  Hello!  ", "tool_calls": [{"name": "f", "arguments": {"x": 1, "y": [1.5, None, True]}}]},
    ],
    "n": 7, "f": 2.5, "s": "Hello, World", "empty": "", "none": None, "items": [3, 1, 2],
    "words": ["b", "A", "c", "a"], "d": {"z": 1, "a": {"b": [10, 20]}, "m": "x"},
    "uni": "Grüße 日本 😀", "flag": True,
}

CASES = [
    # Whitespace control with trim_blocks + lstrip_blocks.
    ("lstrip_and_trim", "<ul>\n    {% for i in items %}\n    <li>{{ i }}</li>\n    {% endfor %}\n</ul>\n", {}),
    ("minus_modifiers", "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c", {}),
    ("plus_disables_lstrip", "x\n    {%+ if true %}y{% endif %}\n", {}),
    ("plus_disables_trim", "{% if true +%}\nkeep\n{% endif %}", {}),
    ("variable_not_lstripped", "a\n    {{ n }}\n    b", {}),
    ("comment_trim", "a\n  {# comment #}\nb {#- tight -#} c", {}),
    ("raw_block", "{% raw %}{{ not rendered }}{% endraw %}\n{%- raw -%}  x {% if %}  {%- endraw %}|", {}),
    ("trailing_newline_dropped", "line\n", {}),
    ("crlf_normalised", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("tab_lstrip", "\t\t{% if true %}t{% endif %}", {}),
    # Literals and operators.
    ("arith", "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }}", {}),
    ("floats", "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 123456789.0 }} {{ 2.5 * 2 }} {{ f }} {{ 10 / 4 }}", {}),
    ("concat_tilde", "{{ 'a' ~ 1 ~ none ~ undefined_var ~ [1] }}", {}),
    ("string_plus", "{{ 'a' + 'b' }}{{ [1] + [2, 3] }}{{ 'ab' * 3 }}", {}),
    ("comparisons", "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ [1, 2] == [1, 2] }} {{ 'b' > 'a' }} {{ true == 1 }}", {}),
    ("in_operator", "{{ 'ell' in s }} {{ 2 in items }} {{ 'z' in d }} {{ 'q' not in d }} {{ 1 in [] }}", {}),
    ("logic_returns_operands", "{{ none or 'x' }} {{ 'a' and 'b' }} {{ 0 or [] }} {{ not empty }}", {}),
    ("cond_expr", "{{ 'y' if flag else 'n' }} {{ 'y' if none else 'n' }} [{{ 'x' if false }}]", {}),
    ("repr_values", "{{ none }} {{ true }} {{ [1, 'a', none, true, 1.0] }} {{ {'k': 'v', 'n': [1]} }} {{ (1,) }} {{ ('a', 2) }}", {}),
    ("repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\there', '\\x00'] }}", {}),
    ("string_escapes", "{{ 'a\\nb\\tc\\\\d\\u00e9\\x41' }}|{{ \"q\\\"q\" }}", {}),
    ("subscripts", "{{ items[0] }} {{ items[-1] }} {{ s[0] }} {{ s[-5:] }} {{ uni[1:4] }} {{ items[::-1] }} {{ s[::2] }} {{ items[5] }}|", {}),
    ("attribute_vs_item", "{{ d.z }} {{ d['a']['b'][1] }} {{ d.a.b.0 }} {{ messages[1].role }} {{ d.missing }}|{{ none.x }}|", {}),
    ("dict_methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys() | list }} {{ d.get('m') }} {{ d.get('q', 'dflt') }} {{ d.get('q') }}", {}),
    # Filters.
    ("tojson", "{{ messages[2].tool_calls | tojson }}\n{{ d | tojson(indent=2) }}\n{{ uni | tojson }}\n{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}", {}),
    ("tojson_escapes", "{{ \"ctl \\x01 \\x1f nl \\n quote \\\" backslash \\\\ del \\x7f\" | tojson }}", {}),
    ("tojson_separators", "{{ [1, {'a': none}] | tojson(separators=(',', ':')) }} {{ 'é' | tojson(true) }}", {}),
    ("length_count", "{{ items | length }} {{ uni | length }} {{ d | count }} {{ undefined_var | length }}", {}),
    ("string_filters", "[{{ '  pad  ' | trim }}] [{{ 'xxhixx' | trim('x') }}] {{ s | upper }} {{ s | lower }} {{ 'hello world-foo' | title }} {{ 'hELLO' | capitalize }} {{ 42 | string }}", {}),
    ("default_filter", "{{ undefined_var | default('dv') }} {{ none | default('dv') }} {{ '' | default('dv', true) }} {{ 0 | d(5, boolean=true) }}", {}),
    ("replace_join", "{{ s | replace('l', 'L') }} {{ s | replace('l', 'L', 2) }} {{ items | join(', ') }} {{ messages | join('|', attribute='role') }}", {}),
    ("first_last_list", "{{ items | first }} {{ items | last }} {{ 'abc' | list }} {{ s | first }}", {}),
    ("sort_unique_reverse", "{{ items | sort }} {{ items | sort(reverse=true) }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ words | unique | list }} {{ items | reverse | list }} {{ 'abc' | reverse }}", {}),
    ("map_select", "{{ messages | map(attribute='role') | list }} {{ items | select('odd') | list }} {{ items | reject('odd') | list }} {{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ messages | rejectattr('tool_calls') | list | length }} {{ [1, 2] | map('string') | join }}", {}),
    ("numbers", "{{ '42' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ items | sum }} {{ items | min }} {{ items | max }}", {}),
    ("indent_filter", "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, first=true) }}|{{ 'a\\n\\nb' | indent(3, blank=true) }}", {}),
    ("items_dictsort", "{{ d | dictsort | map(attribute=0) | list }} {{ {'b': 2, 'a': 1} | items | list }}", {}),
    ("escape_safe", "{{ messages[1].content | e }} {{ '<b>' | safe }}", {}),
    # Tests.
    ("tests", "{{ n is odd }} {{ n is even }} {{ n is divisibleby 7 }} {{ none is none }} {{ undefined_var is defined }} {{ s is string }} {{ n is number }} {{ f is float }} {{ n is integer }} {{ true is boolean }} {{ d is mapping }} {{ items is iterable }} {{ s is sequence }} {{ false is false }} {{ 1 is true }} {{ n is eq 7 }} {{ n is ne 7 }} {{ n is gt 3 }} {{ 2 is in items }} {{ 'HI' is upper }} {{ none is sameas none }}", {}),
    ("is_not", "{{ n is not none }} {{ undefined_var is not defined }} {{ flag is not false }}", {}),
    # String methods.
    ("methods", "{{ s.startswith('Hell') }} {{ s.endswith(('x', 'ld')) }} {{ s.split(', ') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ s.lower() }} {{ s.upper() }} [{{ '\\n x \\n'.strip() }}] [{{ 'xxaxx'.lstrip('x') }}] [{{ 'xxaxx'.rstrip('x') }}] {{ s.replace('o', '0') }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.count('l') }} {{ '-'.join(['a', 'b']) }} {{ 'a b'.title() }} {{ 'ab'.capitalize() }}", {}),
    ("more_methods", "{{ 'l1\\nl2\\r\\nl3'.splitlines() }} {{ 'k=v=w'.partition('=') }} {{ 'abc'.removeprefix('a') }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ '  '.isspace() }} {{ '7'.zfill(3) }} {{ 'x'.ljust(3, '.') }}| {{ 'x'.center(4, '*') }}", {}),
    ("unicode_methods", "{{ uni.upper() }} {{ uni.split() }} {{ uni | length }} {{ uni[-1] }} {{ 'ß'.upper() }}", {}),
    # Statements.
    ("for_loop_vars", "{% for x in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.cycle('a', 'b') }};{% endfor %}", {}),
    ("for_else_filter", "{% for x in [] %}x{% else %}empty{% endfor %} {% for x in items if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}", {}),
    ("for_unpack", "{% for a, b in [[1, 2], (3, 4)] %}{{ a }}{{ b }}{% endfor %} {% for k in d %}{{ k }}{% endfor %} {% for c in 'hé' %}[{{ c }}]{% endfor %}", {}),
    ("loop_controls", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("scoping", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}", {}),
    ("namespace", "{% set ns = namespace(total=0, seen=[]) %}{% for i in items %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.seen }}", {}),
    ("set_tuple_block", "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set blk %}inner {{ n }}{% endset %}[{{ blk }}] {% set up | upper %}shout{% endset %}{{ up }}", {}),
    ("macros", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }} {{ greet() }}|", {}),
    ("macro_sees_outer", "{% set outer = 'o' %}{% macro m() %}{{ outer }}{{ n }}{% endmacro %}{{ m() }}", {}),
    ("filter_block", "{% filter upper %}abc {{ n }}{% endfilter %}", {}),
    ("range_global", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }}", {}),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ {'a': 1}.items() | list }}", {}),
    ("if_elif_else", "{% for v in [0, 1, 2] %}{% if v == 0 %}zero{% elif v == 1 %}one{% else %}many{% endif %} {% endfor %}", {}),
    ("generation_tag", "{% generation %}assistant text{% endgeneration %}", {}),
    ("nested_loops", "{% for m in messages %}{% for k in m %}{{ loop.index }}{{ k[0] }}{% endfor %};{% endfor %}", {}),
    ("slice_negative_step", "{{ [1, 2, 3, 4, 5][4:1:-1] }} {{ [1, 2, 3][-2:] }} {{ 'hello'[:-1] }} {{ [1, 2, 3][10:] }}", {}),
    # Runtime errors (the message need not match, only that rendering fails).
    ("error_raise", "{{ raise_exception('custom failure') }}", {}),
    ("error_undefined_attr", "{{ undefined_var.attr }}", {}),
    ("error_add_none", "{{ 'a' + none }}", {}),
    ("error_list_append", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("error_iterate_int", "{% for x in 5 %}{% endfor %}", {}),
    ("error_undefined_call", "{{ nope() }}", {}),
    ("error_compare_types", "{{ 1 < 'a' }}", {}),
    # Syntax errors: Jinja2's line; "column" is where Kiln must point (by hand).
    ("syntax_unclosed_if", "line one\n{% if true %}\nno end", {"column": None}),
    ("syntax_bad_token", "ok\n\n{{ 1 + }}", {"column": 8}),
    ("syntax_unknown_tag", "{% frobnicate %}", {"column": 4}),
    ("syntax_unsupported_include", "a\n  {% include 'x.html' %}", {"column": 6}),
    ("syntax_mismatched_end", "{% for x in y %}\n{% endif %}", {"column": 4}),
    ("syntax_unclosed_expression", "{{ foo", {"column": 1}),
    ("syntax_unclosed_comment", "x {# never closed", {"column": 3}),
    ("syntax_bad_bracket", "{{ (1, 2] }}", {"column": 9}),
]


def main():
    rows = []
    for name, source, extra in CASES:
        row = {"name": name, "template": source}
        try:
            template = compile_template(source)
            try:
                row["expected"] = template.render(**CTX)
            except Exception as e:
                row["error"] = type(e).__name__
        except jinja2.exceptions.TemplateSyntaxError as e:
            row["syntax_error_line"] = e.lineno
            row["syntax_error_column"] = extra.get("column")
        rows.append(row)
    out = {"context": CTX, "cases": rows}
    with open(os.path.join(FIXTURES, "jinja_cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(rows)} cases")


if __name__ == "__main__":
    main()
