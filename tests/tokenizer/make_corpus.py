#!/usr/bin/python3
"""Writes the tokenizer equality corpus: a JSON array of strings, deterministic for a given seed.

The strings aim at the places where tokenizers disagree: regex pre-tokenization (contractions,
letters vs numbers vs punctuation, whitespace runs and the lookahead that keeps one space for the
next word), byte-level mapping of multi-byte UTF-8 (CJK, emoji with ZWJ and skin tones), Unicode
normalization (decomposed accents under Qwen's NFC), byte fallback (LLaMA-2 on rare characters),
and added tokens embedded in text.

Characters come from blocks that were complete long before Unicode 14, so the character tables of
PCRE2 (Unicode 14) and of the reference (Rust `tokenizers`: Oniguruma, newer) classify them
identically.

usage: make_corpus.py OUT.json [--seed N]
"""
import argparse
import json
import random

WORDS = (
    "the of and to in is was for that with as on by it at from this be are or an have not which "
    "but had they his her one all were we there been if more when will would who so no time can "
    "only other new some could these two may first then do any like my now over such our man me "
    "even most made after also did many before must through back years where much your way well "
    "down should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another know "
    "while last might us great old year off come since against go came right used take three "
    "tokenizer gradient shard optimizer accumulator microbatch throughput llama qwen transformer "
    "Hello World OpenAI GPT-4 PyTorch CUDA NCCL MPI iPhone McDonald's O'Neill naïve café résumé"
).split()

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D"]

PUNCT = list(".,;:!?-()[]{}\"'/\\@#$%^&*_+=<>|~`") + ["...", "--", "—", "–", "…", "«", "»", "“", "”", "‘", "’"]

SPECIAL = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|reserved_special_token_0|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>",
    "<unk>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    # near misses that must be tokenized as ordinary text
    "<|begin_of_text|", "<|im_start", "|im_end|>", "<s", "s>", "</ s>", "< s>", "<|eot_id||>",
    "<<|im_start|>>", "<|IM_START|>",
]

EMOJI = [
    "😀", "😂", "🤣", "❤️", "❤", "👍", "👍🏻", "👍🏼", "👍🏽", "👍🏾", "👍🏿", "🙏🏽", "👋🏿", "🎉", "🔥", "🚀",
    "👨‍👩‍👧‍👦", "👩‍💻", "👩🏽‍💻", "🧑🏿‍🚀", "🏳️‍🌈", "🏴‍☠️", "👁️‍🗨️", "❤️‍🔥", "🧔‍♂️", "👨🏻‍🤝‍👨🏿",
    "🇺🇸", "🇯🇵", "🇩🇪", "🇧🇷", "1️⃣", "#️⃣", "©️", "™️", "☺️", "✌🏾", "🫠", "🥲", "🦀", "🐍",
]

CODE = [
    'def f(x):\n    return x * 2\n\nprint(f(21))\n',
    'for i in range(10):\n\tif i % 2 == 0:\n\t\tprint(i, end=" ")\n',
    '#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  return v.size() > 2 ? 0 : 1;\n}\n',
    'template <typename T>\nT add(T a, T b) noexcept { return a + b; }\n',
    'const add = (a, b) => a + b;\nconsole.log(`sum=${add(1, 2)}`);\n',
    'fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!("{:?}", v);\n}\n',
    'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("hello, 世界")\n}\n',
    'SELECT id, name FROM users WHERE age >= 21 AND name LIKE \'%son\' ORDER BY id DESC;\n',
    '<!DOCTYPE html>\n<html lang="en">\n  <body><p class="x">Hi &amp; bye</p></body>\n</html>\n',
    '{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "nested": {"a": null, "b": true}}',
    '#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do wc -l "$f"; done\n',
    'x = [i**2 for i in range(100) if i%3==0]  # comment\r\ny = {k: v for k, v in zip("abc", x)}\r\n',
    '    \n    \n\tindented();\n        deeper = 1;\n',
    'if (a&&b||!c) { x+=1; y-=2; z*=3; w/=4; } else if (p->q != nullptr) { r <<= 1; }',
    'public static void main(String[] args) { System.out.println("Hello"); }',
    'let re = /^[a-z0-9_\\-]+@[a-z]+\\.[a-z]{2,}$/i;',
]

