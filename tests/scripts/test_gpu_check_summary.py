#!/usr/bin/python3
"""scripts/gpu_check_summary.py on made-up GPU check logs: the figures it prints are the ones the
logs hold (worst parity line, sanitizer counts, MFU against the dense bf16 peak and the measured
GEMM ceiling, the ratio to torch), failures are named, missing results are said to be missing,
and the summary never exceeds 40 lines.

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


def full_logs(folder):
    write(folder, "COMMIT", "abc123\n")
    write(folder, "steps.tsv", "manifest\t0\t1\ntests\t0\t50\nmemcheck\t9\t40\nracecheck\t0\t30\n"
                               "throughput\t0\t20\n")
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
                                     "tokens_per_s": 91000.0}])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", default=SCRIPT)
    script = parser.parse_args().script
    with tempfile.TemporaryDirectory() as folder:
        full_logs(folder)
        lines = summarize(script, folder)
        assert len(lines) <= 40, len(lines)
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
    with tempfile.TemporaryDirectory() as folder:
        # 200 steps, 30 of them failed, and 60 parity-failing model checks: still 40 lines at most.
        write(folder, "steps.tsv", "".join(f"step{i}\t{1 if i % 7 == 0 else 0}\t1\n" for i in range(200)))
        jsonl(folder, "model-parity.jsonl", [{"check": f"c{i}", "value": 1.0, "bound": 0.1, "ok": False}
                                             for i in range(60)])
        lines = summarize(script, folder)
        assert len(lines) <= 40, len(lines)
        expect(lines, "FAILED step0 (rc=1, 1s)")
        expect(lines, "and 21 more; 171 of 200 run passed, 200s in all")
        expect(lines, "model parity: 0/60 within bounds")
        expect(lines, "tests: not run")
        expect(lines, "throughput: no results")
        expect(lines, "nccl: no results")
        expect(lines, "trainer: no result")
    with tempfile.TemporaryDirectory() as folder:
        write(folder, "steps.tsv", "manifest\t0\t1\nlibraries\t0\t1\n")
        lines = summarize(script, folder, dry="1")
        expect(lines, "dry run")
        expect(lines, "steps: all 2 run passed in 2s")
        assert not any("throughput" in l for l in lines), lines
    with tempfile.TemporaryDirectory() as folder:
        # Steps the deadline cut are listed as not run, with the --only that reruns them.
        write(folder, "steps.tsv", "tests\t0\t9\nnccl\t1\t2\nthroughput\tdeadline\t0\nattention\tdeadline\t0\n")
        lines = summarize(script, folder)
        expect(lines, "steps: FAILED nccl (rc=1, 2s); 1 of 2 run passed, 11s in all; "
                      "not run (deadline; rerun with --only throughput,attention)")
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
