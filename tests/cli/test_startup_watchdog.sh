#!/usr/bin/env bash
# The watchdog from the first moment: a rank that never joins MPI initialisation (frozen with
# SIGSTOP before its main(), as a stuck node or a paused container would leave it) must not hang the
# others. With comm.timeout_s=2 the start-up deadline is its floor, 10 s (distributed::
# kMinStartupTimeoutS): rank 0 ends the job with "rank 0 is stuck in start-up: ... in MPI
# initialisation", exit non-zero, within the deadline plus mpirun's teardown (bound: 40 s), and no
# process of the job is left. Before the deadline existed rank 0 waited in MPI_Init forever.
# A wrapper stops rank 1 before exec: deterministic, whatever the machine's load.
# Usage: test_startup_watchdog.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$bin/odc-data" synth --out "$work/data.jsonl" --num 40 --max-length 64 --mean-length 24 --seed 3 >/dev/null
cat >"$work/freeze-rank1.sh" <<'SH'
#!/bin/sh
# Rank 1 stops itself before the program starts; the others run it.
[ "${OMPI_COMM_WORLD_RANK:-}" = 1 ] && kill -STOP $$
exec "$@"
SH
chmod +x "$work/freeze-rank1.sh"
model="{hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 1}"

start=$(date +%s)
timeout -s KILL 90 mpirun -np 2 --oversubscribe --bind-to none "$work/freeze-rank1.sh" "$bin/odc-train" \
  --set "data.train=$work/data.jsonl" --set "model.config=$model" --set train.steps=2 --set comm.timeout_s=2 \
  >"$work/frozen.log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
if [ "$rc" -eq 137 ]; then
  fail "a rank frozen before MPI initialisation: the job still ran after 90 s (killed by the test)"
else
  [ "$rc" -ne 0 ] || fail "frozen rank 1: exit status 0"
  grep -q "rank 0 is stuck in start-up: .* in MPI initialisation" "$work/frozen.log" ||
    fail "frozen rank 1: no 'rank 0 is stuck in start-up ... MPI initialisation' line: $(tail -5 "$work/frozen.log")"
  [ "$elapsed" -ge 10 ] || fail "frozen rank 1: ended after ${elapsed} s, before the 10 s start-up deadline: not the deadline"
  [ "$elapsed" -le 40 ] || fail "frozen rank 1: ended after ${elapsed} s (bound 40 s)"
fi
left=$(pgrep -f "$work/data.jsonl")
[ -z "$left" ] || { fail "processes left: $(ps -o pid,stat,args -p "$(echo $left | tr ' ' ',')")"; kill -KILL $left; }
[ "$failures" -eq 0 ] && echo "ok   a rank frozen before MPI initialisation: exit $rc after ${elapsed} s, rank 0 named the phase"

# The same job without a frozen rank starts and finishes (the deadline is disarmed in time).
mpirun -np 2 --oversubscribe --bind-to none "$bin/odc-train" --set "data.train=$work/data.jsonl" --set "model.config=$model" \
  --set train.steps=2 --set comm.timeout_s=2 >"$work/normal.log" 2>&1 || fail "normal start-up: exit $?: $(tail -3 "$work/normal.log")"
grep -q "stuck in start-up" "$work/normal.log" && fail "normal start-up: a start-up deadline message"
finish_test "start-up is watched from MPI initialisation on"
