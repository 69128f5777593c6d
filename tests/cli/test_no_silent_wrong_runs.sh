#!/usr/bin/env bash
# Inputs that once ran to the end with exit 0 and a wrong or empty result (issue 32, "no silent
# wrong runs") are refused up front, naming what is wrong and where:
#   an HF checkpoint with a NaN or inf weight (odc-eval printed {"loss": null}, odc-train blamed train.lr),
#   a model whose loss overflows (odc-eval printed a null loss with exit 0),
#   a training set without a single target token (trained to the end, loss 0),
#   checkpoint.export_hf naming model.checkpoint's directory (replaced the base model).
# Usage: test_no_silent_wrong_runs.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# expect_error NAME TOOL SUBSTRING... -- ARGS: runs TOOL ARGS, requires exit 1, nothing on stdout
# and every SUBSTRING in stderr.
expect_error() {
  local name="$1"; shift
  local tool="$1"; shift
  local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  local out err rc
  err=$(timeout 120 "$bin/$tool" "$@" 2>&1 >"$work/stdout"); rc=$?
  out=$(cat "$work/stdout")
  if [ $rc -ne 1 ]; then
    echo "FAIL [$name]: exit code $rc (expected 1)"; echo "$err" | sed 's/^/    /'; echo "$out" | sed 's/^/    out: /'
    failures=$((failures + 1)); return
  fi
  if [ -n "$out" ]; then
    echo "FAIL [$name]: printed a result: $out"; failures=$((failures + 1)); return
  fi
  for needle in "${needles[@]}"; do
    if ! grep -qF -- "$needle" <<<"$err"; then
      echo "FAIL [$name]: message lacks '$needle':"; echo "$err" | sed 's/^/    /'
      failures=$((failures + 1)); return
    fi
  done
  echo "ok   [$name] exit $rc: $(head -c 240 <<<"$err" | tr '\n' ' ')"
}

# set_weight DIR TENSOR INDEX VALUE: overwrites one float32 element of a single-file checkpoint.
set_weight() {
  /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
d, name, index, value = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
path = d + "/model.safetensors"
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    info = header[name]
    assert info["dtype"] == "F32", info
    f.seek(8 + n + info["data_offsets"][0] + 4 * index)
    f.write(struct.pack("<f", value))
PY
}

shape=(--set model.config.vocab_size=64 --set model.config.hidden_size=16 --set model.config.intermediate_size=32
       --set model.config.num_hidden_layers=2 --set model.config.num_attention_heads=4
       --set model.config.num_key_value_heads=2)
if ! "$bin/odc-ckpt" init --out "$work/good" --dtype f32 "${shape[@]}" >/dev/null ||
   ! "$bin/odc-data" synth --out "$work/data.jsonl" --num 8 --vocab 64 --max-length 32 --mean-length 20 >/dev/null; then
  echo "FAIL [odc-ckpt init / odc-data synth]"; exit 1
fi
train=(--set "data.train=$work/data.jsonl" --set data.minibatch_size=2 --set train.steps=1)

# The good checkpoint evaluates and trains (so the cases below fail for the reason they name).
if out=$(timeout 120 "$bin/odc-eval" --model "$work/good" --data "$work/data.jsonl" 2>&1) && grep -q '"loss":[0-9]' <<<"$out"; then
  echo "ok   [good checkpoint evaluates] $out"
else
  echo "FAIL [good checkpoint evaluates]: $out"; failures=$((failures + 1))
fi
if out=$(timeout 120 "$bin/odc-train" "${train[@]}" --set "model.checkpoint=$work/good" 2>&1); then
  echo "ok   [good checkpoint trains]"
else
  echo "FAIL [good checkpoint trains]:"; echo "$out" | tail -5 | sed 's/^/    /'; failures=$((failures + 1))
fi

# Row 8: one NaN (or inf) weight is refused at load, naming the tensor and the file.
cp -r "$work/good" "$work/nan"
set_weight "$work/nan" model.layers.1.mlp.up_proj.weight 5 nan
for tool in odc-eval odc-train; do
  args=(--model "$work/nan" --data "$work/data.jsonl")
  [ "$tool" = odc-train ] && args=("${train[@]}" --set "model.checkpoint=$work/nan")
  expect_error "$tool: NaN weight" "$tool" "tensor 'model.layers.1.mlp.up_proj.weight'" "$work/nan/model.safetensors" \
    "holds a non-finite weight (nan at element 5)" -- "${args[@]}"
