#!/usr/bin/env bash
# Qwen3 through the tools: odc-ckpt init of a Qwen3 config.json (q/k norms, head_dim unlike
# hidden_size / heads, tied), a 0-step run exports it bit-identically as Qwen3ForCausalLM, 2 ranks
# fine-tune it (ODC) and the loss falls, the native checkpoint exports the same bytes,
# odc-generate's KV cache gives the greedy tokens of --no-cache, a YAML model with qk_norm exports
# as Qwen3, and a sliding-window Qwen3 is refused naming the field.
# Usage: test_qwen3_finetune.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

/usr/bin/python3 "$root/tools/make_demo_chat.py" --out "$work/chat" --num 300 --merges 40 --seed 2 >/dev/null
cat >"$work/qwen3.json" <<'EOF'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 96,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
 "rms_norm_eps": 1e-06, "rope_theta": 1000000, "rope_scaling": null, "tie_word_embeddings": true,
 "attention_bias": false, "max_position_embeddings": 512, "use_sliding_window": false,
 "sliding_window": null, "max_window_layers": 2, "hidden_act": "silu"}
EOF
"$bin/odc-ckpt" init --config "$work/qwen3.json" --out "$work/init" --tokenizer "$work/chat/tokenizer" --dtype bf16 \
  >"$work/init.log" 2>&1 || fail "odc-ckpt init: $(cat "$work/init.log")"
grep -q '"architecture":"Qwen3ForCausalLM"' "$work/init.log" || fail "init did not write Qwen3: $(cat "$work/init.log")"
/usr/bin/python3 - "$work/init/config.json" <<'PY' || fail "config.json is not a Qwen3 config"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["architectures"] == ["Qwen3ForCausalLM"] and c["model_type"] == "qwen3", c
assert c["head_dim"] == 24 and c["use_sliding_window"] is False and "qk_norm" not in c, c
PY

train=("$bin/odc-train" "$root/configs/demo-chat.yaml" --set "data.train=$work/chat/chat.jsonl" --set "model.checkpoint=$work/init"
       --set train.peak_flops=1e10)
"${train[@]}" --set train.steps=0 --set "checkpoint.export_hf=$work/roundtrip" >"$work/rt.log" 2>&1 ||
  fail "0-step export: $(tail -3 "$work/rt.log")"
cmp -s "$work/init/model.safetensors" "$work/roundtrip/model.safetensors" || fail "0-step export changed the weights"
grep -q '"model_type": "qwen3"' "$work/roundtrip/config.json" || fail "0-step export is not Qwen3"

mpirun -np 2 --oversubscribe --bind-to none "${train[@]}" --set train.steps=30 --set train.lr=3e-3 \
  --set "checkpoint.export_hf=$work/tuned" --set "checkpoint.dir=$work/ckpt" --set checkpoint.every=30 \
  >"$work/train.log" 2>&1 || fail "fine-tuning: $(tail -5 "$work/train.log")"
before=$("$bin/odc-eval" --model "$work/init" --data "$work/chat/chat.jsonl" --format chat --max-sequences 100) ||
  fail "odc-eval before"
after=$("$bin/odc-eval" --model "$work/tuned" --data "$work/chat/chat.jsonl" --format chat --max-sequences 100) ||
  fail "odc-eval after"
echo "before: $before"
echo "after:  $after"
/usr/bin/python3 -c "
import json, sys
b, a = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert a['tokens'] == b['tokens'] > 0 and a['loss'] < 0.9 * b['loss'], (b, a)
" "$before" "$after" || fail "evaluation did not show the fine-tuning"
"$bin/odc-ckpt" export --from "$work/ckpt/step-00000030" --out "$work/from-native" --dtype bf16 >"$work/export.log" 2>&1 ||
  fail "odc-ckpt export: $(cat "$work/export.log")"
cmp -s "$work/tuned/model.safetensors" "$work/from-native/model.safetensors" || fail "odc-ckpt export differs from the trainer's"
grep -q '"model_type": "qwen3"' "$work/from-native/config.json" || fail "odc-ckpt export is not Qwen3"

gen=("$bin/odc-generate" --model "$work/tuned" --chat --prompt "reverse: apple" --max-new-tokens 12 --json)
cached=$("${gen[@]}") || fail "odc-generate"
uncached=$("${gen[@]}" --no-cache) || fail "odc-generate --no-cache"
/usr/bin/python3 -c "
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert a['completion_ids'] == b['completion_ids'] and a['completion_ids'], (a, b)
" "$cached" "$uncached" || fail "KV cache and --no-cache differ: $cached / $uncached"

# A model.config with qk_norm (no checkpoint): its native checkpoint exports as Qwen3 by default.
"$bin/odc-train" "$root/configs/demo.yaml" --set "data.train=$work/chat/chat.jsonl" --set data.format=chat \
  --set "data.tokenizer=$work/chat/tokenizer/tokenizer.json" --set model.config.vocab_size=512 \
  --set model.config.qk_norm=true --set model.config.head_dim=40 --set train.steps=1 --set train.peak_flops=1e10 \
  --set "checkpoint.dir=$work/yaml-ckpt" --set checkpoint.every=1 >"$work/yaml.log" 2>&1 ||
  fail "qk_norm from model.config: $(tail -3 "$work/yaml.log")"
"$bin/odc-ckpt" export --from "$work/yaml-ckpt/step-00000001" --out "$work/yaml-hf" >"$work/yaml-export.log" 2>&1 ||
  fail "odc-ckpt export of a qk_norm model: $(cat "$work/yaml-export.log")"
grep -q '"Qwen3ForCausalLM"' "$work/yaml-hf/config.json" || fail "a qk_norm model did not export as Qwen3"

# A window that reaches a layer is refused, naming the file and the field.
/usr/bin/python3 - "$work/init/config.json" "$work/sliding" <<'PY'
import json, os, shutil, sys
shutil.copytree(os.path.dirname(sys.argv[1]), sys.argv[2])
c = json.load(open(sys.argv[1]))
c.update(use_sliding_window=True, sliding_window=128, max_window_layers=1)
json.dump(c, open(os.path.join(sys.argv[2], "config.json"), "w"))
PY
"$bin/odc-ckpt" inspect "$work/sliding" >/dev/null 2>"$work/sliding.err"; rc=$?
[ $rc -eq 1 ] && grep -q "sliding/config.json: use_sliding_window is true with sliding_window 128" "$work/sliding.err" ||
  fail "a sliding-window Qwen3: exit $rc, $(cat "$work/sliding.err")"

finish_test "Qwen3: init, bit-identical round trip, fine-tune on 2 ranks, export, KV cache, refusals"
