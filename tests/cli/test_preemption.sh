#!/usr/bin/env bash
# Preemption: SIGTERM to one rank of a 2-rank ODC run -> every rank finishes the current minibatch,
# a checkpoint of that step is committed, mpirun exits 0; a resumed run continues from that step.
# A second SIGTERM before the minibatch ends stops that rank at once (the default action): the job
# ends within seconds although the step had several seconds left, and no checkpoint is committed.
# Usage: test_preemption.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$bin/odc-data" synth --out "$work/data.jsonl" --num 400 --max-length 96 --mean-length 40 --seed 5 >/dev/null
train() {
  mpirun -np 2 --oversubscribe --bind-to none "$bin/odc-train" --set "data.train=$work/data.jsonl" \
    --set "model.config={hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}" \
    --set data.minibatch_size=4 --set train.steps=100000 --set "checkpoint.dir=$work/ckpt" \
    --set "train.metrics_file=$work/metrics-{rank}.jsonl" --set train.peak_flops=1e10 --set train.log_every=1000 "$@"
}

train >"$work/run.log" 2>&1 &
launcher=$!
for _ in $(seq 1 120); do
  [ -s "$work/metrics-1.jsonl" ] && [ "$(wc -l < "$work/metrics-1.jsonl")" -ge 5 ] && break
  sleep 0.25
done
victim=$(wait_rank_pid "odc-train.*$work/data.jsonl" 1)
[ -n "$victim" ] || fail "rank 1 not found"
kill -TERM "$victim"
wait "$launcher"; rc=$?
[ "$rc" -eq 0 ] || fail "mpirun exited $rc after SIGTERM (expected 0): $(tail -5 "$work/run.log")"
grep -q "stop requested" "$work/run.log" || fail "no 'stop requested' message"
# Plain mpirun with checkpoint.dir: the start-up line says Ctrl-C through mpirun is not graceful.
grep -q "started by mpirun directly: a Ctrl-C or SIGTERM to mpirun ends the ranks" "$work/run.log" ||
  fail "plain mpirun: no start-up hint about odc-run"
last=$(tail -1 "$work/metrics-0.jsonl" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])')
ckpt="$work/ckpt/$(printf 'step-%08d' "$last")"
[ -f "$ckpt/manifest.json" ] || fail "no checkpoint of the last step $last: $(ls "$work/ckpt")"
[ -z "$(pgrep -f "odc-train.*$work/data.jsonl")" ] || fail "processes left behind"

train --set train.stop_at_step=$((last + 2)) >"$work/resume.log" 2>&1 || fail "resume exited non-zero: $(tail -3 "$work/resume.log")"
grep -q "resumed from $ckpt" "$work/resume.log" || fail "the resumed run did not start from step $last"

# Second signal: rank 1 sleeps 6 s in each microbatch, so the first signal leaves it seconds of work.
rm -f "$work"/metrics-*
before=$(ls "$work/ckpt")
train --set debug.slow_rank=1 --set debug.delay_ms=6000 >"$work/twice.log" 2>&1 &
launcher=$!
for _ in $(seq 1 200); do
  [ -s "$work/metrics-1.jsonl" ] && break
  sleep 0.25
done
victim=$(wait_rank_pid "odc-train.*$work/data.jsonl.*debug.delay_ms" 1)
[ -n "$victim" ] || fail "second signal: rank 1 not found: $(tail -3 "$work/twice.log")"
sleep 0.5
kill -TERM "$victim"
sleep 0.5
t0=$(date +%s.%N)
kill -TERM "$victim"
wait "$launcher"; rc=$?
elapsed=$(echo "$(date +%s.%N) - $t0" | bc)
[ "$rc" -ne 0 ] || fail "second signal: mpirun exited 0 (expected the rank to die of SIGTERM)"
grep -Eq "process rank 1 .*exited on signal 15" "$work/twice.log" || fail "second signal: rank 1 did not die of SIGTERM: $(tail -5 "$work/twice.log")"
[ "$(echo "$elapsed < 4" | bc)" = 1 ] || fail "second signal: the job took ${elapsed}s to end (the step had ~5 s left)"
[ "$(ls "$work/ckpt")" = "$before" ] || fail "second signal: a checkpoint was committed: $(ls "$work/ckpt")"
[ -z "$(pgrep -f "odc-train.*$work/data.jsonl")" ] || fail "second signal: processes left behind"

finish_test "SIGTERM on rank 1: all ranks stop after step $last, checkpoint, exit 0; resume continues; a second SIGTERM ends it in $(printf %.1f "$elapsed") s"
