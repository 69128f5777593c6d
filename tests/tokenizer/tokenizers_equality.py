#!/usr/bin/env python3
"""tokenizer/equality: our Tokenizer against Hugging Face's `tokenizers` on real tokenizer files.

The files come from PyPI packages pinned in scripts/requirements.txt (installed by scripts/setup.sh):
  llama3         llama-models  llama_models/llama3/tokenizer.model  (tiktoken ranks, 128,000 + 256 special)
  qwen3          dashscope     dashscope/resources/qwen.tiktoken    (Qwen's 151,643 BPE ranks)
  mistral7b-sp   mistral-common  mistral_common/data/tokenizer.model.v1  (SentencePiece BPE, byte fallback)
  mistral7b-hub  the same model in the layout of the LLaMA-2 / Mistral-7B-v0.1 tokenizer.json files
None ships a tokenizer.json, so each is converted with transformers' own converters
(TikTokenConverter, SpmConverter.build_tokenizer_from_spm_proto) into WORK_DIR/<name>/tokenizer.json;
what the converters leave to the model repositories (special tokens, post-processor, Qwen's NFC) is
set as the published tokenizer.json files of LLaMA-3, Qwen3 and LLaMA-2 have it.

Before comparing, each converted file is checked against the original tokenizer (tiktoken with
the package's own pattern, sentencepiece), so the equality below is with the real tokenizers and
not with a conversion mistake. Then `tokenizers` encodes and decodes the corpus (make_corpus.py),
the reference goes to WORK_DIR/reference.json in the format odc_tokenizer_compare reads, and that
binary's verdict (per file: encode, encode with special tokens, decode, round trip) is the test's.

usage: tokenizers_equality.py WORK_DIR COMPARE_BINARY
exit 0 equal, 1 a difference, 77 skipped (the Python environment of scripts/setup.sh is missing).
"""
import argparse
import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import time
import unicodedata

SKIPPED = 77
HERE = os.path.dirname(os.path.abspath(__file__))

# The pre-tokenizer patterns, as the packages define them (checked against their sources below).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# LLaMA-3's 256 special tokens after the 128,000 ranks, in llama_models/llama3/tokenizer.py's order.
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                  "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                  "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
                  "<|image|>"]
LLAMA3_SPECIAL += [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(LLAMA3_SPECIAL))]
# Qwen3's added tokens from id 151643 on, with their "special" flag, as its tokenizer.json lists them.
QWEN3_ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
               ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
               ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
               ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
               ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
               ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
               ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
               ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
               ("<think>", False), ("</think>", False)]
QWEN_FIRST_ADDED_ID = 151643


class Skip(Exception):
    pass


def need_module(name):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise Skip(f"Python module '{name}' is missing ({e}); scripts/setup.sh installs scripts/requirements.txt")


def package_file(dist, relative):
    """A data file inside an installed distribution, or Skip naming the package."""
    try:
        path = importlib.metadata.distribution(dist).locate_file(relative)
    except importlib.metadata.PackageNotFoundError:
        raise Skip(f"PyPI package '{dist}' is not installed; scripts/setup.sh installs scripts/requirements.txt")
    if not os.path.isfile(path):
        raise Skip(f"{dist} {importlib.metadata.version(dist)} has no {relative}")
    return str(path)


def check_source(dist, relative, *needles):
    """The constants above must be the package's own: a pin bump that changes them fails here."""
    with open(package_file(dist, relative), encoding="utf-8") as f:
        source = f.read()
    for needle in needles:
        if needle not in source:
            sys.exit(f"tokenizers_equality: {dist}/{relative} no longer contains {needle!r}")


def byte_level_file(tiktoken_path, pattern, added, ignore_merges):
    """A byte-level BPE tokenizer.json from tiktoken ranks (transformers' TikTokenConverter)."""
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter
    tokenizer = TikTokenConverter(vocab_file=tiktoken_path, pattern=pattern).converted()
    # add_tokens keeps each token's own "special" flag; ids follow the ranks in this order.
    tokenizer.add_tokens([AddedToken(text, normalized=False, special=special) for text, special in added])
    tokenizer.model.ignore_merges = ignore_merges
    return tokenizer


