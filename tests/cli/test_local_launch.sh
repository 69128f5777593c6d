#!/usr/bin/env bash
# odc-run --local N: ranks of one host without MPI (ShmHostGroup). Checks, as a user meets them:
#   * `--local 1 odc-train` trains, writes its metrics, and its losses are bitwise those of plain
#     `odc-train`; nothing is left in /dev/shm;
#   * `--local 2 odc-train` trains ODC over shared memory with either transport, ipc or ucx (the
#     1-rank losses to fp32 round-off; the two transports bit for bit);
#     with the collective comm, which needs MPI, both ranks print the error and exit 1; a rank
#     killed mid-run ends the job; nothing hangs or is left running;
#   * Ctrl-C (SIGINT to odc-run alone, and to its process group as a terminal sends it) commits a
#     checkpoint of the last step and exits 0; two Ctrl-C stop at once;
#   * a config error, a data file that cannot be opened and an error in its contents are printed
#     once, not by every rank;
#   * the environment every rank gets; a rank that fails (exit status or signal) makes odc-run
#     stop the others and exit with its status, a rank that ignores SIGUSR2 is killed; a program
#     that cannot be started is 127; bad --local values are usage errors (exit 2).
# Usage: test_local_launch.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
unset ODC_LOCAL_JOB ODC_LOCAL_RANK ODC_LOCAL_SIZE
ok() { echo "ok   [$1]"; }
has() { if grep -qF -- "$2" "$3"; then return 0; fi; fail "$1" "lacks '$2' in $3:"$'\n'"$(tail -8 "$3")"; return 1; }

"$bin/odc-data" synth --out "$work/data.jsonl" --num 200 --max-length 64 --mean-length 32 --seed 5 >/dev/null
small=(--set "data.train=$work/data.jsonl" --set train.peak_flops=1e10 --set data.minibatch_size=2
       --set "model.config={vocab_size: 256, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 4, num_key_value_heads: 2}")
losses() { /usr/bin/python3 -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1])))' "$1"; }
trainers() { pgrep -f "^$bin/odc-train .*$work/data.jsonl"; }
# leftovers PID: the shared-memory segments of odc-run PID's jobs still in /dev/shm.
leftovers() { ls /dev/shm 2>/dev/null | grep "^odc-host-group-odc-$1-"; }

# 1. One local rank trains like odc-train on its own.
"$bin/odc-train" "${small[@]}" --set train.steps=4 --set "train.metrics_file=$work/direct.jsonl" >"$work/direct.log" 2>&1 ||
  fail "direct run" "$(tail -5 "$work/direct.log")"
timeout 300 "$bin/odc-run" --local 1 "$bin/odc-train" "${small[@]}" --set train.steps=4 \
  --set "train.metrics_file=$work/local1.jsonl" >"$work/local1.log" 2>&1 &
job=$!; wait "$job"; rc=$?
if [ "$rc" -ne 0 ]; then
  fail "local 1 trains" "exit status $rc: $(tail -5 "$work/local1.log")"
elif [ "$(wc -l <"$work/local1.jsonl")" -ne 4 ]; then
  fail "local 1 trains" "expected 4 metrics lines, got $(wc -l <"$work/local1.jsonl")"
elif [ "$(losses "$work/local1.jsonl")" != "$(losses "$work/direct.jsonl")" ]; then
  fail "local 1 trains" "losses $(losses "$work/local1.jsonl") differ from the direct run's $(losses "$work/direct.jsonl")"
elif [ -n "$(leftovers "$job")" ]; then
  fail "local 1 trains" "left in /dev/shm: $(leftovers "$job")"
else
  ok "local 1 trains: 4 steps, losses bitwise those of plain odc-train ($(losses "$work/local1.jsonl" | cut -c1-40)...)"
fi

