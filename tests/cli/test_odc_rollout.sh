#!/usr/bin/env bash
# odc-rollout, GRPO's sampling and scoring step, on a small random model: G completions per prompt
# as rollout records that odc-train's grpo objective then trains on (the offline loop end to end);
# the records do not depend on how many sequences decode at once; a seed repeats them; an external
# reward command scores them (killed, with what it started, at its timeout or on SIGINT); bad input
# (a lone completion per prompt, a reward that is not one number, a reference of another
# tokenizer, a sliding window too short, logits that overflow) is an error naming what and where.
# Usage: bash test_odc_rollout.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
set -e

tool="$bin/odc-rollout"
# shellcheck source=cli_tool_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_tool_checks.sh"

make_tiny_chat_model
cp "$work/chat/tokenizer/tokenizer.json" "$work/model/"
printf '%s\n' '{"prompt": "reverse: apple ->", "answer": "elppa"}' '{"prompt": "add: 2 3 ->", "answer": "5"}' \
  '{"prompt": "sort: lemon ->", "answer": "elmno"}' >"$work/prompts.jsonl"
roll=(--model "$work/model" --prompts "$work/prompts.jsonl" --group 4 --max-new-tokens 12 --seed 3)

# 1. Records: 3 prompts x 4, each a valid rollout record with one log-probability per token.
run_tool batched "${roll[@]}" --concurrency 5 --out "$work/batched.jsonl"
expect_rc batched 0
expect_in batched out '"completions":12'
/usr/bin/python3 - "$work/batched.jsonl" <<'PY' || fail "records: $(cat "$work/batched.jsonl" | head -3)"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 12, len(recs)
for i, r in enumerate(recs):
    assert set(r) == {"prompt_ids", "completion_ids", "logprobs", "reward", "group", "temperature"}, r.keys()
    assert r["temperature"] == 1.0
    assert r["group"] == i // 4 and 1 <= len(r["completion_ids"]) <= 12
    assert len(r["logprobs"]) == len(r["completion_ids"]) and all(x <= 0 for x in r["logprobs"])
    assert r["reward"] in (0.0, 1.0)
assert len({tuple(r["completion_ids"]) for r in recs[:4]}) > 1, "the samples of a prompt differ"
PY

# 2. One sequence at a time gives the same records; the seed repeats them, another does not.
run_tool alone "${roll[@]}" --concurrency 1 --out "$work/alone.jsonl"
expect_rc alone 0
# The same tokens and rewards; log-probabilities within 1e-4 (the batched forward's GEMMs add over
# other row blocks: fp32 summation order, measured ~1e-5 on values around -5).
/usr/bin/python3 - "$work/batched.jsonl" "$work/alone.jsonl" <<'PY' || fail "concurrency 5 and 1 wrote different records"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b)
for x, y in zip(a, b):
    assert (x["completion_ids"], x["reward"], x["group"]) == (y["completion_ids"], y["reward"], y["group"]), (x, y)
    assert max(abs(p - q) for p, q in zip(x["logprobs"], y["logprobs"])) < 1e-4
PY
run_tool again "${roll[@]}" --concurrency 5 --out "$work/again.jsonl"
cmp -s "$work/batched.jsonl" "$work/again.jsonl" || fail "the same seed wrote different records"
run_tool other --model "$work/model" --prompts "$work/prompts.jsonl" --group 4 --max-new-tokens 12 --seed 4 \
  --concurrency 5 --out "$work/other.jsonl"
cmp -s "$work/batched.jsonl" "$work/other.jsonl" && fail "another seed wrote the same records"

