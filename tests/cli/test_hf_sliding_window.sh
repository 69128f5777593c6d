#!/usr/bin/env bash
# A Mistral checkpoint with a sliding window shorter than its context (sliding_window 16): our
# attention spans whole sequences, which is the original model's on sequences of up to 16 tokens.
# Loaded with an info line saying so; odc-train fine-tunes it on sequences <= 16 and the export
# keeps sliding_window 16; data with a longer sequence is refused at start-up, before any step
# (exit 1, naming the record, its length, the window, where it came from and what to do), and
# data.max_length 16 with data.over_length truncate trains; odc-eval refuses a longer sequence;
# odc-generate refuses a prompt plus --max-new-tokens beyond 16 and generates within it.
# Usage: test_hf_sliding_window.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

/usr/bin/python3 "$root/tools/make_demo_chat.py" --out "$work/chat" --num 10 --merges 10 --seed 1 >/dev/null
shape=(--set model.config.hidden_size=64 --set model.config.intermediate_size=128 --set model.config.num_hidden_layers=2
       --set model.config.num_attention_heads=4 --set model.config.num_key_value_heads=2)
# A Mistral checkpoint as published ones are: config.json's sliding_window, which odc-ckpt init's
# --set writes as a config.json field (odc-train's model.config refuses sliding_window: there it
# would name the original's window without a checkpoint's config.json).
"$bin/odc-ckpt" init --out "$work/init" --architecture MistralForCausalLM "${shape[@]}" --set model.config.sliding_window=16 \
  --tokenizer "$work/chat/tokenizer" >"$work/init.log" 2>&1 || fail "odc-ckpt init: $(cat "$work/init.log")"
/usr/bin/python3 - "$work/init/config.json" <<'PY' || fail "init's config.json: $(cat "$work/init/config.json")"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["architectures"] == ["MistralForCausalLM"] and c["max_position_embeddings"] > 16 and c["sliding_window"] == 16, c
PY
# A window asked of an architecture that keeps none (transformers ignores it for Llama) is refused.
"$bin/odc-ckpt" init --out "$work/llama-window" "${shape[@]}" --set model.config.sliding_window=16 >/dev/null 2>"$work/llama-window.err"
rc=$?
[ "$rc" -eq 1 ] && grep -q "would keep no sliding window" "$work/llama-window.err" ||
  fail "odc-ckpt init of a Llama with sliding_window: exit $rc, $(cat "$work/llama-window.err")"
"$bin/odc-data" synth --out "$work/short.jsonl" --num 200 --vocab 32 --min-length 8 --max-length 16 --mean-length 12 \
  --seed 3 >/dev/null || fail "odc-data synth short"
"$bin/odc-data" synth --out "$work/long.jsonl" --num 200 --vocab 32 --min-length 8 --max-length 40 --mean-length 20 \
  --seed 4 >/dev/null || fail "odc-data synth long"

train=("$bin/odc-train" --set "model.checkpoint=$work/init" --set train.peak_flops=1e10 --set data.minibatch_size=8)
# Sequences <= 16: trained as the original model trains them; the export keeps the window.
"${train[@]}" --set "data.train=$work/short.jsonl" --set train.steps=5 --set train.warmup_steps=0 --set "checkpoint.export_hf=$work/tuned" \
  >"$work/short.log" 2>&1 || fail "training on sequences <= 16: $(tail -5 "$work/short.log")"
grep -qF "init/config.json: sliding_window 16: sequences of up to 16 tokens train exactly as in the original model" \
  "$work/short.log" || fail "no info line on the window: $(head -5 "$work/short.log")"
grep -qi "warn.*sliding" "$work/short.log" && fail "a warning on the window: $(grep -i "warn.*sliding" "$work/short.log")"
grep -q "step     5/5" "$work/short.log" || fail "5 steps did not run: $(tail -3 "$work/short.log")"
/usr/bin/python3 - "$work/tuned/config.json" <<'PY' || fail "the export lost the window: $(cat "$work/tuned/config.json")"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["architectures"] == ["MistralForCausalLM"] and c["sliding_window"] == 16 and "attention_window" not in c, c
PY

# A sequence longer than the window: refused at start-up, before any step.
"${train[@]}" --set "data.train=$work/long.jsonl" --set train.steps=5 >"$work/long.log" 2>&1; rc=$?
[ $rc -eq 1 ] || fail "training on sequences > 16: exit $rc, $(tail -3 "$work/long.log")"
grep -qE "odc-train: error: $work/long.jsonl:[0-9]+: sequence [0-9]+ has length (1[7-9]|[2-4][0-9]), longer than the model's attention window of 16 tokens \(sliding_window in $work/init/config.json\)" \
  "$work/long.log" || fail "the refusal does not name the record, length, window and origin: $(tail -3 "$work/long.log")"
grep -qF "set data.max_length to at most 16 with data.over_length truncate or drop" "$work/long.log" ||
  fail "the refusal does not say what to do: $(tail -3 "$work/long.log")"
grep -q "step " "$work/long.log" && fail "a step ran before the refusal: $(grep "step " "$work/long.log" | head -2)"
# ... and trained once data.max_length keeps every sequence within it.
"${train[@]}" --set "data.train=$work/long.jsonl" --set train.steps=2 --set data.max_length=16 \
  --set data.over_length=truncate >"$work/truncated.log" 2>&1 ||
  fail "data.max_length 16, truncate: $(tail -3 "$work/truncated.log")"

# odc-eval: the loss of a longer sequence would not be the original model's.
"$bin/odc-eval" --model "$work/tuned" --data "$work/short.jsonl" >"$work/eval.out" 2>"$work/eval.err" ||
  fail "odc-eval within the window: $(cat "$work/eval.err")"
"$bin/odc-eval" --model "$work/tuned" --data "$work/long.jsonl" >/dev/null 2>"$work/eval-long.err"; rc=$?
[ $rc -eq 1 ] && grep -qF "longer than the model's attention window of 16 tokens (sliding_window in $work/tuned/config.json)" \
  "$work/eval-long.err" || fail "odc-eval beyond the window: exit $rc, $(cat "$work/eval-long.err")"

# odc-generate: the prompt plus --max-new-tokens (default 64) beyond 16 is refused; within, it runs.
gen=("$bin/odc-generate" --model "$work/tuned" --prompt "hi" --json)
"${gen[@]}" >/dev/null 2>"$work/gen.err"; rc=$?
[ $rc -eq 1 ] && grep -qE "max_new_tokens is 64: [0-9]+ tokens, more than the model's attention window of 16 \(sliding_window in $work/tuned/config.json\)" \
  "$work/gen.err" && grep -qF "keep the prompt plus max_new_tokens within 16" "$work/gen.err" ||
  fail "odc-generate beyond the window: exit $rc, $(cat "$work/gen.err")"
"${gen[@]}" --max-new-tokens 20 >/dev/null 2>"$work/gen.err"; rc=$?
[ $rc -eq 1 ] && grep -qF "max_new_tokens is 20" "$work/gen.err" || fail "odc-generate with 20 new tokens: exit $rc"
out=$("${gen[@]}" --max-new-tokens 4 2>"$work/gen.err") || fail "odc-generate within the window: $(cat "$work/gen.err")"
/usr/bin/python3 -c "
import json, sys
r = json.loads(sys.argv[1])
assert len(r['prompt_ids']) + 4 <= 16 and 1 <= len(r['completion_ids']) <= 4, r
" "$out" || fail "odc-generate within the window: $out"

finish_test "Mistral sliding_window 16: trains <= 16, export keeps it, longer data / eval / generation refused"
