#!/usr/bin/env bash
# The launcher's death ends its job; Ctrl-C right after launch stops cleanly.
#   kill -9 of odc-run (mpirun path and --local path): no process of the job left within 20 s
#     (the ranks watch ODC_LAUNCHER_PID and stop; --local ranks also die by PR_SET_PDEATHSIG)
#   kill -TERM of mpirun alone (under odc-run): the job stops, exit 0, "mpirun got a stop signal"
#   Ctrl-C (SIGINT to odc-run's process group) 0.1-0.5 s after launch: exit 0, no rank dies of a
#     signal ("exited on signal", "failed (signal")
# The job's processes are found by the unique work directory in their command line.
# Usage: test_launcher_death.sh BIN_DIR WORK_DIR [TRIALS]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$bin/odc-data" synth --out "$work/data.jsonl" --num 400 --max-length 96 --mean-length 40 --seed 9 >/dev/null
model="{hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}"

start_job() {  # start_job NAME mpi|local: odc-run in a session of its own (its pid = its process group)
  local name=$1 how=$2 launch
  if [ "$how" = local ]; then launch=(--local 2); else launch=(-np 2 --oversubscribe --bind-to none); fi
  rm -rf "$work/ckpt"
  setsid "$bin/odc-run" "${launch[@]}" "$bin/odc-train" --set "data.train=$work/data.jsonl" --set "model.config=$model" \
    --set data.minibatch_size=4 --set train.steps=100000 --set "checkpoint.dir=$work/ckpt" --set checkpoint.every=0 \
    --set train.log_every=1000 >"$work/$name.log" 2>&1 &
  job=$!
}
job_pids() { pgrep -f "$work/data.jsonl"; }  # mpirun and the ranks (odc-run too while it lives)
gone_within() {  # gone_within SECONDS: true once no process of the job is left
  local ticks=$(($1 * 10))
  for _ in $(seq 1 "$ticks"); do [ -z "$(job_pids)" ] && return 0; sleep 0.1; done
  return 1
}

for how in mpi local; do  # kill -9 of odc-run during training
  start_job "kill9-$how" "$how"
  sleep 3
  kill -KILL "$job"
  gone_within 20 || { fail "kill9-$how: processes left 20 s after kill -9 of odc-run: $(ps -o pid,args -p "$(job_pids | tr '\n' ',' | sed 's/,$//')")"; pkill -KILL -f "$work/data.jsonl"; }
  wait "$job" 2>/dev/null
  [ "$failures" -eq 0 ] && echo "ok   kill9-$how: nothing of the job left after kill -9 of odc-run"
done

# kill -TERM of mpirun alone stops the job gracefully.
start_job term-mpirun mpi
sleep 3
mpirun_pid=$(pgrep -P "$job" | head -1)
kill -TERM "$mpirun_pid"
if gone_within 30; then
  wait "$job"; rc=$?
  [ "$rc" -eq 0 ] || fail "term-mpirun: exit status $rc (expected 0): $(tail -3 "$work/term-mpirun.log")"
  grep -q "mpirun got a stop signal" "$work/term-mpirun.log" || fail "term-mpirun: no 'mpirun got a stop signal' line"
else
  fail "term-mpirun: the job still runs 30 s after kill -TERM of mpirun"; kill -KILL -- -"$job"; pkill -KILL -f "$work/data.jsonl"
fi

# Ctrl-C right after launch: a clean stop, no rank dies of the signal.
n=0
for how in local mpi; do
  for delay in 0.1 0.3 0.5; do
    n=$((n + 1)); name="early-$how-$delay"
    start_job "$name" "$how"
    sleep "$delay"
    kill -INT -- -"$job"
    gone_within 30 || { fail "$name: still running 30 s after Ctrl-C"; kill -KILL -- -"$job"; pkill -KILL -f "$work/data.jsonl"; }
    wait "$job"; rc=$?
    if grep -Eq "exited on signal|failed \(signal" "$work/$name.log"; then
      fail "$name: a rank died of a signal: $(grep -E -m1 'exited on signal|failed \(signal' "$work/$name.log")"
    elif [ "$rc" -ne 0 ]; then
      fail "$name: exit status $rc (expected 0): $(tail -3 "$work/$name.log")"
    fi
  done
done
finish_test "odc-run: kill -9 leaves nothing, SIGTERM to mpirun stops the job, an early Ctrl-C stops cleanly"
