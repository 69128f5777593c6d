#!/usr/bin/env python3
"""Draw one minibatch of odc-train traces as per-rank timelines, several runs side by side.

usage: plot_trace.py TRACE.json [TRACE2.json ...] --out timeline.png [--step N] [--labels A,B]

Each trace (train.trace_file, Chrome trace-event JSON) becomes one panel with a row per rank:
forward / backward / head compute, communication waits, barriers and the optimizer step, on a time
axis that starts at the step's first event. Panels share the time axis, so a Collective and an ODC
run of the same data show where each one's idle time goes. Without --step the last step present in
every trace is drawn (the first traced step still grows buffers).
"""
import argparse
import json
import os
import sys

COLORS = {
    "forward": "#4C72B0",
    "backward": "#55A868",
    "head": "#8172B2",
    "wait": "#DD8452",
    "barrier": "#C44E52",
    "optimizer": "#937860",
}
LABELS = {
    "forward": "forward",
    "backward": "backward",
    "head": "head (fwd+loss+bwd)",
    "wait": "gather / push wait",
    "barrier": "barrier",
    "optimizer": "optimizer",
}


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"{path}: cannot read a Chrome trace ({e})")
    events = [e for e in doc.get("traceEvents", []) if e.get("ph") == "X"]
    if not events:
        sys.exit(f"{path}: no complete events (was train.trace_file set and did the run finish?)")
    return doc.get("otherData", {}), events


def steps_of(events):
    return {e["args"]["step"] for e in events if "step" in e.get("args", {})}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--step", type=int, default=None)
    parser.add_argument("--labels", default=None, help="comma-separated panel titles (default: comm+balance)")
    args = parser.parse_args()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    runs = [load(p) for p in args.traces]
    common = set.intersection(*(steps_of(ev) for _, ev in runs))
    if args.step is not None:
        if args.step not in common:
            sys.exit(f"step {args.step} is not in every trace (common steps: {sorted(common)})")
        step = args.step
    elif common:
        step = max(common)
    else:
        sys.exit("the traces share no step")
    labels = args.labels.split(",") if args.labels else [
        f"{o.get('comm', '?')} + {o.get('balance', '?')}" for o, _ in runs]
    if len(labels) != len(runs):
        sys.exit(f"--labels names {len(labels)} panels for {len(runs)} traces")

    panels = []
    longest = 0.0
    for (other, events), label in zip(runs, labels):
        mine = [e for e in events if e["args"].get("step") == step and e["cat"] in COLORS]
        start = min(e["ts"] for e in mine)
        end = max(e["ts"] + e["dur"] for e in mine)
        longest = max(longest, (end - start) / 1e6)
        panels.append((label, other, mine, start, end))

    height = 1.0 + sum(0.8 + 0.45 * len({e["pid"] for e in p[2]}) for p in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, height),
        sharex=True, squeeze=False)
    for ax, (label, other, mine, start, end) in zip(axes[:, 0], panels):
        ranks = sorted({e["pid"] for e in mine})
        for row, rank in enumerate(ranks):
            for e in mine:
                if e["pid"] != rank:
                    continue
                ax.broken_barh([((e["ts"] - start) / 1e6, e["dur"] / 1e6)], (row - 0.4, 0.8),
                               facecolors=COLORS[e["cat"]], edgecolor="none")
        busy = {r: sum(e["dur"] for e in mine if e["pid"] == r and e["cat"] in ("forward", "backward", "head"))
                for r in ranks}
        span = end - start
        idle = 1 - sum(busy.values()) / (len(ranks) * span) if span > 0 else 0
        ax.set_yticks(range(len(ranks)))
        ax.set_yticklabels([f"rank {r}" for r in ranks])
        ax.invert_yaxis()
        ax.set_title(f"{label}: step {step} takes {span / 1e6:.2f} s, ranks idle {100 * idle:.1f}% of it", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since the step's first event")
    axes[-1, 0].set_xlim(0, longest * 1.01)
    fig.legend(handles=[Patch(color=c, label=LABELS[k]) for k, c in COLORS.items()], loc="upper center",
               ncol=len(COLORS), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}: step {step}, {len(panels)} panel(s)")


if __name__ == "__main__":
    main()
