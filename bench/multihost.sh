#!/usr/bin/env bash
# Training across 2 hosts x 2 ranks (network namespaces joined by a bridge, scripts/netns-hosts.sh;
# TCP between hosts, shared memory within one): ODC+LB-Mini against Collective+LB-Micro, with full
# and hybrid sharding, on an unlimited link and on one limited to RATE (default 10gbit), all in
# one run on the same long-tailed data. Prints one JSON line per cell (samples/s per rank, waits)
# and one per comparison (ratios), and a table on stderr. Needs root; makes and removes its hosts.
# Runtime: about 5-10 minutes on an idle 2-core machine (4 ranks with one compute thread each).
# Usage: bench/multihost.sh [BUILD_DIR] [STEPS] [RATE]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-${BUILD_DIR:-$root/build}}"
steps="${2:-16}"
rate="${3:-10gbit}"
[ -x "$build/bin/odc-train" ] || { echo "multihost.sh: $build/bin/odc-train not found; build it first" >&2; exit 1; }
export ODC_NETNS="${ODC_NETNS:-odcbench}" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
hosts="$root/scripts/netns-hosts.sh"
work="$(mktemp -d)"
trap '"$hosts" down; rm -rf "$work"' EXIT
"$hosts" up 2

# Long-tailed lengths (log-normal, clipped to [64, 1024], mean about a quarter of the maximum).
"$build/bin/odc-data" synth --out "$work/data.jsonl" --num 4000 --vocab 32 --min-length 64 --max-length 1024 \
  --mean-length 256 --sigma 0.9 --seed 1 > /dev/null
cells=()
for link in unlimited "$rate"; do
  if [ "$link" = unlimited ]; then "$hosts" rate 1 off; "$hosts" rate 0 off; else "$hosts" rate 0 "$link"; "$hosts" rate 1 "$link"; fi
  for sharding in full hybrid; do
    for method in collective+lb_micro odc+lb_mini; do
      comm="${method%+*}" balance="${method#*+}"
      name="$comm-$balance-$sharding-$link"
      echo "multihost.sh: $name" >&2
      "$hosts" mpirun --npernode 2 -np 4 --bind-to none -x OMP_NUM_THREADS "$build/bin/odc-train" \
        "$root/configs/demo.yaml" --set "data.train=$work/data.jsonl" --set data.minibatch_size=4 \
        --set data.max_tokens_per_microbatch=1024 --set train.steps="$steps" --set train.warmup_steps=2 \
        --set train.comm="$comm" --set data.balance="$balance" --set train.sharding="$sharding" \
        --set train.log_level=warn --set "train.metrics_file=$work/$name-{rank}.jsonl" > "$work/$name.log" 2>&1 \
        || { echo "multihost.sh: $name failed:" >&2; tail -20 "$work/$name.log" >&2; exit 1; }
      cells+=("$name")
    done
  done
done
/usr/bin/python3 - "$work" "$rate" "${cells[@]}" <<'PY'
import json, sys
work, rate, cells = sys.argv[1], sys.argv[2], sys.argv[3:]
WARM = 3  # steps left out: buffers grow, pages fault in
out = {}
for name in cells:
    comm, balance, sharding, link = name.split("-", 3)
    ranks = [[json.loads(l) for l in open(f"{work}/{name}-{r}.jsonl")] for r in range(4)]
    timed = [recs[WARM:] for recs in ranks]
    seconds = max(sum(x["step_time_s"] for x in recs) for recs in timed)
    samples = sum(x["sequences"] for x in timed[0])
    rec = {"bench": "multihost", "hosts": 2, "ranks_per_host": 2, "comm": comm, "balance": balance,
           "sharding": sharding, "link": link, "steps_timed": len(timed[0]),
           "samples_per_s_per_rank": round(samples / 4 / seconds, 4),
           "wait_in_loop_s": [round(sum(x["wait_in_loop_s"] for x in recs), 3) for recs in timed],
           "wait_end_s": [round(sum(x["wait_end_s"] for x in recs), 3) for recs in timed],
           "final_loss": ranks[0][-1]["loss"]}
    out[(comm, sharding, link)] = rec
    print(json.dumps(rec))
def ratio(a, b, what, **key):
    r = round(out[a]["samples_per_s_per_rank"] / out[b]["samples_per_s_per_rank"], 3)
    print(json.dumps({"bench": "multihost", "comparison": what, **key, "ratio": r}))
    return r
table = []
for link in ("unlimited", rate):
    for sharding in ("full", "hybrid"):
        r = ratio(("odc", sharding, link), ("collective", sharding, link), "odc+lb_mini/collective+lb_micro",
                  sharding=sharding, link=link)
        table.append(f"| {sharding} | {link} | {out[('collective', sharding, link)]['samples_per_s_per_rank']} | "
                     f"{out[('odc', sharding, link)]['samples_per_s_per_rank']} | {r} |")
    for comm in ("collective", "odc"):
        ratio((comm, "hybrid", link), (comm, "full", link), "hybrid/full", comm=comm, link=link)
for comm in ("collective", "odc"):
    for sharding in ("full", "hybrid"):
        ratio((comm, sharding, rate), (comm, sharding, "unlimited"), f"{rate}/unlimited", comm=comm, sharding=sharding)
print("| sharding | link | collective+lb_micro samples/s/rank | odc+lb_mini samples/s/rank | ratio |", file=sys.stderr)
print("|---|---|---|---|---|", file=sys.stderr)
print("\n".join(table), file=sys.stderr)
PY
