#!/usr/bin/env bash
# odc-ckpt command-line behaviour: init writes a loadable HF checkpoint (single file or shards,
# each dtype, tokenizer files copied) and prints a summary, inspect prints one JSON line, usage
# errors exit 2 naming the culprit, bad checkpoints exit 1 naming the file or tensor, --help
# exits 0.
# Usage: bash test_odc_ckpt.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
set -e

tool="$bin/odc-ckpt"
# shellcheck source=cli_tool_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_tool_checks.sh"

tiny=(--set model.config.vocab_size=40 --set model.config.hidden_size=16 --set model.config.intermediate_size=24
      --set model.config.num_hidden_layers=2 --set model.config.num_attention_heads=4
      --set model.config.num_key_value_heads=2)

# --- init from --set over the default model: one file, bf16 by default ---
run_tool init init --out "$work/llama" "${tiny[@]}" --seed 3
expect_rc init 0
for key in '"architecture":"LlamaForCausalLM"' '"dtype":"bfloat16"' '"files":1' '"seed":3' '"parameters":'; do
  expect_in init out "$key"
done
[ -s "$work/llama/model.safetensors" ] || fail "init: model.safetensors missing"
[ -s "$work/llama/config.json" ] || fail "init: config.json missing"
[ -e "$work/llama.tmp" ] && fail "init: staging directory llama.tmp left behind"
grep -q '"torch_dtype": "bfloat16"' "$work/llama/config.json" || fail "init: config.json lacks torch_dtype"

# Same seed -> identical weights; another seed -> different ones.
run_tool init_again init --out "$work/llama_again" "${tiny[@]}" --seed=3
expect_rc init_again 0
cmp -s "$work/llama/model.safetensors" "$work/llama_again/model.safetensors" ||
  fail "init: same seed produced different weights"
run_tool init_other init --out "$work/llama_other" "${tiny[@]}" --seed 4
cmp -s "$work/llama/model.safetensors" "$work/llama_other/model.safetensors" &&
  fail "init: different seeds produced identical weights"

# --- inspect: one JSON line ---
run_tool inspect inspect "$work/llama"
expect_rc inspect 0
lines=$(wc -l <"$work/inspect.out")
[ "$lines" -eq 1 ] || fail "inspect: $lines lines, expected 1"
params=$(grep -o '"parameters":[0-9]*' "$work/init.out")
for key in '"architecture":"LlamaForCausalLM"' '"model_type":"llama"' '"dtype":"bfloat16"' "$params" \
           '"model.layers.1.self_attn.k_proj.weight":[8,16]' '"lm_head.weight":[40,16]' '"files":["model.safetensors"]'; do
  expect_in inspect out "$key"
done

# --- Qwen2 from a config.json file, f16, sharded, tokenizer copied ---
cat >"$work/qwen2_config.json" <<'EOF'
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 40, "hidden_size": 16,
 "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "tie_word_embeddings": true, "rope_theta": 1000000.0, "use_sliding_window": false, "sliding_window": 4096,
 "bos_token_id": 1, "eos_token_id": 2, "some_field_we_do_not_use": {"x": 1}}
EOF
mkdir -p "$work/tok"
echo '{"model": {"type": "BPE", "vocab": {}}}' >"$work/tok/tokenizer.json"
echo '{"eos_token_id": 2}' >"$work/tok/generation_config.json"
run_tool qwen2 init --config "$work/qwen2_config.json" --out "$work/qwen2" --dtype f16 \
  --max-shard-bytes 2048 --tokenizer "$work/tok/tokenizer.json" --set model.config.rms_norm_eps=1e-5
expect_rc qwen2 0
expect_in qwen2 out '"architecture":"Qwen2ForCausalLM"'
expect_in qwen2 out '"dtype":"float16"'
[ -s "$work/qwen2/model.safetensors.index.json" ] || fail "qwen2: no index for a sharded export"
[ -e "$work/qwen2/model.safetensors" ] && fail "qwen2: both a single file and shards"
ls "$work"/qwen2/model-00001-of-*.safetensors >/dev/null 2>&1 || fail "qwen2: no shard files"
cmp -s "$work/tok/tokenizer.json" "$work/qwen2/tokenizer.json" || fail "qwen2: tokenizer.json not copied"
[ -s "$work/qwen2/generation_config.json" ] || fail "qwen2: generation_config.json not copied"
grep -q '"rms_norm_eps": 1e-05' "$work/qwen2/config.json" || fail "qwen2: --set over --config not applied"
run_tool qwen2_inspect inspect "$work/qwen2"
expect_rc qwen2_inspect 0
expect_in qwen2_inspect out '"model.layers.0.self_attn.q_proj.bias":[16]'
grep -q '"lm_head.weight"' "$work/qwen2_inspect.out" && fail "qwen2: tied model has an lm_head.weight"

