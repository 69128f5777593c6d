#!/usr/bin/env python3
"""The GPU check's summary (scripts/gpu-check.sh): at most 50 lines from the logs folder.

  gpu_check_summary.py LOGS_DIR DRY_RUN(0|1)

Reads LOGS_DIR/steps.tsv (a header, then per step: name, status, exit code, seconds, estimate,
limit, the --only that reruns it), COMMIT, env.log, tests.log (the Catch2
totals and the "[cuda]" parity lines of odc_cuda_tests), the sanitizer logs, and the JSON lines of
trainer.jsonl, rl.jsonl, rollout.jsonl, ipc-train.jsonl, context.jsonl, profile.json, comm-bandwidth.jsonl, ceilings.jsonl, nccl.jsonl, attention*.jsonl,
model-parity.jsonl, throughput*.jsonl, long-context*.jsonl, and switches.txt (the switches set away
from their defaults). Missing results are reported as missing, never invented. Standard library only
(it runs on the lent machine too).
"""
import json
import os
import re
import sys

MAX_LINES = 50
# NVIDIA H200 SXM dense bf16 tensor-core peak (datasheet: 989.5 TFLOP/s without sparsity).
H200_BF16_DENSE_TFLOPS = 989.5
# The targets on an H200 (docs/GPU_CHECK.md, "Targets"): reported against, not failed on.
TARGET_1B_MFU = 0.45
TARGET_1B_VS_TORCH = 1.2
TARGET_32K_MFU = 0.40
TARGET_CUDNN_TFLOPS = 400.0


def target(value, goal, text):
    """" (target >= goal: met)" or "... BELOW" """
    return f" (target >= {text}: {'met' if value >= goal else 'BELOW'})"


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def jsonl(path):
    text = read(path)
    rows = []
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def steps_lines(logs):
    """The steps: passed, failed (with exit codes), cut by the deadline and deferred, the last two
    with the --only that reruns them (neither is a failure, but the check is not complete)."""
    rows = []
    for line in (read(os.path.join(logs, "steps.tsv")) or "").splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) == 7:
            rows.append(dict(zip(("step", "status", "rc", "seconds", "estimate", "limit", "rerun"), parts)))
    if not rows:
        return ["steps: none finished"]
    total = sum(int(r["seconds"]) for r in rows if r["seconds"].isdigit())
    ran = [r for r in rows if r["status"] in ("passed", "failed")]
    failed = [f"{r['step']} (rc={r['rc']}, {r['seconds']}s)" for r in rows if r["status"] == "failed"]
    cut = [r["step"] for r in rows if r["status"] == "cut"]
    deferred = [r["step"] for r in rows if r["status"] == "deferred"]
    if failed:
        shown = ", ".join(failed[:8]) + (f" and {len(failed) - 8} more" if len(failed) > 8 else "")
        line = f"steps: FAILED {shown}; {len(ran) - len(failed)} of {len(ran)} run passed, {total}s in all"
    else:
        line = f"steps: all {len(ran)} run passed in {total}s"
    if cut:
        line += f"; cut by the deadline: {','.join(cut)}"
    if deferred:
        line += f"; not run (deadline): {','.join(deferred)}"
    out = [line]
    again = [r["step"] for r in rows if r["status"] in ("failed", "cut", "deferred")]
    if again:
        out.append(f"  rerun: --only {','.join(again)}")
    return out


def env_lines(logs):
    """What the env step found: the GPU, cuDNN, and the CUDA runtime our programs pin for cuDNN's
    frontend (gpu_attention --runtime-info)."""
    text = read(os.path.join(logs, "env.log")) or ""
    gpu = re.search(r"\|\s+\d+\s+(NVIDIA [^|]*?)\s{2,}", text)
    info = next((r for r in jsonl(os.path.join(logs, "env.log")) if "runtime_info" in r), None)
    if not gpu and not info:
        return []
    if info:
        why = info.get("cudnn_frontend_cudart_why", "")
        runtime = (f"cuDNN {info.get('cudnn_version', '?')}; cuDNN frontend's CUDA runtime: "
                   f"{info.get('cudnn_frontend_cudart', '?')}" + (f" ({why})" if why else ""))
    else:
        runtime = "cuDNN frontend's CUDA runtime: not reported"
    return [f"env: {gpu.group(1).strip() if gpu else 'no GPU named'}; {runtime}"]


