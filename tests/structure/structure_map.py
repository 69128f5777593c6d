"""The map of one place of the tree: its rooms, the include arrows between them, their floors and circles.

Used by check_structure.py --map PLACE [--by file|room] [--dot FILE] [REPO_ROOT]:
  * PLACE is `src` (the whole source tree) or a folder under it such as `src/train` or
    `src/distributed/comm`; a place means its files under both src/ and include/odc/.
  * --by file: a room is one source and its header (the same path and stem, `trainer.cpp` +
    `trainer.h`), named by its path under PLACE without the ending.
    --by room (the default): a room is the first sub-folder under PLACE, so the layers when PLACE is
    `src`; the files that sit directly in PLACE form the room `.`.
  * an arrow is a distinct include from one room into another room of the same place (includes that
    leave the place are not drawn); a private header included by its bare name ("parts.h") is looked
    up beside the file that includes it.
  * floors: a room that includes no other room is on floor 0; any other room stands one floor above
    the highest room it includes (the rooms of a circle share one floor).
  * arrows up: arrows against the declared order, bottom first: the "## Layers" table when PLACE is
    `src`, the "## Rooms" row of the layer when PLACE is a layer that has rooms; nothing is declared
    between files, nor for a layer without rooms.
  * circles: the groups of two or more rooms that reach each other through includes.
"""
import pathlib
import re

CODE_SUFFIXES = {".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def _key(path: pathlib.Path, root: pathlib.Path) -> str | None:
    """`layer/sub/stem` for a file under src/ or include/odc/, whichever holds it."""
    for base in (root / "src", root / "include" / "odc"):
        try:
            return path.relative_to(base).with_suffix("").as_posix()
        except ValueError:
            continue
    return None


def file_graph(root: pathlib.Path) -> dict[str, set[str]]:
    """Every file pair under src/ and include/odc/ (key `layer/.../stem`) -> the pairs it includes."""
    files = []
    for base in (root / "src", root / "include" / "odc"):
        if base.is_dir():
            files += sorted(p for p in base.rglob("*") if p.is_file() and p.suffix in CODE_SUFFIXES)
    graph: dict[str, set[str]] = {}
    for path in files:
        graph.setdefault(_key(path, root), set())
    for path in files:
        here = _key(path, root)
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            if target.startswith("odc/"):
                key = pathlib.PurePosixPath(target[4:]).with_suffix("").as_posix()
            else:  # a private header beside the file (or reached by a relative path)
                key = _key((path.parent / target).resolve(), root.resolve())
            if key in graph and key != here:
                graph[here].add(key)
    return graph


def place_graph(files: dict[str, set[str]], scope: str, by: str) -> dict[str, set[str]]:
    """The rooms of `scope` ('' for all of src, else e.g. 'train') and the arrows between them."""
    def room(key: str) -> str | None:
        if scope and not key.startswith(scope + "/"):
            return None
        rest = key[len(scope) + 1:] if scope else key
        if by == "file":
            return rest
        parts = rest.split("/")
        return parts[0] if len(parts) >= 2 else "."
    graph: dict[str, set[str]] = {}
    for key in files:
        if room(key) is not None:
            graph.setdefault(room(key), set())
    for key, targets in files.items():
        here = room(key)
        if here is None:
            continue
        for t in targets:
            there = room(t)
            if there is not None and there != here:
                graph[here].add(there)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan), every one, each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    out.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
    return out


def floors(graph: dict[str, set[str]], comps: list[list[str]]) -> dict[str, int]:
    """Longest-path level of each room over the arrows, bottom = 0; a circle's rooms share one."""
    comp_of = {n: i for i, c in enumerate(comps) for n in c}
    below = [{comp_of[t] for n in comp for t in graph[n]} - {i} for i, comp in enumerate(comps)]
    level: dict[int, int] = {}
    for i in range(len(comps)):  # the components form no circle, so this walk ends
        work = [i]
        while work:
            j = work[-1]
            todo = [k for k in below[j] if k not in level]
            if todo:
                work += todo
                continue
            level[j] = 1 + max(level[k] for k in below[j]) if below[j] else 0
            work.pop()
    return {n: level[comp_of[n]] for n in graph}


