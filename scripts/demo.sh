#!/usr/bin/env bash
# The main job on its embedded default: set-up, build, then the whole fine-tuning path on the CPU:
# generate chat SFT data and a tokenizer (tools/make_demo_chat.py: string tasks a small model can
# learn), write a randomly initialized Hugging Face-layout model (odc-ckpt init), show what it
# answers, fine-tune it with ODC on 2 ranks under mpirun (loss on assistant turns only), export
# the result as a Hugging Face directory, and show the answers, the held-out accuracy (200 fresh
# prompts, greedy, exact match; tools/demo_accuracy.py) and the loss again.
# Outputs in demo-out/: metrics.jsonl, loss.png, base/ and sft/ (HF checkpoints with tokenizer).
# Extra arguments are passed to odc-train (e.g. --set train.steps=100).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ODC_BUILD_DIR:-$root/build}"
out="${ODC_DEMO_DIR:-$root/demo-out}"
ranks="${ODC_DEMO_RANKS:-2}"

"$root/scripts/build.sh"
mkdir -p "$out"
summary=$(/usr/bin/python3 "$root/tools/make_demo_chat.py" --out "$out" --num 8000 --seed 1 --heldout 200)
vocab=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["vocab_size"])' "$summary")
"$build/bin/odc-ckpt" init --out "$out/base" --set model.config.vocab_size="$vocab" --dtype bf16 \
  --tokenizer "$out/tokenizer" --seed 0

prompts=("reverse: apple" "repeat: tiger" "sort: lemon" "length: banana")
answers() {  # MODEL_DIR
  for prompt in "${prompts[@]}"; do
    printf '  %-16s -> %s\n' "$prompt" "$("$build/bin/odc-generate" --model "$1" --chat --prompt "$prompt" --max-new-tokens 12)"
  done
  /usr/bin/python3 "$root/tools/demo_accuracy.py" --build "$build" --model "$1" --prompts "$out/prompts-heldout.jsonl" \
    --out "$out/heldout-$(basename "$1").jsonl"
}
echo "== before fine-tuning ($out/base) =="
answers "$out/base"
"$build/bin/odc-eval" --model "$out/base" --data "$out/chat.jsonl" --format chat --max-sequences 1000 | tee "$out/eval-before.json"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
"$build/bin/odc-run" -np "$ranks" --oversubscribe --bind-to none "$build/bin/odc-train" "$root/configs/demo-chat.yaml" \
  --set model.checkpoint="$out/base" --set data.train="$out/chat.jsonl" \
  --set checkpoint.export_hf="$out/sft" --set train.metrics_file="$out/metrics.jsonl" "$@"

echo "== after fine-tuning ($out/sft) =="
answers "$out/sft"
"$build/bin/odc-eval" --model "$out/sft" --data "$out/chat.jsonl" --format chat --max-sequences 1000 | tee "$out/eval-after.json"
/usr/bin/python3 "$root/tools/plot_metrics.py" "$out/metrics.jsonl" --out "$out/loss.png" --check-decrease
