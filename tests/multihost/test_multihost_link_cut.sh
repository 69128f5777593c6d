#!/usr/bin/env bash
# A network fault between 2 hosts x 2 ranks (network namespaces): host 1's link is cut in the
# middle of an ODC run. The job must end, within comm.timeout_s and a margin, with a non-zero exit
# and an error naming the ranks it cannot reach and what it was doing; every checkpoint in the
# directory is complete (a half-written one is never committed); once the link is back, the job
# resumes from the last checkpoint and its steps repeat the losses of a run that was never cut.
# Usage: test_multihost_link_cut.sh FIXTURE_DIR BIN_DIR WORK_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bin="$(cd "$2" && pwd)"
work="$3"
rm -rf "$work" && mkdir -p "$work" && work="$(cd "$work" && pwd)"
timeout_s=8
restore() { "$hosts" link 1 up 2> /dev/null || true; }
trap restore EXIT

"$bin/odc-data" synth --out "$work/data.jsonl" --num 256 --max-length 96 --mean-length 32 --seed 9 > /dev/null
common=(--set "model.config={vocab_size: 96, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}"
        --set "data.train=$work/data.jsonl" --set data.minibatch_size=2 --set train.steps=400 --set train.warmup_steps=2
        --set data.max_tokens_per_microbatch=96 --set train.peak_flops=1e10 --set comm.timeout_s=$timeout_s
        --set "checkpoint.dir=$work/ckpt" --set checkpoint.every=4 --set "train.metrics_file=$work/metrics-{rank}.jsonl")

across "$bin/odc-train" "${common[@]}" > "$work/cut.log" 2>&1 &
job=$!
# Cut once a few checkpoints are committed, while the job trains.
for _ in $(seq 1 600); do [ -d "$work/ckpt/step-00000008" ] && break; sleep 0.1; done
if [ ! -d "$work/ckpt/step-00000008" ]; then
  kill -9 "$job" 2> /dev/null
  fail "the run reaches step 8" "$(tail -30 "$work/cut.log")"
  echo "$failures failure(s)"; exit 1
fi
sleep 0.3
"$hosts" link 1 down
cut_at=$(date +%s.%N)
since_cut() { /usr/bin/python3 -c "import sys,time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$cut_at"; }
# When the first rank reports (the ranks behind the cut say nothing we can see), and when the
# launcher, which then waits for the daemon behind the cut until TCP gives up on it, exits.
reported=""
while kill -0 "$job" 2> /dev/null; do
  [ -z "$reported" ] && grep -q "error" "$work/cut.log" && reported=$(since_cut)
  sleep 0.1
done
wait "$job"; rc=$?
elapsed=$(since_cut)
[ -n "$reported" ] || { grep -q "error" "$work/cut.log" && reported="$elapsed"; }
# Anything the job left on the hosts (a daemon the abort could not reach) goes now.
for h in 0 1; do ip netns pids "$ODC_NETNS-h$h" 2> /dev/null | xargs -r kill -9 2> /dev/null; done
restore

# The report: comm.timeout_s, plus the watchdog's few seconds of querying the peers. The exit: the
# report, plus TCP giving up on the launcher's connection to the daemon behind the cut (~13 s on
# these hosts, net.ipv4.tcp_retries2 = 5; scripts/netns-hosts.sh).
if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
  fail "the cut ends the job" "exit $rc after ${elapsed} s (expected a non-zero exit, not a hang)"$'\n'"$(tail -30 "$work/cut.log")"
elif [ -z "$reported" ]; then
  fail "a rank reports the cut" "exit $rc after ${elapsed} s, but no rank printed an error:"$'\n'"$(tail -30 "$work/cut.log")"
elif /usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[3]) + 6 and float(sys.argv[2]) <= float(sys.argv[1]) + 30 else 1)" "$reported" "$elapsed" "$timeout_s"; then
  echo "ok   [the cut ends the job] reported after ${reported} s (comm.timeout_s $timeout_s), exit $rc after ${elapsed} s"
else
  fail "the cut ends the job in time" "reported after ${reported} s, exit $rc after ${elapsed} s (comm.timeout_s $timeout_s)"
