#!/usr/bin/env python3
"""The ptxas resource gate: registers, spills, stack and static shared memory per CUDA kernel.

Compiles every src/kernels/cuda/*.cu for one architecture (sm_90a by default) with
`-Xptxas -v`, parses ptxas's per-kernel report and compares it with the checked-in budget
(tests/cuda_resources/budget_sm90a.json). Fails, naming the kernel and the number, when a kernel
uses more registers, spill bytes, stack or static shared memory than its budget, when a budgeted
kernel disappeared (renamed: update the budget) or when a new kernel has no budget.

  check_ptxas.py SOURCE_ROOT [--nvcc PATH] [--arch sm_90a] [--budget FILE] [--jobs N]
  check_ptxas.py SOURCE_ROOT --write-budget     records today's numbers as the budget
  check_ptxas.py --self-test                    the parser and the comparison on made-up text

Exits 77 (ctest: skipped) when no nvcc is found. Dynamic shared memory is not in ptxas's report
(it is a launch argument); the kernels' kSmemBytes constants are checked by static_asserts.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

FIELDS = ("registers", "spill_stores", "spill_loads", "stack_frame", "smem_static")

_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers(.*)")
_SMEM = re.compile(r"(\d+) bytes smem")


def demangle(names):
    """Mangled -> readable, through c++filt when it exists (otherwise the mangled names)."""
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return {n: n for n in names}
    out = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out))


def kernel_key(source, readable):
    """'attention.cu attn_fwd_kernel<128>': the file and the kernel with its template arguments,
    without namespaces (nvcc's anonymous-namespace hash changes with the path) or parameters."""
    name = readable
    depth = 0
    for i, ch in enumerate(name):  # cut the parameter list: the first '(' outside template args
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not name.startswith("(anonymous", i):
            name = name[:i]
            break
    # Every namespace qualifier goes, in the template arguments too (a functor argument such as
    # (anonymous namespace)::BiasTerm would otherwise cut the key at its last '::').
    name = re.sub(r"\b[A-Za-z_]\w*::", "", name.replace("(anonymous namespace)::", ""))
    name = re.sub(r"^void ", "", name)  # the return type c++filt shows for function templates
    return f"{source} {name}"


def parse(source, text):
    """ptxas -v output of one translation unit -> {kernel key: {field: int}}."""
    raw = {}
    current = None
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = m.group(1)
            raw[current] = dict.fromkeys(FIELDS, 0)
            continue
        if current is None:
            continue
        m = _FRAME.search(line)
        if m:
            raw[current]["stack_frame"] = int(m.group(1))
            raw[current]["spill_stores"] = int(m.group(2))
            raw[current]["spill_loads"] = int(m.group(3))
            continue
        m = _USED.search(line)
        if m:
            raw[current]["registers"] = int(m.group(1))
            s = _SMEM.search(m.group(2))
            raw[current]["smem_static"] = int(s.group(1)) if s else 0
    names = demangle(list(raw))
    return {kernel_key(source, names[k]): v for k, v in raw.items()}


def compare(measured, budget):
    """Lines describing every regression, vanished kernel and unbudgeted kernel (empty = pass)."""
    problems = []
    for key in sorted(budget):
        if key not in measured:
            problems.append(f"{key}: in the budget but not compiled any more (renamed? update the budget)")
    for key in sorted(measured):
        if key not in budget:
            problems.append(f"{key}: new kernel without a budget ({measured[key]})")
            continue
        for field in FIELDS:
            got, allowed = measured[key][field], budget[key].get(field, 0)
            if got > allowed:
                problems.append(f"{key}: {field} {got} > budget {allowed}")
    return problems


def compile_one(nvcc, root, arch, source):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, "-std=c++17", f"-arch={arch}", "-Xptxas", "-v", "-I",
               os.path.join(root, "include"), "-c", os.path.join(root, "src/kernels/cuda", source),
               "-o", os.path.join(tmp, "out.o")]
        run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"check_ptxas: {' '.join(cmd)} failed:\n{run.stderr}")
    return parse(source, run.stdout + run.stderr)


def self_test():
    text = """ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90a'
ptxas info    : Function properties for _Z3fooPf
    40 bytes stack frame, 48 bytes spill stores, 76 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 1024 bytes smem, 40 bytes cumulative stack size
ptxas info    : Compiling entry function '_Z3barv' for 'sm_90a'
ptxas info    : Function properties for _Z3barv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 25 registers, used 0 barriers
"""
    got = parse("x.cu", text)
    assert got["x.cu foo"] == {"registers": 128, "spill_stores": 48, "spill_loads": 76,
                               "stack_frame": 40, "smem_static": 1024}, got
    assert got["x.cu bar"]["registers"] == 25 and got["x.cu bar"]["smem_static"] == 0, got
    assert kernel_key("a.cu", "odc::k::(anonymous namespace)::attn<128>(int4 const*, int)") == \
        "a.cu attn<128>"
    assert kernel_key("g.cu", "void odc::kernels::cuda::(anonymous namespace)::cols<"
                      "odc::kernels::cuda::(anonymous namespace)::BiasTerm>(BiasTerm, float*)") == \
        "g.cu cols<BiasTerm>"
    assert compare(got, got) == []
    worse = json.loads(json.dumps(got))
    worse["x.cu foo"]["registers"] = 130
    worse["x.cu bar"]["spill_stores"] = 8
    problems = compare(worse, got)
    assert problems == ["x.cu bar: spill_stores 8 > budget 0",
                        "x.cu foo: registers 130 > budget 128"], problems
    assert "renamed" in compare({"x.cu foo": got["x.cu foo"]}, got)[0]
    assert "without a budget" in compare(got, {"x.cu foo": got["x.cu foo"]})[0]
    print("check_ptxas self-test: ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root", nargs="?")
    ap.add_argument("--nvcc", default=None)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--budget", default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--write-budget", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return 0
    if not args.root:
        ap.error("SOURCE_ROOT is required")
    nvcc = args.nvcc or shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None)
    if not nvcc:
        print("check_ptxas: SKIPPED: no nvcc on PATH or in /usr/local/cuda/bin")
        return 77
    budget_path = args.budget or os.path.join(args.root, "tests/cuda_resources",
                                              f"budget_{args.arch.replace('sm_', 'sm')}.json")
    sources = sorted(f for f in os.listdir(os.path.join(args.root, "src/kernels/cuda"))
                     if f.endswith(".cu"))
    measured = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for part in pool.map(lambda s: compile_one(nvcc, args.root, args.arch, s), sources):
            measured.update(part)
    for key in sorted(measured):
        m = measured[key]
        print(f"{key}: {m['registers']} regs, spill {m['spill_stores']}/{m['spill_loads']} B, "
              f"stack {m['stack_frame']} B, static smem {m['smem_static']} B")
    if args.write_budget:
        with open(budget_path, "w") as f:
            json.dump({"arch": args.arch, "kernels": measured}, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"check_ptxas: wrote {len(measured)} kernels to {budget_path}")
        return 0
    with open(budget_path) as f:
        budget = json.load(f)["kernels"]
    problems = compare(measured, budget)
    if problems:
        print(f"check_ptxas: {len(problems)} problem(s) against {budget_path}:")
        for p in problems:
            print("  " + p)
        return 1
    print(f"check_ptxas: {len(measured)} kernels within budget ({budget_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
