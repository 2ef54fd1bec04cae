#!/usr/bin/env python3
"""Writes the tokenizer comparison corpus (tests/tokenizer/corpus/corpus.b64).

One string per line, base64 of its exact bytes (so invalid UTF-8, NUL, CR and
lone surrogates' encodings survive). Deterministic: the same script writes the
same file (random.Random with a fixed seed, no dependence on the locale or the
Python version's hash seed). Run it again after changing it and commit both:

    python3 tests/tokenizer/corpus/make_corpus.py > tests/tokenizer/corpus/corpus.b64

Every line is a test case of tests/tokenizer/tok_compare.cpp; its category
(the first field of the record list below) is only for humans reading a
mismatch report: `make_corpus.py --list` prints index, category and text.

What it holds: prose in several scripts and languages (Latin with diacritics,
Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai, CJK, Japanese, Korean),
code (C, Python with indentation, JSON, shell, HTML), emoji with ZWJ
sequences, skin tones, flags and keycaps, runs of spaces / tabs / newlines /
CR LF, numbers of every length, contractions in every case, the special
tokens of Qwen3 and Llama 3 (alone, glued, partial), NFC and NFD forms,
control characters and invalid UTF-8 (lone continuation bytes, truncated
sequences, overlong forms, encoded surrogates, bytes F5..FF).

Deliberately absent: U+0085 and U+FEFF (JavaScript's \\s and the Rust regex
crate's \\s disagree on them, so the JavaScript reference would differ from
Hugging Face's own tokenizer there), U+017F and U+212A (case folding
differences of (?i:'s)), and characters assigned after Unicode 14 (the
reference's ICU and qsp's utf8proc may be of different Unicode versions).
"""
import base64
import random
import sys

R = random.Random(20261204)

