#!/usr/bin/env python3
"""Keeps the house in the shape docs/ARCHITECTURE.md draws.

Usage: check_structure.py [REPO_ROOT]      the real tree (default: two levels above this script)
       check_structure.py --self-test      proves on a made-up tree that each rule catches its case,
                                           and that the map counts what it should
       check_structure.py --map PLACE [--by file|room] [--dot FILE] [REPO_ROOT]
                                           draws PLACE (src, src/train, ...): its rooms, floors, arrows,
                                           arrows up and circles, in text (and in Graphviz DOT with
                                           --dot); see structure_map.py. Always exits 0.

Rules:
  * layering: the layers are the rows of the "## Layers" table of docs/ARCHITECTURE.md, bottom
    first (first column, e.g. `core`). A file under include/odc/<layer>/ or src/<layer>/ may
    include "odc/<other>/..." only when <other> is the same layer or one listed before it; every
    folder of include/odc/ and src/ must be a row of the table; no source file reaches into
    another folder with a relative include ("../").
  * rooms: a layer split into rooms (a row of the "## Rooms" table: the layer, then its rooms
    bottom first) keeps every file in a room (its first sub-folder); a file of room R includes
    "odc/<layer>/<room>/..." only for R or a room listed before it.
  * size: no file under src/, tools/, tests/ or bench/ holds more than MAX_LINES lines.
Exits 1 naming every violation (file:line and what it includes).
"""
import argparse
import pathlib
import re
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import structure_map  # noqa: E402  (beside this script)

MAX_LINES = 600
SOURCE_SUFFIXES = {".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh", ".py", ".sh"}
SIZE_CHECKED = ("src", "tools", "tests", "bench")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ROW = re.compile(r"^\|\s*`?([a-z_]+)`?\s*\|")


def layer_order(architecture: pathlib.Path) -> list[str]:
    text = architecture.read_text(encoding="utf-8")
    if "## Layers" not in text:
        raise SystemExit(f"{architecture}: no '## Layers' section")
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    layers = []
    for line in section.splitlines():
        m = ROW.match(line)
        if m and m.group(1) not in ("layer",) and not set(line) <= set("|-: "):
            layers.append(m.group(1))
    if len(layers) < 2:
        raise SystemExit(f"{architecture}: the Layers table lists {layers}; expected the layers, bottom first")
    return layers


def room_order(architecture: pathlib.Path) -> dict[str, list[str]]:
    text = architecture.read_text(encoding="utf-8")
    if "## Rooms" not in text:
        return {}
    section = text.split("## Rooms", 1)[1].split("\n## ", 1)[0]
    rooms = {}
    for line in section.splitlines():
        m = ROW.match(line)
        if m and m.group(1) != "layer" and not set(line) <= set("|-: "):
            cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
            rooms[m.group(1)] = [r.strip().strip("`") for r in cells[1].split(",") if r.strip()]
    return rooms


def source_files(folder: pathlib.Path):
    if folder.is_dir():
        yield from sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES)


def room_of(path: pathlib.Path, base: pathlib.Path, rooms) -> str | None:
    """The room (first sub-folder under the layer's folder) of `path`, if it is one of `rooms`."""
    if not rooms:
        return None
    parts = path.relative_to(base).parts
    return parts[0] if len(parts) >= 2 and parts[0] in rooms else None


def check(root: pathlib.Path) -> list[str]:
    problems = []
    layers = layer_order(root / "docs" / "ARCHITECTURE.md")
    rank = {name: i for i, name in enumerate(layers)}
    rooms = room_order(root / "docs" / "ARCHITECTURE.md")
    for layer in rooms:
        if layer not in rank:
            problems.append(f"docs/ARCHITECTURE.md: the Rooms table names '{layer}', which is not a layer")
    for base in (root / "include" / "odc", root / "src"):
        for folder in sorted(p for p in base.iterdir() if p.is_dir()):
            if folder.name not in rank:
                problems.append(f"{folder.relative_to(root)}: a folder that is not a layer of docs/ARCHITECTURE.md "
                                f"(layers: {', '.join(layers)})")
    for layer in layers:
        for base in (root / "include" / "odc" / layer, root / "src" / layer):
            for path in source_files(base):
                if path.suffix in (".py", ".sh"):
                    continue
                if layer in rooms and room_of(path, base, rooms[layer]) is None:
                    problems.append(f"{path.relative_to(root)}: not in a room of layer '{layer}' "
                                    f"(rooms: {', '.join(rooms[layer])})")
                    continue
                for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    where = f"{path.relative_to(root)}:{number}"
                    if target.startswith("../") or "/../" in target:
                        problems.append(f"{where}: relative include \"{target}\" leaves its folder")
                        continue
                    parts = target.split("/")
                    if len(parts) >= 3 and parts[0] == "odc" and parts[1] in rank and rank[parts[1]] > rank[layer]:
                        problems.append(f"{where}: layer '{layer}' includes \"{target}\" of layer '{parts[1]}', "
                                        f"which is above it")
                    room = room_of(path, base, rooms.get(layer))
                    if (room is not None and len(parts) >= 4 and parts[0] == "odc" and parts[1] == layer and
                            parts[2] in rooms[layer] and rooms[layer].index(parts[2]) > rooms[layer].index(room)):
                        problems.append(f"{where}: room '{layer}/{room}' includes \"{target}\" of room "
                                        f"'{parts[2]}', which is above it (rooms bottom first: "
                                        f"{', '.join(rooms[layer])})")
    for folder in SIZE_CHECKED:
        for path in source_files(root / folder):
            lines = len(path.read_text(encoding="utf-8", errors="replace").splitlines())
            if lines > MAX_LINES:
                problems.append(f"{path.relative_to(root)}: {lines} lines (at most {MAX_LINES}: split it along its seams)")
    return problems


