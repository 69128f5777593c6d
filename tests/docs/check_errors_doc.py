#!/usr/bin/env python3
"""Keeps docs/errors.md honest: every row of its tables must point at a test that exists and quote
a message that the sources still contain.

Usage: check_errors_doc.py [REPO_ROOT]   (default: two levels above this script)

Per table row (| Situation | What the user sees | Test |):
  * the message column holds at least one `excerpt` and says "exit ...";
  * each excerpt, with placeholders <...> treated as wildcards, is split into its literal fragments,
    and every fragment must occur in the string literals (adjacent literals joined, escapes and fmt's
    {{ }} undone) or the text of src/, tools/, bench/ or include/; an excerpt followed by "(from mpirun)" is
    the launcher's text and must occur in the named test file instead;
  * the test column names at least one `tests/...` file, each must exist, and every "quoted" case
    name must occur in one of the named files.
The document must hold the sections Config, Data, Checkpoint, Tokenizer, Launch, Runtime and, last,
Rank failure, and at least MIN_ROWS rows. Exits 1 naming each bad row.
"""
import pathlib
import re
import sys

MIN_ROWS = 25
REQUIRED_SECTIONS = ["Config", "Data", "Checkpoint", "Tokenizer", "Launch", "Runtime", "Rank failure"]
HEADER = ["Situation", "What the user sees (exit status + message excerpt)", "Test"]
SOURCE_DIRS = ["src", "tools", "bench", "include"]
CXX_SUFFIXES = {".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh"}
PLACEHOLDER = re.compile(r"<[^<>`]*>")
MIN_LONGEST_FRAGMENT = 8  # an excerpt must pin at least one literal this long
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'", "?": "?", "a": "\a",
           "b": "\b", "f": "\f", "v": "\v"}