PROSE = {
    "en": [
        "The quick brown fox jumps over the lazy dog.",
        "It was the best of times, it was the worst of times.",
        "Tokenizers split text into pieces that a language model understands.",
        "She sells sea-shells on the sea-shore; the shells she sells are sea-shells, I'm sure.",
        "In 1969, Apollo 11 landed on the Moon — a giant leap for mankind.",
        "Why? Because \"quoted text\", (parentheses) and [brackets] all matter!",
        "Mr. O'Neill's well-known 'state-of-the-art' approach didn't work.",
        "Email me at someone@example.com or visit https://example.org/path?q=1&r=2#frag.",
        "The price rose from $3.50 to $1,234,567.89 (an increase of 35,273%).",
        "Hello, World! HELLO, WORLD! hello, world!",
    ],
    "fr": [
        "Le cœur a ses raisons que la raison ne connaît point.",
        "À l'été, où il fait très chaud, nous mangeons des crêpes près de la forêt.",
        "Ça va ? Oui, ça va très bien, merci !",
        "L'œuvre d'Émile Zola était déjà célèbre au XIXᵉ siècle.",
    ],
    "de": [
        "Die Straße ist naß, weil es geregnet hat.",
        "Größere Übungen erfordern mehr Geduld und Ausdauer.",
        "Donaudampfschifffahrtsgesellschaftskapitän ist ein langes Wort.",
        "Fünf Äpfel, sechs Öfen und zwölf Bücher.",
    ],
    "es": [
        "¿Dónde está la biblioteca? ¡Está allí, señor!",
        "El niño comió piña y jamón en el año 2023.",
        "La ciudad de México tiene más de veinte millones de habitantes.",
    ],
    "pl_cs_tr_vi": [
        "Zażółć gęślą jaźń.",
        "Příliš žluťoučký kůň úpěl ďábelské ódy.",
        "Pijamalı hasta yağız şoföre çabucak güvendi.",
        "Tiếng Việt có nhiều dấu: ầ, ẩ, ẫ, ậ, ặ, ẳ, ỡ, ự.",
        "Þú ert æðislegur, Ævar! Ísland og Færeyjar.",
    ],
    "ru": [
        "Съешь же ещё этих мягких французских булок, да выпей чаю.",
        "Москва — столица России; население более 12 миллионов человек.",
        "Я не знаю, что сказать. Ёлка, ёж и щётка!",
        "Привет, мир! ПРИВЕТ, МИР! привет, мир!",
    ],
    "uk_bg_sr": [
        "Їжак і ґава п'ють узвар.",
        "Български език: щастие, юнак, ъгъл.",
        "Љубав, њега, џеп и ђак на српском.",
    ],
    "el": [
        "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
        "Η γλώσσα μου έδωσαν ελληνική· το σπίτι φτωχικό.",
        "ΑΒΓΔΕ αβγδε άέήίόύώ ϊϋΐΰ ς.",
    ],
    "ar": [
        "مرحبا بالعالم! كيف حالك اليوم؟",
        "اللغة العربية جميلة جداً، وهي لغة القرآن الكريم.",
        "في عام ٢٠٢٣ بلغ عدد السكان ١٠٠ مليون نسمة.",
        "السَّلَامُ عَلَيْكُمْ وَرَحْمَةُ اللهِ",
    ],
    "he": [
        "שלום עולם! מה שלומך היום?",
        "עִבְרִית הִיא שָׂפָה שֵׁמִית.",
        "ירושלים היא עיר עתיקה מאוד.",
    ],
    "hi": [
        "नमस्ते दुनिया! आप कैसे हैं?",
        "हिन्दी भारत की एक प्रमुख भाषा है।",
        "संख्याएँ: १२३४५६७८९० और क्षत्रिय, ज्ञान, श्री।",
    ],
    "th": [
        "สวัสดีชาวโลก คุณสบายดีไหม",
        "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
        "กรุงเทพมหานคร อมรรัตนโกสินทร์ มหินทรายุธยา",
    ],
    "zh": [
        "你好，世界！今天天气很好。",
        "我想在apple工作1314151天～",
        "中华人民共和国成立于1949年10月1日。",
        "學而時習之，不亦說乎？有朋自遠方來，不亦樂乎？",
        "机器学习和自然语言处理是人工智能的重要分支。",
    ],
    "ja": [
        "こんにちは、世界！お元気ですか？",
        "日本語の文章にはひらがな、カタカナ、漢字が混在します。",
        "東京スカイツリーは634メートルです。ｶﾀｶﾅ（半角）もあります。",
    ],
    "ko": [
        "안녕하세요, 세계! 오늘 날씨가 좋네요.",
        "한국어는 한글로 씁니다. 대한민국의 수도는 서울입니다.",
        "다람쥐 헌 쳇바퀴에 타고파.",
    ],
    "misc_scripts": [
        "Բարև աշխարհ (Armenian) გამარჯობა (Georgian) ሰላም (Amharic)",
        "வணக்கம் உலகம் (Tamil) ನಮಸ್ಕಾರ (Kannada) ഹലോ (Malayalam) হ্যালো (Bengali)",
        "Сайн байна уу ᠮᠣᠩᠭᠣᠯ ཀྲ་ཤིས་བདེ་ལེགས། ជំរាបសួរ ສະບາຍດີ မင်္ဂလာပါ",
    ],
}

