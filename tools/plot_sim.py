#!/usr/bin/python3
"""Tables and plots of odc-sim results (JSON lines, one object per method and setting).

  plot_sim.py table MAIN.jsonl              markdown tables, one row per setting (label "CONFIG/mbN"):
                                            "ODC over both baselines": the best ODC schedule's throughput
                                            over the paper's baseline (Collective with the reference's
                                            LB-Micro packing) and over ours (Collective LB-Micro), our
                                            baseline's over the paper's (ratios of samples/s per device, so
                                            independent of sim.baseline), and the three schedules' bubbles,
                                            simulated and planned; then speedup over the rows' baseline
                                            (sim.baseline) and bubble per method
  plot_sim.py lengths MAIN.jsonl            markdown table: each setting's simulated length statistics next to
                                            the published ones it stands in for
  plot_sim.py sensitivity SENS.jsonl        markdown table: the best ODC schedule's speedup in every cell (labels
                                            "CONFIG/mbN/VARIANT") under each model variant, in points from
                                            the first variant: its samples/s per device over the paper's
                                            baseline's (collective+ref_lb_micro) where that ran, over ours
                                            (collective+lb_micro) in a variant named "ours-baseline", else the
                                            rows' speedup field (over their sim.baseline; older files)
  plot_sim.py sharding SHARD.jsonl          markdown table: every method under each sharding layout (the rows'
                                            "sharding" field, one run per layout of one setting): minibatch
                                            time, throughput relative to Collective LB-Micro with full sharding,
                                            bytes across nodes, hybrid's all-reduce and hpz's refresh
  plot_sim.py context CONTEXT.jsonl         markdown table: long sequences dropped at 64K (labels
                                            "CONFIG/mbN/drop64k") vs kept up to 128K and split by context
                                            parallelism ("CONFIG/mbN/cp128k": collective static degree, ODC
                                            dynamic groups): tokens/s per device, their ratios, groups, exchanges
  plot_sim.py sweep-table SWEEPS.jsonl      markdown table: one row per sweep point ("sweep/PARAM=VALUE"): every
                                            method's speedup over the baseline, ODC LB-Mini over our baseline,
                                            simulated bubbles
  plot_sim.py sweeps SWEEPS.jsonl OUT_DIR   one PNG per swept parameter (labels "sweep/PARAM=VALUE"):
                                            speedup over the baseline and simulated bubble per method
  plot_sim.py timeline TIMELINE.json OUT.png [METHOD...]
                                            per-device busy intervals of the first minibatch (odc-sim
                                            --out DIR writes DIR/timeline.json)

Methods are "COMM+BALANCE": collective+ref_lb_micro is the paper's baseline (the reference
implementation's DynamicSameMicro packing), collective+lb_micro ours (our LB-Micro, which plans no
minibatch worse), odc+ref_lb_mini ODC with the reference's LB-Mini packing, odc+lb_mini ODC with
ours, odc+lb_mini_equal LB-Mini with equal sequence counts per device (what verl allows in RL). A
method a file lacks prints "-".

Uses only the standard library for tables; matplotlib (Agg backend) for plots.
"""
import json
import sys
from collections import OrderedDict

METHODS = ["collective+local_sort", "collective+ref_lb_micro", "collective+lb_micro", "odc+local_sort",
           "odc+ref_lb_micro", "odc+lb_micro", "odc+ref_lb_mini", "odc+lb_mini_equal", "odc+lb_mini"]
PAPER_BASELINE = "collective+ref_lb_micro"  # the paper's: the reference implementation's LB-Micro packing
OUR_BASELINE = "collective+lb_micro"
SHORT = {
    "collective+local_sort": "Coll LocalSort",
    "collective+ref_lb_micro": "Coll LB-Micro (paper)",
    "collective+lb_micro": "Coll LB-Micro",
    "odc+local_sort": "ODC LocalSort",
    "odc+ref_lb_micro": "ODC LB-Micro (paper's planner)",
    "odc+lb_micro": "ODC LB-Micro",
    "odc+ref_lb_mini": "ODC LB-Mini (paper's planner)",
    "odc+lb_mini_equal": "ODC LB-Mini (equal counts)",
    "odc+lb_mini": "ODC LB-Mini",
}


