#!/usr/bin/env bash
# The throughput experiment of this machine in one run: builds, then trains the demo model shape on
# fixed long-tailed synthetic data with Collective x {LocalSort, LB-Micro} and ODC x {LocalSort,
# LB-Micro, LB-Mini} at 1, 2, 4 and 8 sequences per rank (2 ranks x 1 compute thread), calibrates
# the simulator on a trace and checks its predictions. Writes OUT/results.jsonl (a JSON line per
# cell), OUT/table.md, OUT/summary.json, OUT/speedup.png (bar charts) and OUT/timeline-mbs4.png
# (one minibatch, Collective+LB-Micro vs ODC+LB-Mini, per rank). Every cell runs twice (the methods
# of a minibatch size forward, then backward) and reports its faster run (--statistic median for
# the mean of the two), about 35-40 minutes on 2 cores; run it on an otherwise idle machine
# (--repeats 1 halves it). --reuse re-derives the tables from what an earlier run left in OUT_DIR.
# Usage: scripts/bench.sh [OUT_DIR] [bench/e2e.py options, e.g. --mbs 4 --sequences-per-rank 16]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ODC_BUILD_DIR:-$root/build}"
out="${1:-$root/bench-out}"
shift || true

"$root/scripts/build.sh"
/usr/bin/python3 "$root/bench/e2e.py" --build "$build" --out "$out" --repeats 2 "$@"
/usr/bin/python3 "$root/tools/plot_bench.py" "$out/results.jsonl" --out "$out/speedup.png"
size=4
[ -f "$out/runs/mbs$size-odc+lb_mini-trace.json" ] || size="$(ls "$out"/runs/mbs*-odc+lb_mini-trace.json | head -1 | sed 's/.*mbs\([0-9]*\)-.*/\1/')"
/usr/bin/python3 "$root/tools/plot_trace.py" "$out/runs/mbs$size-collective+lb_micro-trace.json" \
  "$out/runs/mbs$size-odc+lb_mini-trace.json" --out "$out/timeline-mbs$size.png"
echo "results: $out/table.md, $out/speedup.png, $out/timeline-mbs$size.png"