CODE = [
    '#include <stdio.h>\n\nint main(void) {\n    printf("Hello, %s!\\n", "world");\n    return 0;\n}\n',
    "static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }",
    "for (int i = 0; i < n; ++i) {\n\tif (a[i] != b[i]) {\n\t\treturn -1;\n\t}\n}\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\nprint([fib(i) for i in range(10)])\n",
    "class Foo:\n    def __init__(self, x: int = 0) -> None:\n        self.x = x  # comment\n\n    def __repr__(self):\n        return f\"Foo(x={self.x!r})\"\n",
    "    if x:\n        y = {'a': 1, \"b\": [2, 3]}\n    else:\n        pass\n",
    '{"name": "qsp", "version": "1.2.0", "tags": ["llm", "cuda"], "nested": {"a": null, "b": true, "c": 3.14e-10}}',
    '{\n  "tokens": [\n    151644,\n    872\n  ],\n  "text": "caf\\u00e9 \\ud83d\\ude00"\n}\n',
    "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\" | tr 'a-z' 'A-Z'; done 2>&1 | tee /tmp/log\n",
    '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>T&amp;C</title></head>\n<body><p class="x">Hi &lt;there&gt;</p></body></html>',
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC LIMIT 10;",
    "fn main() {\n    let v: Vec<u8> = (0..=255).collect();\n    println!(\"{:?}\", &v[..4]);\n}\n",
    "const f = async (x) => { await fetch(`/api/${x}?q=${encodeURIComponent(x)}`); return x ?? 0; };",
    "x = a->b.c[d] + *p++ - --q; y ^= ~z & 0xFF | 0b1010 << 3 >> 1; z %= 7; w /= 2.5e3f;",
    "# Title\n\n- item **bold** and _italic_\n- `code` and [link](http://x.y/z)\n\n```python\nprint('hi')\n```\n",
    "diff --git a/f.c b/f.c\n@@ -1,3 +1,4 @@\n-int x;\n+int x = 0;\n+int y;\n",
]

EMOJI = [
    "😀", "😂", "🤣", "❤️", "👍", "👍🏻", "👍🏼", "👍🏽", "👍🏾", "👍🏿", "🚀", "🦙", "🌍", "✅", "❌", "⭐",
    "👨‍👩‍👧‍👦", "👩‍💻", "👩🏽‍💻", "🧑🏿‍🚀", "👨‍❤️‍👨", "🏳️‍🌈", "🏴‍☠️", "😶‍🌫️", "❤️‍🔥", "🐕‍🦺",
    "🇫🇷", "🇯🇵", "🇺🇸🇬🇧", "1️⃣", "#️⃣", "©️", "™", "☺", "☺️", "🫠", "🧑‍🤝‍🧑", "🤷🏽‍♀️",
]

SPECIALS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|reserved_special_token_5|>", "<|python_tag|>",
]
PARTIAL_SPECIALS = ["<|im_start", "im_end|>", "<|im_start|", "<think", "</think", "<|eot_id", "<|", "|>", "<>"]

WORDS_EN = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more write "
    "go see number no way could people my than first water been call who oil its now find long down day did "
    "get come made may part tokenizer model prefill cache attention transformer quantization kernel"
).split()

CONTRACTIONS = [
    "don't", "DON'T", "Don't", "I'll", "I'LL", "i'll", "we've", "WE'VE", "We'Ve", "she's", "SHE'S", "it'S",
    "they're", "THEY'RE", "I'm", "I'M", "you'd", "YOU'D", "can't", "won't", "y'all", "'tis", "rock'n'roll",
    "o'clock", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "''", "'''", "don’t", "it’s", "ma'am", "'S'", "x'LL'd",
]

WS = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ", " \t ",
      "\u00a0", "\u3000", "\u2009", "\u2003", "\v", "\f", "\u2028", "\u2029", "\n\n\n\n\n"]

RANGES = [  # (lo, hi) of code points assigned long ago (Unicode <= 6)
    (0x20, 0x7E), (0xA1, 0xFF), (0x100, 0x17E), (0x180, 0x24F), (0x370, 0x377), (0x37A, 0x37E), (0x384, 0x38A),
    (0x391, 0x3A1), (0x3A3, 0x3FF), (0x400, 0x4FF), (0x531, 0x556), (0x561, 0x587), (0x5D0, 0x5EA),
    (0x620, 0x64A), (0x660, 0x669), (0x905, 0x939), (0x966, 0x96F), (0xE01, 0xE3A), (0xE40, 0xE5B),
    (0x10A0, 0x10C5), (0x1E00, 0x1EFF), (0x2010, 0x2027), (0x2030, 0x205E), (0x20A0, 0x20B5),
    (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2460, 0x24FF), (0x2500, 0x257F), (0x3041, 0x3096),
    (0x30A1, 0x30FA), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xFF01, 0xFF5E), (0x1D400, 0x1D454),
    (0x1F600, 0x1F64F), (0x1F300, 0x1F3F0), (0x0300, 0x036F), (0x2070, 0x2071), (0x2074, 0x208E),
    (0xBC, 0xBE), (0x2150, 0x2189),
]