def build_llama3(path):
    from tokenizers import processors
    tokenizer = byte_level_file(path, LLAMA3_PATTERN, [(t, True) for t in LLAMA3_SPECIAL], ignore_merges=True)
    bos = "<|begin_of_text|>"
    # LLaMA-3's tokenizer.json: the byte-level offsets step, then the BOS template.
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1",
                                      special_tokens=[(bos, tokenizer.token_to_id(bos))]),
    ])
    return tokenizer


def build_qwen3(path):
    from tokenizers import normalizers
    # Qwen2/Qwen3's tokenizer.json is built from vocab.json + merges.txt (no ignore_merges) and NFC-normalizes.
    tokenizer = byte_level_file(path, QWEN_PATTERN, QWEN3_ADDED, ignore_merges=False)
    tokenizer.normalizer = normalizers.NFC()
    return tokenizer


def spm_proto(path):
    from transformers.convert_slow_tokenizer import SentencePieceExtractor
    return SentencePieceExtractor(path).proto


def build_spm(path, hub_layout):
    from tokenizers import AddedToken, normalizers, processors
    from transformers.convert_slow_tokenizer import SpmConverter
    proto = spm_proto(path)
    vocab = {piece.piece: i for i, piece in enumerate(proto.pieces)}
    # Merges ranked by piece score, normalizer and Metaspace as the model's normalizer_spec says.
    tokenizer = SpmConverter.build_tokenizer_from_spm_proto(proto, vocab, legacy=True)
    if hub_layout:
        # LLaMA-2's and Mistral-7B-v0.1's published tokenizer.json: "▁" prepended to every section
        # between added tokens, spaces replaced, no pre-tokenizer.
        tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tokenizer.pre_tokenizer = None
    # <unk>, <s>, </s> are added tokens in those files, and encoding adds the BOS.
    tokenizer.add_special_tokens([AddedToken(proto.pieces[i].piece, normalized=False, special=True) for i in range(3)])
    bos = proto.pieces[1].piece
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1", special_tokens=[(bos, 1)])
    return tokenizer


def fidelity_tiktoken(tokenizer, path, pattern, specials, first_special_id, corpus, normalize):
    """Strings where the converted file encodes as tiktoken does with the package's ranks."""
    import tiktoken.load
    ranks = tiktoken.load.load_tiktoken_bpe(path)
    encoding = tiktoken.Encoding("reference", pat_str=pattern, mergeable_ranks=ranks,
                                 special_tokens={t: first_special_id + i for i, t in enumerate(specials)})
    equal = 0
    for text in corpus:
        expected = encoding.encode(normalize(text), allowed_special="all")
        equal += tokenizer.encode(text, add_special_tokens=False).ids == expected
    return equal, len(corpus), f"tiktoken {importlib.metadata.version('tiktoken')}"


def fidelity_sentencepiece(tokenizer, path, corpus):
    """Strings where the converted file encodes as sentencepiece does. Text holding <s>, </s> or
    <unk> is left out: sentencepiece reads them as characters, tokenizer.json as added tokens."""
    import sentencepiece
    processor = sentencepiece.SentencePieceProcessor(model_file=path)
    controls = [processor.id_to_piece(i) for i in range(3)]
    plain = [t for t in corpus if not any(c in t for c in controls)]
    equal = sum(tokenizer.encode(t, add_special_tokens=False).ids == processor.encode(t) for t in plain)
    return equal, len(plain), f"sentencepiece {sentencepiece.__version__}"