def tests_lines(logs):
    text = read(os.path.join(logs, "tests.log"))
    if text is None:
        return ["tests: not run"]
    totals = [l.strip() for l in text.splitlines() if l.startswith(("All tests passed", "test cases:"))]
    out = ["tests: " + (totals[-1] if totals else "no Catch2 totals in tests.log (crashed or cut off)")]
    parity = [l for l in text.splitlines() if l.startswith("[cuda] ") and "=" in l]
    if parity:
        cos = [(float(m.group(1)), l) for l in parity for m in [re.search(r"cosine=([-0-9.e+]+)", l)] if m]
        rel = [(float(m.group(1)), l) for l in parity for m in [re.search(r"rel_err=([-0-9.e+]+)", l)] if m]
        bad = sum(int(m.group(1)) for l in parity for m in [re.search(r"mismatches=(\d+)", l)] if m)
        out.append(f"kernel parity: {len(parity)} checks, {bad} elementwise mismatches")
        if cos:
            v, l = min(cos)
            out.append(f"  lowest cosine {v:.6f}: {l[7:41].strip()}")
        if rel:
            v, l = max(rel)
            out.append(f"  largest relative error {v:.2e}: {l[7:41].strip()}")
    m = re.search(r"\[cuda\] ragged microbatches: peak in use ([0-9.]+) MiB, peak reserved ([0-9.]+) MiB \(([0-9.]+)x", text)
    if m:
        out.append(f"allocator under ragged sizes: peak reserved {m.group(2)} MiB for {m.group(1)} MiB in use "
                   f"({m.group(3)}x; measured, not bounded)")
    return out


def sanitizer_lines(logs):
    cells = []
    for tool in ("memcheck", "racecheck", "synccheck"):
        text = read(os.path.join(logs, tool + ".log"))
        if text is None:
            cells.append(f"{tool} not run")
            continue
        m = re.findall(r"ERROR SUMMARY: (\d+) error", text)
        hazards = re.findall(r"RACECHECK SUMMARY: (\d+) hazard", text)
        # racecheck prints no ERROR SUMMARY: "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
        m = m or re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error", text)
        if m:
            cells.append(f"{tool} {m[-1]} errors" + (f", {hazards[-1]} hazards" if hazards else ""))
        else:
            cells.append(f"{tool} no summary")
    return ["sanitizers: " + "; ".join(cells)]


def ceiling_lines(logs):
    rows = jsonl(os.path.join(logs, "ceilings.jsonl"))
    gemm = next((r for r in rows if r.get("op") == "gemm_bf16"), None)
    copy = next((r for r in rows if r.get("op") == "device_copy"), None)
    g = f"cuBLASLt bf16 {gemm['m']}^3 {gemm['tflops']:.0f} TFLOP/s" if gemm else "GEMM ceiling missing"
    c = f"device copy {copy['gbps']:.0f} GB/s (read+write)" if copy else "copy ceiling missing"
    return [f"ceilings: {g}; {c}"], (gemm["tflops"] if gemm else None)


def nccl_lines(logs):
    """One line per buffer size of gpu_nccl: each collective's GB/s and its ratio to the copy."""
    rows = [r for r in jsonl(os.path.join(logs, "nccl.jsonl")) if "gbps" in r and "bytes" in r]
    if not rows:
        return ["nccl: no results"]
    out = []
    for size in dict.fromkeys(r["bytes"] for r in rows):
        cells = []
        for r in (r for r in rows if r["bytes"] == size and r.get("op") != "device_copy"):
            name = r.get("op", "?").replace("_", "-") + " " + r.get("dtype", "")
            ratio = f" ({r['vs_copy']:.2f}x copy)" if isinstance(r.get("vs_copy"), (int, float)) else ""
            cells.append(f"{name.strip()} {r['gbps']:.0f}{ratio}")
        copy = next((r for r in rows if r["bytes"] == size and r.get("op") == "device_copy"), None)
        cells.append(f"copy {copy['gbps']:.0f}" if copy else "copy missing")
        out.append(f"nccl 1 rank {size / 2**20:.0f} MiB, GB/s: " + ", ".join(cells))
    return out


