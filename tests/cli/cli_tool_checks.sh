# The checks of the CLI tests that drive one tool, sourced after lib.sh and after setting $tool
# (the executable under test). Each check counts a failure (lib.sh's fail) instead of exiting, so
# one run reports every broken case; the test ends with lib.sh's finish_test.

# run_tool NAME ARGS...: runs $tool, keeping stdout/stderr in $work/NAME.{out,err}, and sets
# $rc without tripping `set -e`.
run_tool() {
  local name=$1
  shift
  rc=0
  "$tool" "$@" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
}

expect_rc() {  # NAME EXPECTED
  if [ "$rc" -ne "$2" ]; then
    fail "$1: exit code $rc, expected $2; stderr: $(cat "$work/$1.err")"
  fi
}

expect_in() {  # NAME STREAM(out|err) TEXT
  if ! grep -qF -- "$3" "$work/$1.$2"; then
    fail "$1: std$2 does not contain '$3'; it was: $(cat "$work/$1.$2")"
  fi
}

[ -x "$tool" ] || { echo "FAIL: $tool is not an executable" >&2; exit 1; }

# make_tiny_chat_model: the demo's byte-level BPE tokenizer (299 ids) in $work/chat and a random
# GQA model of that vocabulary in $work/model (f32; a wide initialization, so that continuations
# vary; no eos id).
make_tiny_chat_model() {
  /usr/bin/python3 "$root/tools/make_demo_chat.py" --out "$work/chat" --num 200 --merges 40 --seed 1 >/dev/null
  "$bin/odc-ckpt" init --out "$work/model" --dtype f32 --seed 5 --set model.config.vocab_size=299 \
    --set model.config.hidden_size=64 --set model.config.intermediate_size=128 --set model.config.num_hidden_layers=2 \
    --set model.config.num_attention_heads=4 --set model.config.num_key_value_heads=2 \
    --set model.config.max_position_embeddings=96 --set model.config.initializer_range=0.5 \
    >"$work/init.out" 2>&1 || fail "odc-ckpt init: $(cat "$work/init.out")"
}

# copy_as_mistral SRC DST: SRC's model as a Mistral whose attention window is 16 tokens.
copy_as_mistral() {
  cp -r "$1" "$2"
  /usr/bin/python3 - "$2/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=16)
json.dump(c, open(sys.argv[1], "w"))
PY
}

# copy_overflowing SRC DST: SRC's model (hidden size 64) with every model.norm weight 3e38: finite
# weights whose activations overflow.
copy_overflowing() {
  cp -r "$1" "$2"
  /usr/bin/python3 - "$2/model.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    info = json.loads(f.read(n))["model.norm.weight"]
    f.seek(8 + n + info["data_offsets"][0])
    f.write(struct.pack("<64f", *[3e38] * 64))
PY
}