def best_odc(group):
    """The ODC schedule the paper's setting allows: LB-Mini with equal sample counts where the
    setting has it (RL: verl's constraint), else LB-Mini."""
    for m in ("odc+lb_mini_equal", "odc+lb_mini"):
        if m in group:
            return m, group[m]
    return None, None


def read_lines(path):
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"plot_sim.py: {path}:{number}: not a JSON line ({e})")
    if not rows:
        sys.exit(f"plot_sim.py: {path} holds no results")
    return rows


def by_label(rows):
    groups = OrderedDict()
    for row in rows:
        groups.setdefault(row["sim"], {})[row["method"]] = row
    return groups


def setting_cells(label, group):
    """The leading cells of a setting's row: setting, devices, sequences per device, mean length."""
    any_row = next(iter(group.values()))
    return (f"| {label.split('/')[0]} | {any_row['devices']} | {any_row['minibatch_size']} | "
            f"{any_row['mean_length'] / 1000:.1f}K |")


def bubble_cell(row):
    """ "simulated% (planned%)", or "-" without a row."""
    if row is None:
        return " - |"
    return f" {100 * row['bubble_simulated']:.1f}% ({100 * row['bubble_planned']:.1f}%) |"


def estimate_cell(row):
    """The reference packing's own bubble estimate of the row's plans (its 7B fit, no c), or "-"."""
    if row is None or row.get("bubble_reference_estimate") is None:
        return " - |"
    return f" {100 * row['bubble_reference_estimate']:.1f}% |"


def throughput_ratio(row, reference):
    """row's samples/s per device over reference's (independent of sim.baseline); None if either is missing."""
    if row is None or reference is None:
        return None
    return row["samples_per_s_per_device"] / reference["samples_per_s_per_device"]


def ratio_cell(value):
    return " - |" if value is None else f" {value:.3f} |"


def table(path):
    groups = by_label(read_lines(path))
    methods = [m for m in METHODS if any(m in g for g in groups.values())]
    head = "| setting | devices | seq/device | mean len |"
    rule = "|---|---:|---:|---:|"
    out = ["#### ODC over both baselines (throughput: samples/s per device, ratio)", "",
           f"The paper's baseline: {SHORT[PAPER_BASELINE]}, Collective with the reference implementation's "
           f"LB-Micro packing (its DynamicSameMicro); ours: {SHORT[OUR_BASELINE]}, our LB-Micro. Best ODC: "
           f"{SHORT['odc+lb_mini_equal']} where the setting has it (RL: verl's equal counts), else "
           f"{SHORT['odc+lb_mini']}. Bubbles: simulated (the planner's estimate in the simulated cost model in "
           f"parentheses); \"as its packing estimates\": the paper's baseline's plans costed as the reference's "
           f"packing costs them (its 7B fit, without the per-microbatch c), the kind of figure the paper reports.", ""]
    out.append(head + " best ODC | ODC / paper's baseline | ODC / our baseline | our / paper's baseline |"
               " bubble: paper's baseline | bubble: our baseline | bubble: best ODC |"
               " paper's baseline as its packing estimates |")
    out.append(rule + "---|" + "---:|" * 7)
    for label, group in groups.items():
        method, best = best_odc(group)
        paper, ours = group.get(PAPER_BASELINE), group.get(OUR_BASELINE)
        cells = [setting_cells(label, group), f" {SHORT[method]} |" if method else " - |",
                 ratio_cell(throughput_ratio(best, paper)), ratio_cell(throughput_ratio(best, ours)),
                 ratio_cell(throughput_ratio(ours, paper)), bubble_cell(paper), bubble_cell(ours), bubble_cell(best),
                 estimate_cell(paper)]
        out.append("".join(cells))
    baselines = list(OrderedDict.fromkeys(r.get("baseline") for g in groups.values() for r in g.values()))
    if len(baselines) == 1 and baselines[0]:
        over = f"the baseline, {SHORT.get(baselines[0], baselines[0])}"
    else:
        over = "each row's baseline (sim.baseline)"
    out += ["", f"#### Throughput speedup over {over} (samples/s per device, ratio)", ""]
    out.append(head + "".join(f" {SHORT[m]} |" for m in methods) + " best ODC bound |")
    out.append(rule + "---:|" * len(methods) + "---:|")
    for label, group in groups.items():
        cells = [setting_cells(label, group)]
        for m in methods:
            cells.append(f" {group[m]['speedup']:.3f} |" if m in group else " - |")
        best = max((group[m]["zero_overhead_bound"] for m in group if m.startswith("odc")), default=float("nan"))
        cells.append(f" {best:.3f} |")
        out.append("".join(cells))
    out += ["", "#### Bubble rate, simulated (planner estimate in parentheses)", ""]
    out.append(head + "".join(f" {SHORT[m]} |" for m in methods))
    out.append(rule + "---:|" * len(methods))
    for label, group in groups.items():
        out.append(setting_cells(label, group) + "".join(bubble_cell(group.get(m)) for m in methods))
    print("\n".join(out))


