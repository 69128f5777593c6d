#!/usr/bin/env bash
# odc-train --plan-memory's step estimate (train/plan/step_estimate.h) with the profile that
# gpu_model_throughput --cpu-tiny --profile writes: the estimate names the file as its rates'
# source and, at the profile's own shape, its microbatch is the profile's ops less those it moves
# or drops (one rank keeps the compute copies: their casts move to the step, their reuses cost
# nothing; the gradient norm and AdamW are the step's); a profile of another device kind, a
# malformed one and a missing one are refused naming the file and the field (exit 1); without a
# profile the rates are nominal (train.peak_flops here; a named GPU's datasheet with --plan-device).
# Usage: test_step_estimate.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

profile="$work/p.json"
"$bin/gpu_model_throughput" --cpu-tiny --layers 2 --seqs 2 --seq-len 128 --steps 2 --warmup 1 --profile "$profile" \
  > "$work/bench.jsonl" 2> "$work/bench.err" || fail "the CPU profile is taken" "$(tail -5 "$work/bench.err")"

# gpu_model_throughput --cpu-tiny's model (llama-1b's tiny stand-in, tied), in the CPU bf16 mode,
# at its 2 x 128 tokens.
plan=(--set "model.config={vocab_size: 512, hidden_size: 128, intermediate_size: 256, num_hidden_layers: 2, num_attention_heads: 2, num_key_value_heads: 1, head_dim: 64, tie_word_embeddings: true, max_position_embeddings: 2048}"
      --set model.dtype=bfloat16 --set data.max_tokens_per_microbatch=256 --set data.max_length=128
      --set train.peak_flops=1e12 --plan-memory)

out="$("$bin/odc-train" "${plan[@]}" --device-profile "$profile" 2>&1)"
if [ $? -ne 0 ] || ! echo "$out" | grep -q "step estimate at 256 tokens in 2 sequence(s), recompute none" \
   || ! echo "$out" | grep -qF "rates: measured: $profile (cpu-bf16"; then
  fail "--device-profile: the estimate with the profile as its source" "$out"
else
  echo "$out" | tail -1 | "$py" -c '
import json, sys
plan = json.loads(sys.stdin.read())
doc = json.load(open(sys.argv[1]))
e = plan["step_estimate"]
ops = {(o["name"], o["role"]): o["seconds"] for o in doc["ops"]}
moved = sum(s for (name, role), s in ops.items() if name in ("weights", "sum_of_squares", "adamw_step"))
want = doc["op_seconds"] - moved
ok = e["source"] == "profile" and abs(e["microbatch_seconds"] - want) <= 1e-6 * want and e["optimizer_seconds"] > 0
print("estimate: microbatch %.3f ms against the profile ops less the moved ones, %.3f ms" % (e["microbatch_seconds"] * 1e3, want * 1e3))
sys.exit(0 if ok else 1)' "$profile" || fail "the estimate takes the profile's rates as they are" "$(echo "$out" | tail -4)"
fi

out="$("$bin/odc-train" "${plan[@]}" --set model.device=cuda --device-profile "$profile" 2>&1)"
[ $? -eq 1 ] && echo "$out" | grep -qF "device profile $profile: the field 'device' is 'cpu' but the run computes on cuda" \
  || fail "a profile of another device kind is refused" "$out"
"$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); del d["ops"][3]["seconds"]; json.dump(d, open(sys.argv[2], "w"))' \
  "$profile" "$work/bad.json"
out="$("$bin/odc-train" "${plan[@]}" --device-profile "$work/bad.json" 2>&1)"
[ $? -eq 1 ] && echo "$out" | grep -qF "device profile $work/bad.json: the field 'ops[3].seconds' is missing" \
  || fail "a malformed profile is refused naming the field" "$out"
out="$("$bin/odc-train" "${plan[@]}" --device-profile "$work/absent.json" 2>&1)"
[ $? -eq 1 ] && echo "$out" | grep -qF "device profile $work/absent.json: cannot be read" \
  || fail "a missing profile is refused" "$out"

out="$("$bin/odc-train" "${plan[@]}" 2>&1)"
[ $? -eq 0 ] && echo "$out" | grep -q "rates: nominal: this CPU's peak 1000.0 GFLOP/s (train.peak_flops)" \
  || fail "without a profile: nominal rates from train.peak_flops" "$out"
out="$("$bin/odc-train" "${plan[@]}" --set model.device=cuda --plan-device h200 2>&1)"
[ $? -eq 0 ] && echo "$out" | grep -q "rates: nominal: h200 datasheet (989 TFLOP/s dense bf16, 4.80 TB/s)" \
  || fail "a GPU's nominal rates from its datasheet" "$out"
out="$("$bin/odc-train" "${plan[@]}" --set model.device=cuda --plan-device tpu 2>&1)"
[ $? -eq 1 ] && echo "$out" | grep -q "unknown device 'tpu'" || fail "an unknown --plan-device is refused" "$out"

finish_test "step estimate: all checks passed"
