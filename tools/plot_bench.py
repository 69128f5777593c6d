#!/usr/bin/env python3
"""Bar charts of a bench/e2e run: speedup over Collective+LB-Micro per minibatch size and method
(with each cell's zero-overhead bound and, when present, the simulator's prediction as markers),
and the measured vs planned bubble rates.

usage: plot_bench.py RESULTS.jsonl --out speedup.png
"""
import argparse
import json
import os
import sys

ORDER = ["collective+local_sort", "collective+lb_micro", "odc+local_sort", "odc+lb_micro", "odc+lb_mini"]
COLORS = ["#9DB4D3", "#4C72B0", "#F2B880", "#DD8452", "#C44E52"]


def load(path):
    cells = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    rec = json.loads(line)
                    if "method" in rec and "speedup" in rec:
                        cells.append(rec)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"{path}: cannot read bench results ({e})")
    if not cells:
        sys.exit(f"{path}: no bench cells with a speedup")
    return cells


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = load(args.results)
    sizes = sorted({c["minibatch_size"] for c in cells})
    methods = [m for m in ORDER if any(c["method"] == m for c in cells)]
    cell = {(c["minibatch_size"], c["method"]): c for c in cells}
    width = 0.8 / len(methods)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 8), sharex=True)
    for i, method in enumerate(methods):
        xs = [s_i + (i - (len(methods) - 1) / 2) * width for s_i in range(len(sizes))]
        present = [(x, cell[(s, method)]) for x, s in zip(xs, sizes) if (s, method) in cell]
        color = COLORS[ORDER.index(method)]
        top.bar([x for x, _ in present], [c["speedup"] for _, c in present], width, color=color, label=method)
        top.scatter([x for x, _ in present], [c["zero_overhead_bound"] for _, c in present], marker="_", s=300,
                    color="black", zorder=3, label="zero-overhead bound" if i == 0 else None)
        sims = [(x, c["sim_speedup"]) for x, c in present if "sim_speedup" in c]
        if sims:
            top.scatter([x for x, _ in sims], [y for _, y in sims], marker="o", s=18, color="white",
                        edgecolor="black", zorder=4, label="simulator" if i == 0 else None)
        bottom.bar([x for x, _ in present], [100 * c["bubble_measured"] for _, c in present], width, color=color)
        bottom.scatter([x for x, _ in present], [100 * c["bubble_planned"] for _, c in present], marker="_", s=300,
                       color="black", zorder=3, label="planned" if i == 0 else None)
    top.axhline(1.0, color="grey", lw=0.8)
    top.set_ylabel("samples/s per rank vs Collective+LB-Micro")
    top.legend(fontsize=8, ncol=4)
    top.set_title("Throughput by minibatch size (sequences per rank)")
    bottom.set_ylabel("bubble rate (%): bars measured")
    bottom.legend(fontsize=8)
    bottom.set_xticks(range(len(sizes)))
    bottom.set_xticklabels([str(s) for s in sizes])
    bottom.set_xlabel("sequences per rank per minibatch")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
