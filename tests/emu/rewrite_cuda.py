#!/usr/bin/env python3
"""Turns CUDA kernel sources into C++ that the emulator (tests/emu/cuda_emu.h) compiles.

Only the two things a C++ compiler cannot parse or place change, on the same lines (a `#line`
directive keeps every diagnostic and std::source_location on the original file and line):
  * `kernel<<<grid, block[, smem[, stream]]>>>(args)` ->
    `::odc_emu::launch(kernel, "kernel", grid, block[, smem[, stream]])(args)`; a kernel template
    launched with deduced arguments (declared `template <...> __global__ void kernel` in the same
    file, launched without `<...>`) goes through a generic lambda instead:
    `::odc_emu::launch_deduced([](auto... p) { kernel(p...); }, "kernel", ...)(args)`
  * `extern __shared__ [__align__(n)] T name[];` -> `T* name = ::odc_emu::dynamic_shared<T>();`
    `__shared__ T name[N]...;` -> `auto& name = ::odc_emu::static_shared<T[N]...>(ODC_EMU_SITE);`
Any other use of `__shared__` is an error (so nothing is silently per-thread).

  rewrite_cuda.py OUT_DIR SOURCE...   writes OUT_DIR/<name>, .cu renamed to .cu.cpp
"""
import os
import re
import sys

LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;(){}]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
DYNAMIC = re.compile(
    r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w:\s]+?)\s+(\w+)\s*\[\s*\]\s*;")
STATIC = re.compile(
    r"__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w:\s]+?)\s+(\w+)\s*((?:\[[^\]]+\])+)\s*;")


TEMPLATE_KERNEL = re.compile(r"template\s*<[^>]*>\s*__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)")


def launch(match, templates):
    kernel, config = match.group(1), match.group(2)
    if kernel in templates:
        return (f'::odc_emu::launch_deduced([](auto... p) {{ {kernel}(p...); }}, "{kernel}", '
                f"{config})(")
    return f'::odc_emu::launch({kernel}, "{kernel}", {config})('


def rewrite(text, path):
    templates = set(TEMPLATE_KERNEL.findall(text))
    text = LAUNCH.sub(lambda m: launch(m, templates), text)
    text = DYNAMIC.sub(lambda m: f"{m.group(1)}* {m.group(2)} = ::odc_emu::dynamic_shared<{m.group(1)}>();",
                       text)
    text = STATIC.sub(
        lambda m: f"auto& {m.group(2)} = ::odc_emu::static_shared<{m.group(1)}{m.group(3)}>(ODC_EMU_SITE);",
        text)
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("//")[0]
        if "__shared__" in code or "<<<" in code:
            raise SystemExit(f"{path}:{number}: rewrite_cuda.py does not know this form: {line.strip()}")
    return f'#line 1 "{path}"\n' + text


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for src in sys.argv[2:]:
        with open(src) as f:
            text = rewrite(f.read(), os.path.abspath(src))
        name = os.path.basename(src)
        if name.endswith(".cu"):
            name += ".cpp"
        target = os.path.join(out_dir, name)
        old = open(target).read() if os.path.exists(target) else None
        if old != text:  # unchanged outputs keep their timestamps (no needless rebuilds)
            with open(target, "w") as f:
                f.write(text)


if __name__ == "__main__":
    main()