def attention_lines(logs):
    rows = jsonl(os.path.join(logs, "attention.jsonl")) + jsonl(os.path.join(logs, "attention-torch.jsonl"))
    key = lambda r: (r.get("shape"), r.get("n_heads"), r.get("n_kv_heads"), r.get("head_dim"))
    ours = {key(r): r for r in rows if r.get("impl") == "odc"}
    if not ours:
        return ["attention: no results"]
    peers = {}
    for r in rows:
        if r.get("impl", "").startswith("torch") and "error" not in r:
            peers.setdefault(key(r), {})[r["impl"]] = r
    cudnn = {key(r): r for r in rows if r.get("impl") == "cudnn"}
    out = ["attention fwd+bwd TFLOP/s: ours / best torch SDPA (backend); cuDNN (model.attention: cudnn) / ours"]
    for k, o in list(ours.items())[:8]:
        p = peers.get(k, {})
        best = max(p.values(), key=lambda r: r.get("fwdbwd_tflops", 0), default=None)
        cell = (f"{o['fwdbwd_tflops']:.0f} / {best['fwdbwd_tflops']:.0f} ({best['impl'].removeprefix('torch_sdpa_').removeprefix('torch_')}) "
                f"= {o['fwdbwd_tflops'] / best['fwdbwd_tflops']:.2f}x" if best and best.get("fwdbwd_tflops")
                else f"{o.get('fwdbwd_tflops', 0):.0f} / n/a")
        c = cudnn.get(k)
        if c and c.get("fwdbwd_tflops") and o.get("fwdbwd_tflops"):
            cell += f"; cudnn {c['fwdbwd_tflops']:.0f} = {c['fwdbwd_tflops'] / o['fwdbwd_tflops']:.2f}x ours"
            if k[0] == "1x4096" and k[3] == 128:
                cell += target(c["fwdbwd_tflops"], TARGET_CUDNN_TFLOPS, f"{TARGET_CUDNN_TFLOPS:.0f}")
        elif c and "error" in c:
            cell += f"; cudnn n/a ({c['error'][:60]})"
        out.append(f"  {k[0]} {k[1]}/{k[2]} d{k[3]}: {cell}")
    return out


def parity_lines(logs):
    # Checked rows carry "check"; the per-tensor rows ("tensor") are for the record.
    rows = [r for r in jsonl(os.path.join(logs, "model-parity.jsonl")) if "check" in r]
    if not rows:
        return ["model parity: no results"]
    bad = [r for r in rows if not r.get("ok")]
    out = [f"model parity: {len(rows) - len(bad)}/{len(rows)} within bounds"]
    tighter = [r for r in rows if str(r.get("check", "")).startswith("tighter")]
    for r in (bad or tighter or rows)[:6]:
        out.append(f"  {r.get('check')}: {r.get('value'):.3e} (bound {r.get('bound'):.1e}){'' if r.get('ok') else '  FAIL'}")
    return out


def throughput_lines(logs, ceiling_tflops):
    ours = next((r for r in jsonl(os.path.join(logs, "throughput.jsonl")) if r.get("impl") == "odc"), None)
    torch = next((r for r in jsonl(os.path.join(logs, "throughput-torch.jsonl")) if "tokens_per_s" in r), None)
    if ours is None:
        return ["throughput: no results"]
    tflops = ours["tokens_per_s"] * ours["flops_per_token"] / 1e12
    line = (f"throughput ({ours.get('shape', '?')}): {ours['tokens_per_s']:.0f} tok/s, {tflops:.0f} TFLOP/s, "
            f"MFU {100 * tflops / H200_BF16_DENSE_TFLOPS:.1f}% of dense bf16 peak")
    if ceiling_tflops:
        line += f", {100 * tflops / ceiling_tflops:.1f}% of the GEMM ceiling"
    line += target(tflops / H200_BF16_DENSE_TFLOPS, TARGET_1B_MFU, f"{100 * TARGET_1B_MFU:.0f}%")
    out = [line]
    if torch:
        ratio = ours['tokens_per_s'] / torch['tokens_per_s']
        out.append(f"  torch eager: {torch['tokens_per_s']:.0f} tok/s; ours / torch = {ratio:.2f}x"
                   + target(ratio, TARGET_1B_VS_TORCH, f"{TARGET_1B_VS_TORCH}x"))
    else:
        out.append("  torch eager: no result")
    return out


