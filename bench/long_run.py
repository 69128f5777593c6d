#!/usr/bin/python3
"""Long-run stability analysis of odc-train's per-step metrics (bench/long_run.sh runs it).

    /usr/bin/python3 bench/long_run.py METRICS_FILES... [--warmup-frac 0.1] [--plot PNG]
        [--window-frac 0.05] [--max-growth-pct 1.0] [--expect-steps N]

For each rank (the records' "rank" field; a file may hold one rank or several) and each resource
the process holds after a step, the first `--warmup-frac` of the steps are skipped and

  baseline = median of the first `--window-frac` of all steps after the warm-up,
  end      = median of the last `--window-frac` of the steps,
  last     = the value after the last step,
  slope    = least-squares fit over every post-warm-up step (reported per 1000 steps; "fit growth"
             is the fitted rise over the post-warm-up span).

Checks:
  memory (rss_bytes, pinned_bytes, registered_bytes): end and fitted growth < --max-growth-pct
      of the baseline; a baseline of 0 must stay 0 at every post-warm-up step.
  counts (open_fds, threads, ucx_endpoints): end, last and every post-warm-up step after the
      baseline window equal to the baseline (a single leaked descriptor fails).

Prints one JSON line per rank and resource, then a summary line {"bench": "long_run", ...,
"pass": ...}. Exit status: 0 all flat, 1 something grows (the failures name rank and resource),
2 unusable input (no records, a resource missing, fewer steps than --expect-steps or too few to
fit windows). The plot (RSS in MiB per rank against the step, open descriptors on a second axis)
needs matplotlib (Debian python3-matplotlib); without it the plot is skipped with a warning.
"""

import argparse
import json
import math
import statistics
import sys

MEMORY = ("rss_bytes", "pinned_bytes", "registered_bytes")
COUNTS = ("open_fds", "threads", "ucx_endpoints")
RESOURCES = MEMORY + COUNTS
MIN_POST_WARMUP = 10  # below this a baseline, an end and a slope say nothing


class InputError(Exception):
    pass


def load(paths):
    """{rank: [(step, record)] sorted by step}; a repeated step (resumed run) keeps its last record."""
    ranks = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(f"{path}:{lineno}: not JSON ({e})") from e
                if "step" not in record:
                    raise InputError(f"{path}:{lineno}: no 'step' field")
                ranks.setdefault(int(record.get("rank", 0)), {})[int(record["step"])] = record
    if not ranks:
        raise InputError("no metrics records in " + ", ".join(paths))
    return {rank: sorted(by_step.items()) for rank, by_step in sorted(ranks.items())}