# 2b. A stop string: the same draws, each completion cut at the token that completes it. The stop
# is a token's text from the middle of the first completion (the tokenizer's vocab, read here).
stop=$(/usr/bin/python3 - "$work/batched.jsonl" "$work/model/tokenizer.json" <<'PY'
import json, sys
rec = json.loads(open(sys.argv[1]).readline())
vocab = {i: t for t, i in json.load(open(sys.argv[2]))["model"]["vocab"].items()}
ids = rec["completion_ids"]
# A plain printable token (byte-level BPE spells a space as "Ġ"; skip those and specials).
for i in ids[len(ids) // 2:] + ids:
    t = vocab.get(i, "")
    if t and t.isprintable() and t.isascii() and " " not in t:
        print(t)
        break
PY
)
if [ -z "$stop" ]; then
  fail "no printable token in the first completion to stop at"
else
  run_tool stopped "${roll[@]}" --concurrency 5 --stop "$stop" --out "$work/stopped.jsonl"
  expect_rc stopped 0
  /usr/bin/python3 - "$work/batched.jsonl" "$work/stopped.jsonl" <<'PY' || fail "--stop '$stop': the records are not the free ones cut"
import json, sys
free = [json.loads(l) for l in open(sys.argv[1])]
cut = [json.loads(l) for l in open(sys.argv[2])]
assert len(free) == len(cut)
shorter = 0
for f, c in zip(free, cut):
    n = len(c["completion_ids"])
    assert 1 <= n <= len(f["completion_ids"]) and c["completion_ids"] == f["completion_ids"][:n], (f, c)
    assert len(c["logprobs"]) == n
    shorter += n < len(f["completion_ids"])
assert shorter >= 1, "no completion was cut"
PY
fi

# 3. An external reward command: 1 for completions longer than 5 characters.
run_tool command "${roll[@]}" --out "$work/command.jsonl" \
  --reward-command "/usr/bin/python3 -c 'import json,sys; [print(float(len(json.loads(l)[\"completion\"]) > 5)) for l in sys.stdin]'"
expect_rc command 0
/usr/bin/python3 -c 'import json,sys; rs={json.loads(l)["reward"] for l in open(sys.argv[1])}; assert rs <= {0.0, 1.0} and rs, rs' \
  "$work/command.jsonl" || fail "command rewards"
# An empty or blank command is a usage error up front (it ran, and failed late: "wrote 0 rewards for 32
# completions").
for blank in "" " "; do
  run_tool blank_command "${roll[@]}" --out "$work/blank.jsonl" --reward-command "$blank"
  expect_rc blank_command 2
  expect_in blank_command err "--reward-command expects a command line, got '$blank'"
  [ ! -e "$work/blank.jsonl" ] || fail "blank_command: wrote $work/blank.jsonl"
done

# 3b. A reference model adds ref_logprobs; with the policy itself as the reference they are the
# sampling log-probabilities (the same model: 1e-4, the full forward's summation order), so the KL
# estimate of the first step is ~0.
run_tool ref "${roll[@]}" --concurrency 5 --out "$work/ref.jsonl" --ref-model "$work/model"
expect_rc ref 0
/usr/bin/python3 - "$work/ref.jsonl" <<'PY' || fail "ref_logprobs"
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    assert len(r["ref_logprobs"]) == len(r["completion_ids"])
    assert max(abs(a - b) for a, b in zip(r["ref_logprobs"], r["logprobs"])) < 1e-4
PY
if ! out=$(timeout 120 "$bin/odc-train" --set "model.checkpoint=$work/model" --set "data.train=$work/ref.jsonl" \
             --set data.format=rollouts --set train.objective=grpo --set data.global_batch_size=12 --set train.steps=1 \
             --set rl.kl_beta=0.1 --set train.log_level=warn --set "train.metrics_file=$work/kl.jsonl" 2>&1); then
  fail "odc-train with the KL penalty: $out"
else
  /usr/bin/python3 -c 'import json,sys; p=json.loads(open(sys.argv[1]).readline())["policy"]; assert abs(p["kl"]) < 1e-6 and abs(p["ratio_mean"] - 1) < 1e-4, p' \
    "$work/kl.jsonl" || fail "on-policy KL and ratio: $(cat "$work/kl.jsonl")"
fi

# 3c. At a sampling temperature T the records say it; training them at another rl.temperature is
# refused, at rl.temperature T the first step is on-policy (ratio 1, KL 0 against the policy at T).
run_tool warm "${roll[@]}" --concurrency 5 --out "$work/warm.jsonl" --ref-model "$work/model" --temperature 0.7
expect_rc warm 0
warm_train=(--set "model.checkpoint=$work/model" --set "data.train=$work/warm.jsonl" --set data.format=rollouts
            --set train.objective=grpo --set data.global_batch_size=12 --set train.steps=1 --set rl.kl_beta=0.1
            --set train.log_level=warn)
if out=$(timeout 60 "$bin/odc-train" "${warm_train[@]}" 2>&1); then
  fail "records sampled at 0.7 trained at rl.temperature 1 were not refused"
elif ! grep -qF "the rollouts were sampled at temperature 0.7 but rl.temperature is 1" <<<"$out"; then
  fail "temperature mismatch message: $out"
fi
if ! out=$(timeout 120 "$bin/odc-train" "${warm_train[@]}" --set rl.temperature=0.7 \
             --set "train.metrics_file=$work/warm-kl.jsonl" 2>&1); then
  fail "odc-train at rl.temperature 0.7: $out"
else
  /usr/bin/python3 -c 'import json,sys; p=json.loads(open(sys.argv[1]).readline())["policy"]; assert abs(p["kl"]) < 1e-6 and abs(p["ratio_mean"] - 1) < 1e-4, p' \
    "$work/warm-kl.jsonl" || fail "on-policy KL and ratio at temperature 0.7: $(cat "$work/warm-kl.jsonl")"
fi

# 4. The records train: two grpo steps from the same model (the offline loop).
if ! out=$(timeout 120 "$bin/odc-train" --set "model.checkpoint=$work/model" --set "data.train=$work/command.jsonl" \
             --set data.format=rollouts --set train.objective=grpo --set data.global_batch_size=6 --set train.steps=2 \
             --set train.log_level=warn --set "train.metrics_file=$work/grpo.jsonl" 2>&1); then
  fail "odc-train on the records: $out"
elif [ "$(wc -l <"$work/grpo.jsonl")" -ne 2 ]; then
  fail "odc-train on the records: expected 2 metrics lines"
fi

# 5. Bad input.
printf '%s\n' '{"prompt": "x"}' >"$work/bad.jsonl"
run_tool bad_prompts --model "$work/model" --prompts "$work/bad.jsonl" --out "$work/x.jsonl"
expect_rc bad_prompts 1
expect_in bad_prompts err "bad.jsonl:1: expected {\"prompt\": TEXT, \"answer\": TEXT}"
run_tool failing_command "${roll[@]}" --out "$work/x.jsonl" --reward-command "exit 3"
expect_rc failing_command 1
expect_in failing_command err "reward command 'exit 3' failed (exit status 3)"
run_tool missing_command "${roll[@]}" --out "$work/x.jsonl" --reward-command "/nonexistent/reward"
expect_rc missing_command 1
expect_in missing_command err "reward command '/nonexistent/reward' failed (not found (exit 127))"
# A reward std::stod read as 0 (it stopped at the comma); every line must be one finite number.
run_tool comma_reward "${roll[@]}" --out "$work/x.jsonl" --reward-command "while read -r l; do echo 0,9; done"
expect_rc comma_reward 1
expect_in comma_reward err "line 1 of its output, '0,9', is not one finite number"
run_tool short_command "${roll[@]}" --out "$work/x.jsonl" --reward-command "echo 1"
expect_rc short_command 1
expect_in short_command err "wrote 1 rewards for 12 completions"
run_tool both "${roll[@]}" --out "$work/x.jsonl" --verifier number --reward-command "echo 1"
expect_rc both 2
# A group of one measures accuracy; grpo refuses its records (tests/cli/test_grpo.sh).
run_tool group1 "${roll[@]}" --out "$work/alone.jsonl" --group 1
expect_rc group1 0
expect_in group1 err "--group 1: every completion stands alone, so these records measure accuracy but cannot train grpo"
[ -z "$(ls "$work"/odc-rewards-* 2>/dev/null)" ] || fail "a reward command's files were left: $(ls "$work"/odc-rewards-*)"

# 6. A reward command that never returns: killed with what it started at --reward-timeout, or at
# once on SIGINT; nothing written, nothing left running or on disk.
marker="odc-rollout-test-sleep-$$"  # a copy of sleep: every process of the command is found by its name
cp "$(command -v sleep)" "$work/$marker"
hang="$work/$marker 60 & $work/$marker 60"
start=$(date +%s)
run_tool hang "${roll[@]}" --out "$work/x.jsonl" --reward-command "$hang" --reward-timeout 1
expect_rc hang 1
expect_in hang err "did not finish within 1 s (--reward-timeout): it was killed with every process it started"
[ $(( $(date +%s) - start )) -le 20 ] || fail "hang: --reward-timeout 1 took $(( $(date +%s) - start )) s"
sleep 0.5
! pgrep -f "$marker" >/dev/null || fail "hang: the reward command outlived its timeout: $(pgrep -af "$marker")"
"$tool" "${roll[@]}" --out "$work/x.jsonl" --reward-command "$hang" >"$work/sigint.out" 2>"$work/sigint.err" &
pid=$!
for _ in $(seq 1 200); do pgrep -f "^$work/$marker" >/dev/null && break; sleep 0.1; done  # the command runs
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
expect_rc sigint 1
expect_in sigint err "stopped by SIGINT while the reward command ran: it was killed with every process it started"
sleep 0.5
! pgrep -f "$marker" >/dev/null || fail "a reward command outlived odc-rollout: $(pgrep -af "$marker")"
[ -z "$(ls "$work"/odc-rewards-* 2>/dev/null)" ] || fail "a reward command's files were left: $(ls "$work"/odc-rewards-*)"
# Even odc-rollout's SIGKILL, which nothing in it sees, takes the command and its files with it,
# and what the command started in a session of its own (setsid: out of the group, and with
# odc-rollout dead no subreaper brings it back).
"$tool" "${roll[@]}" --out "$work/x.jsonl" --reward-command "setsid $work/$marker 61 & $hang" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 200); do pgrep -f "^$work/$marker" >/dev/null && break; sleep 0.1; done
kill -KILL "$pid"
wait "$pid" || true
sleep 0.5
! pgrep -f "$marker" >/dev/null || fail "a reward command outlived odc-rollout's SIGKILL: $(pgrep -af "$marker")"
[ -z "$(ls "$work"/odc-rewards-* 2>/dev/null)" ] || fail "SIGKILL: a reward command's files were left: $(ls "$work"/odc-rewards-*)"
[ ! -e "$work/x.jsonl" ] || fail "a failed run left $work/x.jsonl"

