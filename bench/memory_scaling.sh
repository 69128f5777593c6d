#!/usr/bin/env bash
# Per-rank parameter + optimizer memory against the number of ranks (collective baseline): trains a
# ~27M-parameter model for 2 steps on N = 1, 2, 4 ranks and prints one JSON line per N with the
# bytes of the shards a rank owns (master, gradient accumulator, two AdamW moments) and the peak
# RSS of the largest rank, plus the ratio to N = 1. Usage: bench/memory_scaling.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$build/bin/odc-data" synth --out "$work/data.jsonl" --num 64 --max-length 128 --mean-length 48 --seed 3 >/dev/null
model="{vocab_size: 8000, hidden_size: 512, intermediate_size: 1376, num_hidden_layers: 6, num_attention_heads: 8, num_key_value_heads: 4}"
for n in 1 2 4; do
  mpirun -np "$n" --oversubscribe --bind-to none "$build/bin/odc-train" --set "data.train=$work/data.jsonl" \
    --set "model.config=$model" --set data.minibatch_size=$((8 / n)) --set train.steps=2 \
    --set train.comm=collective --set train.log_level=warn --set "train.metrics_file=$work/m$n-{rank}.jsonl"
done
/usr/bin/python3 - "$work" <<'PY'
import json, sys, glob
work = sys.argv[1]
base = None
for n in (1, 2, 4):
    recs = [json.loads(open(f).read().splitlines()[-1]) for f in sorted(glob.glob(f"{work}/m{n}-*.jsonl"))]
    shard = max(r["param_state_bytes"] for r in recs)
    rss = max(r["peak_rss_bytes"] for r in recs)
    if base is None:
        base = (shard, rss)
    print(json.dumps({"bench": "memory_scaling", "ranks": n, "param_state_bytes_per_rank": shard,
                      "param_state_ratio_vs_1": round(shard / base[0], 4), "peak_rss_bytes_max_rank": int(rss),
                      "peak_rss_ratio_vs_1": round(rss / base[1], 4)}))
PY
