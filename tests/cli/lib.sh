# The preamble of the CLI tests, written once. Each test script starts with
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# tests/CMakeLists.txt runs it as `bash SCRIPT BIN_DIR WORK_DIR [ARGS...]` (ARGS stay the script's
# own: $3, $4, ...). Sourcing this file:
#   - sets -u and pipefail (a script that wants -e sets it after sourcing);
#   - bin:  BIN_DIR, absolute (the build's bin/, where the tools are);
#   - work: WORK_DIR, emptied and created, absolute;
#   - root: the repository; py: /usr/bin/python3 (Debian's, for the tests' small Python pieces);
#   - mpirun: the launcher with the flags every multi-rank test uses (oversubscribed, unbound,
#     every help message shown);
#   - exports what mpirun needs in a container run as root, and OMP_NUM_THREADS=1;
#   - failures=0, `fail NAME [DETAIL...]` counting a failed check (the test goes on, so one run
#     reports every broken case) and `finish_test OK_TEXT` ending the test on the count;
#   - rank_pid / wait_rank_pid: a rank's pid in a running mpirun job;
#   - track_ucx_shm / remove_leaked_ucx_shm: the shared-memory files that SIGKILLed UCX processes
#     leave behind.
set -uo pipefail

bin="$(cd "${1:?usage: $(basename "$0") BIN_DIR WORK_DIR [ARGS...]}" && pwd)"
work="${2:?usage: $(basename "$0") BIN_DIR WORK_DIR [ARGS...]}"
rm -rf "$work" && mkdir -p "$work" && work="$(cd "$work" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
py=/usr/bin/python3
mpirun=(mpirun --oversubscribe --bind-to none --mca orte_base_help_aggregate 0)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

failures=0
# fail NAME [DETAIL...]: "FAIL [NAME]", then each DETAIL indented below it.
fail() {
  echo "FAIL [$1]"
  [ $# -lt 2 ] || printf '%s\n' "${@:2}" | sed 's/^/    /'
  failures=$((failures + 1))
}

# finish_test OK_TEXT: exits 0 with "ok   [OK_TEXT]" if no check failed, else 1 with the count.
finish_test() {
  if [ "$failures" -eq 0 ]; then
    echo "ok   [$1]"
    exit 0
  fi
  echo "$failures failure(s)"
  exit 1
}

# The pid of a rank of a running mpirun job, found by its command line and its Open MPI rank
# (OMPI_COMM_WORLD_RANK in its environment).
#   rank_pid PATTERN RANK        one look at the process list (empty if no process matches)
#   wait_rank_pid PATTERN RANK   looks again every 0.1 s for up to 5 s:
#                                one look under load has been seen to miss a running rank
# PATTERN is a `pgrep -f` regular expression that matches the ranks' command lines (and may match
# mpirun's, whose environment has no OMPI_COMM_WORLD_RANK).
rank_pid() {  # PATTERN RANK
  local pid
  for pid in $(pgrep -f "$1"); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -q "^OMPI_COMM_WORLD_RANK=$2$"; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

wait_rank_pid() {  # PATTERN RANK
  for _ in $(seq 1 50); do
    rank_pid "$1" "$2" && return 0
    sleep 0.1
  done
  return 1
}

# track_ucx_shm: remembers /dev/shm now; remove_leaked_ucx_shm then removes the UCX segments that
# appeared since (a SIGKILLed UCX process cannot unlink its shared-memory files). A test that
# kills ranks calls both (the second from its EXIT trap).
track_ucx_shm() { shm_before=$(ls /dev/shm 2>/dev/null | sort); }
remove_leaked_ucx_shm() {
  comm -13 <(echo "$shm_before") <(ls /dev/shm 2>/dev/null | sort) | grep '^ucx_shm_posix_' | sed 's|^|/dev/shm/|' | xargs -r rm -f
}
