#!/usr/bin/env bash
# odc-data command-line behaviour: synth writes a valid file and a summary, convert turns it into
# the binary pair, usage errors exit 2 with a message naming the culprit, bad values exit non-zero,
# --help exits 0.
# Usage: bash test_odc_data.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
set -e

tool="$bin/odc-data"
# shellcheck source=cli_tool_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_tool_checks.sh"

# --- synth writes the file and a one-line JSON summary ---
out="$work/synth.jsonl"
run_tool synth synth --out "$out" --num 300 --max-length 256 --mean-length 64 --seed 5
expect_rc synth 0
if [ ! -s "$out" ]; then
  fail "synth: $out missing or empty"
else
  lines=$(wc -l <"$out")
  [ "$lines" -eq 300 ] || fail "synth: $out has $lines lines, expected 300"
  head -n 1 "$out" | grep -q '^{"input_ids":\[1,[4-7],' ||
    fail "synth: first line is not a <bos> <task> record: $(head -c 200 "$out")"
  grep -q '"loss_mask":\[0,0,' "$out" || fail "synth: no masked-out prompt found in $out"
fi
summary_lines=$(wc -l <"$work/synth.out")
[ "$summary_lines" -eq 1 ] || fail "synth: summary has $summary_lines lines, expected 1"
for key in '"count":300' '"mean_length":' '"min_length":' '"max_length":' '"p50":' '"p90":' \
           '"p99":' '"target_tokens":'; do
  expect_in synth out "$key"
done
[ -e "$out.tmp" ] && fail "synth: temporary file $out.tmp left behind"

# Same seed -> byte-identical file; different seed -> different file.
run_tool synth_again synth --out "$work/again.jsonl" --num 300 --max-length 256 \
  --mean-length=64 --seed=5
expect_rc synth_again 0
cmp -s "$out" "$work/again.jsonl" || fail "synth: same seed produced different files"
run_tool synth_other synth --out "$work/other.jsonl" --num 300 --max-length 256 \
  --mean-length 64 --seed 6
expect_rc synth_other 0
cmp -s "$out" "$work/other.jsonl" && fail "synth: different seeds produced identical files"

# Task subset and exact length: every line is an add task of 20 tokens.
run_tool synth_add synth --out "$work/add.jsonl" --num 50 --tasks add --min-length 20 \
  --max-length 20
expect_rc synth_add 0
bad_lines=$(grep -cv '^{"input_ids":\[1,7,' "$work/add.jsonl" || true)
[ "$bad_lines" -eq 0 ] || fail "synth --tasks add: $bad_lines lines are not add tasks"
expect_in synth_add out '"min_length":20'
expect_in synth_add out '"max_length":20'

# --- convert: JSONL -> binary pair (PREFIX.bin + PREFIX.idx) and a one-line JSON summary ---
run_tool convert convert --in "$out" --out "$work/synth_bin" --vocab 64
expect_rc convert 0
for ext in bin idx; do
  [ -s "$work/synth_bin.$ext" ] || fail "convert: $work/synth_bin.$ext missing or empty"
  [ -e "$work/synth_bin.$ext.tmp" ] && fail "convert: temporary file synth_bin.$ext.tmp left behind"
done
summary_lines=$(wc -l <"$work/convert.out")
[ "$summary_lines" -eq 1 ] || fail "convert: summary has $summary_lines lines, expected 1"
synth_tokens=$(grep -o '"tokens":[0-9]*' "$work/synth.out")
for key in '"sequences":300' "$synth_tokens" '"target_tokens":' '"bytes":' '"seconds":'; do
  expect_in convert out "$key"
done
# The .bin holds exactly 4 bytes per token.
bin_bytes=$(stat -c %s "$work/synth_bin.bin")
[ "$bin_bytes" -eq $((4 * ${synth_tokens#*:})) ] ||
  fail "convert: synth_bin.bin has $bin_bytes bytes, expected 4 x ${synth_tokens#*:}"

run_tool convert_missing convert --in "$work/no_such.jsonl" --out "$work/missing_bin"
expect_rc convert_missing 1
expect_in convert_missing err "no_such.jsonl"
[ -e "$work/missing_bin.bin" ] && fail "convert_missing: wrote an output for a missing input"

run_tool convert_vocab convert --in "$out" --out "$work/small_vocab" --vocab 8
expect_rc convert_vocab 1
expect_in convert_vocab err "out of range [0, 8)"

run_tool convert_no_out convert --in "$out"
expect_rc convert_no_out 2
expect_in convert_no_out err "--out"

run_tool convert_bad_vocab convert --in "$out" --out "$work/x" --vocab lots
expect_rc convert_bad_vocab 2
expect_in convert_bad_vocab err "lots"

run_tool convert_help convert --help
expect_rc convert_help 0
expect_in convert_help out "--in FILE"

# --- usage errors: exit 2 and the message names the culprit ---
run_tool bad_flag synth --out "$work/x.jsonl" --bogus-flag 3
expect_rc bad_flag 2
expect_in bad_flag err "--bogus-flag"

run_tool bad_number synth --out "$work/x.jsonl" --num twelve
expect_rc bad_number 2
expect_in bad_number err "--num"
expect_in bad_number err "twelve"

run_tool missing_value synth --out "$work/x.jsonl" --seed
expect_rc missing_value 2
expect_in missing_value err "--seed"

run_tool missing_out synth --num 3
expect_rc missing_out 2
expect_in missing_out err "--out"

run_tool bad_command frobnicate
expect_rc bad_command 2
expect_in bad_command err "frobnicate"

run_tool no_args
expect_rc no_args 2

# --- bad values (odc::Error): exit 1 and the message names the option ---
run_tool bad_vocab synth --out "$work/x.jsonl" --vocab 10
expect_rc bad_vocab 1
expect_in bad_vocab err "vocab_size"

run_tool bad_task synth --out "$work/x.jsonl" --tasks copy,divide
expect_rc bad_task 1
expect_in bad_task err "divide"

# A missing directory is created (the README's first command in a fresh clone); a path under a
# regular file is an error that names the path and the reason, not an internal .tmp file.
run_tool new_dir synth --out "$work/new/dir/x.jsonl" --num 3
expect_rc new_dir 0
[ -s "$work/new/dir/x.jsonl" ] || fail "new_dir: $work/new/dir/x.jsonl not written"
run_tool bad_out synth --out "$out/x.jsonl" --num 3
expect_rc bad_out 1
expect_in bad_out err "synth.jsonl/x.jsonl: cannot create its directory"
expect_in bad_out err "Not a directory"
# 2^32 + 1 sequences: a clear error before anything is written, not std::bad_alloc.
run_tool huge_num synth --out "$work/huge.jsonl" --num 4294967297
expect_rc huge_num 1
expect_in huge_num err "GiB free; lower --num"
[ -e "$work/huge.jsonl.tmp" ] && fail "huge_num: a temporary file was left behind"

# --- help ---
run_tool help --help
expect_rc help 0
expect_in help out "synth"
expect_in help out "convert"
run_tool synth_help synth --help
expect_rc synth_help 0
expect_in synth_help out "--mean-length"

finish_test "test_odc_data: all checks passed"
