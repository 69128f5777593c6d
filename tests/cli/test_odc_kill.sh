#!/usr/bin/env bash
# A rank killed (SIGKILL) in the middle of ODC training: the job must end non-zero, with a message
# naming the dead rank, well within the comm timeout, leaving no process behind.
# Usage: test_odc_kill.sh BIN_DIR WORK_DIR
set -uo pipefail
bin="$(cd "$1" && pwd)"
work="$2"
rm -rf "$work" && mkdir -p "$work" && work="$(cd "$work" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1

"$bin/odc-data" synth --out "$work/data.jsonl" --num 400 --max-length 128 --mean-length 48 --seed 4 >/dev/null
# A SIGKILLed process cannot unlink the POSIX shared-memory files UCX created for it: remove the
# ones this test leaves behind (they would otherwise hold memory until reboot).
shm_before=$(ls /dev/shm 2>/dev/null | sort)
cleanup_shm() {
  comm -13 <(echo "$shm_before") <(ls /dev/shm 2>/dev/null | sort) | grep '^ucx_shm_posix_' | sed 's|^|/dev/shm/|' | xargs -r rm -f
}
trap cleanup_shm EXIT
timeout_s=20
start=$(date +%s)
mpirun -np 2 --oversubscribe --bind-to none --mca orte_base_help_aggregate 0 "$bin/odc-train" \
  --set "data.train=$work/data.jsonl" --set train.comm=odc --set train.steps=100000 --set train.log_every=50 \
  --set comm.timeout_s=$timeout_s --set "train.metrics_file=$work/metrics-{rank}.jsonl" >"$work/out.log" 2>&1 &
launcher=$!

# Wait until both ranks are training (their metrics files grow), then kill rank 1 mid-step.
for _ in $(seq 1 120); do
  [ -s "$work/metrics-1.jsonl" ] && [ "$(wc -l < "$work/metrics-1.jsonl")" -ge 3 ] && break
  sleep 0.5
done
victim=$(pgrep -f "odc-train.*$work/metrics-\{rank\}" | while read -r pid; do
  if tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -q '^OMPI_COMM_WORLD_RANK=1$'; then echo "$pid"; fi
done | head -1)
if [ -z "$victim" ]; then
  echo "FAIL: could not find rank 1 (training did not start?)"; cat "$work/out.log"; kill "$launcher" 2>/dev/null; exit 1
fi
kill -9 "$victim"
wait "$launcher"; rc=$?
elapsed=$(( $(date +%s) - start ))
leftover=$(pgrep -f "odc-train.*$work/metrics-\{rank\}" || true)

failures=0
[ "$rc" -ne 0 ] || { echo "FAIL: mpirun exited 0 after a rank was killed"; failures=1; }
grep -Eq "rank 1|process rank 1" "$work/out.log" || { echo "FAIL: no message names rank 1"; failures=1; }
[ "$elapsed" -lt $((timeout_s + 60)) ] || { echo "FAIL: took ${elapsed}s (timeout ${timeout_s}s)"; failures=1; }
[ -z "$leftover" ] || { echo "FAIL: processes left behind: $leftover"; kill -9 $leftover; failures=1; }
echo "exit $rc after ${elapsed}s; messages naming the rank:"
grep -E "rank 1" "$work/out.log" | head -3 | sed 's/^/    /'
[ "$failures" -eq 0 ] && echo "ok   [killed peer ends the job loudly]"
exit "$failures"
