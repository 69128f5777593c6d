#!/usr/bin/env bash
# The multi-host tests' hosts (ctest fixture): `hosts.sh up WORK` makes 2 hosts (network
# namespaces, scripts/netns-hosts.sh) or, where this machine cannot, writes why into
# WORK/skip-reason (the tests then report themselves skipped with that reason); `hosts.sh down WORK`
# removes them, also after a failed test.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export ODC_NETNS="${ODC_NETNS:-odcmh}"
action="$1"
work="$2"
mkdir -p "$work"
case "$action" in
  up)
    rm -f "$work/skip-reason"
    out=$("$root/scripts/netns-hosts.sh" up 2 2>&1); rc=$?
    if [ $rc -eq 77 ]; then
      echo "$out" | tee "$work/skip-reason"
      exit 0
    fi
    echo "$out"
    exit $rc ;;
  down)
    "$root/scripts/netns-hosts.sh" down
    rm -f /dev/shm/vader_segment.* 2> /dev/null
    exit 0 ;;
  *) echo "hosts.sh: up or down" >&2; exit 2 ;;
esac
