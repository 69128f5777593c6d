#!/usr/bin/env python3
"""Plot an odc-train metrics file (JSON lines, docs/performance.md) as a multi-panel PNG.

usage: plot_metrics.py METRICS.jsonl [METRICS2.jsonl ...] --out metrics.png [--check-decrease] [--smooth N]

Panels: loss, learning rate, gradient norm, eval loss and rollout reward (each only when some file has
eval lines, or the online RL loop's rollout lines) and
tokens/s. Noisy series (loss, gradient norm, tokens/s) are drawn raw (thin) and as a trailing moving
average (thick; the legend says over how many steps: N = --smooth, default 1/20 of the steps, at
least 1); lr and eval loss are drawn as they are. With several files the curves are overlaid
(labelled by file name). Prints one JSON line per file: steps, loss_first and loss_last (the first and
the last step's loss), loss_mean_first_10pct and loss_mean_last_10pct (the mean loss of the first and
of the last 10% of the steps, at least one step each) and drop (1 - the second mean / the first); then
a last line {"out": ..., "panels": [...]} naming the panels drawn. --check-decrease exits 1 unless
drop >= 10% (the means, which one noisy step cannot decide). Needs matplotlib
(Debian's /usr/bin/python3 with python3-matplotlib, as scripts/demo.sh runs it).
"""
import argparse
import json
import os
import sys

# (panel, metrics field, y label, smoothed)
PANELS = [
    ("loss", "loss", "loss (mean token NLL)", True),
    ("lr", "lr", "learning rate", False),
    ("grad_norm", "grad_norm", "gradient norm (before clipping)", True),
    ("eval_loss", "eval_loss", "eval loss", False),
    ("reward_mean", "reward_mean", "rollout reward (online RL)", False),
    ("tokens_per_s", "tokens_per_s", "tokens/s", True),
]


def load(path):
    """Step lines and eval lines: {field: ([steps], [values])}."""
    series = {field: ([], []) for _, field, _, _ in PANELS}
    try:
        f = open(path)
    except OSError as e:
        sys.exit(f"plot_metrics.py: {path}: cannot be read ({e.strerror}): give the metrics file train.metrics_file wrote")
    with f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_metrics.py: {path}:{n}: not a JSON line ({e})")
            if "step" not in rec:
                sys.exit(f"plot_metrics.py: {path}:{n}: a metrics line without \"step\"")
            for _, field, _, _ in PANELS:
                if isinstance(rec.get(field), (int, float)):
                    series[field][0].append(rec["step"])
                    series[field][1].append(float(rec[field]))
    if not series["loss"][0]:
        sys.exit(f"plot_metrics.py: {path}: no per-step metrics records (no \"loss\")")
    return series


def moving_average(values, w):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= w:
            total -= values[i - w]
        out.append(total / min(i + 1, w))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--check-decrease", action="store_true")
    ap.add_argument("--smooth", type=int, default=0, help="moving-average window in steps (default: steps/20)")
    args = ap.parse_args()
    if args.smooth < 0:
        sys.exit("plot_metrics.py: --smooth must be >= 0")

    data = [(path, load(path)) for path in args.metrics]
    # Panels of lines only some runs have (evaluations, online RL iterations) appear when present.
    optional = ("eval_loss", "reward_mean")
    panels = [p for p in PANELS if p[0] not in optional or any(s[p[0]][0] for _, s in data)]

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.4 * len(panels)), dpi=110, sharex=True)
    ok = True
    for path, series in data:
        name = os.path.basename(path)
        color = None
        for ax, (panel, field, ylabel, smoothed) in zip(axes, panels):
            steps, values = series[field]
            if not steps:
                continue
            if smoothed:
                w = args.smooth or max(1, len(values) // 20)
                raw, = ax.plot(steps, values, linewidth=0.6 if w > 1 else 1.4, alpha=0.35 if w > 1 else 1.0, color=color,
                               label=f"{name} (each step)" if w > 1 else name)
                color = raw.get_color()
                if w > 1:
                    ax.plot(steps, moving_average(values, w), color=color, linewidth=1.8,
                            label=f"{name} (moving average of {w} steps)")
            else:
                line, = ax.plot(steps, values, color=color, linewidth=1.4,
                                marker="o" if panel in optional else None, markersize=3, label=name)
                color = line.get_color()
            ax.set_ylabel(ylabel)
        losses = series["loss"][1]
        k = max(1, len(losses) // 10)
        first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
        print(json.dumps({"metrics": path, "steps": len(losses), "loss_first": round(losses[0], 4),
                          "loss_last": round(losses[-1], 4), "loss_mean_first_10pct": round(first, 4),
                          "loss_mean_last_10pct": round(last, 4),
                          "drop": round(1 - last / first, 4) if first else 0.0}))
        if args.check_decrease and not last < 0.9 * first:
            print(f"{path}: loss did not fall by 10% (mean of the first {k} step(s) {first:.4f}, of the last {k} "
                  f"{last:.4f})", file=sys.stderr)
            ok = False
    for ax, (panel, *_rest) in zip(axes, panels):
        ax.grid(alpha=0.3)
        ax.set_title(panel, fontsize=9, loc="left")
        ax.legend(fontsize=7)
    axes[-1].set_xlabel("optimizer step")
    fig.tight_layout()
    fig.savefig(args.out)
    print(json.dumps({"out": args.out, "panels": [p[0] for p in panels]}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
