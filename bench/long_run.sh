#!/usr/bin/env bash
# Long-run stability: trains the demo chat model (scripts/demo.sh's data and model, 2 ranks, ODC)
# for STEPS steps with per-rank metrics, then checks with bench/long_run.py that nothing the
# processes hold grows after warm-up: resident set, pinned and UCX-registered memory (< 1%),
# open descriptors, threads and UCX endpoints (exactly flat). Exit status: the analysis's.
# Outputs in OUT_DIR: metrics-{rank}.jsonl, train.log, analysis.jsonl, long-run.png.
# Runtime: about 10 minutes for 2000 steps on an idle 2-core machine. Builds nothing.
# Usage: bench/long_run.sh [STEPS=2000] [OUT_DIR=build-long-run]   (BUILD_DIR=... default: build)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps="${1:-2000}"
out="${2:-$root/build-long-run}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
build="${BUILD_DIR:-$root/build}"
for tool in odc-train odc-ckpt; do
  [[ -x "$build/bin/$tool" ]] || { echo "long_run.sh: $build/bin/$tool not found; build it first" >&2; exit 2; }
done

# The demo's data and model, as scripts/demo.sh makes them (it has no functions to call).
if [[ ! -f "$out/data/chat.jsonl" || ! -f "$out/base/config.json" ]]; then
  summary=$(/usr/bin/python3 "$root/tools/make_demo_chat.py" --out "$out/data" --num 8000 --seed 1)
  vocab=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["vocab_size"])' "$summary")
  rm -rf "$out/base"
  "$build/bin/odc-ckpt" init --out "$out/base" --set model.config.vocab_size="$vocab" --dtype bf16 \
    --tokenizer "$out/data/tokenizer" --seed 0 >/dev/null
fi

rm -f "$out"/metrics-*.jsonl
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun -np 2 --oversubscribe --bind-to none "$build/bin/odc-train" "$root/configs/demo-chat.yaml" \
  --set model.checkpoint="$out/base" --set data.train="$out/data/chat.jsonl" \
  --set train.comm=odc --set train.steps="$steps" --set train.threads=1 --set train.log_every=100 \
  --set train.metrics_file="$out/metrics-{rank}.jsonl" 2>&1 | tee "$out/train.log"

/usr/bin/python3 "$root/bench/long_run.py" "$out"/metrics-*.jsonl --expect-steps "$steps" \
  --plot "$out/long-run.png" | tee "$out/analysis.jsonl"
