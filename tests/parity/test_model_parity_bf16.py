#!/usr/bin/python3
"""Mixed-precision parity: our C++ model in CpuBackend's bf16 mode (odc_parity_dump with
"dtype": "bfloat16") against PyTorch in bfloat16 with fp32 master weights (llama_ref.py), on the
cases of test_model_parity.py.

    /usr/bin/python3 test_model_parity_bf16.py --dump build/bin/odc_parity_dump --workdir DIR

The torch side keeps fp32 leaf parameters (the masters, updated by torch.optim.AdamW in fp32) and
runs every forward on bf16 casts of them, so activations are bf16 and gradients reach the fp32
leaves through the cast; logits are cast to fp32 before the loss. Checked, with normwise relative
errors ||ours - ref|| / ||ref||: forward logits at initialization, step 1's gradient of every
parameter, the loss of every AdamW step, and each parameter's total update (final - init).
The float64 reference's distance to both bf16 runs is printed next to it, for scale.
Prints a table; exits non-zero naming every failure.
"""

import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
import test_model_parity  # noqa: E402  (the cases, and the report format)

# Why the bounds are what they are. Both sides round to bf16 (unit roundoff u = 2^-8 = 3.9e-3)
# and accumulate matrix products in fp32, so neither is "right"; they differ because torch rounds
# at more points than our GPU-mirroring kernels do: its RMSNorm is five bf16 ops (x^2, mean,
# rsqrt, two products; ours is one fp32 computation rounded once), its RoPE tables and each
# rotated product are bf16 (ours: fp32 tables, one rounding), its attention scores are rounded to
# bf16 before the softmax (an error of u |s| in each exponent; ours keep the scores fp32) and its
# probabilities are normalized before their bf16 rounding (ours: unnormalized, as in
# FlashAttention-2). A forward through two layers thus carries a few u of independent error on
# either side. Measured, logits: 6.1e-3 / 5.7e-3 (cases A / B); ours vs float64 5.2e-3 / 4.8e-3,
# torch bf16 vs float64 6.6e-3 / 6.2e-3. Bound 2e-2, for ours against both references.
TOL_LOGITS = 2e-2
# Gradients go through the same ops backwards, plus torch's bf16 weight gradients (rounded once
# per microbatch before they reach the fp32 master; ours are fp32 accumulators). Measured per
# tensor <= 3.0e-2 against torch bf16 (RMSNorm weights and attention biases, whose gradients are
# sums of many small, partly cancelling terms), <= 1.2e-2 against float64. Bound 8e-2. A wrong
# rounding point or a missing fp32 accumulation shows up as an error of order 1, not of order u.
TOL_GRAD = 8e-2
# The loss is a mean over ~40 targets of log-softmax values whose errors average out. Measured
# <= 7.2e-4 relative per step (5 steps); bound 5e-3.
TOL_LOSS = 5e-3
# Each parameter's total update over the 5 AdamW steps (final - init). Adam normalizes every
# element's step to about lr, so the update's error follows the gradients' relative error, and a
# tensor whose steps change sign from one step to the next ends with a small ||update|| against
# which the same absolute error is large (the v_proj biases: ||update|| 5e-2 where lr * steps *
# sqrt(n) is 0.9). Measured <= 5.5e-2 for matrices, 9.8e-2 for one bias; bound 2.5e-1.
TOL_UPDATE = 2.5e-1


def normwise(ours, ref):
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape:
        return math.inf, f"shape {ours.shape} != reference {ref.shape}"
    if not np.all(np.isfinite(ours)):
        return math.inf, "non-finite values"
    norm = float(np.linalg.norm(ref))
    diff = float(np.linalg.norm(ours - ref))
    if norm == 0.0:
        return (0.0 if diff == 0.0 else math.inf), f"reference is zero, ||ours|| = {diff:.3e}"
    return diff / norm, f"||diff|| {diff:.3e} / ||ref|| {norm:.3e}"


def is_bf16(array):
    a = np.ascontiguousarray(np.asarray(array, dtype=np.float32))
    return bool(np.all((a.view(np.uint32) & 0xFFFF) == 0))


def reference_run(cfg, init, case, batches, dtype):
    """Logits at init, step 1's gradients, per-step losses and final weights of a torch run whose
    compute dtype is `dtype` (torch.bfloat16: fp32 masters, cast per forward; torch.float64: all
    float64)."""
    master_dtype = torch.float32 if dtype == torch.bfloat16 else torch.float64
    params = llama_ref.params_from_arrays(init, master_dtype)

    def forward(batch):
        compute = {n: p.to(dtype) for n, p in params.items()}
        return llama_ref.forward(cfg, compute, batch).to(master_dtype)

    with torch.no_grad():
        logits = [forward(b).numpy() for b in batches]
    opt = llama_ref.make_optimizer(params, **case["adamw"])
    losses, grads = [], {}
    for step in range(1, case["steps"] + 1):
        opt.zero_grad(set_to_none=False)
        loss = 0.0
        for batch in batches:
            mb_loss = llama_ref.weighted_loss(forward(batch), batch)
            mb_loss.backward()
            loss += mb_loss.item()
        if step == 1:
            grads = {n: p.grad.detach().numpy().copy() for n, p in params.items()}
        torch.nn.utils.clip_grad_norm_(list(params.values()), case["grad_clip"])
        losses.append(loss)
        opt.step()
    final = {n: p.detach().numpy().copy() for n, p in params.items()}
    return logits, grads, losses, final