def run(work, compare):
    tokenizers = need_module("tokenizers")
    transformers = need_module("transformers")
    for name in ("tiktoken", "sentencepiece", "google.protobuf"):
        need_module(name)
    llama3 = package_file("llama-models", "llama_models/llama3/tokenizer.model")
    qwen = package_file("dashscope", "dashscope/resources/qwen.tiktoken")
    mistral = package_file("mistral-common", "mistral_common/data/tokenizer.model.v1")
    check_source("llama-models", "llama_models/llama3/tokenizer.py", LLAMA3_PATTERN, *LLAMA3_SPECIAL[:12])
    check_source("dashscope", "dashscope/tokenizers/qwen_tokenizer.py", QWEN_PATTERN,
                 f"SPECIAL_START_ID = {QWEN_FIRST_ADDED_ID}")

    os.makedirs(work, exist_ok=True)
    corpus_path = os.path.join(work, "corpus.json")
    subprocess.run([sys.executable, os.path.join(HERE, "make_corpus.py"), corpus_path], check=True)
    with open(corpus_path, encoding="utf-8") as f:
        corpus = json.load(f)
    special_indices = [i for i in range(len(corpus)) if i % 7 == 0]  # every 7th: each post-processor

    nfc = lambda text: unicodedata.normalize("NFC", text)  # noqa: E731
    plans = [
        ("llama3", True, lambda: build_llama3(llama3),
         lambda tok: fidelity_tiktoken(tok, llama3, LLAMA3_PATTERN, LLAMA3_SPECIAL, 128000, corpus, lambda t: t)),
        # Qwen's own tokenizer NFC-normalizes before tiktoken, as its tokenizer.json does; Qwen3's
        # added tokens are tiktoken special tokens here (Qwen's tiktoken tokenizer knew the first 3).
        ("qwen3", True, lambda: build_qwen3(qwen),
         lambda tok: fidelity_tiktoken(tok, qwen, QWEN_PATTERN, [t for t, _ in QWEN3_ADDED],
                                       QWEN_FIRST_ADDED_ID, corpus, nfc)),
        ("mistral7b-sp", False, lambda: build_spm(mistral, hub_layout=False),
         lambda tok: fidelity_sentencepiece(tok, mistral, corpus)),
        ("mistral7b-hub", False, lambda: build_spm(mistral, hub_layout=True),
         lambda tok: fidelity_sentencepiece(tok, mistral, corpus)),
    ]
    results = []
    faithful = True
    for name, byte_level, build, fidelity in plans:
        start = time.monotonic()
        tokenizer = build()
        path = os.path.join(work, name, "tokenizer.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tokenizer.save(path)
        built = time.monotonic() - start
        ids = [e.ids for e in tokenizer.encode_batch(corpus, add_special_tokens=False)]
        decoded = tokenizer.decode_batch(ids, skip_special_tokens=False)
        special_ids = [tokenizer.encode(corpus[i], add_special_tokens=True).ids for i in special_indices]
        line = f"{name}: {path}: vocab {tokenizer.get_vocab_size()}, converted in {built:.1f} s"
        if fidelity is not None:
            equal, total, reference = fidelity(tokenizer)
            line += f"; as {reference}: {equal}/{total}"
            faithful = faithful and equal == total
        print(line, flush=True)
        results.append({"name": name, "path": path, "byte_level": byte_level, "ids": ids, "decoded": decoded,
                        "special_indices": special_indices, "special_ids": special_ids})

    reference_path = os.path.join(work, "reference.json")
    with open(reference_path, "w", encoding="utf-8") as f:
        json.dump({"reference": f"tokenizers {tokenizers.__version__} (files converted by transformers "
                                f"{transformers.__version__})", "tokenizers": results}, f)
    verdict = subprocess.run([compare, corpus_path, reference_path]).returncode
    if not faithful:
        print("tokenizers_equality: a converted file differs from its original tokenizer (above)")
        return 1
    return verdict


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("work_dir")
    parser.add_argument("compare_binary")
    args = parser.parse_args()
    try:
        return run(args.work_dir, args.compare_binary)
    except Skip as e:
        print(f"tokenizers_equality: skipped: {e} (Python: {sys.executable})")
        return SKIPPED


if __name__ == "__main__":
    sys.exit(main())
