#!/usr/bin/env python3
"""The GPU check's context-parallel step (scripts/gpu-check.sh, "context"): sequences longer than
the microbatch cap split over several odc-train processes sharing the GPU (odc-run --local N, no
MPI on the lent machine), against one process that holds every sequence whole.

  gpu_check_context.py ODC_RUN ODC_TRAIN CONFIG DATA WORK [--ranks 2,4] [--gpus G] [--tolerance T]
                       [--set key=value]...

DATA's longest sequence (L tokens) fixes the caps: the unsplit run (1 rank) gets cap L; the run on
N ranks gets the most rows one member holds when L is cut for N (2 * (L // 2N), one more when 2N
does not divide L: ContextCut's zig-zag share), so L needs all N ranks and every sequence over the
cap is split (ODC: over the fewest ranks whose share fits, 2..N, chosen per minibatch). Each N runs
  * train.comm odc (CONFIG's: CUDA IPC between the processes), and
  * train.comm collective with train.context_parallel_degree 0 (static groups of N ranks), only
    when G >= N: the collective comm on GPUs is NCCL, which refuses ranks that share a GPU (and on
    the CPU it runs over MPI, which odc-run --local does not start); otherwise it is reported as
    skipped, with the reason, and does not decide the verdict.
CONFIG fixes the global batch (data.global_batch_size), so every run trains the same model on the
same data. Requires every split run's loss at every step within a relative T (default 0.02, the
ipc-train step's: bf16 compute rounds in other places when a sequence is cut or a microbatch packed
otherwise; a lost or misplaced key/value exchange breaks the loss far beyond it within a step or
two) of the unsplit run's, and, when the metrics count split microbatches, at least one split.
Prints one JSON line {"bench":"gpu_check_context","ok":...,"tolerance":...,"longest":L,"runs":[...]}
and exits 0 when all hold, 1 otherwise (what differed on stderr). Standard library only.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_check_ipc import median, run  # noqa: E402  (one launcher and metrics reader for both steps)


def share(length, k):
    """The most rows a member holds of a sequence of `length` cut for `k` (member 0's chunks)."""
    q, r = divmod(length, 2 * k)
    return 2 * q + (1 if r else 0)


def longest(data):
    with open(data) as f:
        return max(len(json.loads(line)["input_ids"]) for line in f if line.strip())


def main():
    args = sys.argv[1:]
    if len(args) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    odc_run, odc_train, config, data, work = args[:5]
    rest = args[5:]
    ranks, gpus, tolerance, sets = [2, 4], 1, 0.02, []
    while rest:
        if rest[0] == "--ranks" and len(rest) >= 2:
            ranks = [int(x) for x in rest[1].split(",")]
        elif rest[0] == "--gpus" and len(rest) >= 2:
            gpus = int(rest[1])
        elif rest[0] == "--tolerance" and len(rest) >= 2:
            tolerance = float(rest[1])
        elif rest[0] == "--set" and len(rest) >= 2:
            sets.append(rest[1])
        else:
            print(f"gpu_check_context: unexpected argument {rest[0]!r}", file=sys.stderr)
            return 2
        rest = rest[2:]
    os.makedirs(work, exist_ok=True)
    length = longest(data)
    ok = True
    base = run(odc_run, odc_train, config, data, work, "unsplit", 1, tool="gpu_check_context", sets=
               sets + [f"data.max_tokens_per_microbatch={length}"])
    ok &= base is not None
    base = base or {}
    runs = [{"name": "unsplit", "comm": "local", "ranks": 1, "cap": length, "steps": len(base),
             "loss_last": base[max(base)]["loss"] if base else None,
             "tokens_per_s": median(r.get("tokens_per_s") for r in base.values())}]
    for n in ranks:
        cap = share(length, n)
        if n < 2 or share(length, n - 1) <= cap:  # (n = 1, or a tiny L: the cap would not need all n)
            print(f"gpu_check_context: a longest sequence of {length} tokens cannot need {n} ranks", file=sys.stderr)
            return 2
        for comm in ("odc", "collective"):
            name = f"{comm}-{n}"
            cell = {"name": name, "comm": comm, "ranks": n, "cap": cap}
            runs.append(cell)
            if comm == "collective" and gpus < n:
                cell["skipped"] = (f"needs {n} GPUs, {gpus} visible: NCCL refuses ranks that share a GPU (and the CPU's "
                                   "collective comm runs over MPI, which odc-run --local does not start)")
                continue
            extra = [f"data.max_tokens_per_microbatch={cap}", f"train.comm={comm}", "train.context_parallel=auto"]
            if comm == "collective":
                extra.append("train.context_parallel_degree=0")
            rows = run(odc_run, odc_train, config, data, work, name, n, sets + extra, tool="gpu_check_context")
            if rows is None:
                ok = False
                cell["error"] = f"exited non-zero ({name}.log)"
                continue
            diffs = [abs(rows[s]["loss"] - base[s]["loss"]) / abs(base[s]["loss"]) for s in base if s in rows]
            worst = max(diffs) if diffs else None
            cell.update({"steps": len(rows), "loss_last": rows[max(rows)]["loss"] if rows else None,
                         "max_rel_diff": worst, "tokens_per_s": median(r.get("tokens_per_s") for r in rows.values())})
            if rows and all("split_microbatches" in r for r in rows.values()):
                cell["split_microbatches"] = sum(r["split_microbatches"] for r in rows.values())
                if cell["split_microbatches"] == 0:
                    print(f"gpu_check_context: {name}: no microbatch was split (cap {cap})", file=sys.stderr)
                    ok = False
            if len(rows) != len(base) or worst is None or worst > tolerance:
                print(f"gpu_check_context: {name}: losses differ from the unsplit run by up to {worst} "
                      f"(tolerance {tolerance}; {len(rows)} of {len(base)} steps)", file=sys.stderr)
                ok = False
    print(json.dumps({"bench": "gpu_check_context", "ok": ok, "tolerance": tolerance, "longest": length, "runs": runs}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
