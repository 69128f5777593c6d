#!/usr/bin/env python3
"""Keeps ProfilingBackend a drop-in Backend: it must override every virtual of backend.h.

Usage: check_profiler_forwards.py [REPO_ROOT]   the real headers (default: two levels above this script)
       check_profiler_forwards.py --self-test    proves on made-up headers that a missing override is caught

A virtual that the profiler does not override would run Backend's default on the profiler itself
(the host defaults, or nothing) instead of the wrapped backend's: a silently wrong model. Every
name declared `virtual` in class Backend (include/odc/backend/backend.h) must be declared with
`override` in class ProfilingBackend (include/odc/backend/op_profiler.h) as many times as it is
declared virtual (overloads: upload). Exits 1 naming each missing one.
"""
import pathlib
import re
import sys
import tempfile

VIRTUAL = re.compile(r"\bvirtual\b[^;{(]*?\b([a-z_][a-z0-9_]*)\s*\(")
OVERRIDE_DECL = re.compile(r"\b([a-z_][a-z0-9_]*)\s*\(")


def class_body(text: str, name: str) -> str:
    m = re.search(r"\bclass\s+" + name + r"\b[^;{]*\{", text)
    if not m:
        raise SystemExit(f"no class {name}")
    depth, i = 1, m.end()
    while depth and i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[m.end():i]


def strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


def statements(body: str):
    """Member declarations: the text up to each ';' or '{' at depth 0 of the class body."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(body):
        if c == "{":
            if depth == 0:
                out.append(body[start:i])
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                start = i + 1
        elif c == ";" and depth == 0:
            out.append(body[start:i])
            start = i + 1
    return out


def count(names):
    counts = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return counts


def check(backend_h: pathlib.Path, profiler_h: pathlib.Path) -> list[str]:
    base = strip_comments(backend_h.read_text(encoding="utf-8"))
    virtuals = count(m.group(1) for s in statements(class_body(base, "Backend"))
                     for m in [VIRTUAL.search(s)] if m and "~" not in s)
    prof = strip_comments(profiler_h.read_text(encoding="utf-8"))
    overrides = count(m.group(1) for s in statements(class_body(prof, "ProfilingBackend"))
                      if "override" in s for m in [OVERRIDE_DECL.search(s.split("override")[0])] if m)
    problems = []
    if len(virtuals) < 10:
        problems.append(f"{backend_h}: found only {len(virtuals)} virtuals in class Backend; the parser lost its way")
    for name, n in sorted(virtuals.items()):
        if overrides.get(name, 0) < n:
            problems.append(f"{profiler_h}: ProfilingBackend does not override Backend::{name} "
                            f"({overrides.get(name, 0)} of {n} declaration(s)): forward it to the wrapped backend")
    return problems


def self_test() -> int:
    ops = "".join(f"  virtual void op{i}(int x) = 0;\n" for i in range(10))
    backend = ("class Backend {\n public:\n  virtual ~Backend() = default;\n" + ops +
               "  virtual ConstView upload(std::span<const int> h, Buffer& s) = 0;\n"
               "  virtual ConstView upload(std::span<const float> h,\n                          Buffer& s) = 0;\n"
               "  // virtual void commented(int);\n"
               "  virtual std::unique_ptr<OpTimeline> make_timeline();\n"
               "  void helper() { if (x) { y(); } }\n};\n")
    good_ops = "".join(f"  void op{i}(int x) override;\n" for i in range(10))
    good = ("class ProfilingBackend final : public Backend {\n public:\n" + good_ops +
            "  ConstView upload(std::span<const int> h, Buffer& s) override;\n"
            "  ConstView upload(std::span<const float> h, Buffer& s) override;\n"
            "  std::unique_ptr<OpTimeline> make_timeline() override { return inner_->make_timeline(); }\n};\n")
    cases = {
        "complete": (good, 0),
        "an op missing": (good.replace("  void op3(int x) override;\n", ""), 1),
        "an overload missing": (good.replace("  ConstView upload(std::span<const float> h, Buffer& s) override;\n", ""), 1),
        "declared without override": (good.replace("make_timeline() override", "make_timeline()"), 1),
    }
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        b = pathlib.Path(d) / "backend.h"
        b.write_text(backend)
        for name, (text, want) in cases.items():
            p = pathlib.Path(d) / "op_profiler.h"
            p.write_text(text)
            got = len(check(b, p))
            if got != want:
                print(f"self-test '{name}': {got} problem(s), expected {want}: {check(b, p)}")
                failures += 1
    print("self-test:", "passed" if failures == 0 else f"{failures} case(s) failed")
    return 1 if failures else 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
    problems = check(root / "include/odc/backend/backend.h", root / "include/odc/backend/op_profiler.h")
    for p in problems:
        print(p)
    if not problems:
        print("ProfilingBackend overrides every virtual of Backend")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
