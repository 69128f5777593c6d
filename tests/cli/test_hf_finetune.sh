#!/usr/bin/env bash
# The Hugging Face path end to end: odc-ckpt init writes a bf16 checkpoint; odc-train with
# model.checkpoint and 0 steps exports it bit-identically; 2 ranks fine-tune it under ODC and
# export; odc-eval shows the loss falling; bad --model / --data inputs are clear errors.
# Usage: test_hf_finetune.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

shape=(--set model.config.hidden_size=64 --set model.config.intermediate_size=128 --set model.config.num_hidden_layers=2
       --set model.config.num_attention_heads=4 --set model.config.num_key_value_heads=2 --set model.config.vocab_size=32)
"$bin/odc-ckpt" init --out "$work/init" "${shape[@]}" --dtype bf16 >"$work/init.log" 2>&1 || fail "odc-ckpt init: $(cat "$work/init.log")"
"$bin/odc-data" synth --out "$work/data.jsonl" --num 400 --vocab 32 --max-length 96 --mean-length 40 --seed 3 >/dev/null

# Round trip: load, train 0 steps, export in the source dtype -> the same bytes.
"$bin/odc-train" --set "data.train=$work/data.jsonl" --set "model.checkpoint=$work/init" --set train.steps=0 \
  --set "checkpoint.export_hf=$work/roundtrip" --set train.peak_flops=1e10 >"$work/rt.log" 2>&1 || fail "0-step export: $(tail -3 "$work/rt.log")"
/usr/bin/python3 - "$work/init/model.safetensors" "$work/roundtrip/model.safetensors" <<'PY' || fail "round trip changed tensors"
import json, struct, sys
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
same = a.keys() == b.keys() and all(a[k] == b[k] for k in a)
print(f"round trip: {len(a)} tensors, bit-identical: {same}")
sys.exit(0 if same else 1)
PY

# Fine-tune on 2 ranks (ODC) and export.
mpirun -np 2 --oversubscribe --bind-to none "$bin/odc-train" --set "data.train=$work/data.jsonl" \
  --set "model.checkpoint=$work/init" --set train.steps=40 --set train.lr=3e-3 --set data.minibatch_size=8 \
  --set "checkpoint.export_hf=$work/tuned" --set "checkpoint.dir=$work/ckpt" --set train.peak_flops=1e10 \
  >"$work/train.log" 2>&1 || fail "fine-tuning: $(tail -5 "$work/train.log")"
before=$("$bin/odc-eval" --model "$work/init" --data "$work/data.jsonl" --max-sequences 200) || fail "odc-eval before"
after=$("$bin/odc-eval" --model "$work/tuned" --data "$work/data.jsonl" --max-sequences 200) || fail "odc-eval after"
echo "before: $before"
echo "after:  $after"
/usr/bin/python3 -c "
import json, sys
b, a = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert a['tokens'] == b['tokens'] > 0, 'different token counts'
assert a['loss'] < 0.9 * b['loss'], f'loss did not fall by 10%: {b[\"loss\"]} -> {a[\"loss\"]}'
assert abs(a['perplexity'] - __import__('math').exp(a['loss'])) < 1e-9 * a['perplexity']
" "$before" "$after" || fail "evaluation did not show the fine-tuning"
grep -q '"torch_dtype": "bfloat16"' "$work/tuned/config.json" || fail "export did not keep the source dtype"

# odc-ckpt export of the run's native checkpoint (2 ranks' shards) = the trainer's own export.
"$bin/odc-ckpt" export --from "$work/ckpt/step-00000040" --out "$work/from-native" --dtype bf16 >"$work/export.log" 2>&1 ||
  fail "odc-ckpt export: $(cat "$work/export.log")"
cmp -s "$work/tuned/model.safetensors" "$work/from-native/model.safetensors" || fail "odc-ckpt export differs from the trainer's export"
# odc-ckpt import: a native step-0 checkpoint for 2 ranks that a run resumes from.
"$bin/odc-ckpt" import --from "$work/init" --out "$work/imported" --world-size 2 >"$work/import.log" 2>&1 ||
  fail "odc-ckpt import: $(cat "$work/import.log")"
mpirun -np 2 --oversubscribe --bind-to none "$bin/odc-train" --set "data.train=$work/data.jsonl" \
  --set "model.checkpoint=$work/init" --set train.steps=2 --set "checkpoint.dir=$work/imported" --set train.peak_flops=1e10 \
  >"$work/resume-imported.log" 2>&1 || fail "resuming from an imported checkpoint: $(tail -3 "$work/resume-imported.log")"
grep -q "resumed from $work/imported/step-00000000" "$work/resume-imported.log" || fail "the run did not resume from the import"

