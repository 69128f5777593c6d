#!/usr/bin/env bash
# kill -9 during a checkpoint write leaves the previous checkpoint loadable: train 4 steps with a
# checkpoint every 2 (step-2, step-4), resume towards step 6 with the checkpoint write slowed down,
# SIGKILL rank 0 while the step-6 shards are written but not committed, then check that step-4 is
# still the newest complete checkpoint and that a resumed run starts from it and finishes.
# Usage: test_checkpoint_crash.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
track_ucx_shm
trap remove_leaked_ucx_shm EXIT

"$bin/odc-data" synth --out "$work/data.jsonl" --num 200 --max-length 96 --mean-length 40 --seed 3 >/dev/null
ckpt="$work/ckpt"
train() {  # extra --set arguments...
  mpirun -np 2 --oversubscribe --bind-to none "$bin/odc-train" --set "data.train=$work/data.jsonl" \
    --set "model.config={hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}" \
    --set data.minibatch_size=4 --set train.steps=6 --set checkpoint.every=2 --set "checkpoint.dir=$ckpt" \
    --set train.log_every=1 --set train.peak_flops=1e10 "$@"
}


train --set train.stop_at_step=4 >"$work/first.log" 2>&1 || fail "first run exited non-zero: $(tail -5 "$work/first.log")"
[ -d "$ckpt/step-00000004" ] || fail "no step-00000004 after the first run: $(ls "$ckpt")"

train --set debug.checkpoint_delay_ms=20000 >"$work/crash.log" 2>&1 &
launcher=$!
for _ in $(seq 1 240); do
  [ -f "$ckpt/.partial-step-00000006/rank-00000.json" ] && break
  sleep 0.25
done
[ -f "$ckpt/.partial-step-00000006/rank-00000.json" ] || fail "the step-6 write never started: $(tail -5 "$work/crash.log")"
victim=$(wait_rank_pid "odc-train.*$work/data.jsonl.*checkpoint.delay_ms" 0)
[ -n "$victim" ] || fail "rank 0 not found while it writes step 6: $(tail -3 "$work/crash.log")"
[ -n "$victim" ] && kill -9 "$victim"
wait "$launcher"; rc=$?
[ "$rc" -ne 0 ] || fail "mpirun exited 0 although rank 0 was killed"
leftover=$(pgrep -f "odc-train.*$work/data.jsonl.*checkpoint.delay_ms" || true)
[ -z "$leftover" ] || { fail "processes left behind: $leftover"; kill -9 $leftover; }
[ ! -d "$ckpt/step-00000006" ] || fail "step-00000006 was committed although the writer was killed"
[ -d "$ckpt/step-00000004" ] || fail "step-00000004 is gone after the crash"

train >"$work/resume.log" 2>&1 || fail "the resumed run exited non-zero: $(tail -5 "$work/resume.log")"
grep -q "resumed from $ckpt/step-00000004" "$work/resume.log" || fail "the resumed run did not start from step 4: $(grep -i resum "$work/resume.log")"
grep -q "step     6/6" "$work/resume.log" || fail "the resumed run did not reach step 6"
[ -d "$ckpt/step-00000006" ] || fail "no step-00000006 after the resumed run"
[ ! -d "$ckpt/.partial-step-00000006" ] || fail "the crashed write's partial directory was not cleaned up"

finish_test "kill -9 during a checkpoint write: step-4 stays loadable, resume finishes"
