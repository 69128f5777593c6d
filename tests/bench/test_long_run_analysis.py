#!/usr/bin/python3
"""bench/long_run.py on synthetic metrics: flat runs pass, growth fails and names rank and resource.

    /usr/bin/python3 test_long_run_analysis.py [--workdir DIR] [--script bench/long_run.py]

Each case writes per-rank metrics files shaped like odc-train's (400 steps, 2 ranks, RSS ramping
up during the warm-up and then flat with +-0.2% noise, 34 fds, 5 threads, 2 endpoints, 14 MiB
registered, nothing pinned), runs the analysis as a program and checks its exit status, its JSON
lines and the failures it names. The flat case must also fail when its warm-up is not skipped and
growth below the limit must pass, so neither verdict can come from an analysis that ignores its
input.
"""

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 400
MIB = 1048576
RESOURCES = ("rss_bytes", "pinned_bytes", "registered_bytes", "open_fds", "threads", "ucx_endpoints")


def records(rank, rss_growth=0.0, fd_from=None, pinned_from=None, drop=None, steps=STEPS):
    """One rank's metrics; rss_growth: fraction RSS rises linearly from the end of warm-up to the end."""
    rng = random.Random(rank)
    warm = steps // 10
    base = (120 + rank) * MIB
    out = []
    for step in range(1, steps + 1):
        if step <= warm:
            rss = 100 * MIB + (base - 100 * MIB) * step / warm  # warm-up: allocations settle
        else:
            rss = base * (1 + rss_growth * (step - warm) / (steps - warm))
        rss *= 1 + rng.uniform(-0.002, 0.002)
        r = {"step": step, "rank": rank, "loss": 3.0 - step / steps, "rss_bytes": int(rss) // 4096 * 4096,
             "peak_rss_bytes": 130 * MIB, "pinned_bytes": 4096 if pinned_from and step >= pinned_from else 0,
             "open_fds": 34 + (1 if fd_from and step >= fd_from else 0), "threads": 5, "ucx_endpoints": 2,
             "registered_bytes": 14983168}
        if drop:
            del r[drop]
        out.append(r)
    return out