def lengths(path):
    seen = OrderedDict()
    for row in read_lines(path):
        setting = row["sim"].split("/")[0]
        if setting not in seen:
            seen[setting] = row
    out = ["| setting | simulated lengths | published |", "|---|---|---|"]
    for setting, row in seen.items():
        out.append(f"| {setting} | {row.get('lengths', '?')} | {row.get('published_lengths') or '-'} |")
    print("\n".join(out))


def sensitivity_reference(variant):
    """The baseline a variant's speedups are over: ours in the variant "ours-baseline", else the paper's."""
    return OUR_BASELINE if variant == "ours-baseline" else PAPER_BASELINE


def sensitivity(path):
    cells = OrderedDict()
    variants = []
    for row in read_lines(path):
        parts = row["sim"].split("/")
        if len(parts) != 3:
            sys.exit(f"plot_sim.py: {path}: label '{row['sim']}' is not CONFIG/mbN/VARIANT")
        cell, variant = "/".join(parts[:2]), parts[2]
        if variant not in variants:
            variants.append(variant)
        cells.setdefault(cell, {}).setdefault(variant, {})[row["method"]] = row
    base = variants[0]
    over = {v: [] for v in variants}  # per variant, what its speedups are over (for the header)

    def speedup(group, method, variant):
        """The best ODC schedule's samples/s per device over the variant's reference row where the group
        has it, else the row's own speedup field (over its sim.baseline: files without the reference)."""
        reference = sensitivity_reference(variant)
        if reference in group:
            what = SHORT[reference]
            value = throughput_ratio(group[method], group[reference])
        else:
            baseline = group[method].get("baseline")
            what = f"{SHORT.get(baseline, baseline or 'sim.baseline')} (speedup field)"
            value = group[method]["speedup"]
        if what not in over[variant]:
            over[variant].append(what)
        return value

    rows = []
    for cell, by_variant in cells.items():
        method, _ = best_odc(by_variant.get(base, {}))
        if method is None:
            continue
        row = [f"| {cell} | {SHORT[method]} |"]
        reference = speedup(by_variant[base], method, base)
        for variant in variants:
            group = by_variant.get(variant, {})
            if method not in group:
                row.append(" - |")
            elif variant == base:
                row.append(f" {reference:.3f} |")
            else:
                value = speedup(group, method, variant)
                row.append(f" {value:.3f} ({100 * (value - reference):+.1f}) |")
        rows.append("".join(row))
    main = " / ".join(over[base]) or "the baseline"
    heads = [v if over[v] in ([], over[base]) else f"{v} (over {' / '.join(over[v])})" for v in variants]
    out = [f"| cell | ODC schedule: speedup over {main} | " + " | ".join(heads) + " |",
           "|---|---|" + "---:|" * len(variants)] + rows
    print("\n".join(out))


LAYOUTS = ["full", "hybrid", "hpz"]