SCRIPTS = {
    "zh": "我们在训练大型语言模型时需要处理各种长度的序列，这是一个很有意思的问题。中文没有空格。",
    "ja": "東京は日本の首都です。ひらがなとカタカナ、そして漢字を混ぜて書きます。ラーメンが好き！",
    "ko": "안녕하세요. 저는 한국어를 공부하고 있습니다. 토크나이저 테스트입니다.",
    "ar": "مرحبا بالعالم. هذه جملة باللغة العربية للاختبار، مع أرقام ١٢٣٤ و 5678.",
    "he": "שלום עולם. זהו משפט בעברית לבדיקה של המחלק לאסימונים.",
    "hi": "नमस्ते दुनिया। यह हिंदी में एक परीक्षण वाक्य है, जिसमें संयुक्ताक्षर क्षत्रिय और ज्ञान हैं।",
    "th": "สวัสดีชาวโลก นี่คือประโยคภาษาไทยสำหรับการทดสอบ ไม่มีช่องว่างระหว่างคำ",
    "ru": "Привет, мир! Это предложение на русском языке для проверки токенизатора.",
    "el": "Γειά σου Κόσμε! Αυτή είναι μια ελληνική πρόταση. ΣΊΣΥΦΟΣ σίσυφος.",
    "vi": "Xin chào thế giới. Tiếng Việt có rất nhiều dấu: ắ ằ ẳ ẵ ặ ế ề ể ễ ệ.",
    "de": "Größere Äpfel schmecken süßer. Straße, Fußgängerübergänge und Ökonomie.",
    "fr": "L'été dernier, à Noël, nous avons mangé une bûche — c'était très bon !",
    "es": "¿Dónde está la biblioteca? ¡El niño comió piñata en el año 2024!",
    "pl": "Zażółć gęślą jaźń. Łódź, Kraków i Wrocław.",
    "tr": "İstanbul'da ılık bir gün. Işık ve ĞÜŞİÖÇ harfleri.",
}

# (first, last) code point ranges, all assigned well before Unicode 14.
RANGES = [
    (0x20, 0x7E), (0xA1, 0xFF), (0x100, 0x17E), (0x391, 0x3A9), (0x3B1, 0x3C9), (0x410, 0x44F),
    (0x5D0, 0x5EA), (0x621, 0x64A), (0x660, 0x669), (0x905, 0x939), (0x966, 0x96F), (0xE01, 0xE2E),
    (0xE50, 0xE59), (0x2010, 0x2027), (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2500, 0x257F),
    (0x3041, 0x3096), (0x30A1, 0x30FA), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xFF01, 0xFF5E),
    (0x1F600, 0x1F64F), (0x1D400, 0x1D433),
]

WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\t\t", " \t ", "\u00a0",
              "\u3000", "\u2009", "\u2028", "\u0085", "\u000b", "\u000c", "\u200b", "\ufeff"]

CONTROL = [chr(c) for c in list(range(0x00, 0x20)) + [0x7F, 0x80, 0x9F]]

COMBINING = ["\u0301", "\u0300", "\u0308", "\u0327", "\u0303", "\u030a", "\u0323", "\u0302"]


def prose(rng, words):
    out = []
    for i in range(words):
        word = rng.choice(WORDS)
        if rng.random() < 0.1:
            word = word.capitalize()
        if rng.random() < 0.08:
            word += rng.choice(CONTRACTIONS)
        out.append(word)
        if rng.random() < 0.12:
            out[-1] += rng.choice(PUNCT)
    return " ".join(out)