# 2. Two local ranks train ODC over shared memory, with each transport (ipc: the ranks' memory
# mapped; ucx: UCX bootstrapped over the local group, no MPI): the 1-rank losses to fp32 round-off,
# nothing left behind; and the two transports give the same bits (one microbatch per rank: each
# owner adds exactly two pushes, a + b == b + a).
for transport in ipc ucx; do
  timeout 300 "$bin/odc-run" --local 2 "$bin/odc-train" "${small[@]}" --set data.minibatch_size=1 --set train.steps=4 \
    --set comm.transport=$transport --set "train.metrics_file=$work/local2-$transport-{rank}.jsonl" \
    >"$work/local2-$transport.log" 2>&1 &
  job=$!; wait "$job"; rc=$?
  close=$(/usr/bin/python3 - "$work/local2-$transport-0.jsonl" "$work/direct.jsonl" <<'PY' 2>&1
import json, sys
two, one = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
worst = max((abs(a - b) / abs(b) for a, b in zip(two, one)), default=1.0)
print(f"{worst:.1e}" if len(two) == len(one) == 4 and worst <= 1e-4 else f"NO: {two} vs {one}")
PY
)
  if [ "$rc" -ne 0 ]; then
    fail "local 2 trains ($transport)" "exit status $rc (124: it hung): $(grep -v '\] step ' "$work/local2-$transport.log" | tail -5)"
  elif [[ "$close" == NO* ]] || [ ! -s "$work/local2-$transport-1.jsonl" ]; then
    fail "local 2 trains ($transport)" "losses of 2 ranks vs 1: $close"
  elif [ -n "$(trainers)" ] || [ -n "$(leftovers "$job")" ]; then
    fail "local 2 trains ($transport)" "left behind: processes $(trainers) segments $(leftovers "$job")"
  else
    ok "local 2 trains ($transport): 4 steps, losses within $close of one rank's, nothing left"
  fi
done
if [ "$(losses "$work/local2-ipc-0.jsonl")" != "$(losses "$work/local2-ucx-0.jsonl")" ]; then
  fail "local 2: ipc and ucx give the same bits" "$(losses "$work/local2-ipc-0.jsonl") vs $(losses "$work/local2-ucx-0.jsonl")"
else
  ok "local 2: ipc and ucx give the same losses, bit for bit ($(losses "$work/local2-ucx-0.jsonl" | cut -c1-40)...)"
fi
# With several microbatches per rank the arrival order shows in the sums; comm.deterministic folds
# every client's pushes in rank order through the accumulator both transports share: the same bits.
for transport in ipc ucx; do
  timeout 300 "$bin/odc-run" --local 2 "$bin/odc-train" "${small[@]}" --set data.minibatch_size=8 \
    --set data.max_tokens_per_microbatch=64 --set train.steps=4 --set comm.deterministic=true \
    --set comm.transport=$transport --set "train.metrics_file=$work/det-$transport-{rank}.jsonl" \
    >"$work/det-$transport.log" 2>&1
  echo "$?" >"$work/det-$transport.rc"
done
mbs=$(/usr/bin/python3 -c 'import json,sys; print(max(json.loads(l)["microbatches"] for l in open(sys.argv[1])))' "$work/det-ucx-0.jsonl" 2>/dev/null || echo 0)
if [ "$(cat "$work/det-ipc.rc")" != 0 ] || [ "$(cat "$work/det-ucx.rc")" != 0 ]; then
  fail "local 2 deterministic: ipc and ucx" "exit status $(cat "$work/det-ipc.rc")/$(cat "$work/det-ucx.rc"): $(tail -3 "$work/det-ucx.log")"
elif [ "$mbs" -lt 2 ]; then
  fail "local 2 deterministic: ipc and ucx" "at most $mbs microbatch a rank: the order of pushes is not exercised"
elif [ "$(losses "$work/det-ipc-0.jsonl")" != "$(losses "$work/det-ucx-0.jsonl")" ]; then
  fail "local 2 deterministic: ipc and ucx" "$(losses "$work/det-ipc-0.jsonl") vs $(losses "$work/det-ucx-0.jsonl")"
