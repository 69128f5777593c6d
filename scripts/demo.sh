#!/usr/bin/env bash
# The main job on its embedded default: set-up, build, generate a synthetic SFT dataset (copy /
# reverse / sort / add with long-tailed lengths), fine-tune the default small LLaMA-style model on
# the CPU under mpirun, and show the loss falling (metrics in demo-out/metrics.jsonl, a loss-curve
# PNG in demo-out/loss.png). Extra arguments are passed to odc-train (e.g. --set train.steps=50).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ODC_BUILD_DIR:-$root/build}"
out="${ODC_DEMO_DIR:-$root/demo-out}"
ranks="${ODC_DEMO_RANKS:-2}"

"$root/scripts/build.sh"
mkdir -p "$out"
"$build/bin/odc-data" synth --out "$out/train.jsonl" --num 8000 --vocab 32 --min-length 16 \
  --max-length 192 --mean-length 48 --sigma 0.8 --seed 1

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
mpirun -np "$ranks" --oversubscribe --bind-to none "$build/bin/odc-train" "$root/configs/demo.yaml" \
  --set data.train="$out/train.jsonl" --set train.metrics_file="$out/metrics.jsonl" "$@"

/usr/bin/python3 "$root/tools/plot_metrics.py" "$out/metrics.jsonl" --out "$out/loss.png" --check-decrease
