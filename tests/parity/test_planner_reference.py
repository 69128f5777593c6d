#!/usr/bin/env python3
"""Our planners against the paper's reference packing, run side by side on the same minibatches.

The reference implementation's planning (its `packing.py`: `DynamicSameMicro` = LB-Micro,
`DynamicDiffMicro` = LB-Mini) is re-derived here from its description (../shared/PAPER.md, section
2.2), not copied:
  * Karmarkar-Karp largest differencing into k parts (with equal part sizes: the sorted items taken
    k at a time, one per part), then a local search of single-item swaps between the costliest part
    and any other, or the cheapest and any other, each swap strictly narrowing that pair's gap
    without inverting it, until none applies;
  * LB-Micro: an equal-count split over the devices; the common microbatch count starts at the
    largest over devices of min(sequences, ceil(tokens / cap)) and grows while any device's
    cost-balanced split overfills a microbatch in tokens;
  * LB-Mini: a split balancing total cost (counts may differ; when they can be equal, the equal
    split is kept if its max - min spread is smaller); each device its own smallest count whose
    cost-balanced split respects the cap;
  * microbatches sorted by decreasing cost.
Planned makespans, in cost units: ODC = max over devices of (its microbatches x c + its cost);
collective = sum over microbatch steps of (c + the slowest device's microbatch), with c the fit's
per-microbatch constant (0.951 s for 7B). Ours is told c (CostModel::per_microbatch) and weighs it
when it chooses LB-Mini's split; the reference's packing cannot (it never sees c).

Minibatches, cap 65536, the reference's fitted 7B cost (a s'^2 + b s', s' = s/32000):
  * LongAlign-like lengths (log-normal, sigma 1, untruncated mean a quarter of 64K, clipped to
    [64, 65536]): 8 and 16 devices x 1, 2, 4 and 8 sequences per device;
  * SWE-Smith-like lengths (log-normal, untruncated mean 34700, sigma 0.642, so mu = ln(34700) -
    sigma^2/2; rounded, clipped below at 64, lengths beyond 65536 dropped and drawn again, as the
    reference's dataset filter drops them): 8 and 16 devices x 2 and 4 sequences per device;
  these 12 paper settings with 24 seeded minibatches each; beyond them, two LongAlign-like settings
  with many parts (64 devices x 2, 1 device x 256), 4 minibatches each.
Requires, on every minibatch: our plan's makespan <= the reference's, to rounding (TOLERANCE: our
planners take the reference's plan as a candidate and keep the shorter), LB-Mini under ODC's makespan
and LB-Micro under the collective's; the simulator's own reference planners (odc_plan_dump with
balance ref_lb_micro, ref_lb_mini, and ref_lb_mini with reference_split makespan) equal to the
re-derivation here, device by device and microbatch by microbatch. Prints the side-by-side table
per setting (mean makespans, the worst single ours/ref, microbatches per device, imbalance = max/mean
device cost - 1).

  test_planner_reference.py --dump PATH/odc_parity_dump --workdir DIR   (odc_plan_dump is found beside it)
"""
import argparse
import heapq
import json
import math
import os
import random
import subprocess
import sys

CAP = 65536
A, B = 4.348357 / 32000.0 ** 2, 8.768377 / 32000.0  # the reference's 7B fit, per raw token
C = 0.951  # its fixed cost per microbatch (seconds, as A and B)
SEEDS = 24
# Ours <= the reference's makespan on every minibatch, to rounding: the planner keeps the reference's
# plan when it is shorter by more than 1e-12 relative (a tie to the rounding of differently ordered
# sums keeps ours), and the makespans here are sums of the same costs in yet another order (a few
# hundred terms at most, each rounding by 2^-53 relative: below 1e-13).
TOLERANCE = 2e-12


def cost(length):
    return A * length * length + B * length


# ---- the reference's packing, re-derived ----------------------------------------------------------