def rand_char():
    lo, hi = R.choice(RANGES)
    return chr(R.randint(lo, hi))


def words(n):
    return " ".join(R.choice(WORDS_EN) for _ in range(n))


def number():
    k = R.choice([1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 16, 20, 25, 33, 40])
    s = str(R.randint(1, 9)) + "".join(str(R.randint(0, 9)) for _ in range(k - 1))
    return s[:k]


records = []  # (category, bytes)


def add(cat, s):
    b = s.encode("utf-8", "surrogatepass") if isinstance(s, str) else bytes(s)
    records.append((cat, b))


# ---- edge cases, one by one --------------------------------------------------
for s in ["", " ", "  ", "\n", "\t", "\r\n", "\r", "a", "A", "0", "'", "!", "\x00", "\x00\x01\x02", "\x7f", "\x1b[31mred\x1b[0m",
          "a b", " a", "a ", "  a  ", "\na\n", "a\r\nb", "a\rb", "a\n\nb", "a \n b", "a\t\tb", "...", "!!!!!!",
          "??????", "------=======", "'''''''```````\"\"\"\"......!!!!!!??????", "_" * 50, "=" * 100, "a" * 300,
          "ab" * 150, "😀" * 40, " " * 100, "\n" * 50, "\t" * 30, "\r\n" * 30, " \t" * 40, "3" * 64,
          "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
          "\u200b", "a\u200bb", "\u200d", "a\u00adb", "\u2060", "\ufffd", "a\ufffdb", "\U0010fffd", "\ue000"]:
    add("edge", s)
for i in range(128):  # every ASCII character alone and between letters
    add("ascii", chr(i))
    add("ascii", "x" + chr(i) + "y")

# ---- prose -------------------------------------------------------------------
for lang, sents in PROSE.items():
    for s in sents:
        add("prose-" + lang, s)
        add("prose-" + lang, " " + s)
        add("prose-" + lang, s.upper())
        add("prose-" + lang, s + "\n")
for _ in range(400):  # mixed paragraphs
    lang = R.choice(list(PROSE))
    parts = [R.choice(PROSE[lang]) for _ in range(R.randint(1, 4))]
    if R.random() < 0.3:
        parts.append(R.choice(PROSE[R.choice(list(PROSE))]))
    sep = R.choice([" ", " ", "\n", "\n\n", "  ", "\r\n", "\t"])
    add("paragraph-" + lang, sep.join(parts))
for _ in range(150):
    add("words-en", words(R.randint(1, 30)))
add("prose-long", " ".join(R.choice(PROSE["en"]) for _ in range(60)))
add("prose-long", "\n\n".join(" ".join(R.choice(v) for _ in range(8)) for v in PROSE.values()))

# ---- code --------------------------------------------------------------------
for c in CODE:
    add("code", c)
    add("code", c.replace("    ", "\t"))
    add("code", c.replace("\n", "\r\n"))
for _ in range(60):
    add("code-mix", "".join(R.choice(CODE) for _ in range(R.randint(2, 3))))
for _ in range(60):  # python blocks with deep indentation
    lines = []
    for _ in range(R.randint(2, 8)):
        lines.append(" " * (4 * R.randint(0, 6)) + R.choice(["x = 1", "return y", "if a:", "pass", "# note", "print(z)", ""]))
    add("code-indent", "\n".join(lines) + R.choice(["", "\n", "\n\n"]))