else
  ok "local 2 deterministic, up to $mbs microbatches a rank: ipc and ucx give the same losses, bit for bit"
fi

# printed_once LABEL TEXT ARGS...: odc-train on 3 local ranks with ARGS exits 1, printing TEXT once
# (an error every rank meets alike was printed by each) and no internal check.
printed_once() {
  local label=$1 text=$2 rc count
  shift 2
  timeout 60 "$bin/odc-run" --local 3 "$bin/odc-train" "${small[@]}" "$@" >"$work/once.log" 2>&1
  rc=$?
  count=$(grep -cF -- "$text" "$work/once.log")
  if [ "$rc" -ne 1 ] || [ "$count" -ne 1 ] || grep -q "internal check" "$work/once.log"; then
    fail "$label" "exit $rc (want 1), printed $count times: $(cat "$work/once.log")"
  else
    ok "$label, exit 1"
  fi
}
# A config error is the same on every rank of one host: printed once (it was once per rank).
printed_once "local 3: a config error printed once" \
  "odc-train: error: config key 'train.lr' in --set expects a number, found 'abc'" --set train.lr=abc
# So is a data file that cannot be opened (every rank printed it),
printed_once "local 3: a data file error printed once" \
  "odc-train: error: $work/absent.jsonl: cannot open dataset file (data.format 'tokens' reads" \
  --set "data.train=$work/absent.jsonl"
# and an error in the data file's contents, which every rank reads alike: an unknown field, a file
# smaller than the global batch.
head -n 3 "$work/data.jsonl" >"$work/three.jsonl"
sed '2s/"input_ids"/"loss_msk": [1], "input_ids"/' "$work/three.jsonl" >"$work/field.jsonl"
printed_once "local 3: a data content error printed once (field.jsonl)" \
  "field.jsonl:2: unknown field \"loss_msk\" in a tokens record" --set "data.train=$work/field.jsonl"
printed_once "local 3: a data content error printed once (three.jsonl)" \
  "the global batch is 6 sequences per step (data.minibatch_size 2 x 3 ranks" --set "data.train=$work/three.jsonl"
# A global batch beyond int64 (2^62 per rank x 3 ranks wrapped to a negative batch: an internal check failed).
printed_once "local 3: a global batch beyond int64 refused once" \
  "x 3 ranks is beyond the largest count of sequences (2^63 - 1): on 3 ranks data.minibatch_size must be <= 3074457345618258602" \
  --set data.minibatch_size=4611686018427387904

# The collective baseline on host memory needs MPI: both ranks say so and exit 1, nothing hangs.
t0=$(date +%s.%N)
timeout 120 "$bin/odc-run" --local 2 "$bin/odc-train" "${small[@]}" --set train.comm=collective --set train.steps=4 \
  >"$work/collective.log" 2>&1 &
job=$!; wait "$job"; rc=$?
seconds=$(echo "$(date +%s.%N) - $t0" | bc)
message="odc-train: error: the collective comm on host memory runs over MPI: launch the job with odc-run or mpirun"
if [ "$rc" -ne 1 ]; then
  fail "local 2 collective stops at the comm" "exit status $rc (124: it hung), expected 1: $(tail -5 "$work/collective.log")"
elif [ "$(grep -cF -- "$message" "$work/collective.log")" -ne 2 ]; then
  fail "local 2 collective stops at the comm" "expected the error from both ranks: $(tail -6 "$work/collective.log")"
elif grep -q "exited while\|waited .* s in\|left the group" "$work/collective.log"; then
  fail "local 2 collective stops at the comm" "a rank failed in the group instead: $(grep -m2 "exited while\|waited\|left the group" "$work/collective.log")"
elif [ -n "$(trainers)" ] || [ -n "$(leftovers "$job")" ]; then
  fail "local 2 collective stops at the comm" "left behind: processes $(trainers) segments $(leftovers "$job")"
else
  ok "local 2 collective stops at the comm: both ranks print the error, exit 1 after $(printf %.1f "$seconds") s, nothing left"
fi

