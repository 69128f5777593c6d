#!/usr/bin/env bash
# odc-generate's decoding options on a small random model: the KV cache gives the same greedy
# (and seeded sampled) tokens as --no-cache, --stop cuts the text before the stop string,
# generation ends at the model's context, logits that overflow are an error naming the model, and bad
# option values are usage errors (exit 2) naming the option and the value.
# Usage: bash test_odc_generate.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
set -e

tool="$bin/odc-generate"
# shellcheck source=cli_tool_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_tool_checks.sh"

# A byte-level BPE tokenizer (299 ids) and a random GQA model of that vocabulary; a wide initialization so
# that greedy continuations vary. No eos id: only the options under test end generation.
make_tiny_chat_model
gen=(--model "$work/model" --tokenizer "$work/chat/tokenizer/tokenizer.json" --json)

# field NAME KEY: a field of the JSON line in NAME.out.
field() { /usr/bin/python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))[sys.argv[2]]))' "$work/$1.out" "$2"; }

# --- the cache against --no-cache: the same ids, for several prompts and with a penalty ---
for prompt in "the river" "zebra sunset piano" "a"; do
  for penalty in 1 1.4; do
    name="cache_${penalty}_${prompt// /_}"
    run_tool "$name" "${gen[@]}" --prompt "$prompt" --max-new-tokens 40 --repetition-penalty "$penalty"
    expect_rc "$name" 0
    run_tool "${name}_nc" "${gen[@]}" --prompt "$prompt" --max-new-tokens 40 --repetition-penalty "$penalty" --no-cache
    expect_rc "${name}_nc" 0
    [ "$(field "$name" completion_ids)" = "$(field "${name}_nc" completion_ids)" ] ||
      fail "cache and no-cache agree ('$prompt', penalty $penalty): $(field "$name" completion_ids) vs $(field "${name}_nc" completion_ids)"
    [ "$(field "$name" finish_reason)" = '"length"' ] || fail "cache and no-cache agree: finish $(field "$name" finish_reason)"
  done
done
[ "$(field "cache_1_the_river" completion_ids)" != "$(field "cache_1.4_the_river" completion_ids)" ] ||
  fail "penalty cache and no-cache agree: --repetition-penalty 1.4 changed nothing"

# --- seeded top-k sampling: the same draws with and without the cache ---
run_tool topk "${gen[@]}" --prompt "the river" --max-new-tokens 30 --temperature 0.8 --top-k 5 --seed 2
expect_rc topk 0
run_tool topk_nc "${gen[@]}" --prompt "the river" --max-new-tokens 30 --temperature 0.8 --top-k 5 --seed 2 --no-cache
expect_rc topk_nc 0
[ "$(field topk completion_ids)" = "$(field topk_nc completion_ids)" ] || fail "top-k sampling: cache and no-cache differ"