# ---- emoji -------------------------------------------------------------------
for e in EMOJI:
    add("emoji", e)
    add("emoji", "I " + e + " it" + e + e)
for _ in range(120):
    add("emoji-mix", "".join(R.choice(EMOJI + [" ", "a", "!", "\n", "の"]) for _ in range(R.randint(2, 14))))

# ---- whitespace runs -----------------------------------------------------------
for _ in range(220):
    parts = []
    for _ in range(R.randint(1, 8)):
        parts.append("".join(R.choice(WS) for _ in range(R.randint(1, 6))))
        if R.random() < 0.7:
            parts.append(R.choice(WORDS_EN + ["x", "1", "!", "é", "中", "(", "'s", "ab12"]))
    add("whitespace", "".join(parts))
for n in [1, 2, 3, 4, 5, 7, 8, 16, 31, 64, 200]:
    for w in [" ", "\t", "\n", "\r\n", "\u3000"]:
        add("ws-run", "a" + w * n + "b")
        add("ws-run", w * n + "x")
        add("ws-run", "x" + w * n)

# ---- numbers -----------------------------------------------------------------
for k in range(1, 41):
    add("digits", "".join(str((i * 7 + k) % 10) for i in range(k)))
    add("digits", "x" + "9" * k + "y")
for _ in range(200):
    fmt = R.choice(["{}", " {}", "{}.{}", "{},{}", "${}", "{}%", "v{}.{}.{}", "{}-{}-{}", "{}:{}", "abc{}def", "{}x{}",
                    "-{}", "+{}", "{}e{}", "0x{}", "#{}", "{}st", "{} {} {}"])
    add("numbers", fmt.format(*[number() for _ in range(fmt.count("{}"))]))
for s in ["٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "１２３４５", "²³¹¼½¾", "Ⅻ ⅻ ①②③", "𝟘𝟙𝟚", "๑๒๓", "〇一二三", "3.14159265358979",
          "1,000,000", "1 000 000", "1_000_000", "12:30:45.678", "2026-12-04T13:47:00Z", "+1 (555) 123-4567"]:
    add("numbers-script", s)
    add("numbers-script", "n=" + s + "!")

# ---- contractions ------------------------------------------------------------
for c in CONTRACTIONS:
    add("contraction", c)
    add("contraction", "I said " + c + " twice: " + c + c)
for _ in range(100):
    add("contraction-mix", " ".join(R.choice(CONTRACTIONS + WORDS_EN) for _ in range(R.randint(2, 12))))

# ---- special tokens ------------------------------------------------------------
for s in SPECIALS + PARTIAL_SPECIALS:
    add("special", s)
    add("special", " " + s + " ")
    add("special", "a" + s + "b")
    add("special", s + s)
    add("special", s + "\n")