# An export replaces an earlier one (here: sharded -> single file) without leftovers.
run_tool replace init --config "$work/qwen2_config.json" --out "$work/qwen2" --dtype f32
expect_rc replace 0
[ -e "$work/qwen2/model.safetensors.index.json" ] && fail "replace: stale index of the previous export"
[ -e "$work/qwen2.old" ] && fail "replace: qwen2.old left behind"
mkdir -p "$work/precious" && echo keep >"$work/precious/notes.txt"
run_tool foreign_out init --out "$work/precious" "${tiny[@]}"
expect_rc foreign_out 1
expect_in foreign_out err "refusing to replace"
[ -s "$work/precious/notes.txt" ] || fail "foreign_out: deleted a directory that is not a checkpoint"

# --- bad checkpoints: exit 1, the message names the file or tensor ---
bad() {  # NAME: a copy of the llama checkpoint to break
  rm -rf "$work/$1" && cp -r "$work/llama" "$work/$1"
}
weights_size=$(stat -c %s "$work/llama/model.safetensors")

bad truncated
truncate -s $((weights_size - 100)) "$work/truncated/model.safetensors"
run_tool truncated inspect "$work/truncated"
expect_rc truncated 1
expect_in truncated err "truncated/model.safetensors"
expect_in truncated err "out of range"

bad header_past_end
printf '\xff\xff\x00\x00\x00\x00\x00\x00' | dd of="$work/header_past_end/model.safetensors" bs=1 count=8 conv=notrunc status=none
run_tool header_past_end inspect "$work/header_past_end"
expect_rc header_past_end 1
expect_in header_past_end err "header length 65535 exceeds the file"

bad overlapping  # make the second tensor's range start inside the first one's
python3 - "$work/overlapping/model.safetensors" <<'EOF'
import json, struct, sys
path = sys.argv[1]
blob = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
names = sorted((v["data_offsets"][0], k) for k, v in header.items() if k != "__metadata__")
first, second = names[0][1], names[1][1]
begin, end = header[second]["data_offsets"]
header[second]["data_offsets"] = [begin - 2, end - 2]
text = json.dumps(header, separators=(",", ":")).encode().ljust(n)
assert len(text) == n
blob[8:8 + n] = text
open(path, "wb").write(bytes(blob))
EOF
run_tool overlapping inspect "$work/overlapping"
expect_rc overlapping 1
expect_in overlapping err "overlap"

bad unknown_dtype
sed -i '0,/"BF16"/s//"F8E4"/' "$work/unknown_dtype/model.safetensors"
run_tool unknown_dtype inspect "$work/unknown_dtype"
expect_rc unknown_dtype 1
expect_in unknown_dtype err "unsupported dtype 'F8E4'"

bad shape_mismatch
sed -i 's/"intermediate_size": 24/"intermediate_size": 32/' "$work/shape_mismatch/config.json"
run_tool shape_mismatch inspect "$work/shape_mismatch"
expect_rc shape_mismatch 1
expect_in shape_mismatch err "'model.layers.0.mlp.down_proj.weight'"
expect_in shape_mismatch err "has shape [16, 24], but config.json implies [16, 32]"

bad missing_tensor  # one more layer in config.json than in the weights
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$work/missing_tensor/config.json"
run_tool missing_tensor inspect "$work/missing_tensor"
expect_rc missing_tensor 1
expect_in missing_tensor err "missing tensor 'model.layers.2.self_attn.q_proj.weight'"

bad unexpected_tensor  # one layer fewer in config.json than in the weights
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 1/' "$work/unexpected_tensor/config.json"
run_tool unexpected_tensor inspect "$work/unexpected_tensor"
expect_rc unexpected_tensor 1
expect_in unexpected_tensor err "unexpected tensor 'model.layers.1.mlp.up_proj.weight'"

bad unknown_arch
sed -i 's/"LlamaForCausalLM"/"GPT2LMHeadModel"/' "$work/unknown_arch/config.json"
run_tool unknown_arch inspect "$work/unknown_arch"
expect_rc unknown_arch 1
expect_in unknown_arch err "architecture 'GPT2LMHeadModel' is not supported"

bad no_config
rm "$work/no_config/config.json"
run_tool no_config inspect "$work/no_config"
expect_rc no_config 1
expect_in no_config err "missing config.json"

run_tool no_dir inspect "$work/does_not_exist"
expect_rc no_dir 1
expect_in no_dir err "does_not_exist"

# --- bad init input: exit 1 ---
run_tool bad_value init --out "$work/x" "${tiny[@]}" --set model.config.num_key_value_heads=3
expect_rc bad_value 1
expect_in bad_value err "num_key_value_heads"
run_tool unknown_field init --out "$work/x" "${tiny[@]}" --set model.config.hiden_size=8
expect_rc unknown_field 1
expect_in unknown_field err "hiden_size"
run_tool missing_config init --out "$work/x" --config "$work/no_such_config.json"
expect_rc missing_config 1
expect_in missing_config err "no_such_config.json"
run_tool mistral_bias init --out "$work/x" "${tiny[@]}" --architecture MistralForCausalLM \
  --set model.config.attention_bias=true
