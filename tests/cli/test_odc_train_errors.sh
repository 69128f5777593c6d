#!/usr/bin/env bash
# odc-train on bad input: each case must exit non-zero with a message that names what is wrong and
# where (key path, file:line, length and cap, field). Usage: test_odc_train_errors.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# expect_error NAME SUBSTRING... -- ARGS: runs odc-train ARGS, requires exit 1 (bad input), no
# crash signal, and every SUBSTRING in stderr. expect_usage_error: the same for a command-line
# mistake, which exits 2 and prints the usage after the message.
expect_error() { expect_exit 1 "$@"; }
expect_usage_error() { expect_exit 2 "$@"; }
expect_exit() {
  local code="$1"; shift
  local name="$1"; shift
  local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  [ "$code" -eq 2 ] && needles+=("usage: odc-train")
  local out rc
  out=$(timeout 60 "$bin/odc-train" "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne "$code" ]; then
    echo "FAIL [$name]: exit code $rc (expected $code)"; echo "$out" | sed 's/^/    /'
    failures=$((failures + 1)); return
  fi
  for needle in "${needles[@]}"; do
    if ! grep -qF -- "$needle" <<<"$out"; then
      echo "FAIL [$name]: message lacks '$needle':"; echo "$out" | sed 's/^/    /'
      failures=$((failures + 1)); return
    fi
  done
  echo "ok   [$name] exit $rc: $(head -c 200 <<<"$out" | tr '\n' ' ')"
}

cat > "$work/good.jsonl" <<'JSONL'
{"input_ids": [1, 4, 9, 10, 2, 9, 10, 3], "loss_mask": [0, 0, 0, 0, 0, 1, 1, 1]}
{"input_ids": [1, 5, 11, 12, 13, 2, 13, 12, 11, 3]}
{"input_ids": [1, 6, 14, 2, 14, 3], "loss_mask": [0, 0, 0, 0, 1, 1]}
JSONL
printf '{"input_ids": [1, 2, 3]}\n{"input_ids": [1, 2,, 3]}\n' > "$work/malformed.jsonl"
printf '{"input_ids": [1, 2, 3]}\n{"input_ids": [1, 64, 3]}\n' > "$work/big_id.jsonl"
small=(--set "model.config={vocab_size: 64, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 4, num_key_value_heads: 2}")
base=(--set "data.train=$work/good.jsonl" --set data.minibatch_size=2 --set train.steps=1 "${small[@]}")

printf 'train:\n  lr: 0.001\n  stesp: 10\n' > "$work/mistyped.yaml"
expect_error "mistyped key" "train.stesp" "mistyped.yaml" -- "$work/mistyped.yaml" "${base[@]}"
printf 'trainer:\n  steps: 10\n' > "$work/unknown_section.yaml"
expect_error "unknown section" "trainer" "unknown_section.yaml" -- "$work/unknown_section.yaml" "${base[@]}"
expect_error "unknown --set key" "data.minibatchsize" "--set" -- "${base[@]}" --set data.minibatchsize=3
expect_error "wrong value type" "train.steps" -- "${base[@]}" --set train.steps=many
expect_error "bad choice" "train.schedule" "cosine" -- "${base[@]}" --set train.schedule=exp
expect_error "missing required key" "data.train" -- --set train.steps=1
printf 'train:\n  lr: [oops\n' > "$work/syntax.yaml"
expect_error "YAML syntax error" "syntax.yaml" -- "$work/syntax.yaml" "${base[@]}"
expect_error "missing config file" "nope.yaml" -- "$work/nope.yaml"
expect_error "malformed JSONL line" "malformed.jsonl:2" -- "${base[@]}" --set "data.train=$work/malformed.jsonl"
expect_error "token id >= vocab_size" "big_id.jsonl:2" "64" -- "${base[@]}" --set "data.train=$work/big_id.jsonl"
expect_error "min_lr above lr" "train.min_lr (0.0003) is above train.lr (0.0001)" -- "${base[@]}" --set train.lr=1e-4
# A 32-bit model field given 2^32 + 1 once wrapped to 1 and trained a 1-layer model.
expect_error "layer count beyond 32 bits" "'num_hidden_layers' is 4294967297, outside the range" -- "${base[@]}" \
  --set model.config.num_hidden_layers=4294967297
expect_error "head count beyond 32 bits" "'num_attention_heads' is 4294967300, outside the range" -- "${base[@]}" \
  --set model.config.num_attention_heads=4294967300
# bf16 gathers would round the weights that fp32 compute uses unrounded.
expect_error "bf16 gathers with fp32 compute" "comm.gather_dtype bf16 rounds the gathered weights to bf16" "set model.dtype: bfloat16" \
  -- "${base[@]}" --set comm.gather_dtype=bf16
expect_error "unknown comm transport" "comm.transport" -- "${base[@]}" --set comm.transport=tcp
expect_error "missing data file" "absent.jsonl" -- "${base[@]}" --set "data.train=$work/absent.jsonl"
expect_error "sequence longer than the cap" "length 10" "data.max_tokens_per_microbatch = 8" -- \
  "${base[@]}" --set data.max_tokens_per_microbatch=8
expect_error "hidden not divisible by heads" "hidden_size 30 is not divisible by num_attention_heads 4" -- \
  "${base[@]}" --set model.config.hidden_size=30
expect_error "kv heads not dividing heads" "num_key_value_heads 3 does not divide num_attention_heads 4" -- \
  "${base[@]}" --set model.config.num_key_value_heads=3
expect_error "unknown model field" "model.config" "hiden_size" -- "${base[@]}" --set model.config.hiden_size=32
# The keys that say one thing two ways: both set is an error naming both and where each came from.
expect_error "both batch keys" "data.minibatch_size (2, from --set) and data.global_batch_size (4, from --set) are both set" \
  "--set data.minibatch_size=" -- "${base[@]}" --set data.global_batch_size=4
expect_error "both steps and epochs" "train.steps (1, from --set) and train.epochs (2, from --set) are both set" -- \
  "${base[@]}" --set train.epochs=2
expect_error "both warmup keys" "train.warmup_steps (3, from --set) and train.warmup_ratio (0.1, from --set) are both set" -- \
  "${base[@]}" --set train.warmup_steps=3 --set train.warmup_ratio=0.1
expect_error "global batch larger than the data" "the global batch is 5 sequences per step (data.global_batch_size)" \
  "holds only 3" -- "${base[@]}" --set data.minibatch_size= --set data.global_batch_size=5
# data.max_length: a longer sequence names file:line, its length and the limit; drop of everything is an error.
expect_error "sequence longer than data.max_length" "good.jsonl:2: the sequence has 10 tokens, more than data.max_length = 8" \
  "record 1 of the dataset" "data.over_length: truncate" -- "${base[@]}" --set data.max_length=8
expect_error "max_length drops every sequence" "every one of its 3 sequences is longer than data.max_length = 5" -- \
  "${base[@]}" --set data.max_length=5 --set data.over_length=drop
expect_error "decay_ratio without wsd" "train.decay_ratio (from --set) shapes only train.schedule wsd" -- \
  "${base[@]}" --set train.decay_ratio=0.2
expect_error "over_length without max_length" "data.over_length (from --set) says what a sequence longer than" \
  "data.max_length is 0 (no limit)" -- "${base[@]}" --set data.over_length=truncate
expect_error "warmup ratio above 1" "config key 'train.warmup_ratio' in --set must be in [0, 1], found 2" -- \
  "${base[@]}" --set train.warmup_steps= --set train.warmup_ratio=2
expect_usage_error "unknown flag" "odc-train: unknown option '--frobnicate'" -- --frobnicate
expect_usage_error "misspelled flag" "unknown option '--dump_config'; did you mean '--dump-config'?" -- --dump_config
expect_usage_error "two config files" "only one config file may be given" -- "$work/mistyped.yaml" "$work/mistyped.yaml"
expect_usage_error "--set without =" "--set expects key=value" -- "${base[@]}" --set train.lr

# Values outside their declared range stop at config load, naming the key, the range, the value and
# where it came from (the trainer's own checks behind them are never reached).
expect_error "threads below its range" "config key 'train.threads' in --set must be in [1, 1024], found 0" -- \
  "${base[@]}" --set train.threads=0
expect_error "minibatch size below 1" "config key 'data.minibatch_size' in --set must be >= 1, found 0" -- \
  "${base[@]}" --set data.minibatch_size=0
expect_error "negative token cap" "config key 'data.max_tokens_per_microbatch' in --set must be >= 0, found -1" -- \
  "${base[@]}" --set data.max_tokens_per_microbatch=-1
expect_error "packing ratio not positive" "config key 'data.packing_ratio' in --set must be > 0, found 0" -- \
  "${base[@]}" --set data.packing_ratio=0
expect_error "timeout not positive" "config key 'comm.timeout_s' in --set must be > 0, found 0" -- \
  "${base[@]}" --set comm.timeout_s=0
expect_error "negative steps" "config key 'train.steps' in --set must be >= 0, found -1" -- "${base[@]}" --set train.steps=-1
expect_error "negative warmup" "config key 'train.warmup_steps' in --set must be >= 0, found -2" -- \
  "${base[@]}" --set train.warmup_steps=-2
expect_error "negative checkpoint cadence" "config key 'checkpoint.every' in --set must be >= 0, found -1" -- \
  "${base[@]}" --set checkpoint.every=-1
expect_error "negative checkpoints kept" "config key 'checkpoint.keep' in --set must be in [0, 2147483647], found -1" -- \
  "${base[@]}" --set checkpoint.keep=-1
expect_error "negative trace steps" "config key 'train.trace_steps' in --set must be >= 0, found -1" -- \
  "${base[@]}" --set train.trace_steps=-1
expect_error "negative peak FLOP/s" "config key 'train.peak_flops' in --set must be >= 0, found -1e9" -- \
  "${base[@]}" --set train.peak_flops=-1e9
expect_error "negative stop step" "config key 'train.stop_at_step' in --set must be >= 0, found -1" -- \
  "${base[@]}" --set train.stop_at_step=-1
expect_error "learning rate not positive" "config key 'train.lr' in --set must be > 0, found 0" -- "${base[@]}" --set train.lr=0
printf 'train:\n  lr: 0.001\n  beta1: 1.0\n' > "$work/beta1.yaml"
expect_error "beta1 of 1 in a file" "config key 'train.beta1' in $work/beta1.yaml:3 must be in [0, 1), found 1.0" -- \
  "$work/beta1.yaml" "${base[@]}"
ODC_TRAIN_EPS=0 expect_error "epsilon from the environment" \
  "config key 'train.eps' in environment ODC_TRAIN_EPS must be > 0, found 0" -- "${base[@]}"

# Native checkpoints that cannot be resumed here, and a checkpoint directory that cannot be created.
# The checkpoints are imported (odc-ckpt import) from a tiny HF model whose hidden size (16) differs
# from the run's (32).
hf_shape=(--set model.config.vocab_size=64 --set model.config.hidden_size=16 --set model.config.intermediate_size=32
          --set model.config.num_hidden_layers=1 --set model.config.num_attention_heads=4 --set model.config.num_key_value_heads=2)
if "$bin/odc-ckpt" init --out "$work/hf16" "${hf_shape[@]}" >/dev/null 2>&1 &&
   "$bin/odc-ckpt" import --from "$work/hf16" --out "$work/ws2" --world-size 2 >/dev/null 2>&1 &&
   "$bin/odc-ckpt" import --from "$work/hf16" --out "$work/ws1" --world-size 1 >/dev/null 2>&1; then
  # A checkpoint of another world size is resharded (tests/cli/test_reshard.sh), an import as well.
  if out=$(timeout 60 "$bin/odc-train" --set "data.train=$work/good.jsonl" --set data.minibatch_size=2 --set train.steps=1 \
             --set "model.checkpoint=$work/hf16" --set "checkpoint.dir=$work/ws2" 2>&1) &&
     grep -q "written with comm any by 2 ranks, resharded onto 1" <<<"$out"; then
    echo "ok   [checkpoint of another world size] resharded"
  else
    echo "FAIL [checkpoint of another world size]: not resharded:"; echo "$out" | tail -3 | sed 's/^/    /'
    failures=$((failures + 1))
  fi
  expect_error "checkpoint of another model" "holds a different model" -- "${base[@]}" --set "checkpoint.dir=$work/ws1"
  rm -f "$work/ws1/step-00000000/rank-00000.safetensors"
  expect_error "checkpoint rank shard missing" "rank-00000.safetensors" "cannot open" -- \
    --set "data.train=$work/good.jsonl" --set data.minibatch_size=2 --set train.steps=1 \
    --set "model.checkpoint=$work/hf16" --set "checkpoint.dir=$work/ws1"
  # Text data tokenized with model.checkpoint's tokenizer.json, which hf16 does not have.
  expect_error "tokenizer of model.checkpoint missing" "data.format text tokenizes with model.checkpoint's tokenizer, but" \
    "hf16/tokenizer.json' does not exist" "set data.tokenizer" -- --set "data.train=$work/good.jsonl" --set data.format=text \
    --set data.minibatch_size=2 --set train.steps=1 --set "model.checkpoint=$work/hf16"
  # --dump-config with a checkpoint shows the checkpoint's shape, not model.config's defaults.
  if ! "$bin/odc-train" --set "data.train=$work/good.jsonl" --set "model.checkpoint=$work/hf16" --dump-config 2>&1 |
     grep -q "^# {.*\"hidden_size\":16"; then
    echo "FAIL [dump-config with a checkpoint]: the checkpoint's hidden_size 16 is not shown"; failures=$((failures + 1))
  fi
  # model.config next to model.checkpoint was silently ignored (the checkpoint's config.json wins).
  expect_error "model.config with model.checkpoint" "model.config (from default + --set) sets" "hidden_size: 32 (the checkpoint's: 16)" \
    "defines the model by its config.json" -- "${base[@]}" --set "model.checkpoint=$work/hf16"
  # Finite weights whose activations overflow (q and k x 1e20): the first step's loss is NaN before
  # any update, which blamed train.lr; the error names the model instead.
  "$bin/odc-ckpt" init --out "$work/ovf" --dtype f32 "${hf_shape[@]}" >/dev/null 2>&1
  /usr/bin/python3 - "$work/ovf/model.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    for name, info in json.loads(f.read(n)).items():
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            begin, end = info["data_offsets"]
            f.seek(8 + n + begin)
            values = struct.unpack(f"<{(end - begin) // 4}f", f.read(end - begin))
            f.seek(8 + n + begin)
            f.write(struct.pack(f"<{len(values)}f", *[v * 1e20 for v in values]))
PY
  expect_error "overflowing model at the first step" "step 1: loss (nan)" \
    "is not finite at the run's first step, before any update (so not because of train.lr): the model in '$work/ovf' (model.checkpoint)" \
    -- --set "data.train=$work/good.jsonl" --set data.minibatch_size=2 --set train.steps=1 --set "model.checkpoint=$work/ovf"
else
  echo "FAIL [odc-ckpt init/import for the checkpoint cases]"; failures=$((failures + 1))
fi
# Outputs written only at the end are checked before training (they were found after it, losing
# the run): a trace file or an HF export under a regular file, a trace path that is a directory.
expect_error "trace file cannot be written" "train.trace_file: cannot write" "good.jsonl/trace.json" -- \
  "${base[@]}" --set "train.trace_file=$work/good.jsonl/trace.json"
expect_error "trace file is a directory" "train.trace_file:" "is a directory" -- "${base[@]}" --set "train.trace_file=$work"
expect_error "HF export cannot be created" "checkpoint.export_hf: cannot create" "good.jsonl/hf" "is not a directory" -- \
  "${base[@]}" --set "checkpoint.export_hf=$work/good.jsonl/hf"
# The probe leaves nothing behind: a run that fails later (no data) has not created the export's
# directories (an empty export directory would make the next run refuse to replace it).
expect_error "probe leaves no export directory" "absent.jsonl" -- "${base[@]}" \
  --set "data.train=$work/absent.jsonl" --set "checkpoint.export_hf=$work/hf-new/model"
if [ -e "$work/hf-new" ]; then echo "FAIL [probe]: $work/hf-new was created"; failures=$((failures + 1)); fi
expect_error "checkpoint dir cannot be created" "checkpoint: cannot create" "good.jsonl/ckpt" -- \
  "${base[@]}" --set "checkpoint.dir=$work/good.jsonl/ckpt"

# And the good input trains (exit 0), so the cases above fail for the reason they name.
if out=$(timeout 120 "$bin/odc-train" "${base[@]}" 2>&1); then
  echo "ok   [good input trains]"
else
  echo "FAIL [good input trains]:"; echo "$out" | sed 's/^/    /'; failures=$((failures + 1))
fi
if "$bin/odc-train" --help | grep -q "usage: odc-train"; then echo "ok   [--help]"; else echo "FAIL [--help]"; failures=$((failures + 1)); fi
# (Captured first: `grep -q` closing the pipe early would fail the pipeline under pipefail.)
dump=$("$bin/odc-train" "${base[@]}" --dump-config)
if grep -q "minibatch_size: 2" <<<"$dump"; then echo "ok   [--dump-config]"; else echo "FAIL [--dump-config]"; failures=$((failures + 1)); fi

# The cost-model calibration fits a non-negative quadratic on this machine, normalized to b = 1
# (or b = 0 when the timings are purely quadratic, which a loaded machine can produce).
if out=$(timeout 120 "$bin/odc-train" "${small[@]}" --set model.config.max_position_embeddings=512 --calibrate-cost) &&
   /usr/bin/python3 -c 'import json,sys; r=json.loads(sys.argv[1].splitlines()[0]); assert r["cost_a"] >= 0 and r["cost_b"] in (0.0, 1.0) and r["cost_a"] + r["cost_b"] > 0 and len(r["points"]) == 4, r' "$out"; then
  echo "ok   [--calibrate-cost] $(head -c 120 <<<"$out")"
else
  echo "FAIL [--calibrate-cost]: $out"; failures=$((failures + 1))
fi

finish_test "test_odc_train_errors"
