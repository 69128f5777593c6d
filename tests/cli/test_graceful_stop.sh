#!/usr/bin/env bash
# Graceful stop through mpirun, as users stop jobs: each trial starts a 2-rank ODC run under
# odc-run with checkpoint.dir (no periodic checkpoints), waits a varying number of steps, then
#   terminal   Ctrl-C in a terminal: SIGINT to odc-run's process group (odc-run and mpirun; OpenMPI
#              puts every rank in a process group of its own, so a terminal never signals them)
#   scheduler  SIGTERM to every process of the job at once: odc-run, mpirun and each rank
# and requires: exit status 0, a committed checkpoint of the last step the metrics show, the
# "stop requested" line, no process left. One more case: a second Ctrl-C, 0.3 s after odc-run took
# the first, ends the job at once (non-zero, no checkpoint).
#
# Usage: test_graceful_stop.sh BIN_DIR WORK_DIR [TRIALS_PER_MODE] [small|large]
#   large: a 93M-parameter model whose checkpoint (1.1 GB of weights and AdamW moments) takes
#   seconds to write, far past mpirun's own one-second kill grace. ctest runs 2 small trials per
#   mode; the 20-trial figure comes from `test_graceful_stop.sh build/bin /tmp/stop 10 large`.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trials="${3:-2}"
size="${4:-small}"
passed=0

case "$size" in
  small) model="{hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}"
         data_args=(--num 400 --max-length 96 --mean-length 40); per_rank=4 ;;
  large) model="{hidden_size: 1024, intermediate_size: 2816, num_hidden_layers: 8, num_attention_heads: 16, num_key_value_heads: 8}"
         data_args=(--num 400 --max-length 48 --mean-length 24); per_rank=1 ;;
  *) echo "test_graceful_stop.sh: size must be small or large, not '$size'" >&2; exit 2 ;;
esac
"$bin/odc-data" synth --out "$work/data.jsonl" "${data_args[@]}" --seed 9 >/dev/null

start_job() {  # start_job NAME [--set ...]: odc-run in a session of its own (its pid = its process group)
  local name=$1; shift
  rm -rf "$work/ckpt" "$work"/metrics-*
  setsid "$bin/odc-run" -np 2 --oversubscribe --bind-to none "$bin/odc-train" --set "data.train=$work/data.jsonl" \
    --set "model.config=$model" --set data.minibatch_size=$per_rank --set train.steps=100000 \
    --set "checkpoint.dir=$work/ckpt" --set checkpoint.every=0 --set "train.metrics_file=$work/metrics-{rank}.jsonl" \
    --set train.peak_flops=1e10 --set train.log_every=1000 "$@" >"$work/$name.log" 2>&1 &
  job=$!
}
wait_steps() {  # wait_steps N: until rank 1's metrics show N steps (120 s at most)
  for _ in $(seq 1 480); do
    [ -s "$work/metrics-1.jsonl" ] && [ "$(wc -l < "$work/metrics-1.jsonl")" -ge "$1" ] && return 0
    sleep 0.25
  done
  return 1
}
job_pids() { pgrep -f "^$bin/odc-train .*$work/data.jsonl"; }  # the ranks only
finish() {  # finish NAME: waits (300 s at most) and sets rc and seconds
  local t0 ticks=0
  t0=$(date +%s.%N)
  while kill -0 "$job" 2>/dev/null && [ "$ticks" -lt 1500 ]; do sleep 0.2; ticks=$((ticks + 1)); done
  if kill -0 "$job" 2>/dev/null; then
    echo "FAIL: $1: still running after 300 s; killing it"
    kill -KILL -- -"$job" 2>/dev/null; pkill -KILL -f "^$bin/odc-train .*$work/data.jsonl"
  fi
  wait "$job"; rc=$?
  seconds=$(echo "$(date +%s.%N) - $t0" | bc)
}

