#!/usr/bin/env bash
# A checkpoint directory belongs to one run (docs/checkpoints.md, "One run per directory"):
#   "resume never into another run"  checkpoint.resume: never into a directory holding an older
#                                    run's step-40/60 is an error naming that run; nothing written
#   "rollback retires the branch"    resume from step-20 of 20/40/60, train to 30: step-40/60 are
#                                    moved to retired/, step-20 stays, auto-resume continues at 30
#   "second job refused"             two 2-rank jobs on one directory: the second exits non-zero
#                                    before training (no hang), naming the first's run, host and
#                                    pid; the first finishes with its own checkpoints
#   "resume without the base"        model.checkpoint moved away after the first part: the resume
#                                    neither needs nor reads it and gives the straight run's losses
#                                    bit for bit (one rank, fixed reduction order)
# Usage: test_checkpoint_runs.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$bin/odc-data" synth --out "$work/data.jsonl" --num 200 --max-length 64 --mean-length 24 --seed 4 >/dev/null
shape='{vocab_size: 64, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}'
train() {  # one process, no MPI
  timeout 300 "$bin/odc-train" --set "data.train=$work/data.jsonl" --set "model.config=$shape" \
    --set data.minibatch_size=4 --set train.steps=60 --set train.peak_flops=1e10 --set train.log_every=1000 "$@"
}
steps_in() { ls "$1" 2>/dev/null | grep '^step-' | tr '\n' ' '; }
run_of() { $py -c 'import json,sys; print(json.load(open(sys.argv[1]+"/manifest.json"))["run_id"])' "$1"; }

# --- resume never into another run's directory
ck="$work/never"
train --set "checkpoint.dir=$ck" --set checkpoint.every=20 --set train.stop_at_step=60 >"$work/old.log" 2>&1 ||
  fail "resume never into another run" "the first run failed: $(tail -3 "$work/old.log")"
old_run=$(run_of "$ck/step-00000060")
before=$(steps_in "$ck")
out=$(train --set "checkpoint.dir=$ck" --set checkpoint.resume=never --set checkpoint.every=10 2>&1); rc=$?
if [ $rc -ne 1 ]; then
  fail "resume never into another run" "exit $rc (expected 1): $(tail -3 <<<"$out")"
elif ! grep -q "holds the checkpoints of run $old_run (step-00000020, step-00000040, step-00000060), and checkpoint.resume is never" <<<"$out"; then
  fail "resume never into another run" "message: $(grep error <<<"$out")"
elif [ "$(steps_in "$ck")" != "$before" ]; then
  fail "resume never into another run" "the directory changed: $(steps_in "$ck")"
else
  echo "ok   [resume never into another run] exit 1: $(grep -m1 error <<<"$out" | head -c 200)"
fi

# --- rollback: 20/40/60 -> resume from 20, train to 30 -> auto continues at 30
out=$(train --set "checkpoint.dir=$ck" --set "checkpoint.resume=$ck/step-00000020" --set checkpoint.every=10 \
        --set train.stop_at_step=30 2>&1); rc=$?
retired=$(ls -d "$ck"/retired/after-step-00000020-* 2>/dev/null | head -1)
if [ $rc -ne 0 ]; then
  fail "rollback retires the branch" "exit $rc: $(tail -3 <<<"$out")"
elif [ "$(steps_in "$ck")" != "step-00000020 step-00000030 " ]; then
  fail "rollback retires the branch" "left in the directory: $(steps_in "$ck")"
elif [ -z "$retired" ] || [ "$(steps_in "$retired")" != "step-00000040 step-00000060 " ]; then
  fail "rollback retires the branch" "retired: '$retired' holds $(steps_in "$retired")"
elif ! grep -q "rollback: run $old_run resumed from $ck/step-00000020; its later checkpoints (step-00000040, step-00000060) are an abandoned branch" <<<"$out"; then
  fail "rollback retires the branch" "no rollback message: $(grep -i rollback <<<"$out")"
else
  out=$(train --set "checkpoint.dir=$ck" --set checkpoint.every=10 --set train.stop_at_step=40 2>&1)
  if grep -q "resumed from $ck/step-00000030" <<<"$out" && [ "$(run_of "$ck/step-00000040")" = "$old_run" ]; then
    echo "ok   [rollback retires the branch] step-40/60 in $(basename "$retired"), auto-resume continues at step 30"
  else
    fail "rollback retires the branch" "auto-resume did not continue at step 30: $(grep -i 'resum' <<<"$out")"
  fi
fi

# --- two jobs on one directory (2 ranks each)
ck2="$work/shared"
mpitrain() {
  timeout 300 mpirun --oversubscribe --bind-to none -np 2 "$bin/odc-train" --set "data.train=$work/data.jsonl" \
    --set "model.config=$shape" --set data.minibatch_size=4 --set train.peak_flops=1e10 --set train.log_every=1000 \
    --set "checkpoint.dir=$ck2" "$@"
}
mpitrain --set train.steps=30 --set debug.slow_rank=1 --set debug.delay_ms=200 \
  --set "train.metrics_file=$work/first-{rank}.jsonl" >"$work/first.log" 2>&1 &