# A rank killed (kill -9) mid-run: odc-run ends the job with its status, nothing left running.
timeout 120 "$bin/odc-run" --local 2 "$bin/odc-train" "${small[@]}" --set data.minibatch_size=1 --set train.steps=100000 \
  --set train.log_every=1000 --set "train.metrics_file=$work/killed-{rank}.jsonl" >"$work/killed.log" 2>&1 &
job=$!
for _ in $(seq 1 480); do [ -s "$work/killed-1.jsonl" ] && [ "$(wc -l <"$work/killed-1.jsonl")" -ge 3 ] && break; sleep 0.25; done
victim=""
for pid in $(trainers); do tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "ODC_LOCAL_RANK=1" && victim=$pid; done
t0=$(date +%s.%N)
[ -n "$victim" ] && kill -KILL "$victim"
wait "$job"; rc=$?
seconds=$(echo "$(date +%s.%N) - $t0" | bc)
if [ -z "$victim" ]; then
  fail "rank killed mid-run" "no rank 1 found running: $(tail -4 "$work/killed.log")"
elif [ "$rc" -ne 137 ] || ! grep -q "odc-run: rank 1 (pid $victim) failed (killed by SIGKILL)" "$work/killed.log"; then
  fail "rank killed mid-run" "exit status $rc, expected 137 and odc-run naming rank 1: $(grep -v '\] step ' "$work/killed.log" | tail -5)"
elif [ -n "$(trainers)" ] || [ -n "$(leftovers "$job")" ]; then
  fail "rank killed mid-run" "left behind: processes $(trainers) segments $(leftovers "$job")"
else
  ok "rank killed mid-run: odc-run exits 137 $(printf %.1f "$seconds") s later; rank 0: $(grep -o "error: .*" "$work/killed.log" | head -1 | cut -c1-120)"
fi

# The comms' bandwidth bench runs the same way (the GPU check's comm-bandwidth step).
if [ -x "$bin/comm_bandwidth" ]; then
  out=$(timeout 120 "$bin/odc-run" --local 2 "$bin/comm_bandwidth" --device cpu --unit-mib 1 --units 2 --reps 1 --comms ipc 2>&1); rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q '"comm":"ipc".*"gather_GBps"' <<<"$out" || ! grep -q '"world":2' <<<"$out" || grep -q '"error"' <<<"$out"; then
    fail "local 2 comm_bandwidth" "exit status $rc: $out"
  else
    ok "local 2 comm_bandwidth: one ipc line from rank 0, world 2"
  fi
fi

# Help and command-line mistakes are printed by rank 0 alone, as under mpirun.
"$bin/odc-run" --local 2 "$bin/odc-train" --frobnicate >"$work/flag.out" 2>"$work/flag.err"; rc=$?
"$bin/odc-run" --local 2 "$bin/odc-train" --help >"$work/help.out" 2>&1; help_rc=$?
if [ "$rc" -ne 2 ] || [ "$(grep -c "unknown option '--frobnicate'" "$work/flag.err")" -ne 1 ]; then
  fail "local 2 usage error" "exit status $rc, expected 2 and the message once: $(cat "$work/flag.err" | head -5)"
elif [ "$help_rc" -ne 0 ] || [ "$(grep -c "^usage: odc-train" "$work/help.out")" -ne 1 ]; then
  fail "local 2 --help" "exit status $help_rc, expected 0 and the usage once: $(head -3 "$work/help.out")"
else
  ok "local 2 usage error and --help: printed once (exit 2, exit 0)"
fi