def cycle_path(graph: dict[str, set[str]], members: list[str]) -> list[str]:
    """One shortest way round a circle, from its first member back to it."""
    inside, start = set(members), members[0]
    came = {start: None}
    queue = [start]
    for node in queue:
        for nxt in sorted(graph[node] & inside):
            if nxt == start:
                path = [node]
                while came[path[-1]] is not None:
                    path.append(came[path[-1]])
                return path[::-1] + [start]
            if nxt not in came:
                came[nxt] = node
                queue.append(nxt)
    return members


def measure(root: pathlib.Path, place: str, by: str, layers: list[str], rooms: dict[str, list[str]]) -> dict:
    parts = pathlib.PurePosixPath(place.strip("/")).parts
    if parts[:2] == ("include", "odc"):
        parts = ("src",) + parts[2:]
    if not parts or parts[0] != "src":
        raise SystemExit(f"--map {place}: a place is src or a folder under it (src/train, src/distributed/comm)")
    scope = "/".join(parts[1:])
    graph = place_graph(file_graph(root), scope, by)
    if not graph:
        raise SystemExit(f"--map {place}: no source files under src/{scope} or include/odc/{scope}")
    if by == "file":
        order, declared = None, "nothing is declared between files"
    elif not scope:
        order, declared = layers, "the Layers table"
    elif scope in rooms:
        order, declared = rooms[scope], f"the Rooms row of '{scope}'"
    else:
        order, declared = None, f"no Rooms row for '{scope}'"
    comps = circles(graph)
    level = floors(graph, comps)
    arrows = sorted((a, b) for a in graph for b in graph[a])
    up = None
    if order is not None:
        rank = {name: i for i, name in enumerate(order)}
        up = [(a, b) for a, b in arrows if a in rank and b in rank and rank[b] > rank[a]]
    rings = [c for c in comps if len(c) > 1]
    return {"place": place, "by": by, "graph": graph, "level": level, "arrows": arrows, "up": up,
            "declared": declared, "circles": sorted(rings, key=lambda c: (-len(c), c)),
            "floors": 1 + max(level.values())}


def report(m: dict) -> list[str]:
    what = "a source and its header are one room" if m["by"] == "file" else "a room is a first sub-folder"
    lines = [f"map of {m['place']} by {m['by']} ({what})",
             f"rooms: {len(m['graph'])}",
             f"floors: {m['floors']} (longest include path, bottom = 0)",
             f"arrows: {len(m['arrows'])} (distinct room -> room includes)"]
    if m["up"] is None:
        lines.append(f"arrows up: not applicable ({m['declared']})")
    else:
        lines.append(f"arrows up: {len(m['up'])} (against {m['declared']})")
        lines += [f"  up: {a} -> {b}" for a, b in m["up"]]
    lines.append(f"circles: {len(m['circles'])}")
    for i, ring in enumerate(m["circles"], 1):
        lines.append(f"  circle {i} ({len(ring)} rooms): {', '.join(ring)}")
        lines.append(f"    e.g. {' -> '.join(cycle_path(m['graph'], ring))}")
    for f in range(m["floors"] - 1, -1, -1):
        lines.append(f"floor {f}: {', '.join(sorted(n for n, lv in m['level'].items() if lv == f))}")
    lines.append("arrows, each room -> the rooms it includes:")
    lines += [f"  {n} -> {', '.join(sorted(m['graph'][n]))}" for n in sorted(m["graph"]) if m["graph"][n]]
    return lines


