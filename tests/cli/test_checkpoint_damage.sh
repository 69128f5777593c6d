#!/usr/bin/env bash
# Damaged checkpoints are named, never passed over (docs/checkpoints.md, "Damaged checkpoints"):
#   "truncated manifest"      resume: auto stops (exit 1) naming step-4 and --set checkpoint.resume=.../step-2;
#                             cut inside its config, the error stays short (it was one line of ~12,000
#                             characters), the setting on its second line
#   "no checksum"             manifest_checksum deleted and a value edited: refused, naming
#                             checkpoint.accept_manifest_without_checksum, which then resumes it;
#                             odc-ckpt reshard and export refuse it too, naming
#                             --accept-manifest-without-checksum, which then reads it with a warning
#   "inconsistent manifest"   world_size edited: the same
#   "sampler.position edited" one digit: the manifest's checksum names it
#   "resume the previous"     with the suggested setting: resumes step-2, moves step-4 to retired/damaged-*
#   "deleted manifest"        step-4 without manifest.json: auto stops; resuming step-2 moves its shards
#                             aside before the run writes step-4 again
#   "flipped shard byte"      names the shard file and suggests step-2; resuming it works
#   "changed lr"              the resume prints train.lr old -> new
#   "changed data.seed"       exit 1 naming data.seed, old and new
# Usage: test_checkpoint_damage.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$bin/odc-data" synth --out "$work/data.jsonl" --num 60 --max-length 32 --mean-length 12 --seed 4 >/dev/null
shape='{vocab_size: 64, hidden_size: 16, intermediate_size: 32, num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 1}'
train() {  # DIR extra --set...
  local dir="$1"; shift
  timeout 120 "$bin/odc-train" --set "data.train=$work/data.jsonl" --set "model.config=$shape" \
    --set data.minibatch_size=2 --set train.steps=6 --set train.peak_flops=1e10 --set train.log_every=1000 \
    --set checkpoint.every=2 --set "checkpoint.dir=$dir" "$@"
}
fresh() {  # DIR: steps 2 and 4
  train "$1" --set train.stop_at_step=4 >"$work/fresh.log" 2>&1 || fail "set-up" "$(tail -3 "$work/fresh.log")"
}
edit() { $py -c "import json,sys; p=sys.argv[1]+'/manifest.json'; m=json.load(open(p)); $2; json.dump(m, open(p,'w'), indent=2)" "$1"; }

# expect_refused CASE DIR WHAT: auto-resume exits 1 naming step-4 as damaged and the setting of step-2
expect_refused() {
  local out rc
  out=$(train "$2" 2>&1); rc=$?
  if [ $rc -ne 1 ]; then fail "$1" "exit $rc (expected 1): $(tail -3 <<<"$out")"
  elif ! grep -q "the newest checkpoint $2/step-00000004 is damaged" <<<"$out"; then fail "$1" "not named: $(grep error <<<"$out")"
  elif ! grep -q -- "--set checkpoint.resume=$2/step-00000002" <<<"$out"; then fail "$1" "no suggestion: $(grep error <<<"$out")"
  elif ! grep -q "$3" <<<"$out"; then fail "$1" "does not say '$3': $(grep error <<<"$out")"
  elif grep -qi "rollback" <<<"$out" || [ -d "$2/retired" ]; then fail "$1" "called a rollback / moved: $(ls "$2")"
  else echo "ok   [$1] exit 1: $(grep -m1 error <<<"$out" | head -c 240)"; fi
}

d="$work/truncated"; fresh "$d"
head -c 100 "$d/step-00000004/manifest.json" >"$work/t" && mv "$work/t" "$d/step-00000004/manifest.json"
expect_refused "truncated manifest" "$d" "is not valid JSON"

