#!/usr/bin/python3
"""scripts/gpu_check_summary.py on made-up GPU check logs: the figures it prints are the ones the
logs hold (worst parity line, sanitizer counts, MFU against the dense bf16 peak and the measured
GEMM ceiling, the ratio to torch, the profile's largest ops, the rollout throughput), failures are
named, steps cut by the deadline or deferred are neither failed nor hidden (with the --only that
reruns them), missing results are said to be missing, and the summary never exceeds 50 lines.

    /usr/bin/python3 test_gpu_check_summary.py [--script scripts/gpu_check_summary.py]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "gpu_check_summary.py")


def write(folder, name, text):
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        f.write(text)


def jsonl(folder, name, rows):
    write(folder, name, "".join(json.dumps(r) + "\n" for r in rows))


def summarize(script, folder, dry="0"):
    done = subprocess.run([sys.executable, script, folder, dry], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def expect(lines, fragment):
    assert any(fragment in l for l in lines), f"no line holds {fragment!r}:\n" + "\n".join(lines)


HEADER = "step\tstatus\trc\tseconds\testimate\tlimit\trerun\n"


def steps(rows):
    """steps.tsv as gpu-check.sh writes it: (name, status, rc, seconds) per row."""
    return HEADER + "".join(f"{n}\t{st}\t{rc}\t{sec}\t10\t60\t{'-' if st == 'passed' else '--only ' + n}\n"
                            for n, st, rc, sec in rows)


def full_logs(folder):
    write(folder, "COMMIT", "abc123\n")
    write(folder, "steps.tsv", steps([("manifest", "passed", 0, 1), ("tests", "passed", 0, 50),
                                      ("memcheck", "failed", 9, 40), ("racecheck", "passed", 0, 30),
                                      ("throughput", "passed", 0, 20)]))
    write(folder, "tests.log",
          "[cuda] rmsnorm dx                         n=4096 cosine=0.99991000 max_abs_err=1.0e-03 (ref rms 1.0e+00)\n"
          "[cuda] attention dq d128                  n=8192 cosine=0.99950000 rel_err=4.100e-03 max_abs_err=2e-03\n"
          "[cuda] linear y                           n=100 max_abs_err=1.0e-03 (ref max 3.0e+00) mismatches=2\n"
          "[cuda] embedding dtable                   n=100 cosine=0.99999000 rel_err=9.000e-04\n"
          "test cases: 20 | 19 passed | 1 failed\n")
    write(folder, "memcheck.log", "========= ERROR SUMMARY: 3 errors\n")
    write(folder, "racecheck.log", "========= RACECHECK SUMMARY: 0 hazards displayed\n========= ERROR SUMMARY: 0 errors\n")
    jsonl(folder, "ceilings.jsonl", [{"op": "gemm_bf16", "m": 8192, "tflops": 750.0},
                                     {"op": "device_copy", "gbps": 4200.0}])
    mib64 = 64 << 20
    jsonl(folder, "nccl.jsonl", [
        {"bench": "gpu_nccl", "op": "device_copy", "ranks": 1, "bytes": mib64, "ms": 0.05, "gbps": 1342.0},
        {"bench": "gpu_nccl", "op": "all_gather", "dtype": "fp32", "ranks": 1, "bytes": mib64, "ms": 0.06,
         "gbps": 1118.0, "vs_copy": 0.83},
        {"bench": "gpu_nccl", "op": "reduce_scatter", "dtype": "fp32", "ranks": 1, "bytes": mib64, "ms": 0.07,
         "gbps": 958.0, "vs_copy": 0.714}])
    jsonl(folder, "attention.jsonl", [{"impl": "odc", "shape": "1x4096", "n_heads": 32, "n_kv_heads": 8,
                                       "head_dim": 128, "fwdbwd_tflops": 300.0},
                                      {"impl": "cudnn", "shape": "1x4096", "n_heads": 32, "n_kv_heads": 8,
                                       "head_dim": 128, "fwdbwd_tflops": 390.0}])
    jsonl(folder, "attention-torch.jsonl", [
        {"impl": "torch_sdpa_flash", "shape": "1x4096", "n_heads": 32, "n_kv_heads": 8, "head_dim": 128,
         "fwdbwd_tflops": 400.0},
        {"impl": "torch_sdpa_cudnn", "shape": "1x4096", "n_heads": 32, "n_kv_heads": 8, "head_dim": 128,
         "fwdbwd_tflops": 500.0}])
    jsonl(folder, "model-parity.jsonl", [
        {"check": "gpu_bf16 vs cpu_bf16 loss", "value": 1e-4, "bound": 2e-3, "ok": True},
        {"check": "gpu_bf16 vs cpu_bf16 gradient", "value": 5e-2, "bound": 2e-2, "ok": False}])
    # 40000 tok/s x 7.5e9 FLOP/token = 300 TFLOP/s: 30.3% of 989.5, 40.0% of 750.
    jsonl(folder, "throughput.jsonl", [{"impl": "odc", "shape": "L16", "tokens_per_s": 40000.0,
                                        "flops_per_token": 7.5e9}])
    jsonl(folder, "throughput-torch.jsonl", [{"impl": "torch_eager", "tokens_per_s": 32000.0}])
    jsonl(folder, "trainer.jsonl", [{"bench": "gpu_check_train", "ok": False, "steps": 12, "loss_first": 3.5,
                                     "loss_last": 2.25, "repeat_bitwise": True, "resume_bitwise": False,
                                     "tokens_per_s": 91000.0,
                                     "compare_sets": ["model.attention=native", "train.recompute=none"],
                                     "compare_max_rel_diff": 3.2e-3, "compare_ok": True,
                                     "memory_predicted_mib": 1000.0, "memory_measured_mib": 1125.0,
                                     "memory_error_pct": 12.5}])
    jsonl(folder, "rollout.jsonl", [
        {"bench": "rollout_throughput", "shape": "llama-1b", "device": "cuda", "path": p, "concurrency": c,
         "tokens_per_s": t} for p, c, t in (("per_sequence", 8, 800.0), ("batched", 8, 1000.0),
                                            ("per_sequence", 64, 2000.0), ("batched", 64, 6000.0))])
    # 3 GEMM roles and attention; 14 ms of ops in a 16 ms step.
    with open(os.path.join(folder, "profile.json"), "w", encoding="utf-8") as f:
        json.dump({"bench": "op_profile", "shape": "llama-1b", "tokens": 8192, "attention": "native",
                   "step_seconds": 0.016, "ops": [
                       {"name": "linear", "role": "gate_up", "calls": 32, "seconds": 0.005, "flops": 2.0e15 * 0.005},
                       {"name": "attention_backward", "role": "", "calls": 16, "seconds": 0.004, "flops": 0},
                       {"name": "linear", "role": "qkv", "calls": 96, "seconds": 0.003, "flops": 1.5e15 * 0.003},
                       {"name": "rmsnorm_forward", "role": "", "calls": 33, "seconds": 0.002}],
                   "sums": [{"name": "linear_forward", "role": "qkv", "of": ["q", "k", "v"], "calls": 48,
                             "seconds": 0.001, "flops": 1.0e12}]}, f)
    write(folder, "env.log", "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:00:00.0 Off |\n"
                             '{"runtime_info":"gpu_attention","cudnn_frontend_cudart":"/x/libcudart.so.13",'
                             '"cudnn_frontend_cudart_why":"the libcudart this process has loaded","cudnn_version":"9.19.0"}\n')


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", default=SCRIPT)
    script = parser.parse_args().script
    with tempfile.TemporaryDirectory() as folder:
        full_logs(folder)
        lines = summarize(script, folder)
        assert len(lines) <= 50, len(lines)
        expect(lines, "commit abc123")
        expect(lines, "FAILED memcheck")
        expect(lines, "test cases: 20 | 19 passed | 1 failed")
        expect(lines, "4 checks, 2 elementwise mismatches")
        expect(lines, "lowest cosine 0.999500: attention dq d128")
        expect(lines, "largest relative error 4.10e-03: attention dq d128")
        expect(lines, "memcheck 3 errors")
        expect(lines, "racecheck 0 errors, 0 hazards")
        expect(lines, "synccheck not run")
        expect(lines, "cuBLASLt bf16 8192^3 750 TFLOP/s")
        expect(lines, "nccl 1 rank 64 MiB, GB/s: all-gather fp32 1118 (0.83x copy), reduce-scatter fp32 958 "
                      "(0.71x copy), copy 1342")
        expect(lines, "300 / 500 (cudnn) = 0.60x; cudnn 390 = 1.30x ours (target >= 400: BELOW)")
        expect(lines, "model parity: 1/2 within bounds")
        expect(lines, "FAIL")
        expect(lines, "MFU 30.3% of dense bf16 peak, 40.0% of the GEMM ceiling (target >= 45%: BELOW)")
        expect(lines, "ours / torch = 1.25x (target >= 1.2x: met)")
        expect(lines, "trainer (odc-train): 12 steps, loss 3.5000 -> 2.2500; rerun bitwise yes, resume bitwise NO, "
                      "91000 tok/s")
        expect(lines, "against model.attention=native train.recompute=none: losses within 3.20e-03 (ok)")
        expect(lines, "memory plan 1000.0 MiB, measured 1125.0 MiB (+12.5%, OFF by more than 10%)")
        expect(lines, "rollout tok/s (llama-1b, cuda), batched decode attention, by concurrent sequences: "
                      "8: 1000 (1.25x per-sequence); 64: 6000 (3.00x per-sequence)")
        expect(lines, "profile (llama-1b, 8192 tokens, attention native): step 16.0 ms, ops 14.0 ms")
        expect(lines, "ms: linear/gate_up 5.0 (2000 TF/s), attention_backward 4.0, linear/qkv 3.0 (1500 TF/s), "
                      "rmsnorm_forward 2.0")
        expect(lines, "q+k+v GEMMs: linear_forward 1.00 ms (1000 TF/s)")
        expect(lines, "env: NVIDIA H100 80GB HBM3; cuDNN 9.19.0; cuDNN frontend's CUDA runtime: /x/libcudart.so.13 "
                      "(the libcudart this process has loaded)")
        expect(lines, "rerun: --only memcheck")
    with tempfile.TemporaryDirectory() as folder:
        # 200 steps, 30 of them failed, and 60 parity-failing model checks: still 50 lines at most.
        write(folder, "steps.tsv", steps([(f"step{i}", "failed" if i % 7 == 0 else "passed", 1 if i % 7 == 0 else 0, 1)
                                          for i in range(200)]))
        jsonl(folder, "model-parity.jsonl", [{"check": f"c{i}", "value": 1.0, "bound": 0.1, "ok": False}
                                             for i in range(60)])
        lines = summarize(script, folder)
        assert len(lines) <= 50, len(lines)
        expect(lines, "FAILED step0 (rc=1, 1s)")
        expect(lines, "and 21 more; 171 of 200 run passed, 200s in all")
        expect(lines, "model parity: 0/60 within bounds")
        expect(lines, "tests: not run")
        expect(lines, "throughput: no results")
        expect(lines, "nccl: no results")
        expect(lines, "trainer: no result")
        expect(lines, "profile: no result")
        expect(lines, "rollout throughput: no results")
    with tempfile.TemporaryDirectory() as folder:
        write(folder, "steps.tsv", steps([("manifest", "passed", 0, 1), ("libraries", "passed", 0, 1)]))
        lines = summarize(script, folder, dry="1")
        expect(lines, "dry run")
        expect(lines, "steps: all 2 run passed in 2s")
        assert not any(l.startswith("throughput") for l in lines), lines
    with tempfile.TemporaryDirectory() as folder:
        # A step killed by the deadline's limit is cut, one that did not fit deferred: neither failed,
        # both named with the --only that reruns them (after the failed one).
        write(folder, "steps.tsv", steps([("tests", "passed", 0, 9), ("nccl", "failed", 1, 2),
                                          ("long-context", "cut", 124, 30), ("throughput", "deferred", "-", 0),
                                          ("attention", "deferred", "-", 0)]))
        lines = summarize(script, folder)
        expect(lines, "steps: FAILED nccl (rc=1, 2s); 1 of 2 run passed, 41s in all; cut by the deadline: "
                      "long-context; not run (deadline): throughput,attention")
        expect(lines, "rerun: --only nccl,long-context,throughput,attention")
    with tempfile.TemporaryDirectory() as folder:
        # Nothing finished yet (a call cut in its first step): said, not invented.
        write(folder, "steps.tsv", HEADER)
        lines = summarize(script, folder)
        expect(lines, "steps: none finished")
    with tempfile.TemporaryDirectory() as folder:
        # The long-context step: ours against the memory plan and torch per token count, a case the
        # plan skipped, the switches set away from their defaults, the allocator's measured line.
        g = 2**30
        jsonl(folder, "long-context.jsonl", [
            {"impl": "odc", "model": "qwen2-1.5b", "recompute": "selective", "attention": "native: forced",
             "tokens": 32768, "tokens_per_s": 20000.0, "tflops": 400.0, "mfu": 400.0 / 989.5,
             "predicted_pooled_bytes": 40 * g, "measured_peak_bytes": 42 * g, "memory_error_pct": 5.0},
            {"impl": "odc", "model": "qwen2-1.5b", "recompute": "selective", "tokens": 65536,
             "predicted_pooled_bytes": 150 * g, "skipped": "the memory plan exceeds the device's budget"}])
        jsonl(folder, "long-context-torch.jsonl", [{"impl": "torch_eager", "tokens": 32768, "tokens_per_s": 16000.0,
                                                    "mfu": 0.3, "peak_bytes": 50 * g, "sdpa": "auto",
                                                    "recompute": "full"}])
        write(folder, "switches.txt", "ODC_CHECK_SET=\nODC_CHECK_ATTENTION=native\nODC_CHECK_RECOMPUTE=selective\n")
        write(folder, "tests.log", "[cuda] ragged microbatches: peak in use 900.0 MiB, peak reserved 1200.0 MiB "
                                   "(1.33x in use; a never-splitting size-class cache: 2000.0 MiB, 2.22x), 30 pool "
                                   "growths of 1000 allocations\nAll tests passed (5 assertions in 2 test cases)\n")
        lines = summarize(script, folder)
        expect(lines, "long context (qwen2-1.5b, world 1, recompute selective, attention native)")
        expect(lines, "32768 tok: 20000 tok/s, 400 TFLOP/s, MFU 40.4% (target >= 40%: met); memory plan 40.0 GiB "
                      "pooled, measured 42.0 GiB (+5.0%)")
        expect(lines, "torch (sdpa auto, checkpoint full): 16000 tok/s, MFU 30.0%, peak 50.0 GiB; ours / torch = 1.25x")
        expect(lines, "65536 tok: skipped (the memory plan exceeds the device's budget); plan 150.0 GiB pooled")
        expect(lines, "switches: ODC_CHECK_ATTENTION=native")
        assert not any("ODC_CHECK_RECOMPUTE" in l for l in lines), lines
        expect(lines, "allocator under ragged sizes: peak reserved 1200.0 MiB for 900.0 MiB in use (1.33x")
    with tempfile.TemporaryDirectory() as folder:
        # racecheck as the H200 printed it: no ERROR SUMMARY line, the errors inside the RACECHECK one.
        write(folder, "racecheck.log", "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")
        write(folder, "memcheck.log", "========= ERROR SUMMARY: 0 errors\n")
        lines = summarize(script, folder)
        expect(lines, "racecheck 0 errors, 0 hazards")
    with tempfile.TemporaryDirectory() as folder:
        # Per-tensor rows are for the record: they neither count as checks nor break the summary.
        jsonl(folder, "model-parity.jsonl", [
            {"check": "tighter: loss gpu~cpu_bf16 / gpu~cpu_f32", "value": 0.25, "bound": 0.5, "ok": True},
            {"tensor": "lm_head.weight", "gpu_vs_cpu_bf16": 5.6e-3, "gpu_vs_cpu_f32": 6.7e-3, "ratio": 0.83}])
        lines = summarize(script, folder)
        expect(lines, "model parity: 1/1 within bounds")
        expect(lines, "tighter: loss gpu~cpu_bf16 / gpu~cpu_f32: 2.500e-01 (bound 5.0e-01)")
    print("gpu_check_summary: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