def trainer_lines(logs):
    r = next(iter(jsonl(os.path.join(logs, "trainer.jsonl"))), None)
    if r is None:
        return ["trainer: no result"]
    yes = lambda v: "yes" if v else "NO"
    loss = (f"loss {r['loss_first']:.4f} -> {r['loss_last']:.4f}" if r.get("loss_first") is not None
            and r.get("loss_last") is not None else "loss n/a")
    rate = f", {r['tokens_per_s']:.0f} tok/s" if r.get("tokens_per_s") else ""
    out = [f"trainer (odc-train): {r.get('steps')} steps, {loss}; rerun bitwise {yes(r.get('repeat_bitwise'))}, "
           f"resume bitwise {yes(r.get('resume_bitwise'))}{rate}"]
    if r.get("compare_sets"):
        diff = r.get("compare_max_rel_diff")
        out.append(f"  against {' '.join(r['compare_sets'])}: losses within "
                   + (f"{diff:.2e}" if isinstance(diff, (int, float)) else "n/a")
                   + f" ({'ok' if r.get('compare_ok') else 'OVER the tolerance'})")
    if r.get("memory_error_pct") is not None:
        # The plan against the allocator, export included (the run ends with the streamed export).
        within = "within 10%" if abs(r["memory_error_pct"]) <= 10 else "OFF by more than 10%"
        out.append(f"  memory plan {r['memory_predicted_mib']:.1f} MiB, measured {r['memory_measured_mib']:.1f} MiB "
                   f"({r['memory_error_pct']:+.1f}%, {within})")
    return out


def rollout_lines(logs):
    """Batched decoding throughput: tokens/s per concurrency, batched against per-sequence attention."""
    rows = [r for r in jsonl(os.path.join(logs, "rollout.jsonl")) if "tokens_per_s" in r]
    if not rows:
        return ["rollout throughput: no results"]
    by = {}
    for r in rows:
        by.setdefault(r.get("concurrency"), {})[r.get("path")] = r
    cells = []
    for c in sorted(k for k in by if k is not None):
        batched, single = by[c].get("batched"), by[c].get("per_sequence")
        cell = f"{c}: {batched['tokens_per_s']:.0f}" if batched else f"{c}: n/a"
        if batched and single and single.get("tokens_per_s"):
            cell += f" ({batched['tokens_per_s'] / single['tokens_per_s']:.2f}x per-sequence)"
        cells.append(cell)
    return [f"rollout tok/s ({rows[0].get('shape', '?')}, {rows[0].get('device', '?')}), batched decode attention, "
            "by concurrent sequences: " + "; ".join(cells)]


def rate(flops, seconds):
    """FLOP/s as TF/s, or GF/s below one TF/s (a CPU's profile)."""
    r = flops / seconds
    return f"{r / 1e12:.0f} TF/s" if r >= 1e12 else f"{r / 1e9:.1f} GF/s"


def profile_lines(logs):
    """The per-op profile of one training step: the largest categories, GEMM roles with their rate."""
    p = None
    try:
        with open(os.path.join(logs, "profile.json"), encoding="utf-8") as f:
            p = json.load(f)
    except (OSError, ValueError):
        pass
    if not p or not p.get("ops"):
        return ["profile: no result"]
    step = p.get("step_seconds") or 0.0
    ops = sorted(p["ops"], key=lambda o: -o.get("seconds", 0.0))
    total = sum(o.get("seconds", 0.0) for o in ops)
    out = [f"profile ({p.get('shape', '?')}, {p.get('tokens')} tokens, attention {p.get('attention', '?')}): "
           f"step {1e3 * step:.1f} ms, ops {1e3 * total:.1f} ms"]
    cells = []
    for o in ops[:10]:
        name = o.get("name", "?") + (f"/{o['role']}" if o.get("role") else "")
        cell = f"{name} {1e3 * o.get('seconds', 0.0):.1f}"
        if o.get("flops") and o.get("seconds"):
            cell += f" ({rate(o['flops'], o['seconds'])})"
        cells.append(cell)
    out.append("  ms: " + ", ".join(cells[:5]))
    if len(cells) > 5:
        out.append("      " + ", ".join(cells[5:]))
    # The three projections' GEMMs together: what one fused QKV GEMM would replace.
    qkv = [x for x in p.get("sums", []) if x.get("role") == "qkv" and x.get("seconds")]
    if qkv:
        out.append("  q+k+v GEMMs: " + ", ".join(
            f"{x.get('name', '?')} {1e3 * x['seconds']:.2f} ms"
            + (f" ({rate(x['flops'], x['seconds'])})" if x.get("flops") else "") for x in qkv))
    return out


def rl_lines(logs):
    """The online GRPO loop on the GPU: rewards, losses, and its rerun and resume bits."""
    r = next(iter(jsonl(os.path.join(logs, "rl.jsonl"))), None)
    if r is None:
        return ["rl: no result"]
    yes = lambda v: "yes" if v else "NO"
    fmt = lambda a, b, what: (f"{what} {r[a]:.4f} -> {r[b]:.4f}" if r.get(a) is not None and r.get(b) is not None
                              else f"{what} n/a")
    return [f"rl (online GRPO loop): {r.get('iterations')} iterations, {r.get('steps')} steps, "
            f"{fmt('reward_first', 'reward_last', 'reward')}, {fmt('loss_first', 'loss_last', 'loss')}; "
            f"rerun bitwise {yes(r.get('repeat_bitwise'))}, resume bitwise {yes(r.get('resume_bitwise'))}"]


