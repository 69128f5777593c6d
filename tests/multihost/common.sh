# Sourced by the multi-host tests: the hosts' set, skipping where they could not be made, checks.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export ODC_NETNS="${ODC_NETNS:-odcmh}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
hosts="$root/scripts/netns-hosts.sh"
fixture="$1"  # the fixture's work directory (hosts.sh up wrote skip-reason there, if any)
if [ -f "$fixture/skip-reason" ]; then
  echo "skipped: $(cat "$fixture/skip-reason")"
  exit 77
fi
if ! "$hosts" status > /dev/null 2>&1; then
  echo "the hosts of set $ODC_NETNS are not up (run the multihost/hosts_up fixture first)"
  exit 1
fi
failures=0
fail() { echo "FAIL [$1]"; echo "$2" | sed 's/^/    /'; failures=$((failures + 1)); }
# mpirun across the 2 hosts, 2 ranks each (hostfile slots: 2 per host with --npernode).
across() { timeout "${ODC_MULTIHOST_TIMEOUT:-300}" "$hosts" mpirun --npernode 2 -np 4 --bind-to none \
             --mca orte_base_help_aggregate 0 -x OMP_NUM_THREADS "$@"; }
# The losses of a metrics file, one per line.
losses() { /usr/bin/python3 -c 'import json,sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r and "step" in r: print(repr(r["loss"]))' "$1"; }
# same_losses NAME A B TOL: the loss columns of metrics files A and B agree to TOL (relative).
same_losses() {
  local out
  if out=$(/usr/bin/python3 - "$2" "$3" "$4" <<'PY'
import json, sys
def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"loss"' in l and '"step"' in l]
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
if not a or len(a) != len(b):
    sys.exit(f"{len(a)} losses against {len(b)}")
worst = max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b))
print(f"{len(a)} steps, worst relative difference {worst:.2e}")
sys.exit(0 if worst <= tol else 1)
PY
  ); then echo "ok   [$1] $out"; else fail "$1" "$out"; fi
}
