#!/usr/bin/env bash
# Edges of odc-data (issue rows 14, 19): a damaged .bin is an error naming the file and the byte
# range (payload checksums, index version 2); convert creates a missing output directory as synth
# does; convert honours odc-train's data.extra_fields as --extra-fields, for tokens, chat and text records.
# Usage: bash test_config_and_data_edges.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
set -e

tool="$bin/odc-data"
# shellcheck source=cli_tool_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_tool_checks.sh"

data="$work/s.jsonl"
run_tool synth synth --out "$data" --num 50 --max-length 64 --mean-length 32 --seed 3
expect_rc synth 0

# --- convert creates the output's missing directories ---
run_tool convert_new_dir convert --in "$data" --out "$work/new/dir/p" --vocab 64
expect_rc convert_new_dir 0
[ -s "$work/new/dir/p.bin" ] || fail "convert_new_dir: $work/new/dir/p.bin not written"
run_tool convert_under_file convert --in "$data" --out "$data/p" --vocab 64
expect_rc convert_under_file 1
expect_in convert_under_file err "s.jsonl/p.bin: cannot create its directory"

# --- one flipped bit in the token payload: exit 1 naming the file, bytes and sequences ---
cp "$work/new/dir/p.bin" "$work/good.bin"
python3 - "$work/new/dir/p.bin" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[400] ^= 1  # token 100: a small id with its low bit flipped stays in the vocabulary
open(path, "wb").write(data)
PY
run_tool flipped convert --format bin --in "$work/new/dir/p" --out "$work/copy" --vocab 64
expect_rc flipped 1
expect_in flipped err "new/dir/p.bin: bytes [0, "
expect_in flipped err "do not match their checksum in $work/new/dir/p.idx (chunk 0 of 1)"
expect_in flipped err "the token file is damaged"
cp "$work/good.bin" "$work/new/dir/p.bin"
run_tool rewrite convert --format bin --in "$work/new/dir/p" --out "$work/new/dir/p" --vocab 64
expect_rc rewrite 0
expect_in rewrite out '"sequences":50'

# --- data.extra_fields: convert refuses an unknown field by default and skips it on request ---
extra="$work/extra.jsonl"
printf '{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "source": "web"}\n' >"$extra"
run_tool extra_error convert --in "$extra" --out "$work/extra" --vocab 64
expect_rc extra_error 1
expect_in extra_error err 'unknown field "source"'
expect_in extra_error err "; --extra-fields ignore skips unknown fields"
run_tool extra_ignore convert --in "$extra" --out "$work/extra" --vocab 64 --extra-fields ignore
expect_rc extra_ignore 0
expect_in extra_ignore out '"sequences":1'
run_tool extra_bad convert --in "$extra" --out "$work/extra" --extra-fields skip
expect_rc extra_bad 2
expect_in extra_bad err "skip"
run_tool extra_bin convert --format bin --in "$work/extra" --out "$work/x" --extra-fields ignore
expect_rc extra_bin 2
expect_in extra_bin err "--extra-fields applies to JSONL input (--format tokens, chat or text), not --format bin"
# Chat and text records too: the hint names the option, and the option works (it exited 2 for chat).
/usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/../../tools/make_demo_chat.py" --out "$work/chat" --num 4 \
  --merges 4 --seed 1 >/dev/null
printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "id": 3}\n' \
  >"$work/chat-extra.jsonl"
printf '{"text": "hello", "source": "web"}\n' >"$work/text-extra.jsonl"
for format in chat text; do
  run_tool "extra_$format" convert --format "$format" --in "$work/$format-extra.jsonl" --out "$work/$format-x" \
    --tokenizer "$work/chat/tokenizer/tokenizer.json"
  expect_rc "extra_$format" 1
  expect_in "extra_$format" err "; --extra-fields ignore skips unknown fields"
  run_tool "extra_${format}_ignored" convert --format "$format" --in "$work/$format-extra.jsonl" \
    --out "$work/$format-x" --tokenizer "$work/chat/tokenizer/tokenizer.json" --extra-fields ignore
  expect_rc "extra_${format}_ignored" 0
  expect_in "extra_${format}_ignored" out '"sequences":1'
done

finish_test "test_config_and_data_edges: all checks passed"