class Case:
    def __init__(self, workdir, script):
        self.workdir, self.script = workdir, script
        self.failed = []

    def run(self, name, ranks, extra=(), one_file=False, env=None):
        d = os.path.join(self.workdir, name)
        os.makedirs(d, exist_ok=True)
        paths = []
        groups = [sum(ranks, [])] if one_file else ranks
        for i, recs in enumerate(groups):
            path = os.path.join(d, f"metrics-{i}.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in recs)
            paths.append(path)
        proc = subprocess.run([sys.executable, self.script, *paths, *extra], capture_output=True, text=True,
                              timeout=120, env=env)
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        per = {(x["rank"], x["resource"]): x for x in lines if "resource" in x}
        summary = lines[-1] if lines else {}
        return proc, per, summary, d

    def check(self, name, cond, what):
        print(f"  {'ok  ' if cond else 'FAIL'} {name}: {what}")
        if not cond:
            self.failed.append(f"{name}: {what}")


def only_failures(per, expected):
    """Every (rank, resource) passes except exactly `expected`."""
    return {k for k, v in per.items() if not v["pass"]} == set(expected) and len(per) == 2 * len(RESOURCES)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", help="where the synthetic metrics go (default: a temporary directory)")
    ap.add_argument("--script", default=os.path.join(HERE, "..", "..", "bench", "long_run.py"))
    args = ap.parse_args()
    script = os.path.abspath(args.script)
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        return check_all(args.workdir, script)
    with tempfile.TemporaryDirectory(prefix="long_run_analysis_") as workdir:
        return check_all(workdir, script)


def check_all(workdir, script):
    t = Case(workdir, script)
    have_mpl = importlib.util.find_spec("matplotlib") is not None

    # 1. Flat after warm-up: pass, every line passes, summary names steps and ranks; the plot.
    name = "flat"
    png = os.path.join(workdir, "flat.png")
    if os.path.exists(png):
        os.remove(png)
    proc, per, s, _ = t.run(name, [records(0), records(1)], ["--plot", png, "--expect-steps", str(STEPS)])
    t.check(name, proc.returncode == 0, f"exit 0 (got {proc.returncode}; stderr {proc.stderr.strip()[:300]!r})")
    t.check(name, len(per) == 12 and all(v["pass"] for v in per.values()), "12 rank x resource lines, all pass")
    t.check(name, s.get("bench") == "long_run" and s.get("pass") is True and s.get("steps") == STEPS
            and s.get("ranks") == 2 and s.get("failures") == [], f"summary pass/steps/ranks ({s})")
    t.check(name, s.get("max_rss_growth_pct") is not None and abs(s["max_rss_growth_pct"]) < 0.5
            and s.get("max_fd_delta") == 0 and s.get("max_endpoint_delta") == 0, "summary growth figures")
    base = per.get((1, "rss_bytes"), {}).get("baseline", 0)
    t.check(name, abs(base - 121 * MIB) < 0.005 * 121 * MIB, f"rank 1 RSS baseline ~121 MiB after warm-up ({base})")
    if have_mpl:
        with open(png, "rb") as f:
            t.check(name, f.read(8) == b"\x89PNG\r\n\x1a\n", "PNG written")
    else:
        print("  skip flat: no matplotlib, plot not checked")

    # 1b. Without matplotlib (a stub package that fails to import shadows it): same verdict, no plot.
    name = "flat-no-matplotlib"
    stub = os.path.join(workdir, "no_matplotlib", "matplotlib")
    os.makedirs(stub, exist_ok=True)
    with open(os.path.join(stub, "__init__.py"), "w", encoding="utf-8") as f:
        f.write("raise ImportError('matplotlib hidden by test_long_run_analysis.py')\n")
    png = os.path.join(workdir, "no-matplotlib.png")
    if os.path.exists(png):
        os.remove(png)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(stub))
    proc, per, s, _ = t.run(name, [records(0), records(1)], ["--plot", png], env=env)
    t.check(name, proc.returncode == 0 and s.get("pass") is True and "plot" not in s and not os.path.exists(png)
            and "no plot" in proc.stderr, f"exit 0, pass, no PNG, a warning (got {proc.returncode}, {proc.stderr!r})")

    # 2. The same data with the warm-up not skipped: the ramp is growth on both ranks.
    name = "flat-no-warmup"
    proc, per, s, _ = t.run(name, [records(0), records(1)], ["--warmup-frac", "0"])
    t.check(name, proc.returncode == 1, f"exit 1 (got {proc.returncode})")
    t.check(name, only_failures(per, [(0, "rss_bytes"), (1, "rss_bytes")]), "exactly rss_bytes of both ranks fail")

    # 3. Rank 1's RSS grows 2% after warm-up: fail, naming rank 1 and rss_bytes only.
    name = "rss-grows-2pct"
    proc, per, s, _ = t.run(name, [records(0), records(1, rss_growth=0.02)])
    t.check(name, proc.returncode == 1, f"exit 1 (got {proc.returncode})")
    t.check(name, only_failures(per, [(1, "rss_bytes")]), "only rank 1 rss_bytes fails")
    g = per.get((1, "rss_bytes"), {}).get("growth_pct")
    t.check(name, g is not None and 1.5 < g < 2.5, f"rank 1 growth_pct ~2 (got {g})")
    t.check(name, s.get("pass") is False and len(s.get("failures", [])) == 1
            and s["failures"][0].startswith("rank 1 rss_bytes") and 1.5 < s.get("max_rss_growth_pct", 0) < 2.5,
            f"summary fails and names rank 1 rss_bytes ({s.get('failures')})")
    t.check(name, "rank 1 rss_bytes" in proc.stderr, "stderr names rank 1 rss_bytes")

    # 4. 0.5% growth is under the 1% limit: pass (the verdict depends on the size of the growth).
    name = "rss-grows-0.5pct"
    proc, per, s, _ = t.run(name, [records(0), records(1, rss_growth=0.005)])
    t.check(name, proc.returncode == 0 and s.get("pass") is True, f"exit 0 (got {proc.returncode})")
    g = per.get((1, "rss_bytes"), {}).get("growth_pct")
    t.check(name, g is not None and 0.2 < g < 0.8, f"rank 1 growth_pct ~0.5 (got {g})")

    # 5. One extra descriptor on rank 0 from the middle on: fail, naming rank 0 open_fds.
    name = "one-extra-fd"
    proc, per, s, _ = t.run(name, [records(0, fd_from=STEPS // 2), records(1)])
    t.check(name, proc.returncode == 1, f"exit 1 (got {proc.returncode})")
    t.check(name, only_failures(per, [(0, "open_fds")]), "only rank 0 open_fds fails")
    t.check(name, per.get((0, "open_fds"), {}).get("delta") == 1 and s.get("max_fd_delta") == 1, "fd delta 1")
    t.check(name, s.get("pass") is False and any(f.startswith("rank 0 open_fds") for f in s.get("failures", [])),
            f"summary names rank 0 open_fds ({s.get('failures')})")

    # 6. One extra descriptor after the last step only (medians cannot see it; the last value does).
    name = "fd-at-last-step"
    proc, per, s, _ = t.run(name, [records(0), records(1, fd_from=STEPS)])
    t.check(name, proc.returncode == 1 and only_failures(per, [(1, "open_fds")]),
            f"exit 1, only rank 1 open_fds fails (got {proc.returncode})")

    # 7. Pinned memory appears where the baseline was 0: fail (0 must stay 0).
    name = "pinned-from-zero"
    proc, per, s, _ = t.run(name, [records(0, pinned_from=STEPS - 30), records(1)])
    t.check(name, proc.returncode == 1 and only_failures(per, [(0, "pinned_bytes")]),
            f"exit 1, only rank 0 pinned_bytes fails (got {proc.returncode})")

    # 8. Both ranks in one file (train.metrics_file without {rank} is rank 0 only, but a merged
    #    file must still be split by the records' rank).
    name = "one-file"
    proc, per, s, _ = t.run(name, [records(0), records(1, rss_growth=0.02)], one_file=True)
    t.check(name, proc.returncode == 1 and s.get("ranks") == 2 and only_failures(per, [(1, "rss_bytes")]),
            f"exit 1, 2 ranks, only rank 1 rss_bytes fails (got {proc.returncode}, ranks {s.get('ranks')})")

    # 9. Unusable input: exit 2 (a missing resource, too few steps, a short rank), never a pass.
    for name, ranks, extra in (("missing-resource", [records(0, drop="ucx_endpoints"), records(1)], []),
                               ("too-few-steps", [records(0, steps=8), records(1, steps=8)], []),
                               ("short-rank", [records(0), records(1, steps=STEPS - 50)],
                                ["--expect-steps", str(STEPS)])):
        proc, per, s, _ = t.run(name, ranks, extra)
        t.check(name, proc.returncode == 2 and s.get("pass") is False and "error" in s,
                f"exit 2 with an error line (got {proc.returncode}; {proc.stderr.strip()[:200]!r})")

    if t.failed:
        print(f"{len(t.failed)} check(s) failed:\n  " + "\n  ".join(t.failed))
        return 1
    print("all long_run.py analysis checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
