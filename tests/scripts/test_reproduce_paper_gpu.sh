#!/usr/bin/env bash
# scripts/reproduce-paper-gpu.sh without GPUs: --dry-run checks every configs/gpu8 setting, plans
# its memory per GPU at the paper's 64K-token microbatches (every setting fits 8 x 80 GB for both
# comms; on 40 GB GPUs the 7B setting does not, and the dry run fails) and prints one odc-run
# command per cell (2 schedules x 4 minibatch sizes x 3 settings); --cpu-smoke
# runs the whole pipeline on 2 CPU ranks and must produce a table row with both schedules' rates.
# Usage: test_reproduce_paper_gpu.sh BUILD_DIR WORK_DIR
set -uo pipefail
build="$(cd "$1" && pwd)"
work="$2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

if bash "$root/scripts/reproduce-paper-gpu.sh" --dry-run --build "$build" "$work/dry" >"$work/dry.log" 2>&1; then
  cells=$(grep -c "odc-run -np 8 " "$work/dry.log")
  [ "$cells" -eq 24 ] || fail "dry run printed $cells cell commands, expected 24"
  grep -q "train.comm=collective --set data.balance=lb_micro" "$work/dry.log" || fail "dry run: no baseline cell"
  grep -q "train.comm=odc --set data.balance=lb_mini" "$work/dry.log" || fail "dry run: no ODC cell"
  # Every setting's memory planned for both comms, each fitting 80 GB at the paper's 64K tokens.
  fits=$(grep -c "^memory: .*: fits: " "$work/dry.log")
  [ "$fits" -eq 6 ] || fail "dry run: $fits of 6 settings x comms planned to fit 8 x 80 GB: $(grep memory "$work/dry.log")"
  for config in "$root"/configs/gpu8/*.yaml; do
    grep -q "max_tokens_per_microbatch: 65536" "$config" || fail "$config does not hold the paper's 64K tokens"
  done
else
  fail "dry run failed: $(tail -3 "$work/dry.log")"
fi
# GPUs too small for the 7B cells: the dry run fails and names them.
bash "$root/scripts/reproduce-paper-gpu.sh" --dry-run --gpu-gb 40 --settings "sft-longalign-7b" --minibatches 1 --build "$build" \
  "$work/small" >"$work/small.log" 2>&1
[ $? -eq 1 ] && grep -q "sft-longalign-7b, train.comm odc does not fit 8 x 40 GB" "$work/small.log" \
  || fail "a cell over 40 GB GPUs does not fail the dry run: $(tail -3 "$work/small.log")"
bash "$root/scripts/reproduce-paper-gpu.sh" --dry-run --build "$build" --settings nope "$work/bad" >"$work/bad.log" 2>&1
[ $? -eq 1 ] && grep -q "no config" "$work/bad.log" || fail "an unknown setting is not an error naming it"
bash "$root/scripts/reproduce-paper-gpu.sh" --gpus 0 "$work/x" >/dev/null 2>&1
[ $? -eq 2 ] || fail "--gpus 0 is not a usage error"

if bash "$root/scripts/reproduce-paper-gpu.sh" --cpu-smoke --build "$build" "$work/smoke" >"$work/smoke.log" 2>&1; then
  row=$(grep "^| sft-longalign-1.5b | 2 |" "$work/smoke/table.md")
  [ -n "$row" ] || fail "smoke: no table row: $(cat "$work/smoke/table.md")"
  echo "$row" | grep -Eq '\| [0-9.]+ \| [0-9.]+ \| [+-][0-9.]+% \|$' || fail "smoke: the row lacks a rate or speed-up: $row"
else
  fail "cpu smoke failed: $(tail -5 "$work/smoke.log")"
fi
[ "$failures" -eq 0 ] && echo "ok   [reproduce-paper-gpu.sh: 24 cells planned, every setting fits 8 x 80 GB at 64K tokens; the pipeline runs end to end on 2 CPU ranks]"
exit "$failures"
