#!/usr/bin/env python3
"""The GPU check's trainer step (scripts/gpu-check.sh): odc-train itself, started directly (one
process, no MPI), proves that a run is reproducible bit for bit and resumes exactly.

  gpu_check_train.py ODC_TRAIN CONFIG DATA WORK [--steps N] [--name NAME] [--set key=value]...
                     [--compare-set key=value]... [--compare-tolerance X]

Runs CONFIG on DATA four times under WORK:
  straight   all train.steps steps, exporting the final weights (float32 safetensors)
  again      the same run once more
  part1      stopped at step steps/2 (train.stop_at_step), a checkpoint at that step
  part2      the same command resumed from that checkpoint (checkpoint.resume: auto) to the end
and requires every step's loss and gradient norm, and the exported weights' sha256, of `again`
and of part1 + part2 to equal `straight`'s exactly. With --compare-set, a fifth run (`compare`: the
same with those settings on top, e.g. the native attention kernels and no recomputation beside a
cuDNN + recomputation run) must give every step's loss within --compare-tolerance (relative,
default 0.02: bf16 attention kernels that round differently drift apart a little over the steps;
a wrong kernel is off by far more) of `straight`'s. Prints one JSON line
{"bench":NAME,"ok":...,"steps":...,"loss_first":...,"loss_last":...,"reward_first":...,
 "reward_last":...,"repeat_bitwise":...,"resume_bitwise":...,"tokens_per_s":...,"compare_max_rel_diff":...,
 "memory_predicted_mib":...,"memory_measured_mib":...,"memory_error_pct":...}
(the memory figures: the straight run's memory plan against its measured peak, the export at its
end included; reported, not a condition) and exits 0 when all hold, 1
otherwise (with what differed on stderr). Standard library only.
"""
import hashlib
import json
import os
import re
import subprocess
import sys


def run(odc_train, config, data, work, name, extra, sets):
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    cmd = [odc_train, config, "--set", f"train.metrics_file={os.path.join(folder, 'metrics.jsonl')}"]
    if data != "-":
        cmd += ["--set", f"data.train={data}"]
    for s in sets + extra:
        cmd += ["--set", s]
    with open(os.path.join(work, name + ".log"), "w") as log:
        done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        print(f"gpu_check_train: the {name} run exited {done.returncode} (log: {work}/{name}.log)", file=sys.stderr)
        sys.exit(1)
    return folder


def memory_check(work, name):
    """odc-train's end-of-run line `memory: predicted P per rank, measured M (...), +E%` (the plan
    against the device allocator's pooled peak on a GPU): (P MiB, M MiB, E), or Nones."""
    pattern = re.compile(r"memory: predicted ([0-9.]+) MiB per rank, measured ([0-9.]+) MiB .*, ([-+][0-9.]+)%")
    with open(os.path.join(work, name + ".log"), errors="replace") as f:
        for line in f:
            m = pattern.search(line)
            if m:
                return float(m.group(1)), float(m.group(2)), float(m.group(3))
    return None, None, None


