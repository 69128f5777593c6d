#!/usr/bin/env bash
# Tool edges (issue rows 13, 19 and row 1's leftovers): option values are usage errors (exit 2)
# before any model is read, an empty --prompt generates from BOS, --threads is bounded, a dataset
# path that is a directory or a checkpoint of the other format is named as such, unknown record
# fields are refused by odc-eval and odc-sim too (data.extra_fields), odc-eval warns of sequences past
# the model's context (and counts them), and a metrics file that
# cannot be written (disk full: /dev/full) ends the run only after a checkpoint of the step;
# warnings the same on every rank are printed once, naming steps 1-based.
# Usage: test_tool_edges.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# check NAME TOOL RC SUBSTRING... -- ARGS: runs TOOL ARGS, requires exit RC and every SUBSTRING in
# stderr (stdout for RC 0).
check() {
  local name="$1" tool="$2" want="$3"; shift 3
  local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  local rc
  timeout 120 "$bin/$tool" "$@" >"$work/out" 2>"$work/err"; rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL [$name]: exit $rc (expected $want)"; sed 's/^/    /' "$work/err" | head -5
    failures=$((failures + 1)); return
  fi
  local stream="$work/err"; [ "$want" -eq 0 ] && stream="$work/out"
  for needle in "${needles[@]}"; do
    [ -z "$needle" ] && continue
    if ! grep -qF -- "$needle" "$stream"; then
      echo "FAIL [$name]: lacks '$needle':"; sed 's/^/    /' "$stream" | head -5
      failures=$((failures + 1)); return
    fi
  done
  echo "ok   [$name] exit $rc"
}

shape=(--set model.config.vocab_size=64 --set model.config.hidden_size=16 --set model.config.intermediate_size=32
       --set model.config.num_hidden_layers=2 --set model.config.num_attention_heads=4
       --set model.config.num_key_value_heads=2)
if ! "$bin/odc-ckpt" init --out "$work/hf" --dtype f32 "${shape[@]}" >/dev/null ||
   ! "$bin/odc-data" synth --out "$work/data.jsonl" --num 8 --vocab 64 --max-length 32 --mean-length 20 >/dev/null; then
  echo "FAIL [odc-ckpt init / odc-data synth]"; exit 1
fi
model=(--model "$work/hf")
data=(--data "$work/data.jsonl")

# --- odc-eval: every numeric option is a usage error when out of range ---
check "eval --max-sequences -1" odc-eval 2 "--max-sequences must be >= 0, got -1" -- "${model[@]}" "${data[@]}" --max-sequences -1
check "eval --max-tokens 0" odc-eval 2 "--max-tokens must be >= 1, got 0" -- "${model[@]}" "${data[@]}" --max-tokens 0
check "eval --threads 10000" odc-eval 2 "--threads must be" "got 10000" -- "${model[@]}" "${data[@]}" --threads 10000
hw=$(nproc --all)
if [ $((4 * hw + 1)) -le 1024 ]; then
  check "eval --threads over 4x hardware" odc-eval 2 "hardware threads of this machine" -- \
    "${model[@]}" "${data[@]}" --threads $((4 * hw + 1))
fi
check "eval --format unknown" odc-eval 2 "--format expects one of tokens, bin, chat, text" -- "${model[@]}" "${data[@]}" --format parquet
check "eval --max-sequences 0 = all" odc-eval 0 '"sequences":8' -- "${model[@]}" "${data[@]}" --max-sequences 0

# --- a directory given as --data: named as one, with the files in it that look like data ---
mkdir -p "$work/datadir" && cp "$work/data.jsonl" "$work/datadir/"
check "eval --data DIR" odc-eval 1 "$work/datadir: is a directory, not a dataset file" "it holds data.jsonl" -- \
  "${model[@]}" --data "$work/datadir"

# --- unknown record fields: refused by odc-eval unless --extra-fields ignore (as data.extra_fields) ---
head -1 "$work/data.jsonl" | sed 's/}$/, "id": 7}/' >"$work/extra.jsonl"
# The hint names odc-eval's option (it named odc-train's key, data.extra_fields: ignore).
check "eval extra field" odc-eval 1 "$work/extra.jsonl:1: unknown field \"id\" in a tokens record" \
  "; --extra-fields ignore skips unknown fields" -- "${model[@]}" --data "$work/extra.jsonl"
grep -q "data.extra_fields" "$work/err" && { echo "FAIL [eval extra field]: names odc-train's key"; failures=$((failures + 1)); }
check "eval extra field ignored" odc-eval 0 '"sequences":1' -- "${model[@]}" --data "$work/extra.jsonl" --extra-fields ignore
# Sequences past max_position_embeddings (16 here; the data's reach 32): scored as odc-train trains
# them, but no longer without a word: a warning naming the first, and a count in the result.
"$bin/odc-ckpt" init --out "$work/ctx16" --dtype f32 "${shape[@]}" --set model.config.max_position_embeddings=16 >/dev/null
over=$(/usr/bin/python3 -c 'import json,sys; print(sum(len(json.loads(l)["input_ids"]) > 16 for l in open(sys.argv[1])))' "$work/data.jsonl")
check "eval past the context" odc-eval 0 "\"over_context\":$over" -- --model "$work/ctx16" "${data[@]}"
grep -qF "of the 8 sequences scored are longer than max_position_embeddings = 16 of the model in '$work/ctx16' (the first: $work/data.jsonl:" "$work/err" ||
  { echo "FAIL [eval past the context]: no warning naming the first sequence: $(cat "$work/err")"; failures=$((failures + 1)); }
