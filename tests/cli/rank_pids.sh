# Shared by the CLI tests that signal one rank of a running mpirun job: the pid of a rank, found
# by its command line and its Open MPI rank (OMPI_COMM_WORLD_RANK in its environment).
#
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
