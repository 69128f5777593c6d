#!/usr/bin/env python3
"""gpu_model_throughput --cpu-tiny --profile: the op profile's document is complete and consistent.

Usage: test_op_profile.py GPU_MODEL_THROUGHPUT WORK_DIR

Per case (the tied LLaMA-like tiny shape without recomputation; the untied one with q/k/v biases
under selective recomputation): the document holds every field of its schema (backend/op_profile.h)
and every category a training step makes (each GEMM role forward and backward, attention, the
norms, RoPE, SwiGLU, the embedding, the loss, the weight casts, the optimizer, copies, uploads,
zeroing, row gathers and scatters), no GEMM left without a role, calls that match the shape (a
GEMM role once per layer, twice with recomputation), seconds >= 0, the qkv sums equal to their
parts, and the ops' seconds within the step's wall seconds: at most all of it (the ops' intervals
are disjoint and inside the step's window, on one clock) and at least half of it. The lower bound:
on the CPU every op runs on the calling thread between its two marks, so what lies outside ops is
only the model's host code between calls (index vectors, loop bookkeeping) and the clock reads,
measured at 0.1% of a tiny step; half leaves room for a loaded machine without letting a lost op
(a category the profiler never timed) pass. Nothing else about the times is asserted.
"""
import json
import subprocess
import sys
from pathlib import Path

FIELDS = {"bench": str, "shape": str, "tokens": int, "sequences": int, "layers": int, "hidden": int, "q_dim": int,
          "kv_dim": int, "intermediate": int, "vocab": int, "recompute": str, "attention": str, "device": str,
          "device_description": str, "step_seconds": float, "op_seconds": float, "ops": list, "sums": list}
OP_FIELDS = {"name": str, "role": str, "measure": str, "calls": int, "seconds": float, "flops": float, "bytes": float}
GEMM_ROLES = ["q", "k", "v", "o_proj", "gate_up", "down", "lm_head"]
FORWARD_OP = {"q": "linear_forward", "k": "linear_forward", "v": "linear_forward", "gate_up": "linear_forward",
              "lm_head": "linear_forward", "o_proj": "linear_forward_residual", "down": "linear_forward_residual"}
OTHERS = ["attention_forward", "attention_backward", "rmsnorm_forward", "rmsnorm_backward", "rope_tables",
          "rope_forward", "rope_backward", "swiglu_forward", "swiglu_backward", "embedding_forward",
          "embedding_backward", "cross_entropy", "adamw_step", "sum_of_squares", "upload", "zero", "gather_rows",
          "scatter_rows", "prepare_microbatch", "resolve_loss"]


def check_case(binary, work, name, args, recompute, tied, problems):
    out = work / f"{name}.json"
    run = subprocess.run([binary, "--cpu-tiny", "--layers", "2", "--seqs", "2", "--seq-len", "128", "--steps", "2",
                          "--warmup", "1", "--recompute", recompute, "--profile", str(out)] + args,
                         capture_output=True, text=True, timeout=300)
    def fail(what):
        problems.append(f"{name}: {what}")
    if run.returncode != 0:
        fail(f"exit {run.returncode}: {run.stderr[-2000:]}")
        return
    line = json.loads(run.stdout.strip().splitlines()[-1])
    if not (line.get("profile") == str(out) and line.get("profile_step_ms", 0) > 0 and "profile_op_ms" in line):
        fail(f"the case's line lacks the profile's figures: {line}")
    if "op profile:" not in run.stderr or "linear_backward qkv (= q + k + v)" not in run.stderr:
        fail(f"no table on stderr: {run.stderr[-2000:]}")
    doc = json.loads(out.read_text())
    for key, kind in FIELDS.items():
        if key not in doc:
            fail(f"field '{key}' missing")
        elif not isinstance(doc[key], kind) and not (kind is float and isinstance(doc[key], int)):
            fail(f"field '{key}' is {type(doc[key]).__name__}, expected {kind.__name__}")
    if problems:
        return
    if doc["bench"] != "op_profile" or doc["device"] != "cpu" or doc["recompute"] != recompute:
        fail(f"bench/device/recompute: {doc['bench']}, {doc['device']}, {doc['recompute']}")
    ops = {}
    for i, op in enumerate(doc["ops"]):
        for key, kind in OP_FIELDS.items():
            if key not in op or not (isinstance(op[key], kind) or (kind is float and isinstance(op[key], int))):
                fail(f"ops[{i}].{key} missing or not {kind.__name__}: {op}")
                return
        if op["seconds"] < 0 or op["calls"] < 1 or op["flops"] < 0 or op["bytes"] < 0:
            fail(f"ops[{i}] has a negative figure or no calls: {op}")
        if op["role"].startswith("gemm"):
            fail(f"a GEMM without a role: {op}")
        ops[(op["name"], op["role"])] = op
    layers = doc["layers"]
    reruns = 1 if recompute == "none" else 2
    for role in GEMM_ROLES:
        forward = ops.get((FORWARD_OP[role], role))
        backward = ops.get(("linear_backward", role))
        if forward is None or backward is None:
            fail(f"GEMM role {role} missing forward or backward")
            continue
        want = 1 if role == "lm_head" else layers * (1 if role == "down" else reruns)
        if forward["calls"] != want or backward["calls"] != (1 if role == "lm_head" else layers):
            fail(f"{role}: {forward['calls']} forward and {backward['calls']} backward calls for {layers} layers")
    for other in OTHERS:
        if (other, "") not in ops:
            fail(f"category {other} missing")
    if ("weights", "cast") not in ops or (("weights", "reuse") in ops) != tied:
        fail(f"weight casts: {[k for k in ops if k[0] == 'weights']}")
    for s in doc["sums"]:
        parts = sum(ops[(s["name"], r)]["seconds"] for r in ("q", "k", "v"))
        if s["role"] != "qkv" or abs(s["seconds"] - parts) > 1e-12 * max(1.0, parts):
            fail(f"sum {s} is not q + k + v ({parts})")
    if len(doc["sums"]) != 2:
        fail(f"{len(doc['sums'])} qkv sums, expected forward and backward")
    total = sum(op["seconds"] for op in doc["ops"])
    step = doc["step_seconds"]
    if abs(total - doc["op_seconds"]) > 1e-9 * max(1.0, total):
        fail(f"op_seconds {doc['op_seconds']} is not the ops' sum {total}")
    if not (0.5 * step <= total <= step * (1 + 1e-12)):
        fail(f"the ops' seconds {total:.6f} are not within [0.5, 1] x the step's {step:.6f}")
    print(f"{name}: {len(doc['ops'])} categories, ops {total * 1e3:.2f} ms of a {step * 1e3:.2f} ms step "
          f"({100 * total / step:.1f}%)")


def main():
    binary, work = sys.argv[1], Path(sys.argv[2])
    work.mkdir(parents=True, exist_ok=True)
    problems = []
    check_case(binary, work, "llama-tiny-none", [], "none", True, problems)
    check_case(binary, work, "qwen2-tiny-selective", ["--shape", "qwen2-1.5b"], "selective", False, problems)
    for p in problems:
        print("FAIL", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