def sharding(path):
    rows = read_lines(path)
    by_layout = OrderedDict()
    for row in rows:
        layout = row.get("sharding", "full")
        if row["method"] in by_layout.setdefault(layout, {}):
            sys.exit(f"plot_sim.py: {path}: two '{row['method']}' rows with sharding {layout} (one run per layout)")
        by_layout[layout][row["method"]] = row
    reference = by_layout.get("full", {}).get("collective+lb_micro")
    if reference is None:
        sys.exit(f"plot_sim.py: {path}: no collective+lb_micro row with sharding full to compare with")
    layouts = [l for l in LAYOUTS if l in by_layout] + [l for l in by_layout if l not in LAYOUTS]
    any_row = next(iter(rows))
    out = [f"#### Sharding layouts: {any_row['devices']} devices, {any_row.get('devices_per_node', '?')} per node, "
           f"{any_row['minibatch_size']} seq/device, mean length {any_row['mean_length'] / 1000:.1f}K", "",
           "| layout | method | minibatch time (s) | samples/s/device | vs Coll LB-Micro full | bubble (simulated) | "
           "inter-node GB per minibatch | all-reduce (s) | refresh (s) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for layout in layouts:
        for m in METHODS:
            r = by_layout[layout].get(m)
            if r is None:
                continue
            ratio = r["samples_per_s_per_device"] / reference["samples_per_s_per_device"]
            out.append(f"| {layout} | {SHORT[m]} | {r['minibatch_time_s']:.3f} | {r['samples_per_s_per_device']:.4f} | "
                       f"{ratio:.3f} | {100 * r['bubble_simulated']:.1f}% | {r.get('inter_node_gb', 0):.1f} | "
                       f"{r.get('replica_sum_s', 0):.3f} | {r.get('refresh_s', 0):.3f} |")
    print("\n".join(out))


def context(path):
    rows = read_lines(path)
    cells = OrderedDict()
    for row in rows:
        setting, variant = row["sim"].rsplit("/", 1)
        cells.setdefault(setting, {}).setdefault(variant, {})[row["method"]] = row

    def tokens(r):  # tokens per second per device: the pools' mean lengths differ
        return r["samples_per_s_per_device"] * r["mean_length"]

    out = ["| setting | devices | seq/device | 64K drop: mean len | Coll LB-Micro tok/s/dev | ODC LB-Mini tok/s/dev | "
           "128K CP: mean len | Coll LB-Micro + static CP tok/s/dev (degree) | ODC LB-Mini + dynamic CP tok/s/dev | "
           "ODC dynamic / Coll static | ODC dynamic CP / ODC 64K drop | groups per minibatch | exchange s/device |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for setting, variants in cells.items():
        drop, cp = variants.get("drop64k", {}), variants.get("cp128k", {})
        dc, do = drop.get("collective+lb_micro"), drop.get("odc+lb_mini")
        cc, co = cp.get("collective+lb_micro"), cp.get("odc+lb_mini")
        if not (dc and do and cc and co):
            sys.exit(f"plot_sim.py: {path}: {setting} lacks a drop64k or cp128k row of collective+lb_micro / odc+lb_mini")
        name, mb = setting.rsplit("/", 1)
        out.append(f"| {name} | {do['devices']} | {mb[2:]} | {do['mean_length'] / 1000:.1f}K | {tokens(dc):.0f} | "
                   f"{tokens(do):.0f} | {co['mean_length'] / 1000:.1f}K | {tokens(cc):.0f} ({cc['context_parallel']}) | "
                   f"{tokens(co):.0f} | {tokens(co) / tokens(cc):.3f} | {tokens(co) / tokens(do):.3f} | "
                   f"{co['context_groups']:.2f} | {co['exchange_s']:.3f} |")
    print("\n".join(out))


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def sweep_table(path):
    """Markdown: one row per sweep point ("sweep/PARAM=VALUE"), every method's speedup over the rows'
    baseline, ODC LB-Mini over our baseline, and the simulated bubbles of ODC LB-Mini and both
    baselines."""
    points = OrderedDict()
    for row in read_lines(path):
        if row["sim"].startswith("sweep/") and "=" in row["sim"]:
            points.setdefault(row["sim"][len("sweep/"):], {})[row["method"]] = row
    if not points:
        sys.exit(f"plot_sim.py: {path} has no 'sweep/PARAM=VALUE' labels")
    methods = [m for m in METHODS if any(m in g for g in points.values())]
    baseline = next(iter(next(iter(points.values())).values())).get("baseline", OUR_BASELINE)
    out = [f"Speedups over {SHORT.get(baseline, baseline)}; simulated bubbles.", "",
           "| sweep point | mean length |" + "".join(f" {SHORT[m]} |" for m in methods) +
           " ODC LB-Mini / our baseline | bubble: ODC LB-Mini | bubble: paper's baseline | bubble: our baseline |",
           "|---|---:|" + "---:|" * (len(methods) + 4)]
    for point, group in points.items():
        any_row = next(iter(group.values()))
        cells = [f"| {point.replace('=', ' ')} | {any_row['mean_length'] / 1000:.1f}K |"]
        cells += [f" {group[m]['speedup']:.3f} |" if m in group else " - |" for m in methods]
        cells.append(ratio_cell(throughput_ratio(group.get("odc+lb_mini"), group.get(OUR_BASELINE))))
        for m in ("odc+lb_mini", PAPER_BASELINE, OUR_BASELINE):
            cells.append(f" {100 * group[m]['bubble_simulated']:.1f}% |" if m in group else " - |")
        out.append("".join(cells))
    print("\n".join(out))


def sweeps(path, out_dir):
    plt = pyplot()
    params = OrderedDict()
    for row in read_lines(path):
        label = row["sim"]
        if not label.startswith("sweep/") or "=" not in label:
            continue
        param, value = label[len("sweep/"):].split("=", 1)
        params.setdefault(param, OrderedDict()).setdefault(value, {})[row["method"]] = row
    if not params:
        sys.exit(f"plot_sim.py: {path} has no 'sweep/PARAM=VALUE' labels")
    for param, values in params.items():
        xs = list(values.keys())
        fig, (ax_speed, ax_bubble) = plt.subplots(1, 2, figsize=(11, 4))
        for m in METHODS:
            if not all(m in values[x] for x in xs):
                continue
            ax_speed.plot(xs, [values[x][m]["speedup"] for x in xs], marker="o", label=SHORT[m])
            ax_bubble.plot(xs, [100 * values[x][m]["bubble_simulated"] for x in xs], marker="o", label=SHORT[m])
        ax_speed.axhline(1.0, color="gray", linewidth=0.8)
        ax_speed.set_xlabel(param)
        baseline = next(iter(values[xs[0]].values())).get("baseline", OUR_BASELINE)
        ax_speed.set_ylabel(f"speedup over {SHORT.get(baseline, baseline)}")
        ax_bubble.set_xlabel(param)
        ax_bubble.set_ylabel("simulated bubble (%)")
        ax_speed.legend(fontsize=8)
        fig.suptitle(f"golden setting (1.5B, LongAlign-like, 4 seq/device, 8 x A100), varying {param}")
        fig.tight_layout()
        fig.savefig(f"{out_dir}/sweep-{param}.png", dpi=110)
        plt.close(fig)
        print(f"{out_dir}/sweep-{param}.png")


def timeline(path, out_png, wanted):
    plt = pyplot()
    with open(path) as f:
        data = json.load(f)
    methods = [m for m in data["methods"] if not wanted or m["method"] in wanted]
    if not methods:
        sys.exit(f"plot_sim.py: {path} has none of the methods {wanted}")
    fig, axes = plt.subplots(len(methods), 1, figsize=(11, 1.2 + 0.35 * len(methods[0]["devices"]) * len(methods)),
                             squeeze=False)
    end = max(m["barrier_s"] for m in methods)
    colors = {"forward": "tab:blue", "head": "tab:purple", "backward": "tab:orange"}
    for ax, method in zip(axes[:, 0], methods):
        for d, device in enumerate(method["devices"]):
            for phase, color in colors.items():
                spans = [(b[0], b[1] - b[0]) for b in device["busy"] if b[4] == phase]
                ax.broken_barh(spans, (d - 0.4, 0.8), facecolors=color, linewidth=0)
        ax.axvline(method["barrier_s"], color="black", linewidth=1)
        ax.set_xlim(0, end * 1.02)
        ax.set_yticks(range(len(method["devices"])))
        ax.set_yticklabels([f"dev {d}" for d in range(len(method["devices"]))], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{SHORT.get(method['method'], method['method'])}: minibatch barrier at "
                     f"{method['barrier_s']:.2f} s (white = idle)", fontsize=9)
    axes[-1, 0].set_xlabel("seconds (blue forward, purple head, orange backward)")
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    print(out_png)


def main(argv):
    if len(argv) >= 3 and argv[1] == "table":
        table(argv[2])
    elif len(argv) == 3 and argv[1] == "lengths":
        lengths(argv[2])
    elif len(argv) == 3 and argv[1] == "sensitivity":
        sensitivity(argv[2])
    elif len(argv) == 3 and argv[1] == "sharding":
        sharding(argv[2])
    elif len(argv) == 3 and argv[1] == "context":
        context(argv[2])
    elif len(argv) == 3 and argv[1] == "sweep-table":
        sweep_table(argv[2])
    elif len(argv) == 4 and argv[1] == "sweeps":
        sweeps(argv[2], argv[3])
    elif len(argv) >= 4 and argv[1] == "timeline":
        timeline(argv[2], argv[3], argv[4:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