# Bad input: usage errors exit 2, bad files exit 1 naming the culprit.
"$bin/odc-eval" --data "$work/data.jsonl" >/dev/null 2>"$work/e1.err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--model" "$work/e1.err" || fail "odc-eval without --model: exit $rc, $(cat "$work/e1.err")"
"$bin/odc-eval" --model "$work/nowhere" --data "$work/data.jsonl" >/dev/null 2>"$work/e2.err"; rc=$?
[ $rc -eq 1 ] && grep -q "nowhere" "$work/e2.err" || fail "odc-eval with a missing model: exit $rc, $(cat "$work/e2.err")"
"$bin/odc-eval" --model "$work/tuned" --data "$work/data.jsonl" --bogus 1 >/dev/null 2>"$work/e3.err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--bogus" "$work/e3.err" || fail "odc-eval with an unknown option: exit $rc"
"$bin/odc-generate" --model "$work/tuned" --prompt "hi" >/dev/null 2>"$work/g1.err"; rc=$?
[ $rc -eq 1 ] && grep -q "tokenizer.json" "$work/g1.err" || fail "odc-generate without a tokenizer: exit $rc, $(cat "$work/g1.err")"
# Generation options out of range and a prompt beyond the model's context: exit 1 naming the
# option (NaN temperature once sampled garbage, -1 new tokens and an over-long prompt printed
# nothing, all with exit 0).
/usr/bin/python3 "$(dirname "$0")/../../tools/make_demo_chat.py" --out "$work/chat" --num 10 --merges 10 --seed 1 >/dev/null
gen=("$bin/odc-generate" --model "$work/tuned" --tokenizer "$work/chat/tokenizer/tokenizer.json")
expect_generate_error() {
  local name="$1" needle="$2"; shift 2
  "${gen[@]}" "$@" >/dev/null 2>"$work/gen.err"; rc=$?
  [ $rc -eq 1 ] && grep -qF -- "$needle" "$work/gen.err" || fail "odc-generate $name: exit $rc, $(cat "$work/gen.err")"
}
# Option values out of range are command-line mistakes (exit 2), found before the model is read.
"${gen[@]}" --prompt hi --temperature -1 >/dev/null 2>"$work/gen.err"; rc=$?
[ $rc -eq 2 ] && grep -qF -- "--temperature must be >= 0, got -1" "$work/gen.err" ||
  fail "odc-generate temperature below 0: exit $rc, $(cat "$work/gen.err")"
# NaN and infinity are no numbers to the command line (exit 2); the library's own check (above)
# also rejects them for its other callers.
"${gen[@]}" --prompt hi --temperature nan >/dev/null 2>"$work/gen.err"; rc=$?
[ $rc -eq 2 ] && grep -qF -- "--temperature expects a number, got 'nan'" "$work/gen.err" ||
  fail "odc-generate temperature nan: exit $rc, $(cat "$work/gen.err")"
"${gen[@]}" --prompt hi --max-new-tokens -1 >/dev/null 2>"$work/gen.err"; rc=$?
[ $rc -eq 2 ] && grep -qF -- "--max-new-tokens must be >= 0, got -1" "$work/gen.err" ||
  fail "odc-generate max-new-tokens -1: exit $rc, $(cat "$work/gen.err")"
long_prompt=$(printf 'x%.0s ' $(seq 1 4200))
expect_generate_error "prompt beyond the context" "more than the model's context of 4096" --prompt "$long_prompt"
# odc-ckpt export over an existing HF directory keeps its tokenizer files and its dtype (they were
# deleted, and bf16 became f32): re-exporting step 40 over the bf16 export gives the same bytes.
cp "$work/chat/tokenizer/tokenizer.json" "$work/chat/tokenizer/tokenizer_config.json" "$work/from-native/"
"$bin/odc-ckpt" export --from "$work/ckpt/step-00000040" --out "$work/from-native" >"$work/reexport.log" 2>&1 ||
  fail "odc-ckpt export over an HF directory: $(cat "$work/reexport.log")"
for f in tokenizer.json tokenizer_config.json; do
  cmp -s "$work/chat/tokenizer/$f" "$work/from-native/$f" || fail "re-export: $f not kept"
done
grep -q '"torch_dtype": "bfloat16"' "$work/from-native/config.json" || fail "re-export: dtype not kept: $(grep dtype "$work/from-native/config.json")"
cmp -s "$work/tuned/model.safetensors" "$work/from-native/model.safetensors" || fail "re-export: weights differ from the bf16 export"
"$bin/odc-train" --set "data.train=$work/data.jsonl" --set "model.checkpoint=$work/nowhere" >/dev/null 2>"$work/t1.err"; rc=$?
[ $rc -eq 1 ] && grep -q "nowhere/config.json" "$work/t1.err" || fail "odc-train with a missing checkpoint: exit $rc, $(cat "$work/t1.err")"

finish_test "HF checkpoint: bit-identical round trip, fine-tune on 2 ranks, export, eval"