# 3. Ctrl-C: SIGINT to odc-run alone, then to its process group (a terminal's Ctrl-C reaches the
# rank too: its own SIGINT and odc-run's SIGUSR1 are one request).
for target in odc-run group; do
  name="ctrl-c to $target"
  rm -rf "$work/ckpt" "$work/stop.jsonl"
  setsid "$bin/odc-run" --local 1 "$bin/odc-train" "${small[@]}" --set train.steps=100000 --set train.log_every=1000 \
    --set "checkpoint.dir=$work/ckpt" --set checkpoint.every=0 --set "train.metrics_file=$work/stop.jsonl" \
    >"$work/stop-$target.log" 2>&1 &
  job=$!
  for _ in $(seq 1 480); do [ -s "$work/stop.jsonl" ] && [ "$(wc -l <"$work/stop.jsonl")" -ge 3 ] && break; sleep 0.25; done
  if [ "$target" = odc-run ]; then kill -INT "$job"; else kill -INT -- -"$job"; fi
  for _ in $(seq 1 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.2; done
  kill -KILL -- -"$job" 2>/dev/null
  wait "$job"; rc=$?
  last=$(tail -1 "$work/stop.jsonl" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])')
  ckpt="$work/ckpt/$(printf 'step-%08d' "$last")"
  if [ "$rc" -ne 0 ]; then
    fail "$name" "exit status $rc: $(grep -v '\] step ' "$work/stop-$target.log" | tail -4)"
  elif ! grep -q "stop requested" "$work/stop-$target.log"; then
    fail "$name" "no 'stop requested' line: $(tail -4 "$work/stop-$target.log")"
  elif [ ! -f "$ckpt/manifest.json" ]; then
    fail "$name" "no committed checkpoint of step $last: $(ls "$work/ckpt" 2>&1)"
  elif [ -n "$(trainers)" ] || [ -n "$(leftovers "$job")" ]; then
    fail "$name" "left behind: processes $(trainers) segments $(leftovers "$job")"
  else
    ok "$name: exit 0, step $last committed"
  fi
done
# Two Ctrl-C 0.3 s apart while the step sleeps 6 s: the rank is stopped at once, nothing committed.
rm -rf "$work/ckpt" "$work/stop.jsonl"
setsid "$bin/odc-run" --local 1 "$bin/odc-train" "${small[@]}" --set train.steps=100000 --set "checkpoint.dir=$work/ckpt" \
  --set checkpoint.every=0 --set "train.metrics_file=$work/stop.jsonl" --set debug.slow_rank=0 --set debug.delay_ms=6000 \
  >"$work/twice.log" 2>&1 &
