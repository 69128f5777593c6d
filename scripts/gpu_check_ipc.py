#!/usr/bin/env python3
"""The GPU check's multi-process step (scripts/gpu-check.sh, "ipc-train"): several odc-train
processes on one GPU, started by `odc-run --local N` (no MPI on the lent machine), ODC over CUDA
IPC (configs/gpu-check-ipc.yaml: the same global batch whatever N).

  gpu_check_ipc.py ODC_RUN ODC_TRAIN CONFIG DATA WORK [--ranks 1,2,4] [--tolerance T] [--set key=value]...

Runs CONFIG on DATA with each N of --ranks, then, on the second N (2 by default), twice more with
comm.deterministic (fp32 gathers, then bf16 gathers). Requires
  * every N's loss at every step within a relative T (default 0.02) of N = 1's: the same model on
    the same data; bf16 compute rounds in other places when a microbatch is split otherwise, and
    2% over 20 steps is far below what a wrong gradient does (a lost push, a stale gather: the loss
    goes its own way within a few steps);
  * the bf16-gather run equal to the fp32-gather run bit for bit (bf16 compute rounds the weights
    to bf16 anyway, so gathering a bf16 copy must not change a bit).
Prints one JSON line {"bench":"gpu_check_ipc","ok":...,"runs":[{"ranks":N,"loss_last":...,
"max_rel_diff":...,"tokens_per_s":...},...],"bf16_gathers_bitwise":...} and exits 0 when all hold,
1 otherwise (what differed on stderr). Standard library only.
"""
import json
import os
import subprocess
import sys


def run(odc_run, odc_train, config, data, work, name, ranks, sets, tool="gpu_check_ipc"):
    """Runs odc-train under `odc-run --local ranks` and returns its metrics rows by step (None: it failed)."""
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    metrics = os.path.join(folder, "metrics.jsonl")
    cmd = [odc_run, "--local", str(ranks), odc_train, config, "--set", f"data.train={data}",
           "--set", f"train.metrics_file={metrics}"]
    for s in sets:
        cmd += ["--set", s]
    with open(os.path.join(work, name + ".log"), "w") as log:
        done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        print(f"{tool}: the {name} run exited {done.returncode} (log: {work}/{name}.log)", file=sys.stderr)
        return None
    rows = {}
    with open(metrics) as f:
        for line in f:
            r = json.loads(line)
            if "step" in r and "loss" in r:
                rows[r["step"]] = r
    return rows


def median(values):
    values = sorted(v for v in values if v is not None)
    return values[len(values) // 2] if values else None


def main():
    args = sys.argv[1:]
    if len(args) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    odc_run, odc_train, config, data, work = args[:5]
    rest = args[5:]
    ranks, tolerance, sets = [1, 2, 4], 0.02, []
    while rest:
        if rest[0] == "--ranks" and len(rest) >= 2:
            ranks = [int(x) for x in rest[1].split(",")]
        elif rest[0] == "--tolerance" and len(rest) >= 2:
            tolerance = float(rest[1])
        elif rest[0] == "--set" and len(rest) >= 2:
            sets.append(rest[1])
        else:
            print(f"gpu_check_ipc: unexpected argument {rest[0]!r}", file=sys.stderr)
            return 2
        rest = rest[2:]
    os.makedirs(work, exist_ok=True)
    ok = True
    results = {}
    for n in ranks:
        rows = run(odc_run, odc_train, config, data, work, f"ranks-{n}", n, sets)
        ok &= rows is not None
        results[n] = rows or {}
    base = results.get(ranks[0], {})
    summary = []
    for n in ranks:
        rows = results[n]
        diffs = [abs(rows[s]["loss"] - base[s]["loss"]) / abs(base[s]["loss"]) for s in base if s in rows]
        worst = max(diffs) if diffs else None
        if rows and (len(rows) != len(base) or worst is None or worst > tolerance):
            print(f"gpu_check_ipc: {n} ranks: losses differ from {ranks[0]} rank(s) by up to {worst} "
                  f"(tolerance {tolerance}; {len(rows)} of {len(base)} steps)", file=sys.stderr)
            ok = False
        last = max(rows) if rows else None
        summary.append({"ranks": n, "steps": len(rows), "loss_last": rows[last]["loss"] if rows else None,
                        "max_rel_diff": worst, "tokens_per_s": median(r.get("tokens_per_s") for r in rows.values()),
                        "samples_per_s_per_rank": median(r.get("samples_per_s_per_rank") for r in rows.values())})
    bitwise = None
    if len(ranks) > 1:
        n = ranks[1]
        det = sets + ["comm.deterministic=true"]
        fp32 = run(odc_run, odc_train, config, data, work, f"ranks-{n}-det-fp32", n, det + ["comm.gather_dtype=fp32"])
        bf16 = run(odc_run, odc_train, config, data, work, f"ranks-{n}-det-bf16", n, det + ["comm.gather_dtype=bf16"])
        bitwise = fp32 is not None and bf16 is not None and bool(fp32) and all(
            fp32[s]["loss"] == bf16.get(s, {}).get("loss") and fp32[s]["grad_norm"] == bf16.get(s, {}).get("grad_norm")
            for s in fp32)
        if not bitwise:
            print(f"gpu_check_ipc: bf16 gathers changed the {n}-rank run (deterministic) against fp32 gathers",
                  file=sys.stderr)
            ok = False
    print(json.dumps({"bench": "gpu_check_ipc", "ok": ok, "tolerance": tolerance, "runs": summary,
                      "bf16_gathers_bitwise": bitwise}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
