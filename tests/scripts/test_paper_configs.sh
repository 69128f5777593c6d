#!/usr/bin/env bash
# Every configs/paper setting simulates, its length stand-in has the statistics its header states
# (pool of 20000 sequences: the sample mean is within ~0.5% of the distribution's), RL settings run
# the equal-count LB-Mini verl allows, and the reproduction's tables (tools/plot_sim.py lengths,
# table's "ODC over both baselines", sensitivity, sharding) come out of real odc-sim output.
# Usage: test_paper_configs.sh BUILD_DIR WORK_DIR
set -uo pipefail
build="$(cd "$1" && pwd)"
work="$2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python=${PYTHON:-/usr/bin/python3}
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Expected pool statistics per dataset (thousands of tokens): mean, min_mean..max_mean, and the
# limits: LongAlign 8K-64K truncated (mean 16.5K), SWE-Smith beyond 64K dropped (28.4K), RL (9.0K).
expect() {
  case $1 in
    sft-longalign-*) echo "16.5 8192 65536" ;;
    sft-swesmith-*) echo "28.4 2048 65536" ;;
    rl-aime-*) echo "9.0 512 32768" ;;
  esac
}
for config in "$root"/configs/paper/*.yaml; do
  name=$(basename "$config" .yaml)
  if ! "$build/bin/odc-sim" "$config" --set sim.minibatches=2 --set data.num_sequences=20000 \
      --set data.minibatch_size=2 >"$work/$name.out" 2>"$work/$name.err"; then
    fail "$name: odc-sim exited non-zero: $(tail -2 "$work/$name.err")"
    continue
  fi
  grep '^{' "$work/$name.out" >"$work/$name.jsonl"
  read -r mean lo hi <<<"$(expect "$name")"
  "$python" - "$work/$name.jsonl" "$name" "$mean" "$lo" "$hi" <<'PY' || fail "$name: see above"
import json, sys
path, name, mean, lo, hi = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rows = [json.loads(l) for l in open(path)]
methods = [r["method"] for r in rows]
problems = []
if name.startswith("rl-") and "odc+lb_mini_equal" not in methods:
    problems.append(f"RL setting without odc+lb_mini_equal: {methods}")
r = rows[0]
# The pool's mean is in the table's "lengths" text; its exact figures in the numeric fields.
pool_mean = float(r["lengths"].split("mean ")[1].split("K")[0])
if abs(pool_mean - mean) > 0.02 * mean:
    problems.append(f"pool mean {pool_mean}K, expected {mean}K +- 2%")
if r["length_share_at_max"] > 0.001:
    problems.append(f"{100 * r['length_share_at_max']:.2f}% of the sequences sit at the cap (a clipping spike)")
if not r["published_lengths"]:
    problems.append("no published statistics to compare with")
if any(row["speedup"] <= 0 for row in rows):
    problems.append("a method without a speedup")
for p in problems:
    print(f"FAIL: {name}: {p}")
sys.exit(1 if problems else 0)
PY
done

# The reproduction's tables from real output: lengths (one row per setting) and sensitivity.
cat "$work"/*.jsonl >"$work/main.jsonl"
rows=$("$python" "$root/tools/plot_sim.py" lengths "$work/main.jsonl" | grep -cE '^\| (rl|sft)-')
[ "$rows" -eq 12 ] || fail "plot_sim.py lengths: $rows setting rows, expected 12"

# The main table's "ODC over both baselines" (reproduce-paper.sh part 1, fewer minibatches): one
# setting, both baselines (the paper's: the reference's packing; ours) and ODC with either LB-Mini.
"$build/bin/odc-sim" "$root/configs/paper/sft-longalign-7b.yaml" --set sim.minibatches=4 \
  --set sim.methods=collective+ref_lb_micro,collective+lb_micro,odc+lb_mini,odc+ref_lb_mini \
  --set sim.baseline=collective+ref_lb_micro --set sim.label=sft-longalign-7b/mb4 | grep '^{' >"$work/both.jsonl"
table=$("$python" "$root/tools/plot_sim.py" table "$work/both.jsonl")
bubble=' [0-9]+\.[0-9]% \([0-9]+\.[0-9]%\) \|'
row=$(echo "$table" | grep -E "^\| sft-longalign-7b \| 8 \| 4 \| [0-9]+\.[0-9]K \| ODC LB-Mini \|( [0-9]+\.[0-9]{3} \|){3}($bubble){3} [0-9]+\.[0-9]% \|\$")
[ "$(echo "$row" | grep -c .)" -eq 1 ] || fail "plot_sim.py table: no single 'ODC over both baselines' row: $table"
echo "$table" | grep -q '^#### ODC over both baselines' || fail "plot_sim.py table: no 'ODC over both baselines' heading"
echo "$table" | grep -qE '^\| sft-longalign-7b \| 8 \| 4 \| [0-9.]+K \| 1\.000 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$' ||
  fail "plot_sim.py table: the speedup row is not at 1.000 for the paper's baseline: $table"
# Its ratio columns are samples/s per device ratios, its bubbles the rows' (recomputed from the JSON).
"$python" - "$work/both.jsonl" "$row" <<'PY' || fail "plot_sim.py table: 'ODC over both baselines' disagrees with the JSON"
import json, sys
rows = {r["method"]: r for r in map(json.loads, open(sys.argv[1]))}
cells = [c.strip() for c in sys.argv[2].strip().strip("|").split("|")]
tput = lambda m: rows[m]["samples_per_s_per_device"]
expected = [tput("odc+lb_mini") / tput("collective+ref_lb_micro"), tput("odc+lb_mini") / tput("collective+lb_micro"),
            tput("collective+lb_micro") / tput("collective+ref_lb_micro")]
problems = [f"column {5 + i}: {cells[5 + i]} vs {e:.6f}" for i, e in enumerate(expected)
            if abs(float(cells[5 + i]) - e) > 1e-3]
for i, m in enumerate(("collective+ref_lb_micro", "collective+lb_micro", "odc+lb_mini")):
    want = f"{100 * rows[m]['bubble_simulated']:.1f}% ({100 * rows[m]['bubble_planned']:.1f}%)"
    if cells[8 + i] != want:
        problems.append(f"bubble of {m}: {cells[8 + i]} vs {want}")
want = f"{100 * rows['collective+ref_lb_micro']['bubble_reference_estimate']:.1f}%"
if cells[11] != want:
    problems.append(f"the paper's baseline as its packing estimates: {cells[11]} vs {want}")
print(f"ODC over both baselines: {' | '.join(cells[4:8])} (expected ratios {', '.join(f'{e:.4f}' for e in expected)})")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
PY

# The sensitivity table (paper-sensitivity.sh, fewer minibatches): speedups over the paper's baseline,
# ours-baseline's over ours.
config="$root/configs/paper/sft-longalign-1.5b.yaml"
for v in "faithful:" "bf16-gathers:--set sim.odc_param_bytes=2" "ours-baseline:--set sim.baseline=collective+lb_micro"; do
  # shellcheck disable=SC2086
  "$build/bin/odc-sim" "$config" --set sim.minibatches=4 --set sim.devices=16 \
    --set sim.methods=collective+ref_lb_micro,collective+lb_micro,odc+lb_mini --set sim.baseline=collective+ref_lb_micro \
    --set "sim.label=la/mb4/${v%%:*}" ${v#*:} | grep '^{' >>"$work/sensitivity.jsonl"
done
table=$("$python" "$root/tools/plot_sim.py" sensitivity "$work/sensitivity.jsonl")
echo "$table" | grep -qE '^\| la/mb4 \| ODC LB-Mini \| [0-9.]+ \|( [0-9.]+ \([-+][0-9.]+\) \|){2}$' ||
  fail "plot_sim.py sensitivity: unexpected table: $table"
echo "$table" | head -1 | grep -qF '| cell | ODC schedule: speedup over Coll LB-Micro (paper) | faithful | bf16-gathers | ours-baseline (over Coll LB-Micro) |' ||
  fail "plot_sim.py sensitivity: the header does not say which baseline: $(echo "$table" | head -1)"
"$python" - "$work/sensitivity.jsonl" "$(echo "$table" | grep '^| la/mb4 ')" <<'PY' || fail "plot_sim.py sensitivity disagrees with the JSON"
import json, sys
rows = {(r["sim"], r["method"]): r for r in map(json.loads, open(sys.argv[1]))}
cells = [c.strip().split()[0] for c in sys.argv[2].strip().strip("|").split("|")[2:]]
tput = lambda v, m: rows[(f"la/mb4/{v}", m)]["samples_per_s_per_device"]
expected = [tput("faithful", "odc+lb_mini") / tput("faithful", "collective+ref_lb_micro"),
            tput("bf16-gathers", "odc+lb_mini") / tput("bf16-gathers", "collective+ref_lb_micro"),
            tput("ours-baseline", "odc+lb_mini") / tput("ours-baseline", "collective+lb_micro")]
bad = [f"{c} vs {e:.6f}" for c, e in zip(cells, expected) if abs(float(c) - e) > 1e-3]
for b in bad:
    print("FAIL: sensitivity cell", b)
sys.exit(1 if bad else 0)
PY
# Across 2 nodes, gathering fp32 instead of bf16 cannot make ODC faster.
"$python" - "$work/sensitivity.jsonl" <<'PY' || fail "bf16 gathers slower than fp32 ones across nodes"
import json, sys
rows = {json.loads(l)["sim"] + json.loads(l)["method"]: json.loads(l) for l in open(sys.argv[1])}
fp32 = rows["la/mb4/faithfulodc+lb_mini"]["minibatch_time_s"]
bf16 = rows["la/mb4/bf16-gathersodc+lb_mini"]["minibatch_time_s"]
print(f"odc+lb_mini minibatch: fp32 gathers {fp32:.4f} s, bf16 {bf16:.4f} s")
sys.exit(0 if bf16 <= fp32 else 1)
PY

# The sweeps' table (reproduce-paper.sh part 2, fewer minibatches): one row per point, the paper's
# baseline at 1.000 with it as the baseline.
for value in 2 4; do
  "$build/bin/odc-sim" "$root/configs/paper/sft-longalign-1.5b.yaml" --set data.minibatch_size=$value --set sim.minibatches=3 \
    --set sim.methods=collective+ref_lb_micro,collective+lb_micro,odc+lb_mini --set sim.baseline=collective+ref_lb_micro \
    --set "sim.label=sweep/minibatch_size=$value" | grep '^{' >>"$work/sweeps.jsonl"
done
table=$("$python" "$root/tools/plot_sim.py" sweep-table "$work/sweeps.jsonl")
rows=$(echo "$table" | grep -cE '^\| minibatch_size [24] \| [0-9.]+K \| 1\.000 \|( [0-9]\.[0-9]{3} \|){3}( [0-9.]+% \|){3}$')
[ "$rows" -eq 2 ] || fail "plot_sim.py sweep-table: $rows well-formed rows, expected 2: $table"

# The sharding comparison's table (reproduce-paper.sh part 4, fewer minibatches) from real output.
for layout in full hybrid hpz; do
  "$build/bin/odc-sim" "$root/configs/paper/sft-swesmith-7b.yaml" --set sim.devices=16 --set sim.devices_per_node=8 \
    --set data.mean_length=4338 --set data.min_length=256 --set data.max_length=8192 --set sim.minibatches=4 \
    --set sim.methods=collective+lb_micro,odc+lb_mini --set sim.sharding=$layout --set "sim.label=sharding/$layout" |
    grep '^{' >>"$work/sharding.jsonl"
done
table=$("$python" "$root/tools/plot_sim.py" sharding "$work/sharding.jsonl")
rows=$(echo "$table" | grep -cE '^\| (full|hybrid|hpz) \| ')
[ "$rows" -eq 6 ] || fail "plot_sim.py sharding: $rows layout rows, expected 6: $table"
echo "$table" | grep -q '^| full | Coll LB-Micro | [0-9.]* | [0-9.]* | 1.000 |' ||
  fail "plot_sim.py sharding: the reference row is not at 1.000: $table"

[ "$failures" -eq 0 ] && echo "ok   [12 paper settings simulate with the stated length statistics; tables from real output]"
exit $((failures > 0))