def ipc_train_lines(logs):
    """The multi-process run: each rank count's agreement with one rank, and bf16 gathers' bits."""
    r = next(iter(jsonl(os.path.join(logs, "ipc-train.jsonl"))), None)
    if r is None:
        return ["ipc training (odc-run --local): no result"]
    cells = []
    for run in r.get("runs", []):
        diff = run.get("max_rel_diff")
        rate = run.get("tokens_per_s")
        cells.append(f"{run.get('ranks')} ranks " + (f"loss {run['loss_last']:.4f}" if run.get("loss_last") else "FAILED")
                     + (f", max diff {diff:.1e}" if isinstance(diff, (int, float)) else "")
                     + (f", {rate:.0f} tok/s" if rate else ""))
    bitwise = r.get("bf16_gathers_bitwise")
    verdict = "ok" if r.get("ok") else "FAILED"
    return [f"ipc training {verdict} (tolerance {r.get('tolerance')}): " + "; ".join(cells),
            f"  bf16 gathers equal fp32 gathers bitwise: {'yes' if bitwise else 'NO' if bitwise is False else 'n/a'}"]


def context_lines(logs):
    """The context-parallel step: each split run's agreement with the unsplit one, or why it was skipped."""
    r = next(iter(jsonl(os.path.join(logs, "context.jsonl"))), None)
    if r is None:
        return ["context parallelism (odc-run --local): no result"]
    cells, skipped = [], []
    for run in r.get("runs", [])[1:]:
        head = f"{run.get('comm')} x{run.get('ranks')} cap {run.get('cap')}"
        if "skipped" in run:
            skipped.append(f"{run.get('comm')} x{run.get('ranks')}")
            continue
        diff = run.get("max_rel_diff")
        cells.append(head + (f" FAILED ({run['error']})" if "error" in run else
                             f" max diff {diff:.1e}" if isinstance(diff, (int, float)) else " no losses")
                     + (f", {run['split_microbatches']} split" if "split_microbatches" in run else ""))
    out = [f"context parallelism {'ok' if r.get('ok') else 'FAILED'} (tolerance {r.get('tolerance')} of 1 unsplit "
           f"rank, longest {r.get('longest')} tok): " + "; ".join(cells)]
    if skipped:
        reason = next(run["skipped"] for run in r["runs"] if "skipped" in run)
        out.append(f"  not run: {', '.join(skipped)} ({reason.split(':')[0]}: one GPU per rank)")
    return out


def comm_bandwidth_lines(logs):
    """comm_bandwidth under odc-run --local: gather and push GB/s of each comm against a copy."""
    rows = jsonl(os.path.join(logs, "comm-bandwidth.jsonl"))
    if not rows:
        return ["comm bandwidth: no results"]
    out = []
    for r in rows[:8]:
        head = f"comm {r.get('comm')} x{r.get('world')}"
        if "error" in r:
            out.append(f"{head}: {r['error'][:90]}")
            continue
        out.append(f"{head} ({r.get('unit_mib', 0):.0f} MiB units): gather {r['gather_GBps']:.0f} GB/s "
                   f"({r['gather_vs_copy']:.2f}x copy), scatter-accumulate {r['push_GBps']:.0f} GB/s "
                   f"({r['push_vs_copy']:.2f}x), copy {r['copy_GBps']:.0f}")
    return out


def gib(b):
    return f"{b / 2**30:.1f} GiB"


