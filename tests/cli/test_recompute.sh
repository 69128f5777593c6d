#!/usr/bin/env bash
# train.recompute under odc-train: selective and full recomputation train exactly what `none`
# trains, at 1, 2 and 4 ranks (ODC with deterministic gradient sums, and the collective baseline
# at 2), in float32 and the CPU bf16 mode: every step's loss and grad norm printed the same and
# the final checkpoint's weight and optimizer shards byte for byte the same.
# Usage: test_recompute.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$bin/odc-data" synth --out "$work/data.jsonl" --num 64 --max-length 80 --mean-length 30 --seed 5 > /dev/null
common=(--set "model.config={vocab_size: 64, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 3, num_attention_heads: 4, num_key_value_heads: 2}"
        --set "data.train=$work/data.jsonl" --set data.minibatch_size=4 --set data.max_tokens_per_microbatch=96
        --set train.steps=3 --set train.warmup_steps=1 --set train.peak_flops=1e12 --set comm.deterministic=true)

# run NAME NP ARGS...: odc-train on NP ranks into $work/NAME (metrics of rank 0, the final checkpoint).
run() {
  local name="$1" np="$2"
  shift 2
  local cmd=("$bin/odc-train" "${common[@]}" --set "checkpoint.dir=$work/$name/ckpt"
             --set "train.metrics_file=$work/$name/metrics-{rank}.jsonl" "$@")
  mkdir -p "$work/$name"
  if [ "$np" -gt 1 ]; then
    cmd=("${mpirun[@]}" -np "$np" "${cmd[@]}")
  fi
  timeout 300 "${cmd[@]}" > "$work/$name/log" 2>&1 || { fail "$name runs" "$(tail -20 "$work/$name/log")"; return 1; }
}

# The steps' figures that depend on the gradients (time and throughput do not).
figures() { /usr/bin/python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "step" in r and "loss" in r: print(r["step"], repr(r["loss"]), repr(r.get("grad_norm")))' "$1"; }
shards() { (cd "$1" && find . -name '*.safetensors' | sort | xargs sha256sum); }

for setting in "1 odc" "2 odc" "4 odc" "2 collective"; do
  read -r np comm <<< "$setting"
  for dtype in float32 bfloat16; do
    base="np$np-$comm-$dtype"
    run "$base-none" "$np" --set train.comm="$comm" --set model.dtype="$dtype" --set train.recompute=none || continue
    for mode in selective full; do
      name="$base-$mode"
      run "$name" "$np" --set train.comm="$comm" --set model.dtype="$dtype" --set train.recompute="$mode" || continue
      grep -q "activation recomputation $mode (train.recompute)" "$work/$name/log" \
        || fail "$name: the run says it recomputes" "$(grep -m1 'model:' "$work/$name/log")"
      a=$(figures "$work/$base-none/metrics-0.jsonl"); b=$(figures "$work/$name/metrics-0.jsonl")
      if [ -z "$a" ] || [ "$a" != "$b" ]; then
        fail "$name: the losses and grad norms of none" "none:"$'\n'"$a"$'\n'"$mode:"$'\n'"$b"
      elif [ "$(shards "$work/$base-none/ckpt")" != "$(shards "$work/$name/ckpt")" ] || [ -z "$(shards "$work/$name/ckpt")" ]; then
        fail "$name: the checkpoint shards of none" "$(diff <(shards "$work/$base-none/ckpt") <(shards "$work/$name/ckpt"))"
      else
        echo "ok   [$name] $(echo "$b" | wc -l) steps' losses and grad norms, and $(shards "$work/$name/ckpt" | wc -l) shard files, bitwise those of none"
      fi
    done
  done
done

finish_test "test_recompute"