fi
# The error names the unreachable ranks (host 1 runs ranks 2 and 3) and the operation.
# Either the watchdog's report ("has waited 8.1 s in '<wait>' ...; rank(s) 2, 3 did not answer"), a
# gather's ("<what> stalled: no completion from rank(s) 2, 3") or the pushes' ("<what> stalled after
# comm.timeout_s ...: gradient pushes still missing from rank 2 ...").
line=$(grep -m1 -E "has waited .* in '.*'.*rank\(s\) 2, 3 did not answer|stalled: no completion from rank\(s\) [23]|stalled after .*missing from rank [23]" "$work/cut.log")
if [ -n "$line" ]; then echo "ok   [the error names the unreachable ranks] $(echo "$line" | head -c 300)"
else fail "the error names the unreachable ranks" "$(grep -i -m8 -E "error|timeout|rank" "$work/cut.log")"; fi

# Every committed checkpoint is whole: its manifest and every rank's shards.
last=""
for dir in "$work"/ckpt/step-*; do
  [ -d "$dir" ] || continue
  if /usr/bin/python3 - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
missing = [f"rank-{r:05}.safetensors" for r in range(m["world_size"])
           if not os.path.isfile(os.path.join(d, f"rank-{r:05}.safetensors"))]
sys.exit("missing " + ", ".join(missing) if missing else 0)
PY
  then last="$dir"; else fail "checkpoint $(basename "$dir") is whole" "incomplete"; fi
done
[ -n "$last" ] || fail "a checkpoint was committed before the cut" "none in $work/ckpt"

# The link is back: resume from the last checkpoint, train two steps.
step=$((10#${last##*step-}))
resume() { across "$bin/odc-train" "${common[@]}" --set checkpoint.resume=auto --set train.stop_at_step=$((step + 2)) \
             --set "train.metrics_file=$work/resumed-{rank}.jsonl" > "$work/resume.log" 2>&1; }
resumed=0
resume && resumed=1
# netns-hosts.sh's `link up` proved a TCP connection gets through; should mpirun's own daemon start
# still fail (before any rank ran, so before our code), that is the launcher's, and it gets one retry.
if [ $resumed -eq 0 ] && grep -q "ORTE was unable to reliably start" "$work/resume.log"; then
  echo "note mpirun could not start its daemon on host 1 after the link came back; retrying once"
  cp "$work/resume.log" "$work/resume-first.log"
  resume && resumed=1
fi
if [ $resumed -eq 1 ]; then
  if grep -q "resumed from .*step-0*$step" "$work/resume.log"; then echo "ok   [resumed from step $step after the link came back]"
  else fail "resumed from the last checkpoint" "$(grep -m3 -i resum "$work/resume.log")"; fi
  # The resumed steps against a run that never met the cut (the cut run's own losses after its
  # last checkpoint may all have been lost with it): the same steps, the same losses.
  across "$bin/odc-train" "${common[@]}" --set checkpoint.resume=never --set "checkpoint.dir=$work/ref-ckpt" \
    --set train.stop_at_step=$((step + 2)) --set "train.metrics_file=$work/straight-{rank}.jsonl" \
    > "$work/straight.log" 2>&1 || fail "the uninterrupted reference run" "$(tail -20 "$work/straight.log")"
  out=$(/usr/bin/python3 - "$work/straight-0.jsonl" "$work/resumed-0.jsonl" "$work/metrics-0.jsonl" <<'PY'
import json, sys
def losses(path):
    try:
        return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
    except FileNotFoundError:
        return {}
straight, again, cut = losses(sys.argv[1]), losses(sys.argv[2]), losses(sys.argv[3])
if len(again) != 2 or not set(again) <= set(straight):
    sys.exit(f"resumed steps {sorted(again)}, uninterrupted steps up to {max(straight, default=0)}")
worst = max(abs(straight[s] - again[s]) / abs(straight[s]) for s in again)
# The cut run, up to the cut, was that same run.
before = sorted(set(cut) & set(straight))
worst_cut = max((abs(straight[s] - cut[s]) / abs(straight[s]) for s in before), default=0.0)
print(f"resumed steps {sorted(again)}: worst relative difference {worst:.2e} against an uninterrupted run "
      f"(whose steps 1-{max(before, default=0)} the cut run matched to {worst_cut:.2e})")
sys.exit(0 if max(worst, worst_cut) <= 1e-5 else 1)
PY
  ) && echo "ok   [the resumed steps repeat an uninterrupted run's losses] $out" || fail "the resumed steps repeat an uninterrupted run's losses" "$out"
else
  fail "resume after the link came back" "$(tail -30 "$work/resume.log")"
fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