trial() {  # trial MODE N
  local mode=$1 n=$2 name="$1-$2"
  start_job "$name"
  wait_steps $((2 + n % 3)) || { fail "$name: the run did not start: $(tail -3 "$work/$name.log")"; kill -KILL -- -"$job"; return; }
  sleep "0.$((n * 37 % 10))"  # land anywhere in a step
  case "$mode" in
    terminal) kill -INT -- -"$job" ;;
    scheduler) kill -TERM "$job" $(pgrep -P "$job") $(job_pids) ;;
  esac
  finish "$name"
  local log="$work/$name.log" last ckpt
  [ "$rc" -eq 0 ] || { fail "$name: exit status $rc (expected 0): $(grep -v '^\[.*step ' "$log" | tail -4)"; return; }
  grep -q "stop requested" "$log" || { fail "$name: no 'stop requested' line"; return; }
  last=$(tail -1 "$work/metrics-0.jsonl" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])')
  ckpt="$work/ckpt/$(printf 'step-%08d' "$last")"
  [ -f "$ckpt/manifest.json" ] || { fail "$name: no committed checkpoint of step $last: $(ls "$work/ckpt" 2>&1)"; return; }
  [ -z "$(job_pids)" ] || { fail "$name: processes left behind"; return; }
  saved=$(grep -o "saved to .* in [0-9.]* s" "$log" | grep -o "[0-9.]* s$" | head -1)
  echo "ok   $name: exit 0 $(printf %.1f "$seconds") s after the signal, step $last committed (written in $saved)"
  passed=$((passed + 1))
}

for n in $(seq 1 "$trials"); do
  trial terminal "$n"
  trial scheduler "$n"
done

# A storm of stop requests (SIGUSR1 to both ranks every 5 ms for 2 s) during compute: one
# request, exit 0. Signals once interrupted system calls in MPI/UCX threads, which corrupted the
# heap ("corrupted size vs. prev_size" in 3 of 3 such storms); now no thread but the one that
# sigwaits can receive them.
start_job storm --set "model.config={hidden_size: 256, intermediate_size: 704, num_hidden_layers: 4, num_attention_heads: 8, num_key_value_heads: 4}" \
  --set data.minibatch_size=8
if wait_steps 1; then
  for _ in $(seq 1 400); do kill -USR1 $(job_pids) 2>/dev/null; sleep 0.005; done
  finish storm
  [ "$rc" -eq 0 ] || fail "storm: exit status $rc (expected 0): $(grep -v '^\[.*step ' "$work/storm.log" | tail -4)"
  ! grep -Eq "corrupted|double free|Segmentation|signal 6" "$work/storm.log" || fail "storm: a rank crashed: $(grep -E -m2 'corrupted|double free|Segmentation|signal 6' "$work/storm.log")"
  [ "$(grep -c "stop requested" "$work/storm.log")" -eq 2 ] || fail "storm: expected one 'stop requested' line per rank"
else
  fail "storm: the run did not start: $(tail -3 "$work/storm.log")"; kill -KILL -- -"$job"
fi

# Two Ctrl-C: the second ends the job at once, without a checkpoint. Rank 1 sleeps 6 s in every
# microbatch, so after the first the step still has seconds to go. The second is sent once odc-run
# said it took the first, as a person presses it again: two SIGINTs that reach a process before it
# runs its handler are one pending signal (on a loaded machine 0.3 s apart was not always enough).
start_job twice --set debug.slow_rank=1 --set debug.delay_ms=6000
if wait_steps 1; then
  sleep 0.5
  kill -INT -- -"$job"
  for _ in $(seq 1 100); do grep -q "send it again to stop at once" "$work/twice.log" && break; sleep 0.05; done
  sleep 0.3; kill -INT -- -"$job"
  finish twice
  [ "$rc" -ne 0 ] || fail "twice: exit status 0 (expected the ranks to be stopped at once)"
  grep -q "again: stopping every rank now" "$work/twice.log" || fail "twice: no 'stopping every rank now' line"
  [ "$(echo "$seconds < 4" | bc)" = 1 ] || fail "twice: the job took ${seconds} s to end (the step had ~5 s left)"
  [ -z "$(ls "$work/ckpt" 2>/dev/null | grep step-)" ] || fail "twice: a checkpoint was committed: $(ls "$work/ckpt")"
  [ -z "$(job_pids)" ] || fail "twice: processes left behind"
else
  fail "twice: the run did not start: $(tail -3 "$work/twice.log")"; kill -KILL -- -"$job"
fi

# odc-run's own usage errors and a missing mpirun.
"$bin/odc-run" >/dev/null 2>"$work/usage.err"; [ $? -eq 2 ] && grep -q "no mpirun arguments" "$work/usage.err" ||
  fail "odc-run without arguments: expected exit 2 and 'no mpirun arguments'"
"$bin/odc-run" --mpirun /nonexistent/mpirun -np 1 true >/dev/null 2>"$work/missing.err"; [ $? -eq 127 ] &&
  grep -q "cannot start '/nonexistent/mpirun'" "$work/missing.err" || fail "odc-run with a missing mpirun: expected exit 127"

echo "graceful stop: $passed of $((2 * trials)) trials committed their checkpoint and exited 0 ($size model)"
finish_test "odc-run: Ctrl-C and a scheduler's SIGTERM stop gracefully; a second Ctrl-C stops at once"
