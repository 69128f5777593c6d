#!/usr/bin/env bash
# scripts/reproduce-paper-gpu.sh without GPUs: --dry-run checks every configs/gpu8 setting and
# prints one odc-run command per cell (2 schedules x 4 minibatch sizes x 3 settings); --cpu-smoke
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
else
  fail "dry run failed: $(tail -3 "$work/dry.log")"
fi
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
[ "$failures" -eq 0 ] && echo "ok   [reproduce-paper-gpu.sh: 24 cells planned; the pipeline runs end to end on 2 CPU ranks]"
exit "$failures"