def steps_of(folder):
    rows = {}
    with open(os.path.join(folder, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "step" in r and "loss" in r:
                rows[r["step"]] = r
    return rows


def iterations_of(folder):
    """The online RL loop's rollout lines, by iteration."""
    rows = {}
    with open(os.path.join(folder, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "reward_mean" in r:
                rows[r["iteration"]] = r
    return rows


def weights_sha(folder):
    h = hashlib.sha256()
    export = os.path.join(folder, "export")
    for name in sorted(os.listdir(export)):
        if name.endswith(".safetensors"):
            with open(os.path.join(export, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def differences(a, b, steps, keys=("loss", "grad_norm"), what="step"):
    out = []
    for s in steps:
        for key in keys:
            if a.get(s, {}).get(key) != b.get(s, {}).get(key):
                out.append(f"{what} {s} {key}: {a.get(s, {}).get(key)!r} vs {b.get(s, {}).get(key)!r}")
    return out


def main():
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    odc_train, config, data, work = sys.argv[1:5]
    sets = []
    compare_sets = []
    tolerance = 0.02
    steps = None
    name = "gpu_check_train"
    rest = sys.argv[5:]
    while rest:
        if rest[0] not in ("--set", "--steps", "--name", "--compare-set", "--compare-tolerance") or len(rest) < 2:
            print(f"gpu_check_train: unexpected argument {rest[0]!r}", file=sys.stderr)
            return 2
        if rest[0] == "--set":
            sets.append(rest[1])
        elif rest[0] == "--compare-set":
            compare_sets.append(rest[1])
        elif rest[0] == "--compare-tolerance":
            tolerance = float(rest[1])
        elif rest[0] == "--steps":
            steps = int(rest[1])
        else:
            name = rest[1]
        rest = rest[2:]
    os.makedirs(work, exist_ok=True)
    dump = subprocess.run([odc_train, config, "--dump-config"] + [x for s in sets for x in ("--set", s)],
                          capture_output=True, text=True, check=False)
    if dump.returncode != 0:
        print(f"gpu_check_train: {config}: {dump.stderr.strip()}", file=sys.stderr)
        return 1
    if steps is None:
        steps = next(int(l.split(":")[1].split("#")[0]) for l in dump.stdout.splitlines() if l.strip().startswith("steps:"))
    half = max(1, steps // 2)
    export = lambda folder: [f"checkpoint.export_hf={os.path.join(work, folder, 'export')}",
                             "checkpoint.export_dtype=float32"]
    straight = run(odc_train, config, data, work, "straight",
                   export("straight") + [f"checkpoint.dir={os.path.join(work, 'straight', 'ckpt')}"], sets)
    again = run(odc_train, config, data, work, "again",
                export("again") + [f"checkpoint.dir={os.path.join(work, 'again', 'ckpt')}"], sets)
    resumed_ckpt = os.path.join(work, "resumed-ckpt")
    part1 = run(odc_train, config, data, work, "part1",
                [f"checkpoint.dir={resumed_ckpt}", f"checkpoint.every={half}", f"train.stop_at_step={half}"], sets)
    part2 = run(odc_train, config, data, work, "part2",
                export("part2") + [f"checkpoint.dir={resumed_ckpt}", f"checkpoint.every={half}"], sets)
    a, b = steps_of(straight), steps_of(again)
    resumed = {**steps_of(part1), **steps_of(part2)}
    all_steps = range(1, steps + 1)
    repeat = differences(a, b, all_steps)
    resume = differences(a, resumed, all_steps)
    ia, ib = iterations_of(straight), iterations_of(again)
    iresumed = {**iterations_of(part1), **iterations_of(part2)}
    if len(ia) != len(iresumed) or len(ia) != len(ib):
        resume.append(f"rollout lines: {len(ia)} straight, {len(ib)} again, {len(iresumed)} resumed")
    rollout_keys = ("reward_mean", "reward_std", "completion_tokens_mean", "completion_tokens_max")
    repeat += differences(ia, ib, sorted(ia), rollout_keys, "iteration")
    resume += differences(ia, iresumed, sorted(ia), rollout_keys, "iteration")
    if weights_sha(straight) != weights_sha(again):
        repeat.append("the exported weights differ")
    if weights_sha(straight) != weights_sha(part2):
        resume.append("the exported weights differ")
    compare, compare_max = [], None
    if compare_sets:
        # Settings given later win: the compare run is the straight run with these on top.
        other = steps_of(run(odc_train, config, data, work, "compare",
                             [f"checkpoint.dir={os.path.join(work, 'compare', 'ckpt')}"] + compare_sets, sets))
        rel = []
        for s in all_steps:
            x, y = a.get(s, {}).get("loss"), other.get(s, {}).get("loss")
            if x is None or y is None:
                compare.append(f"step {s}: loss {x!r} vs {y!r} with {' '.join(compare_sets)}")
                continue
            rel.append(abs(x - y) / max(abs(y), 1e-12))
        compare_max = max(rel) if rel else None
        if compare_max is not None and compare_max > tolerance:
            compare.append(f"losses differ by up to {compare_max:.3e} (relative) from the run with "
                           f"{' '.join(compare_sets)}, over the tolerance {tolerance}")
    for what, diffs in (("repeat", repeat), ("resume", resume), ("compare", compare)):
        for d in diffs[:5]:
            print(f"gpu_check_train: {what}: {d}", file=sys.stderr)
    rates = sorted(r.get("tokens_per_s", 0.0) for r in a.values())
    predicted, measured, error = memory_check(work, "straight")
    rewards = [ia[i]["reward_mean"] for i in sorted(ia)]
    print(json.dumps({"bench": name, "ok": not repeat and not resume, "steps": steps,
                      "loss_first": a.get(1, {}).get("loss"), "loss_last": a.get(steps, {}).get("loss"),
                      "iterations": len(ia), "reward_first": rewards[0] if rewards else None,
                      "reward_last": rewards[-1] if rewards else None,
                      "repeat_bitwise": not repeat, "resume_bitwise": not resume,
                      "tokens_per_s": rates[len(rates) // 2] if rates else None,
                      "compare_sets": compare_sets, "compare_max_rel_diff": compare_max,
                      "compare_ok": not compare, "memory_predicted_mib": predicted,
                      "memory_measured_mib": measured, "memory_error_pct": error}))
    return 0 if not repeat and not resume and not compare else 1


if __name__ == "__main__":
    sys.exit(main())