expect_rc mistral_bias 1
expect_in mistral_bias err "MistralForCausalLM has no attention biases"
run_tool bad_arch init --out "$work/x" "${tiny[@]}" --architecture GPT2LMHeadModel
expect_rc bad_arch 1
expect_in bad_arch err "GPT2LMHeadModel"
run_tool bad_tokenizer init --out "$work/x" "${tiny[@]}" --tokenizer "$work/qwen2_config.json"
expect_rc bad_tokenizer 1
expect_in bad_tokenizer err "tokenizer.json"
# A llama3 rope_scaling that odc-train and odc-eval would refuse is refused by init too.
llama3=(--set model.config.rope_scaling.rope_type=llama3 --set model.config.rope_scaling.low_freq_factor=1
        --set model.config.rope_scaling.high_freq_factor=4 --set model.config.rope_scaling.original_max_position_embeddings=64)
run_tool rope_factor init --out "$work/x" "${tiny[@]}" "${llama3[@]}" --set model.config.rope_scaling.factor=0
expect_rc rope_factor 1
expect_in rope_factor err "llama3 rope_scaling field 'factor' must be positive, found 0"
run_tool rope_band init --out "$work/x" "${tiny[@]}" "${llama3[@]}" --set model.config.rope_scaling.factor=8 \
  --set model.config.rope_scaling.high_freq_factor=1
expect_rc rope_band 1
expect_in rope_band err "'high_freq_factor' (1) must be greater than 'low_freq_factor' (1)"
# init's --set writes config.json fields: a sliding_window a Llama would ignore is refused, not
# silently dropped (a Mistral gets it: tests/cli/test_hf_sliding_window.sh).
run_tool sliding_window init --out "$work/x" "${tiny[@]}" --set model.config.sliding_window=8
expect_rc sliding_window 1
expect_in sliding_window err "would keep no sliding window"
[ -e "$work/x" ] && fail "a failed init left $work/x behind"

# --- the vocabulary follows --tokenizer unless set; a smaller one is refused ---
mkdir -p "$work/tok48"
/usr/bin/python3 -c 'import json,sys; json.dump({"model": {"type": "BPE", "vocab": {f"t{i}": i for i in range(48)}, "merges": []}}, open(sys.argv[1], "w"))' \
  "$work/tok48/tokenizer.json"
tiny_no_vocab=("${tiny[@]:2}")
run_tool vocab_from_tokenizer init --out "$work/tokvocab" "${tiny_no_vocab[@]}" --tokenizer "$work/tok48"
expect_rc vocab_from_tokenizer 0
[ "$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$work/tokvocab/config.json")" = 48 ] ||
  fail "vocab_from_tokenizer: config.json vocab_size is not the tokenizer's 48"
run_tool vocab_below_tokenizer init --out "$work/x" "${tiny[@]}" --tokenizer "$work/tok48"
expect_rc vocab_below_tokenizer 1
expect_in vocab_below_tokenizer err "is smaller than the tokenizer's 48 tokens"
[ -e "$work/x" ] && fail "vocab_below_tokenizer left $work/x behind"

# --- usage errors: exit 2 and the message names the culprit ---
run_tool no_out init "${tiny[@]}"
expect_rc no_out 2
expect_in no_out err "--out"
run_tool bad_dtype init --out "$work/x" --dtype f64
expect_rc bad_dtype 2
expect_in bad_dtype err "f64"
run_tool bad_seed init --out "$work/x" --seed many
expect_rc bad_seed 2
expect_in bad_seed err "many"
run_tool bad_set init --out "$work/x" --set train.lr=1
expect_rc bad_set 2
expect_in bad_set err "train.lr=1"
run_tool bad_flag init --out "$work/x" --bogus 1
expect_rc bad_flag 2
expect_in bad_flag err "--bogus"
run_tool missing_value init --out
expect_rc missing_value 2
expect_in missing_value err "--out"
run_tool inspect_none inspect
expect_rc inspect_none 2
run_tool inspect_two inspect a b
expect_rc inspect_two 2
run_tool bad_command frobnicate
expect_rc bad_command 2
expect_in bad_command err "frobnicate"
run_tool no_args
expect_rc no_args 2

# --- help ---
run_tool help --help
expect_rc help 0
expect_in help out "init"
expect_in help out "inspect"
run_tool init_help init --help
expect_rc init_help 0
expect_in init_help out "--architecture"
run_tool inspect_help inspect --help
expect_rc inspect_help 0
expect_in inspect_help out "inspect DIR"

finish_test "test_odc_ckpt: all checks passed"