def unescape(body):
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            if n == "x":
                m = re.match(r"[0-9a-fA-F]+", body[i + 2:])
                if m:
                    out.append(chr(int(m.group(0), 16) & 0xFF))
                    i += 2 + len(m.group(0))
                    continue
            out.append(ESCAPES.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def string_literals(text):
    """The string literals of a C++ source, adjacent ones (only whitespace or comments between them)
    joined as the compiler joins them."""
    groups, current, i, n = [], None, 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
            continue
        if text.startswith("/*", i):
            i = text.find("*/", i + 2)
            i = n if i < 0 else i + 2
            continue
        raw = re.match(r'(?:u8|u|U|L)?R"([^()\\\s]{0,16})\(', text[i:])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end_marker = ")" + raw.group(1) + '"'
            start = i + raw.end()
            end = text.find(end_marker, start)
            end = n if end < 0 else end
            value = text[start:end]
            i = end + len(end_marker)
            current = value if current is None else current + value
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            value = unescape(text[i + 1:j])
            i = j + 1
            current = value if current is None else current + value
            continue
        if c == "'":  # a character literal (or a digit separator, which this skips harmlessly)
            j = i + 1
            while j < n and text[j] != "'" and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            if current is not None:
                groups.append(current)
                current = None
            continue
        if not c.isspace() and current is not None:
            groups.append(current)
            current = None
        i += 1
    if current is not None:
        groups.append(current)
    return groups


def source_corpus(root):
    pieces = []
    for name in SOURCE_DIRS:
        base = root / name
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if not path.is_file():
                continue
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            pieces.append(text)
            if path.suffix in CXX_SUFFIXES:
                for literal in string_literals(text):
                    pieces.append(literal)
                    pieces.append(literal.replace("{{", "{").replace("}}", "}"))
    return "\0".join(pieces)


def split_cells(line):
    """Cells of a Markdown table row; '|' inside `code` or escaped as \\| does not split."""
    cells, cell, in_code, i = [], [], False, 0
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cell.append("|")
            i += 2
            continue
        if c == "`":
            in_code = not in_code
        if c == "|" and not in_code:
            cells.append("".join(cell).strip())
            cell = []
        else:
            cell.append(c)
        i += 1
    cells.append("".join(cell).strip())
    return cells


def fragments(excerpt):
    return [f for f in PLACEHOLDER.split(excerpt) if f.strip()]


def check(root):
    doc_path = root / "docs" / "errors.md"
    if not doc_path.is_file():
        return [f"{doc_path}: missing"], 0
    corpus = source_corpus(root)
    problems, rows, sections = [], 0, []
    section, table_line = None, 0
    for number, line in enumerate(doc_path.read_text(encoding="utf-8").splitlines(), start=1):
        heading = re.match(r"^##\s+(.*?)\s*$", line)
        if heading:
            section = heading.group(1)
            sections.append(section)
            table_line = 0
            continue
        if not line.lstrip().startswith("|"):
            table_line = 0
            continue
        table_line += 1
        cells = split_cells(line)
        where = f"docs/errors.md:{number} [{section}]"
        if table_line == 1:
            if cells != HEADER:
                problems.append(f"{where}: table header must be {' | '.join(HEADER)}, found {' | '.join(cells)}")
            continue
        if table_line == 2 and all(re.fullmatch(r":?-{3,}:?", c) for c in cells):
            continue
        rows += 1
        if len(cells) != 3:
            problems.append(f"{where}: expected 3 cells, found {len(cells)}: {line.strip()}")
            continue
        situation, seen, test = cells
        label = f"{where} row '{situation}'"
        if not situation:
            problems.append(f"{label}: empty situation")

        # The tests.
        test_files = re.findall(r"`(tests/[^`]+)`", test)
        if not test_files:
            problems.append(f"{label}: the Test column names no `tests/...` file")
        texts = []
        for name in test_files:
            path = root / name
            if not path.is_file():
                problems.append(f"{label}: test file {name} does not exist")
            else:
                texts.append(path.read_text(encoding="utf-8", errors="replace"))
        for case in re.findall(r'"([^"]+)"', re.sub(r"`[^`]*`", "", test)):
            if texts and not any(case in text for text in texts):
                problems.append(f"{label}: test case \"{case}\" not found in {', '.join(test_files)}")

        # The message.
        if not re.search(r"\bexit\b", seen):
            problems.append(f"{label}: the message column does not state the exit status ('exit ...')")
        excerpts = list(re.finditer(r"`([^`]+)`(\s*\(from mpirun\))?", seen))
        if not excerpts:
            problems.append(f"{label}: no `message excerpt` in the message column")
        for match in excerpts:
            excerpt, external = match.group(1), match.group(2)
            parts = fragments(excerpt)
            if not parts or max(len(p.strip()) for p in parts) < MIN_LONGEST_FRAGMENT:
                problems.append(f"{label}: excerpt `{excerpt}` has no literal fragment of "
                                f"{MIN_LONGEST_FRAGMENT}+ characters to check")
                continue
            haystacks = texts if external else [corpus]
            where_text = ", ".join(test_files) if external else "src/, tools/ or include/"
            for part in parts:
                if not any(part in hay for hay in haystacks):
                    problems.append(f"{label}: fragment {part!r} of `{excerpt}` not found in {where_text}")

    for name in REQUIRED_SECTIONS:
        if name not in sections:
            problems.append(f"docs/errors.md: missing section '## {name}'")
    if sections and sections[-1] != REQUIRED_SECTIONS[-1]:
        problems.append(f"docs/errors.md: the last section must be '## {REQUIRED_SECTIONS[-1]}', found '{sections[-1]}'")
    if rows < MIN_ROWS:
        problems.append(f"docs/errors.md: {rows} table rows, at least {MIN_ROWS} required")
    return problems, rows


def main():
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
    problems, rows = check(root.resolve())
    for problem in problems:
        print(f"FAIL: {problem}")
    if problems:
        print(f"check_errors_doc: {len(problems)} problem(s) in {rows} row(s)")
        return 1
    print(f"check_errors_doc: {rows} rows, every test file, case name and message fragment found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