first=$!
for _ in $(seq 1 240); do [ -s "$work/first-0.jsonl" ] && break; sleep 0.25; done
start=$(date +%s)
out=$(mpitrain --set train.steps=30 --set "train.metrics_file=$work/second-{rank}.jsonl" 2>&1); rc=$?
took=$(( $(date +%s) - start ))
wait "$first"; first_rc=$?
holder=$(run_of "$ck2/step-00000030" 2>/dev/null)
count=$(grep -c "checkpoint directory '$ck2' is in use by run $holder (host $(hostname), pid " <<<"$out")
if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
  fail "second job refused" "the second job exited $rc: $(tail -3 <<<"$out")"
elif [ "$count" -lt 1 ]; then
  # (Every rank throws it — rank 0 broadcasts the verdict, tests/unit/train/checkpoint/test_checkpointing.cpp —
  # but the first to print aborts the job, so mpirun may show it once.)
  fail "second job refused" "no lock message naming the first job: $(grep error <<<"$out")"
elif [ -e "$work/second-0.jsonl" ] && [ -s "$work/second-0.jsonl" ]; then
  fail "second job refused" "the second job trained steps"
elif [ $first_rc -ne 0 ] || [ "$(steps_in "$ck2")" != "step-00000030 " ]; then
  fail "second job refused" "the first job exited $first_rc with $(steps_in "$ck2"): $(tail -3 "$work/first.log")"
else
  echo "ok   [second job refused] exit $rc after ${took}s: $(grep -m1 'in use' <<<"$out" | head -c 200)"
fi
# Once the first job is gone, the directory is free again.
mpitrain --set train.steps=31 >"$work/third.log" 2>&1 ||
  fail "second job refused" "a job after the first one ended could not use the directory: $(tail -3 "$work/third.log")"

# --- resume without the base weights
"$bin/odc-ckpt" init --out "$work/base" --set model.config.vocab_size=64 --set model.config.hidden_size=32 \
  --set model.config.intermediate_size=64 --set model.config.num_hidden_layers=2 --set model.config.num_attention_heads=4 \
  --set model.config.num_key_value_heads=2 --dtype bf16 >/dev/null 2>"$work/init.log" ||
  fail "resume without the base" "odc-ckpt init: $(cat "$work/init.log")"
basetrain() {
  timeout 300 "$bin/odc-train" --set "data.train=$work/data.jsonl" --set "model.checkpoint=$1" --set data.minibatch_size=4 \
    --set train.steps=8 --set train.peak_flops=1e10 --set train.log_every=1000 "${@:2}"
}
losses() { $py -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if l.strip()))' "$1"; }
basetrain "$work/base" --set "train.metrics_file=$work/straight.jsonl" >"$work/straight.log" 2>&1 ||
  fail "resume without the base" "the straight run failed: $(tail -3 "$work/straight.log")"
basetrain "$work/base" --set "checkpoint.dir=$work/based" --set train.stop_at_step=4 \
  --set "train.metrics_file=$work/split.jsonl" >"$work/part1.log" 2>&1 ||
  fail "resume without the base" "the first part failed: $(tail -3 "$work/part1.log")"
mv "$work/base" "$work/base-moved"
out=$(basetrain "$work/base" --set "checkpoint.dir=$work/based" --set "train.metrics_file=$work/split.jsonl" \
        --set "checkpoint.export_hf=$work/exported" 2>&1); rc=$?
if [ $rc -ne 0 ]; then
  fail "resume without the base" "exit $rc: $(grep -m3 -i 'error\|warn' <<<"$out")"
elif ! grep -q "model.checkpoint '$work/base' is not there (moved?): not needed" <<<"$out"; then
  fail "resume without the base" "no message about the missing base: $(grep -i 'model' <<<"$out" | head -3)"
elif ! grep -q "checkpoint.export_hf: model.checkpoint '$work/base' is not there: $work/exported gets no tokenizer files" <<<"$out"; then
  fail "resume without the base" "no warning about the export's tokenizer files"
elif grep -q "model: loaded" <<<"$out"; then
  fail "resume without the base" "the base weights were loaded"
elif [ "$(losses "$work/split.jsonl")" != "$(losses "$work/straight.jsonl")" ]; then
  fail "resume without the base" "losses differ: straight $(losses "$work/straight.jsonl") vs $(losses "$work/split.jsonl")"
elif ! "$bin/odc-ckpt" inspect "$work/exported" 2>/dev/null | grep -q '"dtype":"bfloat16"'; then
  fail "resume without the base" "the export does not keep the base's dtype (bf16): $("$bin/odc-ckpt" inspect "$work/exported" 2>&1 | head -c 200)"
else
  echo "ok   [resume without the base] base moved away; 4 + 4 steps give the straight 8 steps' losses bit for bit"
fi

finish_test "checkpoint directory: one run, rollback, lock, no base needed"
