#!/usr/bin/env python3
"""The demo's chat data and tokenizer, generated (no model hub or dataset download is reachable).

Writes OUT/chat.jsonl — conversations {"messages": [{"role": "system"|"user"|"assistant",
"content": ...}]} where the user asks for a small string task on one of 24 words (reverse it,
repeat it, sort its letters, count its letters) and the assistant answers — and OUT/tokenizer/ with a byte-level BPE
tokenizer.json (the format of Qwen2 / LLaMA-3 tokenizers: GPT-2 byte alphabet, a Split
pre-tokenizer regex, merges learned here from the corpus) plus tokenizer_config.json naming the
ChatML template and its special tokens <|im_start|>, <|im_end|>, <|endoftext|>, and
generation_config.json (eos = <|im_end|>).

With --prompts N and --heldout M it also writes OUT/prompts-train.jsonl and OUT/prompts-heldout.jsonl:
N and M prompts with their answers ({"prompt", "answer"}, what odc-rollout and rl.prompts read),
drawn apart from the conversations and from each other (seeds 21 and 22): the held-out accuracy's
prompts are fresh draws of the same tasks.

usage: make_demo_chat.py --out DIR [--num 8000] [--merges 200] [--seed 1] [--prompts N] [--heldout M]
"""
import argparse
import collections
import json
import os
import random

PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = ("apple banana cherry dragon eagle forest garden harbor island jungle kettle lemon mango "
         "night ocean piano quartz river sunset tiger umbrella violet walnut yellow zebra").split()


def byte_alphabet():
    """GPT-2's reversible byte -> printable character map (what ByteLevel uses)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def conversation(rng):
    word = rng.choice(WORDS)
    task = rng.choice(["reverse", "repeat", "sort", "length"])
    if task == "reverse":
        question, answer = f"reverse: {word}", word[::-1]
    elif task == "repeat":
        question, answer = f"repeat: {word}", word
    elif task == "sort":
        question, answer = f"sort: {word}", "".join(sorted(word))
    else:
        question, answer = f"length: {word}", str(len(word))
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": "You are a helpful assistant."})
    messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return messages


def rendered(messages):
    """ChatML text of a conversation (only for learning merges; the trainer renders it itself)."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def pre_tokens(text):
    """An ASCII-only approximation of PATTERN's split, enough to learn merges from this corpus."""
    import re
    simple = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d|[^\r\n\w]?[A-Za-z]+|\d| ?[^\s\w]+[\r\n]*|\s*[\r\n]+|\s+")
    for special in SPECIAL:
        text = text.replace(special, "\n")
    return simple.findall(text)


def learn_merges(texts, count, alphabet):
    words = collections.Counter()
    for text in texts:
        for piece in pre_tokens(text):
            words[tuple(alphabet[b] for b in piece.encode("utf-8"))] += 1
    merges = []
    for _ in range(count):
        pairs = collections.Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        merged = collections.Counter()
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    return merges


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--num", type=int, default=8000)
    parser.add_argument("--merges", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=0, help="training prompts to write (prompts-train.jsonl)")
    parser.add_argument("--heldout", type=int, default=0, help="held-out prompts to write (prompts-heldout.jsonl)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    os.makedirs(os.path.join(args.out, "tokenizer"), exist_ok=True)
    conversations = [conversation(rng) for _ in range(args.num)]
    with open(os.path.join(args.out, "chat.jsonl"), "w") as f:
        for messages in conversations:
            f.write(json.dumps({"messages": messages}) + "\n")

    alphabet = byte_alphabet()
    vocab = {}
    for b in range(256):
        vocab.setdefault(alphabet[b], len(vocab))
    merges = learn_merges([rendered(m) for m in conversations[:2000]], args.merges, alphabet)
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    added = [{"id": len(vocab) + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(SPECIAL)]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }
    with open(os.path.join(args.out, "tokenizer", "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    config = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "chat_template": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                               "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                               "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
              "model_max_length": 4096, "tokenizer_class": "Qwen2Tokenizer"}
    with open(os.path.join(args.out, "tokenizer", "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    vocab_size = len(vocab) + len(SPECIAL)
    eos = vocab_size - 1  # <|im_end|> ends the assistant's turn
    with open(os.path.join(args.out, "tokenizer", "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": eos, "pad_token_id": vocab_size - 3}, f, indent=2)
    for name, seed, count in (("prompts-train", 21, args.prompts), ("prompts-heldout", 22, args.heldout)):
        if count <= 0:
            continue
        prompt_rng = random.Random(seed)
        with open(os.path.join(args.out, name + ".jsonl"), "w") as f:
            for _ in range(count):
                messages = conversation(prompt_rng)
                f.write(json.dumps({"prompt": messages[-2]["content"], "answer": messages[-1]["content"]}) + "\n")
    print(json.dumps({"conversations": len(conversations), "vocab_size": vocab_size, "merges": len(merges),
                      "eos_token_id": eos, "out": args.out}))


if __name__ == "__main__":
    main()