add("special", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>")
add("special", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>")
for _ in range(150):
    parts = []
    for _ in range(R.randint(1, 6)):
        r = R.random()
        if r < 0.35:
            parts.append(R.choice(SPECIALS))
        elif r < 0.45:
            parts.append(R.choice(PARTIAL_SPECIALS))
        elif r < 0.6:
            parts.append(R.choice(WS))
        else:
            parts.append(R.choice(PROSE[R.choice(list(PROSE))])[: R.randint(1, 30)])
    add("special-mix", "".join(parts))

# ---- normalization: NFC and NFD forms ---------------------------------------
NFD_PAIRS = [
    ("é", "e\u0301"), ("Å", "A\u030a"), ("ñ", "n\u0303"), ("ö", "o\u0308"), ("ệ", "e\u0323\u0302"),
    ("한국어", "\u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165"), ("Ǻ", "A\u030a\u0301"), ("ḍ̇", "d\u0323\u0307"),
    ("ά", "α\u0301"), ("й", "и\u0306"), ("が", "か\u3099"), ("Ω", "\u2126"), ("Å", "\u212b"), ("ﬁ", "ﬁ"),
]
for nfc, nfd in NFD_PAIRS:
    for s in [nfc, nfd, "caf" + nfc, "caf" + nfd, nfd + nfd + " " + nfc, nfd.upper(), "x " + nfd + "y"]:
        add("normalization", s)
for _ in range(80):
    base = R.choice(["a", "e", "o", "u", "n", "c", "s", "z", "A", "E", "i", " ", "1", "я", "α", "ก"])
    marks = "".join(chr(R.randint(0x300, 0x36F)) for _ in range(R.randint(1, 4)))
    add("combining", R.choice(WORDS_EN) + base + marks + R.choice(["", " ", "x", "!"]) + R.choice(WORDS_EN))

# ---- random characters of many blocks ---------------------------------------
for _ in range(300):
    add("random-unicode", "".join(rand_char() for _ in range(R.randint(1, 24))))
for _ in range(100):
    add("random-mixed", "".join(R.choice([rand_char(), R.choice(WS), R.choice(WORDS_EN), number(), "'s", "'LL"])
                                for _ in range(R.randint(2, 12))))

# ---- control characters --------------------------------------------------------
for _ in range(40):
    add("control", "".join(R.choice([chr(R.randint(0, 31)), chr(0x7f), "a", " ", "é", chr(R.choice([0x80, 0x81, 0x8a, 0x90, 0x9b, 0x9f]))])
                           for _ in range(R.randint(1, 10))))

# ---- invalid UTF-8 -------------------------------------------------------------
BAD = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
       b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xf0\x9f",
       b"\xe2\x28\xa1", b"\xc3\x28", b"\xa0\xa1", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80",
       b"\x80\x80\x80", b"\xe2\x82\xe2\x82\xac"]
for b in BAD:
    add("invalid", b)
    add("invalid", b"a" + b + b"b")
    add("invalid", b"caf\xc3\xa9 " + b + b" \xe4\xb8\xad")
for _ in range(140):
    s = bytearray(R.choice(PROSE[R.choice(list(PROSE))]).encode())
    for _ in range(R.randint(1, 3)):
        r = R.random()
        pos = R.randint(0, len(s))
        if r < 0.4:
            s[pos:pos] = R.choice(BAD)
        elif r < 0.7 and len(s) > 1:  # cut a multi-byte sequence
            del s[R.randint(0, len(s) - 1)]
        else:
            s[pos:pos] = bytes([R.randint(0x80, 0xff)])
    add("invalid-mix", bytes(s))
for _ in range(40):
    add("invalid-random", bytes(R.randint(0, 255) for _ in range(R.randint(1, 24))))

# ---- long strings (BPE on long words, long runs, big mixed texts) -----------
for s in ["a" * 5000, "ab" * 2500, "abc" * 1700, " " * 10000, "\n" * 3000, "\t " * 2000, "\r\n" * 2000,
          "7" * 3000, "".join(str(i) for i in range(1500)), "😀" * 1000, "中" * 3000, "ع" * 2000,
          "-" * 4000 + "=" * 4000, "'s" * 2000, "x'LL" * 1000]:
    add("long", s)
add("long", "".join(rand_char() for _ in range(4000)))
add("long", "".join(R.choice([rand_char(), R.choice(WS), R.choice(WORDS_EN), number(), R.choice(EMOJI), R.choice(SPECIALS)])
                    for _ in range(3000)))
add("long", " ".join(R.choice(PROSE[R.choice(list(PROSE))]) for _ in range(300)))
add("long", "\n".join(R.choice(CODE) for _ in range(40)))
add("long", bytes(R.randint(0, 255) for _ in range(5000)))

if len(sys.argv) > 1 and sys.argv[1] == "--list":
    for i, (cat, b) in enumerate(records):
        print(i, cat, repr(b.decode("utf-8", "replace")))
else:
    assert len(records) >= 2000, len(records)
    out = sys.stdout.buffer
    for cat, b in records:
        out.write(base64.b64encode(b) + b"\n")
