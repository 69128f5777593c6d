#!/usr/bin/env bash
# The online RL loop (odc-train with rl.prompts): every iteration samples completions of the next
# prompts with the ranks' current weights, scores them (here an external reward command, so that
# rewards vary on a random model), and trains on them. Proves: a run stopped in the middle of an
# iteration and resumed gives the same rewards, losses and final weights as the straight run,
# bitwise (ODC with comm.deterministic); the collective baseline samples the same first iteration;
# the KL penalty's reference (the starting model, sharded like the policy) is 0 away at first and
# then grows; the rollout metrics are there; a reward command that fails, hangs (rl.reward_timeout_s)
# or is stopped by SIGTERM ends every rank (the stop gracefully); misconfigurations (a group of one,
# a sliding window shorter than prompt + rl.max_new_tokens) and a damaged checkpoint are refused with
# messages naming what is wrong. Usage: test_grpo_online.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
tool="$bin/odc-train"
# shellcheck source=cli_tool_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_tool_checks.sh"

make_tiny_chat_model
cp "$work/chat/tokenizer/"* "$work/model/"
printf '%s\n' '{"prompt": "reverse: apple ->", "answer": "elppa"}' '{"prompt": "add: 2 3 ->", "answer": "5"}' \
  '{"prompt": "sort: lemon ->", "answer": "elmno"}' '{"prompt": "repeat: ab 2 ->", "answer": "abab"}' \
  '{"prompt": "reverse: kiwi ->", "answer": "iwik"}' '{"prompt": "add: 4 4 ->", "answer": "8"}' \
  '{"prompt": "sort: grape ->", "answer": "aegpr"}' '{"prompt": "repeat: x 3 ->", "answer": "xxx"}' \
  >"$work/prompts.jsonl"
# Rewards that vary on a random model (completions also end at an "e", rl.stop): the completion's length in characters, mod 3.
cat >"$work/reward.py" <<'PY'
import json, sys
for line in sys.stdin:
    print(len(json.loads(line)["completion"]) % 3)
PY
# 3 iterations of 4 prompts x 4 completions, 2 steps of 8 rollouts each: 6 steps.
loop=(--set "model.checkpoint=$work/model" --set train.objective=grpo --set "rl.prompts=$work/prompts.jsonl"
      --set rl.iterations=3 --set rl.prompts_per_iteration=4 --set rl.group_size=4 --set rl.max_new_tokens=12
      --set rl.chat=true --set rl.concurrency=6 --set rl.seed=11 --set rl.stop=e
      --set "rl.reward_command=/usr/bin/python3 $work/reward.py" --set data.global_batch_size=8
      --set rl.kl_beta=0.05 --set train.lr=3e-3 --set train.warmup_steps=0 --set train.schedule=constant
      --set comm.deterministic=true
      --set train.log_level=info)
odc=(--set train.comm=odc --set data.balance=lb_mini_equal)

train() {  # NAME RANKS ARGS...: odc-train under mpirun, output in NAME.{out,err}
  local name=$1 ranks=$2
  shift 2
  rc=0
  timeout 300 mpirun --oversubscribe --bind-to none -np "$ranks" "$tool" "${loop[@]}" "$@" \
    >"$work/$name.out" 2>"$work/$name.err" || rc=$?
}

# 1. Straight, stopped in the middle of iteration 2 (after step 3) and resumed, and the collective baseline.
train straight 2 "${odc[@]}" --set "checkpoint.dir=$work/ck-straight" --set "train.metrics_file=$work/straight.jsonl"
expect_rc straight 0
train stopped 2 "${odc[@]}" --set "checkpoint.dir=$work/ck-resumed" --set "train.metrics_file=$work/resumed.jsonl" \
  --set train.stop_at_step=3
expect_rc stopped 0
[ -f "$work/ck-resumed/step-00000003/rollouts.jsonl" ] || fail "the mid-iteration checkpoint step-3 holds no rollouts.jsonl"
cp -r "$work/ck-resumed/step-00000003" "$work/step-3-copy"
train resumed 2 "${odc[@]}" --set "checkpoint.dir=$work/ck-resumed" --set "train.metrics_file=$work/resumed.jsonl"
expect_rc resumed 0
expect_in resumed err "in the middle of iteration 2"
train collective 2 --set train.comm=collective --set data.balance=lb_micro --set "train.metrics_file=$work/collective.jsonl"
expect_rc collective 0
expect_in straight err "iteration 3: 16 rollouts, reward"