job=$!
for _ in $(seq 1 480); do [ -s "$work/stop.jsonl" ] && break; sleep 0.25; done
sleep 0.5
t0=$(date +%s.%N)
kill -INT "$job"; sleep 0.3; kill -INT "$job"
for _ in $(seq 1 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
kill -KILL -- -"$job" 2>/dev/null
wait "$job"; rc=$?
seconds=$(echo "$(date +%s.%N) - $t0" | bc)
if [ "$rc" -eq 0 ] || ! grep -q "again: stopping every rank now" "$work/twice.log"; then
  fail "two ctrl-c" "exit status $rc, expected non-zero and 'stopping every rank now': $(tail -4 "$work/twice.log")"
elif [ "$(echo "$seconds < 4" | bc)" != 1 ] || [ -n "$(ls "$work/ckpt" 2>/dev/null | grep step-)" ] || [ -n "$(trainers)" ]; then
  fail "two ctrl-c" "took $seconds s; checkpoints: $(ls "$work/ckpt" 2>&1); processes: $(trainers)"
else
  ok "two ctrl-c: exit $rc after $(printf %.1f "$seconds") s, nothing committed"
fi

# 4. What every rank gets, and ranks that fail.
out=$("$bin/odc-run" --local 3 -- bash -c 'echo "$ODC_LOCAL_RANK/$ODC_LOCAL_SIZE $ODC_LOCAL_JOB $ODC_LAUNCHER"' 2>&1); rc=$?
if [ "$rc" -ne 0 ] || [ "$(sort <<<"$out" | cut -d' ' -f1 | tr '\n' ' ')" != "0/3 1/3 2/3 " ] ||
   [ "$(cut -d' ' -f2 <<<"$out" | sort -u | wc -l)" -ne 1 ] || ! grep -q "^0/3 odc-[0-9]*-[0-9]* odc-run$" <<<"$out"; then
  fail "environment" "exit $rc, output: $out"
else
  ok "environment: ranks 0..2 of 3, one job id ($(head -1 <<<"$out" | cut -d' ' -f2)), ODC_LAUNCHER=odc-run"
fi
marker="odc-local-test-$$"
cat >"$work/rank.sh" <<EOF
# Rank 1 fails as told by \$1 (an exit status or "signal"); the others wait, as a rank in a
# collective would (exec: no child of theirs outlives them).
if [ "\$ODC_LOCAL_RANK" = 1 ]; then
  sleep 0.5
  if [ "\$1" = signal ]; then kill -KILL \$\$; fi
  exit "\$1"
fi
[ "\$2" = deaf ] && trap '' USR2
exec -a "$marker" sleep 120
EOF
for case in "3 polite" "signal polite" "1 deaf"; do
  read -r how ears <<<"$case"
  expected=$([ "$how" = signal ] && echo 137 || echo "$how")
  t0=$(date +%s.%N)
  timeout 60 "$bin/odc-run" --local 3 bash "$work/rank.sh" "$how" "$ears" >"$work/fail.log" 2>&1; rc=$?
  seconds=$(echo "$(date +%s.%N) - $t0" | bc)
  left=$(pgrep -f "^$marker")
  if [ "$rc" -ne "$expected" ]; then
    fail "rank 1 fails ($case)" "exit status $rc, expected $expected: $(cat "$work/fail.log")"
  elif [ -n "$left" ]; then
    fail "rank 1 fails ($case)" "left running: $left"; kill -KILL $left
  elif ! grep -q "odc-run: rank 1 (pid [0-9]*) failed" "$work/fail.log"; then
    fail "rank 1 fails ($case)" "no 'rank 1 ... failed' line: $(cat "$work/fail.log")"
  elif [ "$ears" = deaf ] && ! grep -q "still running 5 s after SIGUSR2: killing them" "$work/fail.log"; then
    fail "rank 1 fails ($case)" "ranks ignoring SIGUSR2 were not killed: $(cat "$work/fail.log")"
  else
    ok "rank 1 fails ($case): odc-run exits $rc after $(printf %.1f "$seconds") s, nothing left running"
  fi
done
"$bin/odc-run" --local 2 /nonexistent/program >/dev/null 2>"$work/missing.err"; rc=$?
if [ "$rc" -ne 127 ] || ! grep -q "cannot start '/nonexistent/program'" "$work/missing.err"; then
  fail "program that cannot start" "exit status $rc: $(cat "$work/missing.err")"
else
  ok "program that cannot start: exit 127"
fi

# 5. Usage errors.
usage() {  # usage NAME EXPECTED-TEXT ARGS...
  local name=$1 text=$2; shift 2
  "$bin/odc-run" "$@" >/dev/null 2>"$work/usage.err"; local rc=$?
  if [ "$rc" -ne 2 ] || ! grep -qF -- "$text" "$work/usage.err" || ! grep -q "^usage: odc-run" "$work/usage.err"; then
    fail "usage: $name" "exit status $rc: $(head -3 "$work/usage.err")"
  else
    ok "usage: $name (exit 2)"
  fi
}
usage "--local 0" "--local expects a number of ranks from 1 to 256, got '0'" --local 0 true
usage "--local two" "--local expects a number of ranks from 1 to 256, got 'two'" --local two true
usage "--local=257" "--local expects a number of ranks from 1 to 256, got '257'" --local=257 true
usage "--local without a value" "--local needs a number of ranks" --local
usage "--local without a program" "--local 2 needs a program to run" --local 2
usage "--local with --mpirun" "--local runs the program without mpirun: --mpirun does not apply" --local 2 --mpirun x true
"$bin/odc-run" --help | grep -q -- "--local N" || fail "help" "odc-run --help does not describe --local"

finish_test "odc-run --local: one and two ranks train, stop gracefully, failures end the job"
