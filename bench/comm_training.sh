#!/usr/bin/env bash
# Training throughput of ODC against the collective baseline, same model (the demo's), same data
# and steps, 2 ranks with one compute thread each, in one run. Prints one JSON line per comm and a
# comparison line with the ratio and ODC's progress-thread CPU as a fraction of step time.
# Usage: bench/comm_training.sh [BUILD_DIR] [STEPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-60}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$build/bin/odc-data" synth --out "$work/data.jsonl" --num 8000 --vocab 32 --min-length 16 --max-length 192 \
  --mean-length 48 --sigma 0.8 --seed 1 >/dev/null
for comm in collective odc; do
  mpirun -np 2 --bind-to none "$build/bin/odc-train" "$root/configs/demo.yaml" --set "data.train=$work/data.jsonl" \
    --set train.steps="$steps" --set train.comm=$comm --set train.log_level=warn \
    --set "train.metrics_file=$work/$comm-{rank}.jsonl"
done
/usr/bin/python3 - "$work" "$steps" <<'PY'
import json, sys
work, steps = sys.argv[1], int(sys.argv[2])
out = {}
for comm in ("collective", "odc"):
    ranks = []
    for r in (0, 1):
        recs = [json.loads(l) for l in open(f"{work}/{comm}-{r}.jsonl")]
        ranks.append(recs)
    # Skip the first 5 steps (warm-up: buffers grow, pages fault in).
    warm = [recs[5:] for recs in ranks]
    time = max(sum(x["step_time_s"] for x in recs) for recs in warm)
    tokens = sum(x["tokens"] for x in warm[0])
    samples = sum(1 for _ in warm[0]) * 8  # minibatch_size per rank per step (configs/demo.yaml)
    cpu = [recs[-1]["comm_thread_cpu_s"] - recs[4]["comm_thread_cpu_s"] for recs in ranks]
    rec = {"bench": "comm_training", "comm": comm, "ranks": 2, "steps_timed": len(warm[0]),
           "tokens_per_s": round(tokens / time, 1), "samples_per_s_per_rank": round(samples / time, 3),
           "wait_in_loop_s": [round(sum(x["wait_in_loop_s"] for x in recs), 3) for recs in warm],
           "wait_end_s": [round(sum(x["wait_end_s"] for x in recs), 3) for recs in warm],
           "comm_thread_cpu_fraction": [round(c / time, 4) for c in cpu],
           "final_loss": ranks[0][-1]["loss"]}
    out[comm] = rec
    print(json.dumps(rec))
print(json.dumps({"bench": "comm_training", "comparison": "odc/collective",
                  "throughput_ratio": round(out["odc"]["tokens_per_s"] / out["collective"]["tokens_per_s"], 3),
                  "odc_comm_thread_cpu_fraction_max": max(out["odc"]["comm_thread_cpu_fraction"]),
                  "same_final_loss": abs(out["odc"]["final_loss"] - out["collective"]["final_loss"]) <= 1e-5 * abs(out["collective"]["final_loss"])}))
PY