if [ -f "$work/straight.jsonl" ] && [ -f "$work/resumed.jsonl" ] && [ -f "$work/collective.jsonl" ]; then
  if ! out=$(/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def lines(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
straight, resumed, collective = lines("straight"), lines("resumed"), lines("collective")
bad = []
steps = [r for r in straight if "loss" in r]
rollouts = [r for r in straight if "reward_mean" in r]
if [r["step"] for r in steps] != [1, 2, 3, 4, 5, 6]:
    bad.append(f"straight steps {[r['step'] for r in steps]}, expected 1..6")
if [(r["iteration"], r["step"], r["rollouts"]) for r in rollouts] != [(1, 1, 16), (2, 3, 16), (3, 5, 16)]:
    bad.append(f"rollout lines {[(r['iteration'], r['step'], r['rollouts']) for r in rollouts]}")
for r in rollouts:
    for key in ("reward_mean", "reward_std", "reward_std_within_groups", "groups_equal_rewards", "accuracy",
                "completion_tokens_mean", "eos_fraction", "sample_s"):
        if key not in r:
            bad.append(f"iteration {r['iteration']}: no {key}")
    if not 1 <= r["completion_tokens_min"] <= r["completion_tokens_max"] <= 12:
        bad.append(f"iteration {r['iteration']}: completion lengths {r['completion_tokens_min']}..{r['completion_tokens_max']}")
if not any(r["stop_fraction"] > 0 for r in rollouts):
    bad.append("rl.stop ended no completion")
if not any(r["reward_std"] > 0 for r in rollouts):
    bad.append("no iteration's rewards vary: nothing to learn from")
if all(r["loss"] == 0 for r in steps):
    bad.append("every loss is 0")
# The KL penalty's reference is the starting model, gathered like the policy: 0 on the first step
# (the policy is the reference; only the forwards' summation order differs), then positive.
if abs(steps[0]["policy"]["kl"]) > 1e-6:
    bad.append(f"step 1 KL {steps[0]['policy']['kl']}: the policy is the reference there")
if not any(r["policy"]["kl"] > 1e-6 for r in steps[2:]):
    bad.append(f"KL never grows: {[r['policy']['kl'] for r in steps]}")
# Stop and resume: bitwise the same rewards, losses and gradient norms.
def key(r):
    if "loss" in r:
        return ("step", r["step"], r["loss"], r["grad_norm"], r["policy"]["kl"], r["policy"]["ratio_mean"])
    return ("rollouts", r["iteration"], r["reward_mean"], r["reward_std"], r["completion_tokens_mean"])
a = [key(r) for r in straight if "loss" in r or "reward_mean" in r]
b = [key(r) for r in resumed if "loss" in r or "reward_mean" in r]
if a != b:
    bad.append("resumed run differs from the straight run:\n  " + "\n  ".join(f"{x} | {y}" for x, y in zip(a, b) if x != y)
               + (f"\n  lengths {len(a)} vs {len(b)}" if len(a) != len(b) else ""))
# The collective baseline samples iteration 1 with the same weights, prompts and seeds.
first = [r for r in collective if "reward_mean" in r][0]
if (first["reward_mean"], first["completion_tokens_mean"]) != (rollouts[0]["reward_mean"], rollouts[0]["completion_tokens_mean"]):
    bad.append(f"collective iteration 1 {first['reward_mean']}, {first['completion_tokens_mean']} vs odc "
               f"{rollouts[0]['reward_mean']}, {rollouts[0]['completion_tokens_mean']}")
c1 = [r for r in collective if "loss" in r][0]
if abs(c1["loss"] - steps[0]["loss"]) > 1e-5 * max(1e-3, abs(steps[0]["loss"])):
    bad.append(f"collective step 1 loss {c1['loss']} vs odc {steps[0]['loss']}")
print("\n".join(bad))
print(f"rewards per iteration {[round(r['reward_mean'], 4) for r in rollouts]}, losses {[round(r['loss'], 6) for r in steps]}",
      file=sys.stderr)
sys.exit(1 if bad else 0)
PY
  ); then
    fail "metrics: $out"
  fi
  # The final weights and optimizer state: bitwise.
  for f in "$work"/ck-straight/step-00000006/rank-*.safetensors; do
    cmp -s "$f" "$work/ck-resumed/step-00000006/$(basename "$f")" || fail "final checkpoint file $(basename "$f") differs"
  done
  ls "$work"/ck-straight/step-00000006/rank-*.safetensors >/dev/null 2>&1 || fail "no shard files in ck-straight/step-00000006"
else
  fail "a metrics file is missing"
fi

# 2. A damaged mid-iteration checkpoint is refused.
mkdir -p "$work/ck-damaged" && cp -r "$work/step-3-copy" "$work/ck-damaged/step-00000003"
sed -i '1s/"reward":[-0-9.e]*/"reward":9/' "$work/ck-damaged/step-00000003/rollouts.jsonl"
train damaged 2 "${odc[@]}" --set "checkpoint.dir=$work/ck-damaged-run" \
  --set "checkpoint.resume=$work/ck-damaged/step-00000003"
expect_rc damaged 1
expect_in damaged err "does not match the fingerprint its manifest recorded"
# The hint a damaged shard gets (here: no earlier checkpoint), and no "resumed from" before the refusal.
expect_in damaged err "after the checkpoint was saved; there is no earlier good checkpoint next to it to resume from"
grep -q "resumed from" "$work/damaged.err" && fail "damaged: 'resumed from' logged before the refusal"

rm -rf "$work/ck-missing" && mkdir -p "$work/ck-missing" && cp -r "$work/step-3-copy" "$work/ck-missing/step-00000003"
rm -f "$work/ck-missing/step-00000003/rollouts.jsonl"
train missing 2 "${odc[@]}" --set "checkpoint.dir=$work/ck-missing-run" \
  --set "checkpoint.resume=$work/ck-missing/step-00000003"
expect_rc missing 1
expect_in missing err "step-00000003/rollouts.jsonl is missing (the rollouts of the online RL iteration it was saved in"
expect_in missing err "there is no earlier good checkpoint next to it to resume from"
grep -q "resumed from" "$work/missing.err" && fail "missing: 'resumed from' logged before the refusal"

# 3. A reward command that fails stops every rank with its message (its status in words); one that
# never returns is killed, with what it started, at rl.reward_timeout_s, and a stop request while
# it runs (odc-run's, from SIGTERM) kills it at once and ends the run as a stop after a step does:
# a checkpoint at the iteration's end, exit 0.
train reward_fails 2 "${odc[@]}" --set "rl.reward_command=exit 3"
expect_rc reward_fails 1
expect_in reward_fails err "rl.reward_command, iteration 1: reward command 'exit 3' failed (exit status 3)"
# A blank command (quoted in YAML: unquoted, ' ' is empty, the default: rl.verifier scores) runs nothing.
train reward_blank 1 "${odc[@]}" --set "rl.reward_command=' '"
expect_rc reward_blank 1
expect_in reward_blank err "rl.reward_command (from --set) is blank, a command line that runs nothing"
marker="grpo-online-test-sleep-$$"  # a copy of sleep: the command's processes are found by its name
cp "$(command -v sleep)" "$work/$marker"
start=$(date +%s)
train reward_hangs 2 "${odc[@]}" --set "rl.reward_command=$work/$marker 60 & $work/$marker 60" \
  --set rl.reward_timeout_s=1 --set comm.timeout_s=5
expect_rc reward_hangs 1
expect_in reward_hangs err "rl.reward_command, iteration 1: reward command '$work/$marker 60 & $work/$marker 60' did not finish within 1 s (rl.reward_timeout_s): it was killed with every process it started"
[ $(( $(date +%s) - start )) -le 60 ] || fail "reward_hangs: rl.reward_timeout_s 1 took $(( $(date +%s) - start )) s"
# A reward command allowed longer than the other ranks may wait for its rewards is refused before
# anything runs, naming both keys (it would otherwise end the run as a lost peer).
train reward_outlasts_wait 2 "${odc[@]}" --set rl.reward_timeout_s=10 --set comm.timeout_s=5
expect_rc reward_outlasts_wait 1
expect_in reward_outlasts_wait err "rl.reward_command on 2 ranks: comm.timeout_s = 5 s must exceed rl.reward_timeout_s = 10 s by more than 3 s"
expect_in reward_outlasts_wait err "raise comm.timeout_s above 13 or lower rl.reward_timeout_s"
cat >"$work/second_hangs.sh" <<SH
#!/bin/sh
# Rewards as reward.py gives them; the second call (iteration 2) never returns.
n=\$(cat "$work/calls" 2>/dev/null || echo 0); n=\$((n + 1)); echo \$n >"$work/calls"
[ \$n -eq 2 ] && exec "$work/$marker" 60
exec /usr/bin/python3 "$work/reward.py"
SH
chmod +x "$work/second_hangs.sh"
# (no timeout(1) in front: it would pass the test's SIGTERM on twice, and a second one stops at once)
"$bin/odc-run" --local 2 -- "$tool" "${loop[@]}" "${odc[@]}" --set "rl.reward_command=$work/second_hangs.sh" \
  --set "checkpoint.dir=$work/ck-stopped" >"$work/reward_stop.out" 2>"$work/reward_stop.err" &
pid=$!
for _ in $(seq 1 600); do pgrep -f "^$work/$marker" >/dev/null && break; sleep 0.1; done
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
expect_rc reward_stop 0
expect_in reward_stop err "while rl.reward_command scored iteration 2: the command and every process it started were killed"
[ -d "$work/ck-stopped/step-00000002" ] && [ ! -e "$work/ck-stopped/step-00000002/rollouts.jsonl" ] ||
  fail "reward_stop: no checkpoint at step 2, the end of iteration 1: $(ls "$work/ck-stopped" 2>&1)"
sleep 0.5
! pgrep -f "$marker" >/dev/null || fail "a reward command outlived the run: $(pgrep -af "$marker")"

# 4. Misconfigurations, refused before anything runs.
train both_scores 1 --set rl.verifier=number
expect_rc both_scores 1
expect_in both_scores err "rl.verifier (from --set) and rl.reward_command (from --set) both score completions: give one"
train no_tokenizer 1 --set data.tokenizer=/nonexistent/tokenizer.json
expect_rc no_tokenizer 1
expect_in no_tokenizer err "rl.prompts: the prompts are tokenized with data.tokenizer or model.checkpoint's tokenizer.json, but '/nonexistent/tokenizer.json' does not exist"
train steps 1 --set train.steps=4
expect_rc steps 1
expect_in steps err "train.steps (from --set) does not apply to the online RL loop (rl.prompts)"
train batch 1 --set data.global_batch_size=5
expect_rc batch 1
expect_in batch err "= 16 rollouts per iteration, which do not divide into global batches of 5 sequences"
solo() {  # NAME ARGS...: odc-train on one rank without mpirun (for refusals at start-up: no launch cost)
  local name=$1
  shift
  rc=0
  timeout 60 "$tool" "${loop[@]}" "$@" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
}
solo lone --set rl.group_size=1
expect_rc lone 1
expect_in lone err "config key 'rl.group_size' in --set must be >= 2, found 1"
solo timeout_without_command --set rl.reward_command= --set rl.reward_timeout_s=5
expect_rc timeout_without_command 1
expect_in timeout_without_command err "rl.reward_timeout_s (from --set) limits rl.reward_command, which is not set"
solo empty_stop --set rl.stop= --dump-config
expect_rc empty_stop 0  # the documented default is empty: an empty value is that
expect_in empty_stop out 'stop: ""'
copy_as_mistral "$work/model" "$work/mistral"
solo window --set "model.checkpoint=$work/mistral"
expect_rc window 1
expect_in window err "tokens and rl.max_new_tokens is 12:"
expect_in window err "more than the model's attention window of 16 (sliding_window in $work/mistral/config.json)"
rc=0
"$tool" --set train.objective=grpo --set data.format=rollouts --set data.train=x.jsonl --set rl.group_size=2 \
  >"$work/offline.out" 2>"$work/offline.err" || rc=$?
expect_rc offline 1
expect_in offline err "rl.group_size (from --set) shapes only the online RL loop, and rl.prompts is not set"

finish_test "test_grpo_online: OK"