done
cp -r "$work/good" "$work/inf"
set_weight "$work/inf" model.embed_tokens.weight 17 -inf
expect_error "odc-eval: inf weight" odc-eval "tensor 'model.embed_tokens.weight'" "non-finite weight (-inf at element 17)" -- \
  --model "$work/inf" --data "$work/data.jsonl"

# Row 8: finite weights whose loss overflows: an error, not {"loss": null} with exit 0.
cp -r "$work/good" "$work/huge"
for i in $(seq 0 15); do set_weight "$work/huge" model.norm.weight "$i" 3e38; done
expect_error "odc-eval: loss not finite" odc-eval "the loss of the model in '$work/huge'" "is not finite" \
  "first in sequences 0..7" -- --model "$work/huge" --data "$work/data.jsonl"

# Row 9: a training set without a single target token.
/usr/bin/python3 -c '
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        r = json.loads(line)
        r["loss_mask"] = [0] * len(r["input_ids"])
        out.write(json.dumps(r) + "\n")' "$work/data.jsonl" "$work/masked.jsonl"
expect_error "odc-train: no targets" odc-train "data.train: '$work/masked.jsonl' has no target tokens in its 8 sequences" \
  "every loss_mask is 0" "nothing to train on" -- "${train[@]}" --set "data.train=$work/masked.jsonl" \
  --set "model.checkpoint=$work/good"
expect_error "odc-train: max_length cuts every target" odc-train "or data.max_length 1 cut off every target" -- \
  "${train[@]}" --set "model.checkpoint=$work/good" --set data.max_length=1 --set data.over_length=truncate
expect_error "odc-eval: no targets (as before)" odc-eval "no target tokens to score" "every loss_mask is 0" -- \
  --model "$work/good" --data "$work/masked.jsonl"
# One-token sequences have no target (nothing precedes their token): said so, not "every loss_mask is 0".
printf '{"input_ids": [5]}\n{"input_ids": [7], "loss_mask": [1]}\n' >"$work/one-token.jsonl"
expect_error "odc-train: one-token sequences" odc-train "has no target tokens in its 2 sequences (every sequence is one token long" \
  "a one-token sequence has no target" "the first is $work/one-token.jsonl:1" "give each sequence two tokens or more" -- \
  "${train[@]}" --set "data.train=$work/one-token.jsonl" --set "model.checkpoint=$work/good" --set data.minibatch_size=1
cat "$work/masked.jsonl" "$work/one-token.jsonl" >"$work/mixed.jsonl"
expect_error "odc-eval: one-token and masked sequences" odc-eval "2 of them are one token long" \
  "the first is $work/mixed.jsonl:9" "and the other 8 have loss_mask 0 on every token after the first" -- \
  --model "$work/good" --data "$work/mixed.jsonl"

# Row 10: checkpoint.export_hf naming model.checkpoint's directory, under several spellings.
cp -r "$work/good" "$work/base"
before=$(cksum < "$work/base/model.safetensors")
ln -s "$work/base" "$work/base-link"
for spelling in "$work/base" "$work/base/" "$work/./base" "$work/base-link" "$work/other/../base"; do
  expect_error "export_hf = model.checkpoint ($spelling)" odc-train "checkpoint.export_hf ('$spelling', from --set)" \
    "and model.checkpoint ('$work/base', from --set) are the same directory" "would replace the base model" -- \
    "${train[@]}" --set "model.checkpoint=$work/base" --set "checkpoint.export_hf=$spelling"
done
pushd "$work" >/dev/null || exit 1
expect_error "export_hf = model.checkpoint (relative)" odc-train "are the same directory" -- \
  "${train[@]}" --set "model.checkpoint=$work/base" --set "checkpoint.export_hf=base"
popd >/dev/null || exit 1
if [ "$(cksum < "$work/base/model.safetensors")" != "$before" ]; then
  echo "FAIL [export_hf = model.checkpoint]: the base model was changed"; failures=$((failures + 1))
fi
# Another directory exports.
if out=$(timeout 120 "$bin/odc-train" "${train[@]}" --set "model.checkpoint=$work/base" \
           --set "checkpoint.export_hf=$work/base-tuned" 2>&1) && [ -f "$work/base-tuned/model.safetensors" ]; then
  echo "ok   [export_hf elsewhere]"
else
  echo "FAIL [export_hf elsewhere]:"; echo "$out" | tail -5 | sed 's/^/    /'; failures=$((failures + 1))
fi

finish_test "test_no_silent_wrong_runs"
