#!/usr/bin/env bash
# What comm.deterministic costs, and what it buys. Trains the demo model (configs/demo.yaml) with
# ODC on 2 ranks x 1 compute thread, four runs in the order plain, deterministic, deterministic,
# plain (so a slow phase of the machine hits both kinds alike), then prints one JSON line:
#   samples_per_s_plain / _deterministic   mean over the two runs of each kind, every step but the
#                                          first (warm-up) of rank 0's metrics
#   ratio                                  deterministic / plain throughput
#   plain_max_rel_diff                     largest relative loss difference between the plain runs
#   deterministic_bitwise                  true when the two deterministic runs' losses and
#                                          gradient norms are equal to the last bit
# Exits 1 if the deterministic runs differ. Run it on an otherwise idle machine.
# Usage: bench/deterministic.sh [STEPS=40] [OUT_DIR=build-deterministic]   (BUILD_DIR=... default: build)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps="${1:-40}"
out="${2:-$root/build-deterministic}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
build="${BUILD_DIR:-$root/build}"
[[ -x "$build/bin/odc-train" ]] || { echo "deterministic.sh: $build/bin/odc-train not found; build it first" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$build/bin/odc-data" synth --out "$out/data.jsonl" --num 2000 --vocab 32 --max-length 512 --mean-length 160 \
  --seed 11 >/dev/null
run() {  # run NAME DETERMINISTIC
  mpirun -np 2 --oversubscribe --bind-to none "$build/bin/odc-train" "$root/configs/demo.yaml" \
    --set "data.train=$out/data.jsonl" --set train.steps="$steps" --set train.log_level=warn \
    --set train.threads=1 --set comm.deterministic="$2" --set "train.metrics_file=$out/$1-{rank}.jsonl" \
    --set checkpoint.resume=never >"$out/$1.log" 2>&1 || { echo "deterministic.sh: run $1 failed:" >&2; tail -5 "$out/$1.log" >&2; exit 1; }
}
run plain-1 false
run det-1 true
run det-2 true
run plain-2 false

/usr/bin/python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
def load(name):
    return [json.loads(line) for line in open(f"{out}/{name}-0.jsonl")]
def throughput(rows):  # samples/s over both ranks: 2 x steps / sum of step seconds per sample
    rows = rows[1:]
    return 2 * len(rows) / sum(1.0 / r["samples_per_s_per_rank"] for r in rows)
def max_rel(a, b):
    return max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a, b))
runs = {n: load(n) for n in ["plain-1", "det-1", "det-2", "plain-2"]}
plain = (throughput(runs["plain-1"]) + throughput(runs["plain-2"])) / 2
det = (throughput(runs["det-1"]) + throughput(runs["det-2"])) / 2
bitwise = all(x["loss"] == y["loss"] and x["grad_norm"] == y["grad_norm"] for x, y in zip(runs["det-1"], runs["det-2"]))
print(json.dumps({"bench": "deterministic", "steps": len(runs["det-1"]), "ranks": 2,
                  "samples_per_s_plain": round(plain, 4), "samples_per_s_deterministic": round(det, 4),
                  "ratio": round(det / plain, 4), "plain_max_rel_diff": max_rel(runs["plain-1"], runs["plain-2"]),
                  "deterministic_max_rel_diff": max_rel(runs["det-1"], runs["det-2"]),
                  "deterministic_bitwise": bitwise}))
sys.exit(0 if bitwise else 1)
EOF