# 7. A reference of another tokenizer (the same vocabulary size, two ids swapped) is refused; a
# sliding window shorter than prompt + --max-new-tokens is refused (the model's and the
# reference's); logits that overflow in finite weights are refused, naming the model.
cp -r "$work/model" "$work/swapped"
/usr/bin/python3 - "$work/swapped/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
vocab = t["model"]["vocab"]
a, b = sorted(vocab, key=vocab.get)[100:102]
vocab[a], vocab[b] = vocab[b], vocab[a]
json.dump(t, open(sys.argv[1], "w"))
PY
run_tool other_tokenizer "${roll[@]}" --out "$work/x.jsonl" --ref-model "$work/swapped"
expect_rc other_tokenizer 1
expect_in other_tokenizer err "--ref-model $work/swapped: its tokenizer $work/swapped/tokenizer.json is not the policy's $work/model/tokenizer.json (first difference: the vocabulary:"
copy_as_mistral "$work/model" "$work/mistral"
run_tool window "${roll[@]}" --model "$work/mistral" --out "$work/x.jsonl"
expect_rc window 1
expect_in window err "prompts.jsonl:1: the prompt has 11 tokens and --max-new-tokens is 12: 23 tokens, more than the model's attention window of 16 (sliding_window in $work/mistral/config.json)"
run_tool ref_window "${roll[@]}" --out "$work/x.jsonl" --ref-model "$work/mistral"
expect_rc ref_window 1
expect_in ref_window err "(--max-new-tokens at most 5 for this prompt)"
copy_overflowing "$work/model" "$work/huge"
run_tool overflow "${roll[@]}" --model "$work/huge" --out "$work/x.jsonl"
expect_rc overflow 1
expect_in overflow err "the model in $work/huge gives a logit that is not finite"
expect_in overflow err "of $work/prompts.jsonl:1's completion 0 (its 11 tokens and 0 drawn)"
run_tool ref_overflow "${roll[@]}" --out "$work/x.jsonl" --ref-model "$work/huge"
expect_rc ref_overflow 1
expect_in ref_overflow err "the reference model in $work/huge gives a logit that is not finite"
[ ! -e "$work/x.jsonl" ] || fail "a failed run left $work/x.jsonl"