# --- --stop: the text is cut before the earliest stop string; the ids include it ---
full_text=$(field cache_1_zebra_sunset_piano completion)
stop=$(/usr/bin/python3 -c '
import json, sys
text = json.loads(sys.argv[1])
for i in range(5, len(text) - 2):
    if text[i:i + 2].isascii() and text[i:i + 2].isalnum():
        print(text[i:i + 2]); break' "$full_text")
[ -n "$stop" ] || fail "stop string: no two ASCII letters in $full_text to stop at"
run_tool stop "${gen[@]}" --prompt "zebra sunset piano" --max-new-tokens 40 --stop "$stop" --stop "never-there"
expect_rc stop 0
/usr/bin/python3 - "$full_text" "$stop" "$(field stop completion)" "$(field stop finish_reason)" <<'PY' ||
import json, sys
full, stop, cut, reason = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
assert reason == "stop", reason
assert cut == full[:full.find(stop)], (cut, full, stop)
PY
  fail "stop string: $(cat "$work/stop.out")"
# The plain output is the cut text too.
run_tool stop_plain --model "$work/model" --tokenizer "$work/chat/tokenizer/tokenizer.json" \
  --prompt "zebra sunset piano" --max-new-tokens 40 --stop "$stop"
expect_rc stop_plain 0
grep -qF -- "$stop" "$work/stop_plain.out" && fail "stop string: plain output still holds '$stop'"

# --- the context (96 positions) ends generation, with and without the cache ---
for cache in "" --no-cache; do
  run_tool "context$cache" "${gen[@]}" --prompt "the river" --max-new-tokens 500 $cache
  expect_rc "context$cache" 0
  /usr/bin/python3 -c '
import json, sys
out = json.load(open(sys.argv[1]))
assert out["finish_reason"] == "context", out["finish_reason"]
assert len(out["prompt_ids"]) + len(out["completion_ids"]) == 96, (len(out["prompt_ids"]), len(out["completion_ids"]))
' "$work/context$cache.out" || fail "context end $cache: $(head -c 300 "$work/context$cache.out")"
done

# --- bad values: usage errors naming the option and the value ---
expect_usage_error() {  # NAME NEEDLE ARGS...
  local name="$1" needle="$2"; shift 2
  run_tool "$name" "${gen[@]}" --prompt hi "$@"
  expect_rc "$name" 2
  expect_in "$name" err "$needle"
}
expect_usage_error "top-k negative" "--top-k must be >= 0 (0 = off), got -1" --top-k -1
expect_usage_error "top-k not an integer" "--top-k expects an integer, got 'three'" --top-k three
expect_usage_error "repetition penalty zero" "--repetition-penalty must be > 0 (1 = off), got 0" --repetition-penalty 0
expect_usage_error "repetition penalty negative" "--repetition-penalty must be > 0 (1 = off), got -2" --repetition-penalty -2
expect_usage_error "repetition penalty nan" "--repetition-penalty expects a number, got 'nan'" --repetition-penalty nan
expect_usage_error "repetition penalty infinite" "--repetition-penalty expects a number, got 'inf'" --repetition-penalty inf
expect_usage_error "empty stop string" "--stop expects a non-empty string, got ''" --stop ok --stop ""
expect_usage_error "empty stop string (=)" "--stop expects a non-empty string, got ''" --stop=

# --- an empty prompt: generation from the model's BOS (as Hugging Face's generate without input
# ids), or a clear error when neither the tokenizer nor the model names one ---
run_tool empty_no_bos "${gen[@]}" --prompt "" --max-new-tokens 3
expect_rc empty_no_bos 1
expect_in empty_no_bos err "--prompt is empty and there is no token to start from"
cp -r "$work/model" "$work/model_bos"
/usr/bin/python3 - "$work/model_bos/config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["bos_token_id"] = 7
json.dump(config, open(sys.argv[1], "w"))
PY
run_tool empty_bos --model "$work/model_bos" --tokenizer "$work/chat/tokenizer/tokenizer.json" --json \
  --prompt "" --max-new-tokens 3
expect_rc empty_bos 0
[ "$(field empty_bos prompt_ids)" = "[7]" ] || fail "empty prompt: prompt_ids $(field empty_bos prompt_ids), expected [7]"
# --- finite weights whose activations overflow: an error naming the model and the position (it
# printed NUL characters, exit 0) ---
copy_overflowing "$work/model" "$work/huge"
run_tool overflow --model "$work/huge" --tokenizer "$work/chat/tokenizer/tokenizer.json" --prompt "the river" \
  --max-new-tokens 3
expect_rc overflow 1
expect_in overflow err "the model in '$work/huge' gives a logit that is not finite"
[ ! -s "$work/overflow.out" ] || fail "overflow: printed $(od -c "$work/overflow.out" | head -2)"
expect_usage_error "top-p zero" "--top-p must be" --top-p 0
expect_usage_error "temperature negative" "--temperature must be >= 0, got -0.5" --temperature -0.5
expect_usage_error "seed negative" "--seed must be >= 0, got -1" --seed -1

run_tool help --help
expect_rc help 0
for option in --top-k --repetition-penalty --stop --no-cache finish_reason; do expect_in help out "$option"; done

finish_test "test_odc_generate: ok"
