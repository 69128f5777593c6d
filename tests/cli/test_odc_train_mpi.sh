#!/usr/bin/env bash
# odc-train under mpirun: 2-rank collective training runs; ranks launched with different configs or
# different data stop with an error naming the ranks, on every rank, with a non-zero exit and no
# hang; a config error is printed once. Usage: test_odc_train_mpi.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$bin/odc-data" synth --out "$work/a.jsonl" --num 64 --max-length 64 --mean-length 24 --seed 1 >/dev/null
"$bin/odc-data" synth --out "$work/b.jsonl" --num 64 --max-length 64 --mean-length 24 --seed 2 >/dev/null
small=(--set "model.config={vocab_size: 64, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}"
       --set data.minibatch_size=2 --set train.steps=3 --set train.comm=collective)

# 1. Two ranks train, each writing its own metrics file.
if out=$(timeout 120 "${mpirun[@]}" -np 2 "$bin/odc-train" "${small[@]}" --set "data.train=$work/a.jsonl" \
           --set "train.metrics_file=$work/metrics-{rank}.jsonl" 2>&1); then
  for r in 0 1; do
    lines=$(wc -l < "$work/metrics-$r.jsonl" 2>/dev/null || echo 0)
    [ "$lines" -eq 3 ] || fail "per-rank metrics file $r" "expected 3 lines, found $lines"
  done
  echo "ok   [2-rank collective training, per-rank metrics]"
else
  fail "2-rank collective training" "$out"
fi

# expect_mismatch NAME NEEDLE -- MPMD ARGS: both ranks must exit non-zero, quickly, naming the item.
expect_mismatch() {
  local name="$1" needle="$2"; shift 3
  local out rc
  out=$(timeout 120 "${mpirun[@]}" "$@" 2>&1); rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then fail "$name" "exit $rc (expected a non-zero exit, not a hang)"$'\n'"$out"; return; fi
  local count
  count=$(grep -c "$needle" <<<"$out")
  if [ "$count" -lt 2 ]; then fail "$name" "expected '$needle' from both ranks, found $count:"$'\n'"$out"; return; fi
  echo "ok   [$name] exit $rc: $(grep -m1 "$needle" <<<"$out" | head -c 220)"
}
expect_mismatch "different config on rank 1" "the configuration differs between rank 0 and rank(s) 1" -- \
  -np 1 "$bin/odc-train" "${small[@]}" --set "data.train=$work/a.jsonl" : \
  -np 1 "$bin/odc-train" "${small[@]}" --set "data.train=$work/a.jsonl" --set train.lr=0.5
# Same config text on both ranks (a relative data path), but each rank's working directory holds
# a different file under that name.
mkdir -p "$work/r0" "$work/r1" && cp "$work/a.jsonl" "$work/r0/a.jsonl" && cp "$work/b.jsonl" "$work/r1/a.jsonl"
expect_mismatch "different data on rank 1" "the dataset a.jsonl" -- \
  -np 1 -wdir "$work/r0" "$bin/odc-train" "${small[@]}" --set "data.train=a.jsonl" : \
  -np 1 -wdir "$work/r1" "$bin/odc-train" "${small[@]}" --set "data.train=a.jsonl"

# A config error is printed once (rank 0; it was once per rank) and ends the job; one that only rank 1
# meets (its input differs) is printed by rank 1 after it waited for rank 0 (kSameErrorWaitS, 5 s).
config_error="odc-train: error: config key 'train.lr' in --set expects a number, found 'abc'"
out=$(timeout 60 "${mpirun[@]}" -np 3 "$bin/odc-train" "${small[@]}" --set train.lr=abc 2>&1); rc=$?
count=$(grep -cF "$config_error" <<<"$out")
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$count" -ne 1 ]; then
  fail "a config error on every rank, printed once" "exit $rc, printed $count times:"$'\n'"$out"
else
  echo "ok   [a config error on every rank, printed once] exit $rc"
fi
out=$(timeout 60 "${mpirun[@]}" -np 1 "$bin/odc-train" "${small[@]}" --set "data.train=$work/a.jsonl" : \
        -np 1 "$bin/odc-train" "${small[@]}" --set "data.train=$work/a.jsonl" --set train.lr=abc 2>&1); rc=$?
count=$(grep -cF "$config_error" <<<"$out")
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$count" -ne 1 ]; then
  fail "a config error on rank 1 alone, printed by it" "exit $rc, printed $count times:"$'\n'"$out"
else
  echo "ok   [a config error on rank 1 alone, printed by it] exit $rc"
fi

finish_test "test_odc_train_mpi"