def run_case(case, dump, workdir):
    case = dict(case, name=case["name"] + "_bf16", dtype="bfloat16")
    report = test_model_parity.Report(case["name"])
    case_dir = os.path.join(workdir, case["name"])
    os.makedirs(case_dir, exist_ok=True)
    case_path = os.path.join(case_dir, "case.json")
    with open(case_path, "w") as f:
        json.dump(case, f, indent=1)
    proc = subprocess.run([dump, "--case", case_path, "--out", case_dir], capture_output=True, text=True)
    if proc.returncode != 0:
        report.failures.append(f"[{case['name']}] odc_parity_dump failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return report

    cfg = llama_ref.Config(case["config"])
    init, _ = llama_ref.read_safetensors(os.path.join(case_dir, "init.safetensors"))
    sequences = [(s["input_ids"], s["loss_mask"]) for s in case["sequences"]]
    total_targets = sum(sum(1 for m in sequences[i][1][1:] if m) for mb in case["microbatches"] for i in mb)
    batches = [llama_ref.pack([sequences[i] for i in mb], 1.0 / total_targets) for mb in case["microbatches"]]

    logits_cpp, _ = llama_ref.read_safetensors(os.path.join(case_dir, "logits.safetensors"))
    grads_cpp, _ = llama_ref.read_safetensors(os.path.join(case_dir, "grads.safetensors"))
    final_cpp, _ = llama_ref.read_safetensors(os.path.join(case_dir, "final.safetensors"))
    with open(os.path.join(case_dir, "losses.json")) as f:
        cpp = json.load(f)

    bf_logits, bf_grads, bf_losses, bf_final = reference_run(cfg, init, case, batches, torch.bfloat16)
    f64_logits, f64_grads, f64_losses, _ = reference_run(cfg, init, case, batches, torch.float64)

    for b in range(len(batches)):
        ours = logits_cpp[f"mb{b}"]
        # The head's output is a bf16 store in our bf16 mode (as on the GPU).
        report.require(is_bf16(ours), f"logits mb{b} are not bf16-representable")
        err, detail = normwise(ours, bf_logits[b])
        vs64, _ = normwise(ours, f64_logits[b])
        torch64, _ = normwise(bf_logits[b], f64_logits[b])
        report.check(f"logits mb{b}", err, TOL_LOGITS, f"{detail}; torch bf16 vs float64 {torch64:.2e}")
        report.check(f"logits mb{b} vs float64", vs64, TOL_LOGITS)
    for name in sorted(bf_grads):
        err, detail = normwise(grads_cpp[name], bf_grads[name])
        vs64, _ = normwise(grads_cpp[name], f64_grads[name])
        report.check(f"grad {name}", err, TOL_GRAD, detail)
        report.check(f"grad {name} vs float64", vs64, TOL_GRAD)
    report.require(len(cpp["losses"]) == case["steps"], f"{len(cpp['losses'])} losses for {case['steps']} steps")
    for step, (ours, ref, ref64) in enumerate(zip(cpp["losses"], bf_losses, f64_losses), start=1):
        report.require(math.isfinite(ours), f"step {step}: C++ loss is {ours}")
        report.check(f"loss step {step}", abs(ours - ref) / abs(ref), TOL_LOSS,
                     f"ours {ours:.6f} torch bf16 {ref:.6f} float64 {ref64:.6f}")
    for name in sorted(bf_final):
        start = init[name].astype(np.float64)
        err, detail = normwise(final_cpp[name] - start, bf_final[name] - start)
        report.check(f"update {name}", err, TOL_UPDATE, detail)
    report.require(abs(bf_losses[-1] - bf_losses[0]) > 1e-2 * abs(bf_losses[0]),
                   f"loss hardly changed over {case['steps']} steps: {bf_losses}")
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", required=True, help="path to the odc_parity_dump binary")
    parser.add_argument("--workdir", required=True, help="scratch directory for the case files and outputs")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    failures = []
    for case in test_model_parity.make_cases():
        report = run_case(case, args.dump, args.workdir)
        if report.rows:
            report.print()
        failures += report.failures
    if failures:
        print("\nFAILED:", file=sys.stderr)
        for failure in failures:
            print("  " + failure, file=sys.stderr)
        return 1
    print("\nbf16 model parity: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
