#!/usr/bin/env bash
# Resharding: a 2-rank ODC run stopped at step 6 (train.stop_at_step) resumes on 1 and on 4 ranks
# (the trainer reshards its checkpoint) and from `odc-ckpt reshard ... --world-size 4`, with the
# global minibatch kept (data.minibatch_size 4 x 2 = 8 x 1 = 2 x 4): steps 7..12 give the straight
# 2-rank run's losses within 1e-5 relative. Not bitwise: the ranks' shares of the minibatch and
# ODC's arrival-order gradient accumulation change the order of fp32 sums (two straight ODC runs
# already differ by ~1e-10); 1e-5 is far above that round-off grown over 6 steps and far below
# what a wrong optimizer state or data position gives (the first resumed step's loss moves by
# 1e-2 or more). Also: a resume that would change the global minibatch is refused, naming it.
# Cases: "resume on 1 rank", "resume on 4 ranks", "odc-ckpt reshard", "global minibatch changed",
# "reshard into its own directory", "reshard into a used directory".
# Usage: test_reshard.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$bin/odc-data" synth --out "$work/data.jsonl" --num 400 --max-length 96 --mean-length 40 --seed 8 >/dev/null
train() {  # RANKS PER_RANK_MINIBATCH extra --set arguments...
  local ranks="$1" per_rank="$2"; shift 2
  timeout 300 mpirun --oversubscribe --bind-to none -np "$ranks" "$bin/odc-train" --set "data.train=$work/data.jsonl" \
    --set "model.config={vocab_size: 64, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}" \
    --set data.minibatch_size="$per_rank" --set train.steps=12 --set train.warmup_steps=2 --set train.peak_flops=1e10 \
    --set train.log_every=1000 "$@"
}
# compare NAME RESUMED_METRICS: steps 7..12 against the straight run's, 1e-5 relative.
compare() {
  local verdict
  verdict=$($py - "$work/straight.jsonl" "$2" <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, filter(str.strip, open(path)))}
straight, resumed = losses(sys.argv[1]), losses(sys.argv[2])
steps = list(range(7, 13))
missing = [s for s in steps if s not in resumed]
if missing:
    print(f"BAD steps {missing} missing from the resumed run ({sorted(resumed)})"); sys.exit()
worst = max(abs(resumed[s] - straight[s]) / abs(straight[s]) for s in steps)
print(("OK" if worst <= 1e-5 else "BAD") + f" max relative difference {worst:.2e} over steps 7..12")
PY
)
  case "$verdict" in
    OK*) echo "ok   [$1] ${verdict#OK }" ;;
    *) fail "$1" "$verdict" ;;
  esac
}

train 2 4 --set "train.metrics_file=$work/straight.jsonl" >"$work/straight.log" 2>&1 ||
  fail "straight run" "$(tail -3 "$work/straight.log")"
train 2 4 --set "checkpoint.dir=$work/two" --set train.stop_at_step=6 >"$work/first.log" 2>&1 ||
  fail "first part" "$(tail -3 "$work/first.log")"
[ -f "$work/two/step-00000006/manifest.json" ] || fail "first part" "no step-6 checkpoint: $(ls "$work/two")"

# The trainer reshards by itself: copies of the 2-rank directory resumed on 1 and on 4 ranks.
for case in "1 8" "4 2"; do
  set -- $case
  cp -r "$work/two" "$work/on$1"
  if train "$1" "$2" --set "checkpoint.dir=$work/on$1" --set "train.metrics_file=$work/on$1.jsonl" >"$work/on$1.log" 2>&1 &&
     grep -q "written with comm odc by 2 ranks, resharded onto $1" "$work/on$1.log"; then
    compare "resume on $1 rank$([ "$1" = 1 ] || echo s)" "$work/on$1.jsonl"
  else
    fail "resume on $1 rank(s)" "$(grep -m3 -i 'error\|resumed' "$work/on$1.log")"
  fi
done

# odc-ckpt reshard writes a 4-rank checkpoint that a 4-rank run resumes as it is.
if out=$("$bin/odc-ckpt" reshard "$work/two/step-00000006" "$work/four" --world-size 4 2>&1) &&
   [ "$($py -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["world_size"], m["step"], m["resharded_from"]["world_size"], m["run_id"] == json.load(open(sys.argv[2]))["run_id"])' \
        "$work/four/step-00000006/manifest.json" "$work/two/step-00000006/manifest.json")" = "4 6 2 True" ]; then
  if train 4 2 --set "checkpoint.dir=$work/four" --set "train.metrics_file=$work/four.jsonl" >"$work/four.log" 2>&1 &&
     grep -q "resumed from $work/four/step-00000006 (step 6, written with comm odc)$" "$work/four.log"; then
    compare "odc-ckpt reshard" "$work/four.jsonl"
  else
    fail "odc-ckpt reshard" "the 4-rank resume: $(grep -m3 -i 'error\|resumed' "$work/four.log")"
  fi
else
  fail "odc-ckpt reshard" "$out"
fi

# Another global minibatch (4 x 3 = 12, not 8) would draw other sequences per step: refused.
cp -r "$work/two" "$work/on3"
out=$(train 3 4 --set "checkpoint.dir=$work/on3" 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
   grep -q "was trained with 8 sequences per step (data.minibatch_size 4 x 2 ranks), this run draws 12" <<<"$out" &&
   grep -q "no data.minibatch_size gives 8 sequences on 3 ranks" <<<"$out"; then
  echo "ok   [global minibatch changed] exit $rc: $(grep -m1 'sequences per step' <<<"$out" | head -c 160)"
else
  fail "global minibatch changed" "exit $rc: $(grep -m2 error <<<"$out")"
fi

# odc-ckpt reshard into the checkpoint's own directory would replace it: refused, nothing lost.
out=$("$bin/odc-ckpt" reshard "$work/two/step-00000006" "$work/two" --world-size 4 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "is the directory of" <<<"$out" &&
   [ "$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["world_size"])' "$work/two/step-00000006/manifest.json")" = 2 ]; then
  echo "ok   [reshard into its own directory] exit 1: $(head -c 160 <<<"$out")"
else
  fail "reshard into its own directory" "exit $rc: $out"
fi

# ... and into a directory that holds checkpoints already (the 4-rank one written above).
out=$("$bin/odc-ckpt" reshard "$work/two/step-00000006" "$work/four" --world-size 1 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -Eq "odc-ckpt reshard: '$work/four' already holds [0-9]+ checkpoint\(s\)" <<<"$out"; then
  echo "ok   [reshard into a used directory] exit 1: $(head -c 160 <<<"$out")"
else
  fail "reshard into a used directory" "exit $rc: $out"
fi

finish_test "2 ranks -> stop -> resume on 1 and 4 ranks within 1e-5 of the straight run"
