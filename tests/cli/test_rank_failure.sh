#!/usr/bin/env bash
# One rank of a 2-rank job fails at a given moment of a step; the job must end non-zero within
# the comm timeout, with a message naming the failed rank, leave no process behind, and the newest
# complete checkpoint must resume and finish.
#   MOMENT microbatch: the survivor (rank 0) is inside its microbatch loop (it is slowed down per
#          microbatch), the victim (rank 1) waits for it at the minibatch end;
#   MOMENT barrier:    the victim is slowed down in its microbatch loop, the survivor waits in the
#          minibatch-end barrier;
#   MOMENT checkpoint: the victim is in its checkpoint write (slowed down after its shards), the
#          survivor waits for it before the commit.
# Two failures per moment:
#   kill -9  the launcher (mpirun) sees the death, names the rank and ends the others at once;
#   kill -STOP  the process is frozen (the launcher sees nothing): our own timeouts must catch it
#          (the ODC transport's per-operation timeout or the watchdog around MPI waits) and name it.
# COMM (default odc): collective runs the same moments over the collective baseline, whose frozen-peer
# detection in the microbatch loop is the watchdog around its all-gather / reduce-scatter waits;
# ipc runs ODC over the IPC transport (shared memory), whose frozen owner stops freeing data slots;
# context splits the long sequences over both ranks, whose frozen member stops coming to their
# key/value exchanges.
# Usage: test_rank_failure.sh BIN_DIR WORK_DIR microbatch|barrier|checkpoint [odc|collective|ipc|context]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
moment="$3"
comm="${4:-odc}"
track_ucx_shm
cleanup() {
  pkill -9 -f "odc-train.*$work/" 2>/dev/null
  remove_leaked_ucx_shm
}
trap cleanup EXIT

timeout_s=5
comm_args=(--set "train.comm=$comm")
[ "$comm" = ipc ] && comm_args=(--set train.comm=odc --set comm.transport=ipc)
# context: ODC with a cap under the longest sequences, which are split over both ranks (context
# parallelism): a frozen member leaves the other waiting in their key/value exchange.
[ "$comm" = context ] && comm_args=(--set train.comm=odc --set data.max_tokens_per_microbatch=48)
"$bin/odc-data" synth --out "$work/data.jsonl" --num 400 --max-length 96 --mean-length 40 --seed 3 >/dev/null
ckpt="$work/ckpt"
train() {  # extra --set arguments...
  "${mpirun[@]}" -np 2 "$bin/odc-train" \
    --set "data.train=$work/data.jsonl" \
    --set "model.config={hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}" \
    --set data.minibatch_size=4 "${comm_args[@]}" --set checkpoint.every=2 --set "checkpoint.dir=$ckpt" \
    --set train.log_every=1 --set train.peak_flops=1e10 --set comm.timeout_s=$timeout_s "$@"
}
latest_step() { ls "$ckpt" | grep -E '^step-[0-9]+$' | sort | tail -1 | sed 's/^step-0*//'; }
job_ranks="odc-train.*$work/run-metrics"  # the ranks of the job whose metrics go to $work/run-metrics-*

# ranks_left TRIES: waits up to TRIES x 0.25 s for the job's ranks to end; prints the pids still there.
ranks_left() {
  local left
  for _ in $(seq 1 "$1"); do
    left=$(pgrep -f "$job_ranks")
    [ -z "$left" ] && return
    sleep 0.25
  done
  echo $left
}
# Ends a job the test gave up on, and waits until none of its ranks is left: a rank that outlives
# its case would hold the checkpoint directory's lock and fail the next case.
end_job() {  # LAUNCHER_PID
  kill "$1" 2>/dev/null
  wait "$1"
  pkill -9 -f "$job_ranks" 2>/dev/null
  ranks_left 40 > /dev/null
}

fail() { echo "FAIL [$moment, $comm]: $*"; failures=$((failures + 1)); }

# A clean start: checkpoints at steps 2 and 4.
train --set train.steps=1000 --set train.stop_at_step=4 >"$work/first.log" 2>&1 || fail "first run failed: $(tail -5 "$work/first.log")"
[ "$(latest_step)" = 4 ] || fail "no step-4 checkpoint after the first run: $(ls "$ckpt")"

case "$moment" in
  # No checkpoint in the failing run of these two moments: a checkpoint write would be a moment of
  # its own (the third case).
  microbatch) moment_args=(--set debug.slow_rank=0 --set debug.delay_ms=400 --set checkpoint.every=100000) ;;
  barrier) moment_args=(--set debug.slow_rank=1 --set debug.delay_ms=3000 --set checkpoint.every=100000) ;;
  checkpoint) moment_args=(--set debug.checkpoint_delay_ms=60000 --set debug.checkpoint_delay_rank=1) ;;
  *) echo "unknown moment '$moment'"; exit 2 ;;
esac