class _State:
    """Largest differencing's partial solution: k sets of (items, sum), by decreasing sum."""

    def __init__(self, items, k):
        self.sets = [([], 0.0) for _ in range(k)]
        for i, (index, c) in enumerate(items):
            self.sets[i] = ([index], c)
        self._sort()

    def _sort(self):
        self.sets.sort(key=lambda s: (-s[1], s[0][:1]))

    def spread(self):
        return self.sets[0][1] - self.sets[-1][1]

    def merge(self, other):
        k = len(self.sets)
        self.sets = [(self.sets[i][0] + other.sets[k - 1 - i][0], self.sets[i][1] + other.sets[k - 1 - i][1])
                     for i in range(k)]
        self._sort()


def karmarkar_karp(costs, k, equal_size):
    items = sorted((c, i) for i, c in enumerate(costs))
    heap, tie = [], 0
    if equal_size:
        assert len(items) % k == 0
        groups = [items[o:o + k] for o in range(0, len(items), k)]
    else:
        groups = [[item] for item in items]
    for group in groups:
        state = _State([(i, c) for c, i in group], k)
        heapq.heappush(heap, (-state.spread(), tie, state))
        tie += 1
    while len(heap) > 1:
        _, _, s0 = heapq.heappop(heap)
        _, _, s1 = heapq.heappop(heap)
        s0.merge(s1)
        heapq.heappush(heap, (-s0.spread(), tie, s0))
        tie += 1
    return [sorted(s[0]) for s in heap[0][2].sets]


def refine(parts, costs):
    """Single-item swaps between the costliest (or cheapest) part and another that strictly narrow
    the pair's gap without inverting it; the largest such change per pair, until none applies."""
    for _ in range(10 * (sum(len(p) for p in parts) + len(parts))):
        sums = [sum(costs[i] for i in p) for p in parts]
        order = sorted(range(len(parts)), key=lambda p: sums[p])
        pairs = [(order[-1], lo) for lo in order[:-1]] + [(hi, order[0]) for hi in reversed(order[1:])]
        done = False
        for hi, lo in pairs:
            gap = sums[hi] - sums[lo]
            if gap <= 0:
                continue
            best = None
            for x in parts[hi]:
                for y in parts[lo]:
                    d = costs[x] - costs[y]
                    if 0 < d <= gap / 2 and (best is None or d > best[0]):
                        best = (d, x, y)
            if best:
                _, x, y = best
                parts[hi].remove(x); parts[hi].append(y); parts[hi].sort()
                parts[lo].remove(y); parts[lo].append(x); parts[lo].sort()
                done = True
                break
        if not done:
            return parts
    return parts


def partition(indices, k, equal_size):
    local = [cost_of[i] for i in indices]
    parts = refine(karmarkar_karp(local, k, equal_size), local)
    return [[indices[i] for i in p] for p in parts]


def fits(parts):
    return all(sum(lengths_of[i] for i in p) <= CAP for p in parts)


def min_count(indices):
    return max(1, min(len(indices), math.ceil(sum(lengths_of[i] for i in indices) / CAP)))


def reference_plan(lengths, world, balance, split_choice="spread"):
    """Per device, its microbatches (lists of sequence indices). split_choice (LB-Mini): "spread" as
    the reference keeps the equal-count split, or "makespan" (the simulator's switch): the split whose
    packed ODC makespan, c included, is lower."""
    global cost_of, lengths_of
    lengths_of = lengths
    cost_of = [cost(s) for s in lengths]
    everything = list(range(len(lengths)))
    spread = lambda split: (max(sum(cost_of[i] for i in p) for p in split)
                            - min(sum(cost_of[i] for i in p) for p in split))

    def own_counts(split):
        micro = []
        for p in split:
            m = min_count(p)
            while True:
                mb = partition(p, m, False)
                if fits(mb) or m >= len(p):
                    break
                m += 1
            micro.append(mb)
        return micro

    if balance == "lb_micro":
        split = partition(everything, world, True)
        m = max(min_count(p) for p in split)
        while True:
            micro = [partition(p, m, False) for p in split]
            if all(fits(mb) for mb in micro) or m >= min(len(p) for p in split):
                break
            m += 1
    else:
        split = partition(everything, world, False)
        micro = own_counts(split)
        if len(lengths) % world == 0:
            equal = partition(everything, world, True)
            if split_choice == "spread" and spread(equal) < spread(split):
                micro = own_counts(equal)
            elif split_choice == "makespan":
                other = own_counts(equal)
                if makespans(plan_costs(other), C)[0] < makespans(plan_costs(micro), C)[0]:
                    micro = other
    return [[mb for mb in mbs if mb] for mbs in micro]