def self_test() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "docs").mkdir()
        (root / "docs" / "ARCHITECTURE.md").write_text(
            "# A\n\n## Layers\n\n| layer | files |\n|---|---|\n| core | x |\n| model | y |\n\n"
            "## Rooms\n\n| layer | rooms |\n|---|---|\n| model | `low`, `high` |\n\n## Next\n| z | w |\n")
        for rel, text in {
            "include/odc/core/a.h": '#include "odc/core/b.h"\n',
            "src/core/a.cpp": '#include "odc/model/m.h"\n',           # up: violation
            "src/model/low/m.cpp": '#include "odc/core/a.h"\n#include "local.h"\n#include "odc/model/low/x.h"\n',
            "src/model/low/down.cpp": '#include "odc/model/high/h.h"\n',  # room up: violation
            "include/odc/model/high/sub/h.h": '#include "odc/model/low/m.h"\n',  # sub-room down: fine
            "src/model/loose.cpp": "\n",                                # outside the rooms: violation
            "src/model/high/r.cpp": '#include "../core/a.h"\n',       # relative: violation
            "src/stray/s.cpp": "\n",                                  # not a layer: violation
            "tools/big.cpp": "x\n" * (MAX_LINES + 1),                 # too long: violation
            "tests/unit/core/test_big.cpp": "x\n" * (MAX_LINES + 2),  # too long test: violation
            "tests/cli/test_big.sh": "x\n" * (MAX_LINES + 3),         # too long test script: violation
            "bench/big.cpp": "x\n" * (MAX_LINES + 4),                 # too long bench: violation
            "tests/unit/core/test_ok.cpp": "x\n" * MAX_LINES,         # at the limit: fine
        }.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        found = check(root)
        expected = ["src/core/a.cpp:1: layer 'core' includes \"odc/model/m.h\"", "src/model/high/r.cpp:1: relative include",
                    "src/model/low/down.cpp:1: room 'model/low' includes", "src/model/loose.cpp: not in a room",
                    "src/stray: a folder that is not a layer", f"tools/big.cpp: {MAX_LINES + 1} lines",
                    f"tests/unit/core/test_big.cpp: {MAX_LINES + 2} lines",
                    f"tests/cli/test_big.sh: {MAX_LINES + 3} lines", f"bench/big.cpp: {MAX_LINES + 4} lines"]
        missing = [e for e in expected if not any(p.startswith(e) for p in found)]
        if missing or len(found) != len(expected):
            print("self-test failed; expected:\n  " + "\n  ".join(expected) + "\nfound:\n  " + "\n  ".join(found))
            return 1
    wrong = structure_map.self_test(layer_order, room_order)
    if wrong:
        print("self-test of the map failed:\n  " + "\n  ".join(wrong))
        return 1
    print(f"self-test: all {len(expected)} planted violations found, nothing else; "
          f"the map counts rooms, floors, arrows, arrows up and circles of a planted tree")
    return 0


def draw(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="check_structure.py --map")
    parser.add_argument("--map", required=True, metavar="PLACE", help="src, or a folder under it (src/train)")
    parser.add_argument("--by", choices=("file", "room"), default="room",
                        help="file: a source and its header are one room; room: first sub-folders (default)")
    parser.add_argument("--dot", metavar="FILE", help="also write the graph as Graphviz DOT to FILE")
    parser.add_argument("root", nargs="?", default=str(pathlib.Path(__file__).resolve().parents[2]))
    args = parser.parse_args(argv)
    root = pathlib.Path(args.root)
    architecture = root / "docs" / "ARCHITECTURE.md"
    m = structure_map.measure(root, args.map, args.by, layer_order(architecture), room_order(architecture))
    if args.dot:
        pathlib.Path(args.dot).write_text(structure_map.dot(m), encoding="utf-8")
    try:
        print("\n".join(structure_map.report(m)) + (f"\nwrote {args.dot}" if args.dot else ""))
    except BrokenPipeError:  # the reader (head) has what it wanted
        sys.stderr.close()
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if any(a == "--map" or a.startswith("--map=") for a in sys.argv[1:]):
        return draw(sys.argv[1:])
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
    problems = check(root)
    for p in problems:
        print(p)
    layers = layer_order(root / "docs" / "ARCHITECTURE.md")
    print(f"{len(problems)} problem(s); layers bottom first: {', '.join(layers)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
