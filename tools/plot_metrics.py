#!/usr/bin/env python3
"""Plot the loss curve of an odc-train metrics file (JSON lines) as a PNG.

usage: plot_metrics.py METRICS.jsonl [METRICS2.jsonl ...] --out loss.png [--check-decrease]

With several files the curves are overlaid (labelled by file name). --check-decrease exits 1 unless
the mean loss of the last 10% of steps is below the mean of the first 10% by at least 10%.
"""
import argparse
import json
import os
import sys


def load(path):
    steps, losses = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not a JSON line ({e})")
            steps.append(rec["step"])
            losses.append(rec["loss"])
    if not steps:
        sys.exit(f"{path}: no metrics records")
    return steps, losses


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--check-decrease", action="store_true")
    args = ap.parse_args()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    ok = True
    for path in args.metrics:
        steps, losses = load(path)
        line, = ax.plot(steps, losses, linewidth=0.6, alpha=0.35)
        # Minibatches differ a lot in content: a moving average shows the trend.
        w = max(1, len(losses) // 20)
        smooth = [sum(losses[max(0, i - w + 1):i + 1]) / len(losses[max(0, i - w + 1):i + 1]) for i in range(len(losses))]
        ax.plot(steps, smooth, color=line.get_color(), linewidth=1.8,
                label=f"{os.path.basename(path)} (mean of {w} steps)")
        k = max(1, len(losses) // 10)
        first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
        print(json.dumps({"metrics": path, "steps": len(losses), "loss_first": round(first, 4),
                          "loss_last": round(last, 4), "drop": round(1 - last / first, 4)}))
        if args.check_decrease and not last < 0.9 * first:
            print(f"{path}: loss did not fall (first {first:.4f}, last {last:.4f})", file=sys.stderr)
            ok = False
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (mean token NLL)")
    ax.set_title("training loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