def plan_costs(plan):
    """Per device, its microbatch costs by decreasing cost."""
    return [sorted((sum(cost_of[i] for i in mb) for mb in mbs if mb), reverse=True) for mbs in plan]


# ---- measures -------------------------------------------------------------------------------------

def makespans(plan, c=0.0):
    """plan: per device, its microbatch costs by decreasing cost."""
    odc = max(len(mbs) * c + sum(mbs) for mbs in plan)
    steps = max(len(mbs) for mbs in plan)
    collective = sum(c + max((mbs[m] if m < len(mbs) else 0.0) for mbs in plan) for m in range(steps))
    totals = [sum(mbs) for mbs in plan]
    imbalance = max(totals) / (sum(totals) / len(totals)) - 1.0
    return odc, collective, sum(len(mbs) for mbs in plan) / len(plan), imbalance


def longalign_like(rng, count):
    mu = math.log(CAP / 4.0) - 0.5
    return [min(max(int(round(math.exp(rng.gauss(mu, 1.0)))), 64), CAP) for _ in range(count)]


SWE_SIGMA = 0.642
SWE_MU = math.log(34700.0) - SWE_SIGMA ** 2 / 2  # untruncated mean 34700


def swesmith_like(rng, count):
    """Rounded, clipped below at 64; a draw beyond the cap is dropped and drawn again (the reference's
    dataset filter keeps only sequences within the maximum length)."""
    lengths = []
    while len(lengths) < count:
        length = max(int(round(math.exp(rng.gauss(SWE_MU, SWE_SIGMA)))), 64)
        if length <= CAP:
            lengths.append(length)
    return lengths


DATASETS = {"longalign": longalign_like, "swesmith": swesmith_like}
SEED_BASE = {"longalign": 0, "swesmith": 500000}  # distinct rng seeds per dataset