for signal in KILL STOP; do
  rm -f "$work"/run-metrics-*
  before=$(latest_step)
  start=$(date +%s.%N)
  train --set train.steps=1000 "${moment_args[@]}" --set "train.metrics_file=$work/run-metrics-{rank}.jsonl" \
    >"$work/$signal.log" 2>&1 &
  launcher=$!
  # Wait for the moment: one resumed step done (the microbatch / barrier cases: 1 s later the
  # survivor is in its slowed microbatch loop, or waits while the victim sleeps 3 s in its first
  # microbatch), or the victim sleeping after its shards of the next checkpoint.
  # The victim's pid is taken as soon as the rank exists, not at the moment: a process list read
  # under load is no proof that a rank has gone; whether it is still alive at the moment is asked
  # of the kernel (kill -0).
  partial="$ckpt/.partial-step-$(printf %08d $((before + 2)))"
  ready=0
  victim=""
  for _ in $(seq 1 240); do
    [ -n "$victim" ] || victim=$(rank_pid "$job_ranks" 1)
    if [ "$moment" = checkpoint ]; then
      [ -f "$partial/rank-00001.json" ] && ready=1
    else
      [ -s "$work/run-metrics-0.jsonl" ] && ready=1
    fi
    [ "$ready" = 1 ] && [ -n "$victim" ] && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.25
  done
  [ "$moment" != checkpoint ] && sleep 1
  alive=0
  [ -n "$victim" ] && kill -0 "$victim" 2>/dev/null && alive=1
  if [ "$ready" != 1 ] || [ "$alive" != 1 ]; then
    state="moment reached: $([ "$ready" = 1 ] && echo yes || echo no); rank 1: pid ${victim:-never seen}"
    [ -n "$victim" ] && [ "$alive" != 1 ] && state="$state (gone before the failure was injected)"
    kill -0 "$launcher" 2>/dev/null || state="$state; the job had already ended"
    fail "$signal: no failure injected ($state): $(grep -v ' step ' "$work/$signal.log" | tail -8)"
    end_job "$launcher"; continue
  fi
  t_fail=$(date +%s.%N)
  kill -"$signal" "$victim"
  wait "$launcher"; rc=$?
  elapsed=$(echo "$(date +%s.%N) - $t_fail" | bc)
  # mpirun may exit as soon as it has sent SIGKILL: give the kernel a moment to end the ranks
  # (seen under load: a frozen rank still listed right after mpirun returned).
  leftover=$(ranks_left 20)
  [ "$rc" -ne 0 ] || fail "$signal: mpirun exited 0 after rank 1 failed"
  [ -z "$leftover" ] || { fail "$signal: processes left behind: $leftover"; kill -9 $leftover; }
  limit=$(( timeout_s + 20 ))  # the timeout, the peers' answer window (<= timeout/4) and shutdown
  [ "$(echo "$elapsed < $limit" | bc)" = 1 ] || fail "$signal: the job took ${elapsed}s to end after the failure (timeout ${timeout_s}s)"
  if [ "$signal" = KILL ]; then
    grep -q "process rank 1 .*exited on signal 9" "$work/$signal.log" || fail "KILL: no message names rank 1: $(tail -8 "$work/$signal.log")"
    named=$(grep -m1 "process rank 1" "$work/$signal.log")
  else
    # Frozen: only our timeouts can see it: the ODC transport's (an operation on rank 1 that never
    # completes) or the watchdog's (rank 1 does not answer). The error must name rank 1 and the moment.
    name="to rank 1: no data slot freed|from rank\(s\) 1 after|missing from 1|rank\(s\) 1 did not answer|for rank 1 .*rank 1 \(pid [0-9]+\) is alive but has not come"
    case "$moment" in
      # Over ipc a push completes into the owner's free data slots without the owner: with slots
      # to spare, the survivor finishes its loop and names rank 1 at the minibatch end.
      microbatch) where="gradient push|gather|reduce-scatter|microbatch"; [ "$comm" = ipc ] && where="$where|minibatch end" ;;
      barrier) where="minibatch.end" ;;
      checkpoint) where="checkpoint" ;;
    esac
    error=$(grep -m1 "odc-train: error:" "$work/$signal.log")
    echo "$error" | grep -Eq "$name" || fail "STOP: no error names rank 1: $(grep -v ' step ' "$work/$signal.log" | tail -8)"
    echo "$error" | grep -Eq "$where" || fail "STOP: the error does not say it happened in the $moment moment ($where): $error"
    named=$(grep -m1 "odc-train: error:" "$work/$signal.log")
    [ "$(echo "$elapsed >= $timeout_s" | bc)" = 1 ] || fail "STOP: ended after ${elapsed}s, before the timeout: not our timeout"
  fi
  if [ "$moment" = checkpoint ]; then
    [ ! -d "$ckpt/step-$(printf %08d $((before + 2)))" ] || fail "$signal: step $((before + 2)) was committed although rank 1 never finished writing it"
  fi
  # The newest complete checkpoint resumes and the run finishes two steps later.
  resume_from=$(latest_step)
  [ "$resume_from" -ge "$before" ] || fail "$signal: the newest checkpoint went back from step $before to $resume_from"
  target=$((resume_from + 2))
  train --set train.steps=$target >"$work/$signal-resume.log" 2>&1 || fail "$signal: the resumed run failed: $(tail -5 "$work/$signal-resume.log")"
  grep -q "resumed from $ckpt/step-$(printf %08d "$resume_from")" "$work/$signal-resume.log" || fail "$signal: did not resume from step $resume_from"
  grep -Eq "step +$target/$target" "$work/$signal-resume.log" || fail "$signal: the resumed run did not reach step $target"
  ls -d "$ckpt"/.partial-* >/dev/null 2>&1 && fail "$signal: partial checkpoint directories left after the resumed run: $(ls -a "$ckpt")"
  printf '%s after %.1fs: %s\n' "$signal" "$elapsed" "$named"
  echo "    resumed from step $resume_from, finished step $target"
done

finish_test "$comm: rank 1 killed / frozen in the $moment moment: job ends loudly naming it, no orphans, resume works"
