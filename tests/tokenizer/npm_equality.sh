#!/usr/bin/env bash
# tokenizer/npm_equality: generates the corpus, encodes it with the JavaScript reference and compares
# our Tokenizer's ids (and decoding) against it.
# usage: npm_equality.sh SOURCE_DIR NPM_DIR WORK_DIR COMPARE_BINARY   (exit 77 = skipped: no node)
set -euo pipefail
src=$1
npm_dir=$2
work=$3
compare=$4
if ! command -v node >/dev/null; then
  echo "npm_equality: node is required (Debian: apt-get install nodejs npm)" >&2
  exit 77
fi
mkdir -p "$work"
/usr/bin/python3 "$src/make_corpus.py" "$work/corpus.json"
node "$src/encode_reference.mjs" "$npm_dir" "$work/corpus.json" "$work/reference.json"
"$compare" "$work/corpus.json" "$work/reference.json"