def check_equal(case, ref_plan, dumped, failures):
    """The simulator's reference planner (odc_plan_dump, balance ref_*) must equal the re-derivation:
    the same devices in the same order, each with the same microbatches (as sets of sequences), and
    so the same makespans (to 1e-9 relative: the same sums, printed and parsed)."""
    ours = [sorted(tuple(mb) for mb in r["microbatches"]) for r in dumped["ranks"]]
    theirs = [sorted(tuple(sorted(mb)) for mb in mbs) for mbs in ref_plan]
    label = f"{case['balance']} ({case.get('reference_split', 'spread')}) world {case['world']} x " \
            f"{len(case['lengths']) // case['world']}"
    if ours != theirs:
        failures.append(f"{label}: the C++ reference plan differs from the re-derivation: {ours} vs {theirs}")
        return
    ref = makespans(plan_costs(ref_plan), C)
    for key, value in (("makespan_odc", ref[0]), ("makespan_collective", ref[1])):
        if abs(dumped[key] - value) > 1e-9 * value:
            failures.append(f"{label}: {key} {dumped[key]} vs the re-derivation's {value}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dump", required=True, help="path to odc_parity_dump (its directory holds odc_plan_dump)")
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    tool = os.path.join(os.path.dirname(os.path.abspath(args.dump)), "odc_plan_dump")
    cases, where = [], []  # where: per case, its dataset and seed (for the failure messages)
    settings = [("longalign", world, per_device, SEEDS) for world in (8, 16) for per_device in (1, 2, 4, 8)]
    settings += [("swesmith", world, per_device, SEEDS) for world in (8, 16) for per_device in (2, 4)]
    # Beyond the paper's settings, a few with many parts (devices, or microbatches per device), where
    # the C++ swap search takes its shortcut for 32 parts or more.
    settings += [("longalign", 64, 2, 4), ("longalign", 1, 256, 4)]
    for dataset, world, per_device, seeds in settings:
        for seed in range(seeds):
            rng_seed = SEED_BASE[dataset] + 1000 * world + 100 * per_device + seed
            lengths = DATASETS[dataset](random.Random(rng_seed), world * per_device)
            for balance in ("lb_mini", "lb_micro"):
                base = {"lengths": lengths, "world": world, "cap": CAP, "a": A, "b": B, "c": C}
                cases.append(dict(base, balance=balance))
                cases.append(dict(base, balance="ref_" + balance))
                where += [(dataset, rng_seed)] * 2
                if balance == "lb_mini":
                    cases.append(dict(base, balance="ref_lb_mini", reference_split="makespan"))
                    where.append((dataset, rng_seed))
    proc = subprocess.run([tool], input="".join(json.dumps(c) + "\n" for c in cases), capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        print(f"FAIL: odc_plan_dump exited {proc.returncode}: {proc.stderr.strip()}")
        return 1
    dumped_all = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(dumped_all) == len(cases)
    rows, failures, compared = {}, [], 0
    for case, dumped, (dataset, rng_seed) in zip(cases, dumped_all, where):
        balance = case["balance"]
        at = f"{dataset} lengths, rng seed {rng_seed}"
        if balance.startswith("ref_"):
            before = len(failures)
            check_equal(case, reference_plan(case["lengths"], case["world"], balance[4:],
                                             case.get("reference_split", "spread")), dumped, failures)
            failures[before:] = [f"{f} ({at})" for f in failures[before:]]
            compared += 1
            continue
        key = (balance, dataset, case["world"], len(case["lengths"]) // case["world"])
        ref = makespans(plan_costs(reference_plan(case["lengths"], case["world"], balance)), C)
        mine = makespans([sorted(r["microbatch_costs"], reverse=True) for r in dumped["ranks"]], C)
        # Our planner's own makespans (with c) agree with the ones computed here.
        which_key = "makespan_odc" if balance == "lb_mini" else "makespan_collective"
        if abs(dumped[which_key] - mine[0 if balance == "lb_mini" else 1]) > 1e-9 * max(1.0, mine[0]):
            failures.append(f"{balance}: odc_plan_dump's {which_key} {dumped[which_key]} vs {mine} ({at})")
        which = 0 if balance == "lb_mini" else 1
        rows.setdefault(key, []).append((ref, mine))
        if mine[which] > ref[which] * (1 + TOLERANCE):
            failures.append(f"{balance} world {case['world']} x {key[3]} ({at}): a minibatch's makespan "
                            f"{mine[which]!r} > the reference's {ref[which]!r}")
    print("| planner | lengths | devices | seqs/device | makespan (ref) | makespan (ours) | ours/ref | worst single | "
          "microbatches/device (ref / ours) | imbalance (ref / ours) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(rows):
        balance, dataset, world, per = key
        which = 0 if balance == "lb_mini" else 1
        pairs = rows[key]
        mean = lambda xs: sum(xs) / len(xs)
        ref_m, our_m = mean([r[which] for r, _ in pairs]), mean([o[which] for _, o in pairs])
        worst = max(o[which] / r[which] for r, o in pairs)
        print(f"| {balance} ({'odc' if which == 0 else 'collective'}) | {dataset} | {world} | {per} | {ref_m:.3f} | {our_m:.3f} | "
              f"{our_m / ref_m:.4f} | {worst:.4f} | {mean([r[2] for r, _ in pairs]):.2f} / "
              f"{mean([o[2] for _, o in pairs]):.2f} | {mean([r[3] for r, _ in pairs]):.4f} / "
              f"{mean([o[3] for _, o in pairs]):.4f} |")
    for f in failures:
        print("FAIL:", f)
    print(f"planner vs reference: {len(cases) - compared} plans of ours no worse than the reference's, "
          f"{compared} reference plans equal to the re-derivation; {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
