#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/corpus.jsonl: the tokenizer parity corpus.

Deterministic (fixed seed). Each line is {"text": str} or, for byte strings that are not UTF-8,
{"hex": "..."}; oracles decode hex with errors="replace" (maximal subparts), as Kiln does.
Characters are drawn from scripts assigned long ago (Unicode <= 12), so that libraries built on
different Unicode versions agree. A few strings probe where transformers.js and HF disagree
(U+0085 and U+FEFF next to spaces; case-folded contractions), since HF is the reference.
"""
import json
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "corpus.jsonl")

SEEDS = [
    # English, contractions (the pattern's case-insensitive group), punctuation.
    "Hello, world!",
    "I'm sure you'll agree it's what we've wanted; they'd say they're DONE. I'M, YOU'LL, IT'S, WE'VE, THEY'D, THEY'RE.",
    "Don't stop—won't stop. Shouldn't've. 'Tis the season. rock 'n' roll",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
    "e.g. i.e. etc... \"quoted\" 'single' `backtick` (parens) [brackets] {braces} <angles>",
    "Price: $1,234.56 (≈ €1.137,89) — 50% off!!! #deal @user ~tilde^caret|pipe\\backslash",
    "email: someone@example.com, url: https://example.org/path?q=1&r=two#frag",
    # European languages with diacritics.
    "Français : « Ça va très bien, merci ! » L'été dernier, j'ai vu Noël.",
    "Deutsch: Größenmaßstäbe, Straße, Übermäßig, ÄÖÜ äöü ß ẞ.",
    "Español: ¿Dónde está la niña? ¡Mañana! El pingüino comió ñoquis.",
    "Português: São Paulo, ação, coração, não, às vezes, Conceição.",
    "Italiano: Perché è così? Più o meno, caffè, città.",
    "Polski: Zażółć gęślą jaźń. Łódź, Kraków, Gdańsk.",
    "Čeština: Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Türkçe: Işık, İstanbul, ğüşöçı, Ağaç.",
    "Tiếng Việt: Tôi yêu tiếng Việt. Người, được, những, Hà Nội, Đà Nẵng.",
    "Română: Știință, țară, București. Magyar: Árvíztűrő tükörfúrógép.",
    "Íslenska: Þetta reddast. Ðóra, æðislegt, ö. Dansk: Rødgrød med fløde, Ålborg.",
    # Greek, Cyrillic, Armenian, Georgian, Hebrew, Arabic, Persian.
    "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Αθήνα, ΕΛΛΆΔΑ.",
    "Русский: Съешь же ещё этих мягких французских булок, да выпей чаю. ЁЛКА, ёлка.",
    "Українська: Чуєш їх, доцю, га? Кумедна ж ти, прощайся без ґольфів!",
    "Հայերեն: Բարեւ աշխարհ։ ქართული: გამარჯობა მსოფლიო.",
    "עברית: שלום עולם! דג סקרן שט בים מאוכזב.",
    "العربية: مرحبا بالعالم! هذه جملة باللغة العربية، وفيها أرقام ١٢٣٤٥٦٧٨٩٠.",
    "فارسی: سلام دنیا. من ۱۲۳ کتاب دارم. زبانِ فارسی",
    "اردو: یہ ایک جملہ ہے۔ پاکستان",
    # Indic and Southeast Asian scripts (combining vowel signs, viramas).
    "हिन्दी: नमस्ते दुनिया! क्षत्रिय, श्रीमान, द्वितीय, ०१२३४५६७८९।",
    "বাংলা: আমি বাংলায় গান গাই। ক্ষ, জ্ঞ",
    "ਪੰਜਾਬੀ: ਸਤ ਸ੍ਰੀ ਅਕਾਲ। ગુજરાતી: કેમ છો?",
    "தமிழ்: வணக்கம் உலகம். తెలుగు: నమస్కారం. ಕನ್ನಡ: ನಮಸ್ಕಾರ. മലയാളം: നമസ്കാരം.",
    "සිංහල: ආයුබෝවන්. नेपाली: नमस्कार।",
    "ไทย: สวัสดีครับ ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ กรุงเทพมหานคร ๑๒๓",
    "ລາວ: ສະບາຍດີ. ខ្មែរ: សួស្តី​ពិភពលោក។ မြန်မာ: မင်္ဂလာပါ",
    "Bahasa Indonesia: Selamat pagi, apa kabar? Tagalog: Kumusta ka?",
    "አማርኛ: ሰላም ዓለም። ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ. ᐃᓄᒃᑎᑐᑦ",
    # CJK.
    "中文：你好，世界！今天天气很好。我们一起去公园散步吧。",
    "繁體中文：電腦軟體與資訊科學，臺灣。",
    "日本語：こんにちは、世界！カタカナとひらがなと漢字。東京都渋谷区。ｶﾀｶﾅ半角",
    "한국어: 안녕하세요, 세계! 대한민국 서울특별시. ㄱㄴㄷ ㅏㅑㅓ",
    "混合：Python是一种编程语言，version 3.12 发布于2023年。",
    "全角：ＡＢＣ１２３！？　（全角スペース）",
    # Emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors.
    "Family: 👨‍👩‍👧‍👦 couple: 👩‍❤️‍💋‍👨 rainbow flag: 🏳️‍🌈 pirate: 🏴‍☠️",
    "Skin tones: 👍🏻👍🏼👍🏽👍🏾👍🏿 👋🏽 🧑🏿‍💻 👩🏼‍🔬",
    "Flags: 🇯🇵🇺🇸🇫🇷🇩🇪🇧🇷🇮🇳 keycaps: 1️⃣ #️⃣ *️⃣ hearts: ❤️ ♥ 💕",
    "Emoji text: I ❤️ 🍕 and 🍣! 😀😃😄😁😆😅🤣😂🙂🙃😉😊😇🥰",
    "Symbols: ☀ ☁ ☂ ☃ ★ ☆ ♠ ♣ ♥ ♦ ✓ ✔ ✗ ✘ → ← ↑ ↓ ⇒ ∞ ≠ ≤ ≥ ± × ÷",
    # Combining marks (decomposed input that NFC composes, and sequences it keeps).
    "Decomposed: e\u0301 a\u0300 o\u0308 n\u0303 c\u0327 A\u030a u\u0308ber",
    "Stacked: a\u0301\u0302\u0303\u0304 Z\u0351\u0352\u0353a\u0354\u0355l\u0356g\u0357o\u0358",
    "Hangul jamo: \u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af",
    "Kana voicing: \u304b\u3099 \u30cf\u309a \u3046\u3099",
    "Compat chars: ﬁ ﬂ ½ ² ㎏ Ⅻ ①  ｈｅｌｌｏ",
    "Angstrom \u212b ohm \u2126 kelvin \u212a vs Å Ω K",
    # Code.
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "import numpy as np\n\nx = np.arange(10)\nprint(f\"{x.mean():.3f}\")  # comment\n",
    "#include <vector>\n\nint main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;\n  return 0;\n}\n",
    "template <typename T>\nconstexpr T clamp(T v, T lo, T hi) noexcept { return v < lo ? lo : (hi < v ? hi : v); }",
    "function debounce(fn, ms) {\n\tlet t;\n\treturn (...args) => {\n\t\tclearTimeout(t);\n\t\tt = setTimeout(() => fn(...args), ms);\n\t};\n}",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello\")\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC LIMIT 10;",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do\n  wc -l \"$f\" | awk '{print $1}'\ndone\n",
    "<html>\n  <body class=\"main\">\n    <p>Hello &amp; welcome</p>\n  </body>\n</html>",
    "{\"name\": \"kiln\", \"version\": [0, 1, 0], \"nested\": {\"a\": null, \"b\": true, \"c\": -1.5e-3}}",
    "public class Main {\n    public static void main(String[] args) {\n        System.out.println(\"Hi\");\n    }\n}",
    "\\begin{equation} E = mc^2 \\quad \\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2} \\end{equation}",
    "x+=1;y-=2;z*=3;w/=4;a&&b||c;a!==b;a===b;a<=>b;a->b;a::b;a=>b;a<<=2;a>>>=3;",
    "    \n\t\t\n  \r\n\r\n  trailing spaces    \nmixed\t \ttabs\n\n\n\nend",
    # Digits.
    "1234567890 3.14159265358979 -42 +7 1e10 0x1F 0b1010 1_000_000 12:34:56 2024-01-31",
    "Phone: +1 (555) 123-4567, ext. 890; ISBN 978-3-16-148410-0",
    "Other digits: ٠١٢٣ ۴۵۶ ०१२ ০১২ ๑๒๓ １２３ ①②③ ¹²³ ½¾",
    # Special tokens embedded in text.
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nLet me think.\n</think>\n\nThe answer is 42.<|im_end|>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    "<tool_response>\n{\"temp\": 21}\n</tool_response>",
    "<|fim_prefix|>def f(x):\n    <|fim_suffix|>\n    return y<|fim_middle|>y = x * 2<|fim_pad|>",
    "<|repo_name|>kiln<|file_sep|>src/main.cc\nint main() {}<|endoftext|>",
    "<|vision_start|><|image_pad|><|image_pad|><|vision_end|> <|video_pad|><|vision_pad|>",
    "<|object_ref_start|>the cat<|object_ref_end|><|box_start|>(10,20),(30,40)<|box_end|><|quad_start|><|quad_end|>",
    "Almost special: <|im_start <|im_start| <im_start|> <|IM_START|> <| im_start |> <|im_end|<|im_end|>",
    "Adjacent: <|im_end|><|im_end|><|endoftext|><|endoftext|>x<think></think><tool_call></tool_call>",
    "<<|im_start|>> <|<|im_start|>|> <<think>> text<|endoftext|>text",
    # Where JavaScript's \s and Oniguruma's differ, and Unicode case folding in (?i:'s|...).
    "next\u0085line  \ufeff bom \u0085 \ufeff\ufeff  end\u0085",
    "It\u017fs (long s) KELVIN \u212a: it'\u017f, WE'\u212aL, I'\u017f",
]

WORDS = [s for seed in SEEDS for s in seed.split()]

SEPARATORS = [" ", "  ", "\n", "\n\n", "\t", " \n", "\r\n", "", "   \n  ", "\u3000", "\u00a0", "\u2003", "\n\n\n\n"]

SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
]

# Code point ranges of long-assigned scripts: (first, last) inclusive.
BLOCKS = {
    "ascii": [(0x20, 0x7E)],
    "latin": [(0xC0, 0x24F), (0x1E00, 0x1EFF)],
    "greek": [(0x391, 0x3A1), (0x3A3, 0x3C9)],
    "cyrillic": [(0x410, 0x44F), (0x400, 0x40F)],
    "arabic": [(0x621, 0x64A), (0x660, 0x669), (0x64B, 0x652)],
    "hebrew": [(0x5D0, 0x5EA), (0x5B0, 0x5BD)],
    "devanagari": [(0x905, 0x939), (0x93E, 0x94D), (0x966, 0x96F)],
    "thai": [(0xE01, 0xE3A), (0xE40, 0xE4E), (0xE50, 0xE59)],
    "cjk": [(0x4E00, 0x9FA5)],
    "hiragana": [(0x3041, 0x3096), (0x30A1, 0x30FA)],
    "hangul": [(0xAC00, 0xD7A3)],
    "combining": [(0x300, 0x36F)],
    "punct": [(0x2010, 0x2027), (0x3001, 0x3011), (0xFF01, 0xFF0F)],
    "emoji": [(0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6C5), (0x1F900, 0x1F9FF)],
    "modifiers": [(0x1F3FB, 0x1F3FF), (0x200D, 0x200D), (0xFE0F, 0xFE0F)],
    "digits": [(0x30, 0x39), (0x660, 0x669), (0x966, 0x96F), (0xFF10, 0xFF19), (0xB2, 0xB3), (0x2460, 0x2473)],
    "space": [(0x20, 0x20), (0x9, 0xD), (0xA0, 0xA0), (0x2000, 0x200A), (0x2028, 0x2029), (0x3000, 0x3000),
              (0x202F, 0x202F), (0x205F, 0x205F), (0x1680, 0x1680), (0x85, 0x85), (0xFEFF, 0xFEFF)],
    "control": [(0x1, 0x8), (0xE, 0x1F), (0x7F, 0x84), (0x86, 0x9F)],
}


def pick(rng, block):
    ranges = BLOCKS[block]
    lo, hi = ranges[rng.randrange(len(ranges))]
    return chr(rng.randint(lo, hi))


def random_script_string(rng):
    blocks = rng.sample(list(BLOCKS), rng.randint(1, 4))
    n = rng.randint(1, 60)
    return "".join(pick(rng, rng.choice(blocks)) for _ in range(n))


def mixed_fragments(rng):
    parts = []
    for _ in range(rng.randint(2, 6)):
        r = rng.random()
        if r < 0.55:
            parts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))))
        elif r < 0.7:
            parts.append(rng.choice(SPECIALS))
        elif r < 0.85:
            seed = rng.choice(SEEDS)
            a = rng.randrange(len(seed))
            parts.append(seed[a:a + rng.randint(1, 80)])
        else:
            parts.append(random_script_string(rng))
        parts.append(rng.choice(SEPARATORS))
    return "".join(parts)


def case_mangle(rng, s):
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in s)


def contractions(rng):
    base = ["it's", "I'm", "you're", "we've", "he'll", "she'd", "can't", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d",
            "o'clock", "rock'n'roll", "'quoted'", "''", "'''", "l'homme", "'S", "'LL", "'Re", "'vE"]
    return "".join(rng.choice([" ", "", "  ", "\n", "x", "1", "!"]) + case_mangle(rng, rng.choice(base))
                   for _ in range(rng.randint(1, 8)))


def whitespace_run(rng):
    pieces = [" ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2009", "\x0b", "\x0c", "\u0085", "\ufeff", "\x1c"]
    out = []
    for _ in range(rng.randint(1, 6)):
        out.append(rng.choice(pieces) * rng.randint(1, 40))
        if rng.random() < 0.6:
            out.append(rng.choice(["a", "word", "1", "!", "中", "é", "🙂", "<|im_end|>", "x y"]))
    return "".join(out)


def digit_string(rng):
    kinds = [
        lambda: str(rng.randint(0, 10 ** rng.randint(1, 30))),
        lambda: f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 9)}f}",
        lambda: "".join(pick(rng, "digits") for _ in range(rng.randint(1, 20))),
        lambda: f"{rng.randint(1, 31)}/{rng.randint(1, 12)}/{rng.randint(1900, 2100)}",
        lambda: " ".join(str(rng.randint(0, 999)) for _ in range(rng.randint(2, 10))),
        lambda: f"v{rng.randint(0, 9)}.{rng.randint(0, 99)}.{rng.randint(0, 999)}-rc{rng.randint(1, 9)}",
    ]
    return rng.choice(kinds)()


def emoji_string(rng):
    out = []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.3:
            out.append(pick(rng, "emoji") + pick(rng, "modifiers"))
        elif r < 0.5:
            people = ["\U0001F468", "\U0001F469", "\U0001F467", "\U0001F466", "\U0001F9D1"]
            out.append("\u200d".join(rng.choice(people) for _ in range(rng.randint(2, 4))))
        elif r < 0.65:
            out.append(chr(0x1F1E6 + rng.randrange(26)) + chr(0x1F1E6 + rng.randrange(26)))
        elif r < 0.75:
            out.append(rng.choice("0123456789#*") + "\ufe0f\u20e3")
        else:
            out.append(pick(rng, "emoji"))
        out.append(rng.choice(["", " ", "", "\n", "ok", "!"]))
    return "".join(out)


def combining_string(rng):
    out = []
    for _ in range(rng.randint(1, 15)):
        out.append(pick(rng, rng.choice(["latin", "ascii", "greek", "cyrillic"])))
        for _ in range(rng.randint(0, 4)):
            out.append(pick(rng, "combining"))
    return "".join(out)


def code_string(rng):
    seeds = [s for s in SEEDS if "\n" in s or ";" in s or "{" in s]
    s = rng.choice(seeds)
    # Re-indent and join with another snippet so whitespace runs vary.
    indent = rng.choice(["", "  ", "    ", "\t", "        "])
    s = "\n".join(indent + line for line in s.split("\n"))
    if rng.random() < 0.5:
        s += rng.choice(["\n\n", "\n", "\n    \n"]) + rng.choice(seeds)
    return s


def invalid_bytes(rng):
    valid = rng.choice(SEEDS).encode("utf-8")
    bad = [
        b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
        b"\xf0\x82\x82\xac", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xfe", b"\xc3", b"\xe4\xbd",
        b"\xf0\x9f\x98", b"\xf0\x9f", b"\xe2\x82", b"\xc3\x28", b"\xa0\xa1", b"\xe2\x28\xa1", b"\xf0\x28\x8c\xbc",
    ]
    out = bytearray()
    for _ in range(rng.randint(1, 5)):
        a = rng.randrange(len(valid))
        out += valid[a:a + rng.randint(0, 40)]
        out += rng.choice(bad)
    if rng.random() < 0.3:
        out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 12)))
    return bytes(out)


def main():
    rng = random.Random(20240601)
    entries = []
    seen = set()

    def add_text(s):
        if s in seen:
            return
        seen.add(s)
        entries.append({"text": s})

    for s in SEEDS:
        add_text(s)
    add_text("")
    add_text(" ")
    add_text("\n")
    add_text(" " * 200)
    add_text("\n" * 50)
    add_text("a" * 1000)
    add_text("ab" * 700)
    add_text("😀" * 100)
    add_text("中" * 300)
    add_text("0123456789" * 30)
    add_text("=" * 150 + "\n" + "-" * 150)
    add_text(" ".join(SEEDS))
    for special in SPECIALS:
        add_text(special)
        add_text(f"before{special}after")
        add_text(f" {special} ")
        add_text(f"\n{special}\n")
    generators = [
        (mixed_fragments, 700),
        (random_script_string, 350),
        (contractions, 150),
        (whitespace_run, 150),
        (digit_string, 150),
        (emoji_string, 150),
        (combining_string, 150),
        (code_string, 120),
    ]
    for gen, count in generators:
        for _ in range(count):
            add_text(gen(rng))
    for _ in range(120):
        b = invalid_bytes(rng)
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            entries.append({"hex": b.hex()})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        for e in entries:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    print(f"wrote {len(entries)} entries to {OUT}")


if __name__ == "__main__":
    main()