[ "$over" -gt 0 ] || { echo "FAIL [eval past the context]: no sequence of the data is over 16 tokens"; failures=$((failures + 1)); }
check "sim extra field" odc-sim 1 "$work/extra.jsonl:1: unknown field \"id\"" -- \
  --set "data.lengths=$work/extra.jsonl" --set data.format=tokens
check "sim extra field ignored" odc-sim 0 "" -- \
  --set "data.lengths=$work/extra.jsonl" --set data.format=tokens --set data.extra_fields=ignore \
  --set sim.devices=1 --set data.minibatch_size=1

# --- odc-generate: option values are usage errors; an empty prompt starts from BOS ---
gen=(--model "$work/hf" --tokenizer "$work/tok.json")
echo '{}' >"$work/tok.json"  # never read: the usage errors come first
check "generate --top-p 0" odc-generate 2 "--top-p must be" "got 0" -- "${gen[@]}" --prompt hi --top-p 0
check "generate --top-k -1" odc-generate 2 "--top-k must be >= 0" -- "${gen[@]}" --prompt hi --top-k -1
check "generate --temperature -1" odc-generate 2 "--temperature must be >= 0, got -1" -- "${gen[@]}" --prompt hi --temperature -1
check "generate --max-new-tokens -1" odc-generate 2 "--max-new-tokens must be >= 0, got -1" -- "${gen[@]}" --prompt hi --max-new-tokens -1
check "generate --threads 10000" odc-generate 2 "--threads must be" -- "${gen[@]}" --prompt hi --threads 10000
check "generate no --prompt" odc-generate 2 "--prompt TEXT is required" -- "${gen[@]}"
# Options that would be ignored are refused: greedy decoding draws nothing, pre-tokenized data is
# not tokenized, a chat template needs --chat; a number beyond an int is not truncated.
check "generate --top-k at temperature 0" odc-generate 2 \
  "--top-p and --top-k apply only to sampling (--temperature > 0); at temperature 0 (greedy, the default) they would be ignored" \
  -- "${gen[@]}" --prompt hi --top-k 5
check "generate --chat-template without --chat" odc-generate 2 \
  "--chat-template applies only with --chat, which is not given (alone it would be ignored)" -- \
  "${gen[@]}" --prompt hi --chat-template chatml
check "generate --max-new-tokens beyond an int" odc-generate 2 "--max-new-tokens must be <= 2147483647, got 4294967360" -- \
  "${gen[@]}" --prompt hi --max-new-tokens 4294967360
check "eval --tokenizer with tokens" odc-eval 2 \
  "--tokenizer and --chat-template apply to --format chat or text only, not tokens (pre-tokenized)" -- \
  "${model[@]}" "${data[@]}" --tokenizer "$work/tok.json"
check "rollout --chat-template without --chat" odc-rollout 2 "--chat-template applies only with --chat" -- \
  --model "$work/hf" --prompts p.jsonl --out o.jsonl --chat-template llama3
check "bench --min-time-s with --iters" odc-bench 2 \
  "--min-time-s and --max-iters adapt the iteration count, which --iters N > 0 fixes: give one or the other" -- \
  --iters 5 --min-time-s 1
check "bench --gather-protocol without gather" odc-bench 2 "--gather-protocol applies to the gather op, which --ops leaves out" -- \
  --ops scatter_accumulate --gather-protocol get
check "train --dump-config with --plan-memory" odc-train 2 "--dump-config and --plan-memory each answer instead of training: give one" -- \
  --dump-config --plan-memory
check "sim --out with --dump-config" odc-sim 2 "--out writes a simulation's results, which --dump-config does not run: give one" -- \
  --dump-config --out "$work/sim-out"
check "ckpt import --world-size beyond an int" odc-ckpt 2 "--world-size must be <= 2147483647, got 4294967297" -- \
  import --from "$work/hf" --out "$work/imported" --world-size 4294967297

# --- the other checkpoint format is recognized ---
mkdir -p "$work/native/step-00000003" && echo '{}' >"$work/native/step-00000003/manifest.json"
check "eval --model native step" odc-eval 1 "is a native checkpoint step directory" "odc-ckpt export --from $work/native/step-00000003" -- \
  --model "$work/native/step-00000003" "${data[@]}"