d="$work/truncated-long"; fresh "$d"
size=$(wc -c <"$d/step-00000004/manifest.json")
head -c $((size * 6 / 10)) "$d/step-00000004/manifest.json" >"$work/t" && mv "$work/t" "$d/step-00000004/manifest.json"
expect_refused "truncated manifest (inside its config)" "$d" "is not valid JSON"
error=$(train "$d" 2>&1 | sed -n '/error:/,$p')
longest=$(awk '{ if (length > n) n = length } END { print n }' <<<"$error")
# The first line: its paths (three spellings of $d), ~200 characters of text and the parser's 200.
limit=$((450 + 3 * ${#d}))
if [ "$(wc -l <<<"$error")" -ne 3 ] || [ "$longest" -gt "$limit" ] ||
   ! sed -n 2p <<<"$error" | grep -q "^  to resume from the previous good checkpoint: --set checkpoint.resume=$d/step-00000002"; then
  fail "truncated manifest (inside its config)" "want 3 lines of at most $limit characters, the setting on the second; got $(wc -l <<<"$error") lines, the longest $longest: $(head -c 600 <<<"$error")"
else echo "ok   [truncated manifest (inside its config)] 3 lines, the longest $longest characters (manifest $size bytes)"; fi

d="$work/no-checksum"; fresh "$d"
edit "$d/step-00000004" "del m['manifest_checksum']; m['optimizer_steps']+=10"
out=$(train "$d" 2>&1); rc=$?
if [ $rc -ne 1 ]; then fail "no checksum" "exit $rc (expected 1): $(tail -3 <<<"$out")"
elif ! grep -q "checkpoint '$d/step-00000004': its manifest has no manifest_checksum" <<<"$out" ||
     ! grep -q -- "--set checkpoint.accept_manifest_without_checksum=true" <<<"$out"; then
  fail "no checksum" "$(grep -A2 error <<<"$out")"
elif grep -q "resumed from" <<<"$out"; then fail "no checksum" "'resumed from' before the refusal"
else echo "ok   [no checksum] exit 1: $(grep -m1 error <<<"$out" | head -c 200)"; fi
# odc-ckpt's readers refuse it too (a reshard would sign the edited values with a fresh checksum),
# unless --accept-manifest-without-checksum, then with a warning.
no_checksum_tool() {  # CASE OUTPUT ARGS...: refused naming the option, nothing written; then accepted with it
  local name="$1" output="$2" out rc; shift 2
  out=$("$bin/odc-ckpt" "$@" 2>&1); rc=$?
  if [ $rc -ne 1 ]; then fail "$name" "exit $rc (expected 1): $(tail -3 <<<"$out")"
  elif ! grep -q "checkpoint '$d/step-00000004': its manifest has no manifest_checksum" <<<"$out" ||
       ! grep -q -- "to $1 it anyway: --accept-manifest-without-checksum" <<<"$out" ||
       ! grep -q "the previous good checkpoint next to it: $d/step-00000002" <<<"$out"; then
    fail "$name" "$(grep -A2 error <<<"$out")"
  elif [ -e "$output" ]; then fail "$name" "wrote $output"
  else echo "ok   [$name] exit 1: $(grep -m1 error <<<"$out" | head -c 160)"; fi
  out=$("$bin/odc-ckpt" "$@" --accept-manifest-without-checksum 2>&1); rc=$?
  [ $rc -eq 0 ] && [ -e "$output" ] &&
    grep -q "(accepted: --accept-manifest-without-checksum): an edit of it cannot be detected" <<<"$out" &&
    echo "ok   [$name] accepted with the option, with a warning" || fail "$name" "with the option: exit $rc: $(tail -3 <<<"$out")"
}
no_checksum_tool "no checksum (odc-ckpt reshard)" "$work/no-checksum-reshard/step-00000004" \
  reshard "$d/step-00000004" "$work/no-checksum-reshard" --world-size 2
no_checksum_tool "no checksum (odc-ckpt export)" "$work/no-checksum-hf/config.json" \
  export --from "$d/step-00000004" --out "$work/no-checksum-hf"
out=$(train "$d" --set checkpoint.accept_manifest_without_checksum=true 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "resumed from $d/step-00000004" <<<"$out" && grep -q "accepted: checkpoint.accept_manifest_without_checksum" <<<"$out" &&
  echo "ok   [no checksum] accepted with the key, with a warning" || fail "no checksum" "with the key: exit $rc: $(tail -3 <<<"$out")"

d="$work/inconsistent"; fresh "$d"
edit "$d/step-00000004" "m['world_size']=2"
expect_refused "inconsistent manifest" "$d" "'ranks' must list every one of the 2 ranks"

d="$work/position"; fresh "$d"
edit "$d/step-00000004" "m['sampler']['position']+=1"
expect_refused "sampler.position edited" "$d" "edited or corrupted after it was written"
out=$(train "$d" --set "checkpoint.resume=$d/step-00000002" 2>&1); rc=$?
if [ $rc -ne 0 ]; then fail "resume the previous" "exit $rc: $(tail -3 <<<"$out")"
elif ! grep -q "resumed from $d/step-00000002" <<<"$out"; then fail "resume the previous" "$(grep -i resum <<<"$out")"
elif ! ls -d "$d"/retired/damaged-*/step-00000004 >/dev/null 2>&1; then fail "resume the previous" "not retired: $(ls -R "$d" | head)"
elif ! grep -q "damaged checkpoint $d/step-00000004 moved to" <<<"$out"; then fail "resume the previous" "no warning"
elif [ ! -f "$d/step-00000006/manifest.json" ]; then fail "resume the previous" "no step-6"
else echo "ok   [resume the previous] $(grep -m1 'damaged checkpoint' <<<"$out" | head -c 200)"; fi

d="$work/deleted"; fresh "$d"
rm "$d/step-00000004/manifest.json"
expect_refused "deleted manifest" "$d" "has no manifest.json"
out=$(train "$d" --set "checkpoint.resume=$d/step-00000002" 2>&1); rc=$?
kept=$(ls "$d"/retired/damaged-*/step-00000004/rank-00000.safetensors 2>/dev/null)
if [ $rc -ne 0 ]; then fail "deleted manifest" "resume exit $rc: $(tail -3 <<<"$out")"
elif [ -z "$kept" ]; then fail "deleted manifest" "the old step-4 shards were not kept: $(ls -R "$d" | head -20)"
elif [ ! -f "$d/step-00000004/manifest.json" ]; then fail "deleted manifest" "no new step-4"
else echo "ok   [deleted manifest] old shards kept in ${kept#$d/}"; fi

d="$work/flipped"; fresh "$d"
$py -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-5]^=0x40; open(p,'wb').write(b)" "$d/step-00000004/rank-00000.safetensors"
out=$(train "$d" 2>&1); rc=$?
if [ $rc -ne 1 ]; then fail "flipped shard byte" "exit $rc: $(tail -3 <<<"$out")"
elif ! grep -q "step-00000004/rank-00000.safetensors': checksum .* (the file is damaged); to resume from the previous good checkpoint instead: --set checkpoint.resume=$d/step-00000002" <<<"$out"; then
  fail "flipped shard byte" "message: $(grep error <<<"$out")"
else echo "ok   [flipped shard byte] exit 1: $(grep -m1 error <<<"$out" | head -c 240)"; fi
out=$(train "$d" --set "checkpoint.resume=$d/step-00000002" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "resumed from $d/step-00000002" <<<"$out" && echo "ok   [flipped shard byte] the suggested setting resumes step-2" ||
  fail "flipped shard byte" "resuming the suggestion: exit $rc: $(tail -3 <<<"$out")"

d="$work/lr"; fresh "$d"
out=$(train "$d" --set train.lr=0.002 --set train.schedule=linear 2>&1); rc=$?
if [ $rc -ne 0 ]; then fail "changed lr" "exit $rc: $(tail -3 <<<"$out")"
elif ! grep -q "resume: 2 key(s) differ from the config saved in $d/step-00000004: train.lr 0.003 -> 0.002, train.schedule \"cosine\" -> \"linear\"" <<<"$out"; then
  fail "changed lr" "$(grep -i 'differ' <<<"$out" || grep -m3 -i resum <<<"$out")"
else echo "ok   [changed lr] $(grep -m1 'differ from' <<<"$out" | sed 's/.*resume:/resume:/')"; fi

d="$work/seed"; fresh "$d"
out=$(train "$d" --set data.seed=5 2>&1); rc=$?
if [ $rc -ne 1 ]; then fail "changed data.seed" "exit $rc: $(tail -3 <<<"$out")"
elif ! grep -q "was trained with data.seed 0, this run sets data.seed 5 (--set)" <<<"$out"; then fail "changed data.seed" "$(grep error <<<"$out")"
else echo "ok   [changed data.seed] exit 1: $(grep -m1 error <<<"$out" | head -c 200)"; fi

finish_test "damaged checkpoints are named; resume says what changed"