def long_context_lines(logs, dry):
    """The long-context step: ours per token count (tok/s, MFU, the allocator's peak against the
    memory plan) and the torch peer's; in a dry run the plans alone."""
    ours = [r for r in jsonl(os.path.join(logs, "long-context.jsonl")) if r.get("impl") == "odc"]
    torch = {r.get("tokens"): r for r in jsonl(os.path.join(logs, "long-context-torch.jsonl"))}
    if not ours:
        return ["long context: no results"]
    head = ours[0]
    out = [f"long context ({head.get('model')}, world 1, recompute {head.get('recompute')}"
           + (f", attention {head['attention'].split(':')[0]}" if head.get("attention") else "") + "):"]
    for r in ours[:3]:
        t = f"  {r.get('tokens')} tok"
        plan = (f"plan {gib(r['predicted_pooled_bytes'])} pooled" if "predicted_pooled_bytes" in r else "no plan")
        if r.get("plan_only"):
            verdict = f"skipped: {r['skipped']}" if "skipped" in r else f"fits {gib(r.get('device_budget_bytes', 0))}"
            out.append(f"{t}: {plan}, peak {gib(r.get('plan_peak_bytes', 0))}; {verdict}")
            continue
        if "skipped" in r:
            out.append(f"{t}: skipped ({r['skipped']}); {plan}")
            continue
        if "error" in r:
            out.append(f"{t}: FAILED {r['error'][:80]}; {plan}")
            continue
        line = f"{t}: {r['tokens_per_s']:.0f} tok/s, {r['tflops']:.0f} TFLOP/s, MFU {100 * r['mfu']:.1f}%"
        if r.get("tokens") == 32768 and r.get("model") == "qwen2-1.5b":
            line += target(r["mfu"], TARGET_32K_MFU, f"{100 * TARGET_32K_MFU:.0f}%")
        if "measured_peak_bytes" in r:
            line += (f"; memory {plan}, measured {gib(r['measured_peak_bytes'])} "
                     f"({r['memory_error_pct']:+.1f}%)")
        out.append(line)
        p = torch.get(r.get("tokens"))
        if p and "tokens_per_s" in p:
            out.append(f"    torch (sdpa {p.get('sdpa')}, checkpoint {p.get('recompute')}): {p['tokens_per_s']:.0f} tok/s, "
                       f"MFU {100 * p['mfu']:.1f}%, peak {gib(p.get('peak_bytes') or 0)}; ours / torch = "
                       f"{r['tokens_per_s'] / p['tokens_per_s']:.2f}x")
        elif p and "error" in p:
            out.append(f"    torch: FAILED {p['error'][:80]}")
        elif not dry:
            out.append("    torch: no result")
    return out


def switches_line(logs):
    """The switches set for this run (docs/GPU_CHECK.md), or nothing when all are defaults."""
    defaults = {"ODC_CHECK_ATTENTION": "auto", "ODC_CHECK_ATTENTION_IMPLS": "native,cudnn",
                "ODC_CHECK_RECOMPUTE": "selective", "ODC_CHECK_LONG_TOKENS": "32768,65536",
                "ODC_CHECK_TORCH_SDPA": "auto"}
    cells = []
    for line in (read(os.path.join(logs, "switches.txt")) or "").splitlines():
        key, _, value = line.partition("=")
        if value and value != defaults.get(key, ""):
            cells.append(f"{key}={value}")
    return ["switches: " + ", ".join(cells)] if cells else []


def main():
    if len(sys.argv) != 3:
        print("usage: gpu_check_summary.py LOGS_DIR DRY_RUN", file=sys.stderr)
        return 2
    logs, dry = sys.argv[1], sys.argv[2] == "1"
    commit = (read(os.path.join(logs, "COMMIT")) or "unknown\n").strip()
    lines = [f"ODC GPU check{' (dry run: no GPU work)' if dry else ''}: commit {commit}"] + steps_lines(logs)
    lines += switches_line(logs)
    lines += env_lines(logs)
    if dry:
        lines += trainer_lines(logs)
        lines += rl_lines(logs)
        lines += rollout_lines(logs)
        lines += ipc_train_lines(logs)
        lines += context_lines(logs)
        lines += comm_bandwidth_lines(logs)
        lines += long_context_lines(logs, dry)
        lines += profile_lines(logs)
    else:
        # In the order of the check's steps (what matters most first, should the 50 lines cut).
        ceil, ceiling_tflops = ceiling_lines(logs)
        lines += trainer_lines(logs)
        lines += rl_lines(logs)
        lines += rollout_lines(logs)
        lines += ipc_train_lines(logs)
        lines += context_lines(logs)
        lines += tests_lines(logs)
        lines += comm_bandwidth_lines(logs)
        lines += parity_lines(logs)
        lines += throughput_lines(logs, ceiling_tflops)
        lines += long_context_lines(logs, dry)
        lines += attention_lines(logs)
        lines += profile_lines(logs)
        lines += nccl_lines(logs)
        lines += ceil
        lines += sanitizer_lines(logs)
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES - 1] + [f"... {len(lines) - MAX_LINES + 1} more lines in gpu-check.tar.gz"]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