check "eval --model native dir" odc-eval 1 "is a native checkpoint directory" -- --model "$work/native" "${data[@]}"
train=(--set "data.train=$work/data.jsonl" --set data.minibatch_size=2 "${shape[@]}")
check "train resume from an HF dir" odc-train 1 "checkpoint.resume '$work/hf' is a Hugging Face model directory" "odc-ckpt import" -- \
  "${train[@]}" --set train.steps=1 --set "checkpoint.dir=$work/ck0" --set "checkpoint.resume=$work/hf"
check "train.threads 10000" odc-train 1 "train.threads" "10000" -- "${train[@]}" --set train.steps=1 --set train.threads=10000

# --- row 13: the metrics file cannot be written (a write to /dev/full fails with ENOSPC) ---
check "metrics write fails: checkpoint first" odc-train 1 \
  "train.metrics_file: writing '/dev/full' failed: No space left on device after step 1" \
  "a checkpoint of step 1 is saved in checkpoint.dir '$work/ck'" -- \
  "${train[@]}" --set train.steps=3 --set "checkpoint.dir=$work/ck" --set train.metrics_file=/dev/full
if [ -f "$work/ck/step-00000001/manifest.json" ]; then
  echo "ok   [metrics write fails: step-00000001 committed]"
else
  echo "FAIL [metrics write fails: no step-00000001 in $work/ck]: $(ls "$work/ck" 2>&1)"; failures=$((failures + 1))
fi
# Space freed (here: another file), the resume writes back step 1's line, which the checkpoint kept:
# the metrics file holds steps 1..3, each once.
check "metrics write fails: resume goes on" odc-train 0 "" -- \
  "${train[@]}" --set train.steps=3 --set "checkpoint.dir=$work/ck" --set "train.metrics_file=$work/m.jsonl"
steps=$(grep -o '"step":[0-9]*' "$work/m.jsonl" | tr '\n' ' ')
if [ "$steps" != '"step":1 "step":2 "step":3 ' ]; then
  echo "FAIL [metrics write fails: the metrics file holds steps 1..3 after the resume]: $steps"; failures=$((failures + 1))
elif ! grep -q "wrote back 1 that could not be written before" "$work/out" "$work/err"; then
  echo "FAIL [metrics write fails: the write-back is logged]"; failures=$((failures + 1))
else
  echo "ok   [metrics write fails: the metrics file holds steps 1..3 after the resume, step 1 from the checkpoint]"
fi
check "metrics write fails: no checkpoint.dir" odc-train 1 "No space left on device" "no checkpoint.dir is set" -- \
  "${train[@]}" --set train.steps=2 --set train.metrics_file=/dev/full
# A step's eval line is written before its checkpoint is saved, so the checkpoint holds every line of
# its step (one the disk refused is kept in it); it was saved first, its eval line left to chance.
check "eval before the checkpoint of its step" odc-train 0 "" -- "${train[@]}" --set train.steps=2 \
  --set "data.eval=$work/data.jsonl" --set train.eval_every=1 --set checkpoint.every=1 --set "checkpoint.dir=$work/ck-eval"
order=$(grep -o "eval after step 1\|checkpoint: step 1 saved" "$work/out" "$work/err" | cut -d: -f2- | tr '\n' '|')
if [ "$order" != "eval after step 1|checkpoint: step 1 saved|" ]; then
  echo "FAIL [eval before the checkpoint of its step]: $order"; failures=$((failures + 1))
else
  echo "ok   [eval before the checkpoint of its step]"
fi

# Warnings the same on every rank are printed once (rank 0), and they name steps 1-based as the
# progress lines do: 2 ranks, the first global minibatch (records 1-4, no shuffle) without targets,
# a warmup as long as the run.
: >"$work/masked.jsonl"
for _ in 1 2 3 4; do echo '{"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 0, 0]}' >>"$work/masked.jsonl"; done
for _ in 1 2 3 4; do echo '{"input_ids": [1, 2, 3, 4], "loss_mask": [0, 1, 1, 1]}' >>"$work/masked.jsonl"; done
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun -np 2 --oversubscribe --bind-to none \
  "$bin/odc-train" --set "data.train=$work/masked.jsonl" --set data.minibatch_size=2 --set data.shuffle=false \
  "${shape[@]}" --set train.steps=2 --set train.warmup_steps=2 --set train.log_every=1 >"$work/ranks.log" 2>&1
rc=$?
masked=$(grep -c "step 1: the minibatch has no target tokens" "$work/ranks.log")
warmup=$(grep -c "is as long as the run" "$work/ranks.log")
if [ "$rc" -ne 0 ] || [ "$masked" -ne 1 ] || [ "$warmup" -ne 1 ] || grep -q "step 0:" "$work/ranks.log"; then
  echo "FAIL [warnings once, steps 1-based]: exit $rc, 'step 1: no target tokens' x$masked, warmup warning x$warmup (want 1 each, no 'step 0:')"
  failures=$((failures + 1))
else
  echo "ok   [warnings once, steps 1-based] 2 ranks: each warning once, the masked minibatch named step 1"
fi

finish_test "test_tool_edges: ok"