def number(rng):
    digits = rng.randint(1, 30)
    text = str(rng.randint(1, 9)) + "".join(rng.choice("0123456789") for _ in range(digits - 1))
    style = rng.randrange(7)
    if style == 1:
        text = "-" + text
    elif style == 2:
        text = text[: max(1, len(text) // 2)] + "." + text[len(text) // 2:]
    elif style == 3:
        text = f"{int(text):,}"
    elif style == 4:
        text = text[:3] + "e-" + str(rng.randint(1, 308))
    elif style == 5:
        text = "0x" + format(int(text) % (1 << 64), "X")
    elif style == 6:
        text = "$" + text + rng.choice(["", "%", "k", " USD"])
    return text


def random_chars(rng, count):
    out = []
    for _ in range(count):
        first, last = rng.choice(RANGES)
        out.append(chr(rng.randint(first, last)))
    return "".join(out)


def decomposed(rng, text):
    """Adds combining marks after some letters, producing text that NFC changes."""
    out = []
    for c in text:
        out.append(c)
        if c.isalpha() and rng.random() < 0.3:
            out.append(rng.choice(COMBINING))
    return "".join(out)


def build(seed):
    rng = random.Random(seed)
    corpus = ["", " ", "a", "  ", "\n", "Hello world", " Hello world", "Hello world ", "hello\n\nworld",
              "I'm sure you'll see it's fine, they've said we'd go.", "DON'T SHOUT, IT'S LOUD"]

    for _ in range(400):
        corpus.append(prose(rng, rng.randint(1, 60)))
    for script, sentence in SCRIPTS.items():
        for _ in range(25):
            start = rng.randrange(len(sentence))
            piece = sentence[start:start + rng.randint(1, len(sentence))]
            corpus.append(piece if rng.random() < 0.5 else prose(rng, 3) + " " + piece + " " + prose(rng, 2))
    for _ in range(150):
        corpus.append("".join(rng.choice(EMOJI) + rng.choice(["", " ", "", "!", "\n"]) for _ in range(rng.randint(1, 8))))
        corpus.append(prose(rng, 4) + " " + rng.choice(EMOJI) + rng.choice(EMOJI) + " " + prose(rng, 3))
    for snippet in CODE:
        corpus.append(snippet)
        for _ in range(10):
            a = rng.randrange(len(snippet))
            corpus.append(snippet[a:a + rng.randint(1, 80)])
    for _ in range(250):
        corpus.append(number(rng))
        corpus.append(prose(rng, 3) + " " + number(rng) + rng.choice([" ", "", ", ", "\n"]) + number(rng))
    for n in range(1, 41):
        corpus.append("1" * n)
        corpus.append("".join(str(d % 10) for d in range(n)))
    for _ in range(200):
        parts = []
        for _ in range(rng.randint(1, 6)):
            parts.append(rng.choice(WHITESPACE) * rng.randint(1, 5))
            if rng.random() < 0.7:
                parts.append(prose(rng, rng.randint(1, 3)))
        corpus.append("".join(parts))
    for n in (1, 2, 3, 7, 16, 100, 500):
        corpus.extend([" " * n, "\t" * n, "\n" * n, " " * n + "x", "x" + " " * n, "a" + " " * n + "b",
                       "\n" * n + "y" + "\r\n" * n])
    for script in ("fr", "de", "vi", "es", "pl"):
        for _ in range(20):
            corpus.append(decomposed(rng, SCRIPTS[script]))
    for _ in range(60):
        corpus.append(decomposed(rng, prose(rng, rng.randint(2, 12))))
    for _ in range(100):
        corpus.append("".join(rng.choice(CONTROL) if rng.random() < 0.4 else rng.choice("ab c") for _ in range(rng.randint(1, 20))))
    for _ in range(250):
        parts = []
        for _ in range(rng.randint(1, 5)):
            parts.append(rng.choice(SPECIAL))
            parts.append(rng.choice(["", " ", "\n", prose(rng, rng.randint(1, 4)), " " + prose(rng, 2) + " "]))
        corpus.append("".join(parts))
    for _ in range(200):
        corpus.append(random_chars(rng, rng.randint(1, 40)))
    for _ in range(20):
        # Long texts: LLaMA-2 runs BPE over a whole section, so these exercise long merge queues.
        corpus.append("\n\n".join(prose(rng, rng.randint(100, 400)) for _ in range(rng.randint(1, 4))))
        corpus.append(random_chars(rng, rng.randint(500, 2000)))
    corpus.append("".join(rng.choice(EMOJI) for _ in range(300)))
    return corpus


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=20240601)
    args = parser.parse_args()
    corpus = build(args.seed)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(corpus, f, ensure_ascii=True)
    print(f"make_corpus: wrote {len(corpus)} strings to {args.out}")


if __name__ == "__main__":
    main()