def dot(m: dict) -> str:
    up = set(m["up"] or [])
    ring = {n: i for i, c in enumerate(m["circles"]) for n in c}
    out = [f'digraph "{m["place"]} by {m["by"]}" {{', "  node [shape=box, fontsize=10];"]
    for f in range(m["floors"]):
        names = " ".join(f'"{n}";' for n in sorted(n for n, lv in m["level"].items() if lv == f))
        out.append(f"  {{ rank=same; {names} }}  // floor {f}")
    for a, b in m["arrows"]:
        style = ' [color=red, penwidth=2, label="up"]' if (a, b) in up else (
            " [color=orange]" if a in ring and ring.get(b) == ring[a] else "")
        out.append(f'  "{a}" -> "{b}"{style};')
    out.append("}")
    return "\n".join(out) + "\n"


def self_test(layers_of, rooms_of) -> list[str]:
    """Plants a tree whose counts are known; returns what the map got wrong (empty: all right)."""
    import tempfile
    wrong = []
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "docs").mkdir()
        (root / "docs" / "ARCHITECTURE.md").write_text(
            "## Layers\n\n| layer | files |\n|---|---|\n| core | x |\n| model | y |\n| io | z |\n\n"
            "## Rooms\n\n| layer | rooms |\n|---|---|\n| model | `low`, `mid`, `high` |\n")
        for rel, text in {
            "include/odc/core/a.h": '#include "odc/core/b.h"\n',                    # a -> b
            "src/core/a.cpp": '#include "odc/core/a.h"\n',                          # its own pair: no arrow
            "include/odc/core/b.h": '#include "odc/core/c.h"\n',                    # b -> c
            "include/odc/core/c.h": "\n",
            "src/core/c.cpp": '#include "odc/core/c.h"\n#include "odc/core/a.h"\n',  # c -> a: circle a, b, c
            "src/core/d.cpp": '#include "d_impl.h"\n#include "odc/core/a.h"\n',     # d -> d_impl, d -> a
            "src/core/d_impl.h": '#include "odc/core/b.h"\n',                       # d_impl -> b
            "include/odc/model/low/m.h": '#include "odc/core/a.h"\n',               # model -> core
            "src/model/low/m.cpp": '#include "odc/model/high/h.h"\n',               # room low -> high: up
            "include/odc/model/high/h.h": '#include "odc/model/mid/k.h"\n',         # high -> mid
            "include/odc/model/mid/k.h": "\n",
            "src/model/mid/k.cpp": '#include "odc/model/low/m.h"\n#include "odc/io/w.h"\n',  # mid -> low; model -> io: up
            "include/odc/io/w.h": "\n",
        }.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        arch = root / "docs" / "ARCHITECTURE.md"
        layers, rooms = layers_of(arch), rooms_of(arch)
        cases = [  # place, by: rooms, floors, arrows, arrows up (None: not applicable), circle sizes
            ("src/core", "file", 5, 3, 6, None, [3]),
            ("src/model", "room", 3, 1, 3, [("low", "high")], [3]),
            ("src", "room", 3, 2, 2, [("model", "io")], []),
            ("src", "file", 9, 3, 11, None, [3, 3]),
        ]
        for place, by, n_rooms, n_floors, n_arrows, up, sizes in cases:
            m = measure(root, place, by, layers, rooms)
            got = (len(m["graph"]), m["floors"], len(m["arrows"]), m["up"], [len(c) for c in m["circles"]])
            if got != (n_rooms, n_floors, n_arrows, up, sizes):
                wrong.append(f"map {place} by {by}: got rooms, floors, arrows, up, circles {got}; expected "
                             f"{(n_rooms, n_floors, n_arrows, up, sizes)}")
        m = measure(root, "src/core", "file", layers, rooms)
        if m["circles"] != [["a", "b", "c"]] or m["level"]["d"] != 2 or m["level"]["d_impl"] != 1:
            wrong.append(f"map src/core by file: circles {m['circles']}, floors {m['level']}")
        drawn = dot(measure(root, "src/model", "room", layers, rooms))
        if drawn.count("->") != 3 or drawn.count('label="up"') != 1:
            wrong.append(f"dot of src/model by room: expected 3 arrows, 1 up; got\n{drawn}")
    return wrong