def fit_slope(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def num(v):
    """Integral values (bytes, counts; a median of an even window may be x.5) print as integers."""
    return int(v) if float(v).is_integer() else v


def pct(delta, base):
    return 100.0 * delta / base if base else (0.0 if delta == 0 else math.inf)


def analyse_rank(rank, records, resource, warmup_frac, window_frac, max_growth_pct):
    n = len(records)
    start = int(math.floor(warmup_frac * n))
    window = max(1, int(math.ceil(window_frac * n)))
    post = records[start:]
    if len(post) < max(MIN_POST_WARMUP, 2 * window):
        raise InputError(f"rank {rank}: {n} steps leave {len(post)} after warm-up, too few for two "
                         f"windows of {window} steps (need >= {max(MIN_POST_WARMUP, 2 * window)})")
    missing = [step for step, r in post if resource not in r]
    if missing:
        raise InputError(f"rank {rank}: no '{resource}' at step {missing[0]} "
                         f"({len(missing)} of {len(post)} post-warm-up steps); is odc-train older than the metrics?")
    steps = [step for step, _ in post]
    values = [float(r[resource]) for _, r in post]
    baseline = statistics.median(values[:window])
    end = statistics.median(values[-window:])
    last = values[-1]
    slope = fit_slope(steps, values)
    span = steps[-1] - steps[0]
    growth_pct = pct(end - baseline, baseline)
    fit_growth_pct = pct(slope * span, baseline)
    result = {
        "bench": "long_run", "rank": rank, "resource": resource,
        "steps": n, "warmup_steps": start, "window_steps": window,
        "first_step": steps[0], "last_step": steps[-1],
        "baseline": num(baseline), "end": num(end), "last": num(last), "min": num(min(values)),
        "max": num(max(values)), "delta": num(end - baseline),
        "growth_pct": round(growth_pct, 4) if math.isfinite(growth_pct) else None,
        "slope_per_1k_steps": round(slope * 1000.0, 4),
        "fit_growth_pct": round(fit_growth_pct, 4) if math.isfinite(fit_growth_pct) else None,
    }
    why = []
    if resource in MEMORY:
        if baseline == 0:
            if any(v != 0 for v in values):
                why.append(f"baseline 0 but reaches {max(values):.0f} after warm-up")
        else:
            if growth_pct >= max_growth_pct:
                why.append(f"end {end:.0f} is {growth_pct:+.3f}% of baseline {baseline:.0f} (limit {max_growth_pct}%)")
            if fit_growth_pct >= max_growth_pct:
                why.append(f"fitted slope {slope * 1000:.1f}/1k steps grows {fit_growth_pct:+.3f}% over "
                           f"{span} steps (limit {max_growth_pct}%)")
    else:
        changed = [(s, v) for s, v in zip(steps[window:], values[window:]) if v != baseline]
        if end != baseline or last != baseline or changed:
            first = changed[0] if changed else (steps[-1], last)
            why.append(f"baseline {baseline:g}, end {end:g}, last {last:g}: first differs at step {first[0]} "
                       f"({first[1]:g}); {len(changed)} post-baseline steps differ")
    result["pass"] = not why
    if why:
        result["why"] = "; ".join(why)
    return result


def plot(path, data, results, warmup_frac):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"long_run.py: no plot ({e}; install python3-matplotlib)", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(9, 4.5))
    fds = ax.twinx()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (rank, records) in enumerate(data.items()):
        color = colors[i % len(colors)]
        steps = [s for s, _ in records]
        ax.plot(steps, [r.get("rss_bytes", math.nan) / 1048576.0 for _, r in records], color=color, lw=1,
                label=f"rank {rank} RSS")
        fds.plot(steps, [r.get("open_fds", math.nan) for _, r in records], color=color, lw=1, ls="--",
                 label=f"rank {rank} open fds")
    # Shade the warm-up (skipped) and the two median windows of the longest rank.
    records = max(data.values(), key=len)
    window = next(r for r in results if r["resource"] == "rss_bytes")
    if window["warmup_steps"] > 0:
        ax.axvspan(records[0][0], records[window["warmup_steps"] - 1][0], color="0.88", label="warm-up (skipped)")
    ax.axvspan(window["first_step"], records[window["warmup_steps"] + window["window_steps"] - 1][0],
               color="tab:green", alpha=0.12, label="baseline / end windows")
    ax.axvspan(records[-window["window_steps"]][0], window["last_step"], color="tab:green", alpha=0.12)
    ax.set_xlabel("step")
    ax.set_ylabel("resident set (MiB)")
    fds.set_ylabel("open file descriptors (dashed)")
    # A band of at least +-3% around the baselines, so that 1% growth is visible and noise is not.
    rss = [r for r in results if r["resource"] == "rss_bytes"]
    low, high = ax.get_ylim()
    base_lo = min(r["baseline"] for r in rss) / 1048576.0
    base_hi = max(r["baseline"] for r in rss) / 1048576.0
    ax.set_ylim(min(low, 0.97 * base_lo), max(high, 1.03 * base_hi))
    lo_fd, hi_fd = fds.get_ylim()
    fds.set_ylim(0, max(hi_fd, 1) * 1.5)
    n = len(records)
    ok = all(r["pass"] for r in results)
    growth = ", ".join(f"rank {r['rank']} {r['growth_pct']:+.2f}%" for r in rss if r["growth_pct"] is not None)
    ax.set_title(f"Long-run stability, {n} steps: {'pass' if ok else 'FAIL'} (RSS after warm-up → end: {growth})",
                 fontsize=10)
    handles = ax.get_legend_handles_labels()
    handles2 = fds.get_legend_handles_labels()
    ax.legend(handles[0] + handles2[0], handles[1] + handles2[1], loc="lower right", fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("metrics", nargs="+", help="metrics JSONL files (odc-train train.metrics_file)")
    ap.add_argument("--warmup-frac", type=float, default=0.1, help="leading fraction of steps skipped")
    ap.add_argument("--window-frac", type=float, default=0.05, help="fraction of steps per median window")
    ap.add_argument("--max-growth-pct", type=float, default=1.0, help="allowed memory growth in percent")
    ap.add_argument("--expect-steps", type=int, default=0, help="fail (exit 2) if a rank has fewer steps")
    ap.add_argument("--plot", help="write a PNG: RSS per rank and open fds against the step")
    args = ap.parse_args(argv)
    if not 0 <= args.warmup_frac < 1 or not 0 < args.window_frac <= 0.5:
        ap.error("--warmup-frac must be in [0, 1) and --window-frac in (0, 0.5]")
    try:
        data = load(args.metrics)
        short = {rank: len(r) for rank, r in data.items() if len(r) < args.expect_steps}
        if short:
            raise InputError(f"expected {args.expect_steps} steps per rank, got {short}")
        results = [analyse_rank(rank, records, resource, args.warmup_frac, args.window_frac, args.max_growth_pct)
                   for rank, records in data.items() for resource in RESOURCES]
    except (InputError, OSError) as e:
        print(f"long_run.py: {e}", file=sys.stderr)
        print(json.dumps({"bench": "long_run", "pass": False, "error": str(e)}))
        return 2
    for r in results:
        print(json.dumps(r))

    def worst(resource, key):
        vals = [r[key] for r in results if r["resource"] == resource]
        return None if any(v is None for v in vals) else max(vals)

    def by_rank(resource, key):
        return {str(r["rank"]): r[key] for r in results if r["resource"] == resource}

    failures = [f"rank {r['rank']} {r['resource']}: {r['why']}" for r in results if not r["pass"]]
    summary = {
        "bench": "long_run",
        "steps": max(len(r) for r in data.values()),
        "ranks": len(data),
        "warmup_frac": args.warmup_frac,
        "pass": not failures,
        "max_rss_growth_pct": worst("rss_bytes", "growth_pct"),
        "max_rss_fit_growth_pct": worst("rss_bytes", "fit_growth_pct"),
        "max_pinned_growth_pct": worst("pinned_bytes", "growth_pct"),
        "max_registered_growth_pct": worst("registered_bytes", "growth_pct"),
        "max_fd_delta": worst("open_fds", "delta"),
        "max_thread_delta": worst("threads", "delta"),
        "max_endpoint_delta": worst("ucx_endpoints", "delta"),
        "rss_baseline_mib": {k: round(v / 1048576.0, 2) for k, v in by_rank("rss_bytes", "baseline").items()},
        "rss_end_mib": {k: round(v / 1048576.0, 2) for k, v in by_rank("rss_bytes", "end").items()},
        "open_fds": by_rank("open_fds", "end"),
        "threads": by_rank("threads", "end"),
        "ucx_endpoints": by_rank("ucx_endpoints", "end"),
        "registered_bytes": by_rank("registered_bytes", "end"),
        "failures": failures,
    }
    if args.plot and plot(args.plot, data, results, args.warmup_frac):
        summary["plot"] = args.plot
    print(json.dumps(summary))
    for f in failures:
        print(f"long_run.py: FAIL {f}", file=sys.stderr)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