# The demos' accuracy tool (tools/demo_accuracy.py): prompts whose answer is the model's own greedy
# answer (odc-generate) count as right, the others as wrong, per task (the text before the colon).
mine=$("$bin/odc-generate" --model "$work/model" --chat --prompt "sort: lemon" --max-new-tokens 12)
/usr/bin/python3 - "$work/accuracy-prompts.jsonl" "$mine" <<'PY'
import json, sys
rows = [("sort: lemon", sys.argv[2]), ("sort: lemon", sys.argv[2] + "x"), ("reverse: apple", "not this")]
open(sys.argv[1], "w").write("".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in rows))
PY
accuracy=$(/usr/bin/python3 "$root/tools/demo_accuracy.py" --build "$bin/.." --model "$work/model" \
  --prompts "$work/accuracy-prompts.jsonl" --out "$work/accuracy.jsonl" --json 2>"$work/accuracy.err") \
  || fail "demo_accuracy.py failed: $(cat "$work/accuracy.err")"
/usr/bin/python3 -c 'import json,sys; a=json.loads(sys.argv[1]); assert abs(a["accuracy"] - 1/3) < 1e-12 and a["per_task"] == {"reverse": 0.0, "sort": 0.5} and a["completions"] == 3, a' \
  "$accuracy" || fail "demo_accuracy.py: expected 1/3 (sort 0.5, reverse 0), got $accuracy"
[ -s "$work/accuracy.err" ] && fail "demo_accuracy.py printed on stderr: $(cat "$work/accuracy.err")"
/usr/bin/python3 "$root/tools/demo_accuracy.py" --build "$bin/.." --model "$work/nothing" \
  --prompts "$work/accuracy-prompts.jsonl" --out "$work/accuracy.jsonl" >/dev/null 2>"$work/accuracy.err" \
  && fail "demo_accuracy.py on a missing model exited 0"
grep -q "nothing" "$work/accuracy.err" || fail "demo_accuracy.py did not pass odc-rollout's error on: $(cat "$work/accuracy.err")"

finish_test "odc-rollout: all checks passed"
