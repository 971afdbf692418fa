#!/usr/bin/env python3
"""Notes check: every Note the code cites is written down exactly once (docs/style.md: invariants are
written where they live, PyTorch c10's Note comments).

    tools/notes.py --check              exit 0 and one summary line when every cited Note has one
                                        definition; exit 1 and one line per problem otherwise
    tools/notes.py --check --root DIR   the same on another tree (the tests plant problems)
    tools/notes.py --list               every definition, with where it is and how often cited

A definition is a line holding only a comment that reads Note, a space and the title in square
brackets (`// Note [Block lifetime in a graph]`, or with #, or in a docstring), nothing after the
bracket. Anything else naming a Note that way cites it: in comments, docstrings, strings,
Markdown (outside its `code spans`, which show the notation). A citation may break across two
lines, in the title or between the word and the bracket; the two parts are joined with a space
(with none after a hyphen: "Counter-" + "based").
Searched: src/, swig/, tools/, test/, examples/, docs/ and README.md.
"""
import argparse
import os
import re
import sys

SEARCHED = ["src", "swig", "tools", "test", "examples", "docs", "README.md"]
# These two talk about the notation itself (and the tests plant broken Notes in their trees):
# what they spell out in their text is not a citation.
NOT_SEARCHED = {"tools/notes.py", "test/tools/test_checks.py"}
SKIPPED_DIRS = {"__pycache__", ".git", ".pytest_cache"}

DEFINITION_RE = re.compile(r'\s*(?://+|#+|\*|/\*+|[rR]?""")?\s*Note \[([^\]]+)\]\s*(?:\*/)?\s*')
CITATION_RE = re.compile(r"\bNote\s+\[([^\]\[]+)\]")
CODE_SPAN_RE = re.compile(r"`[^`]*`")
# What comes before a comment's text on a line, and after it when the line is inside a string
# (a macro's help text goes on with `"    \`).
LEAD_RE = re.compile(r'^[\s/#*"]*')
TRAIL_RE = re.compile(r'[\s\\"]*$')


def text_files(root):
    for top in SEARCHED:
        path = os.path.join(root, top)
        if os.path.isfile(path):
            yield top
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
            for name in sorted(filenames):
                rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                if rel not in NOT_SEARCHED:
                    yield rel


def read_lines(path):
    """The file's lines, or None for a binary file (a PNG in docs/, a model in test/)."""
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        return None


def title(raw):
    return re.sub(r"\s+", " ", raw).strip()


def scan(root):
    """({title: [(file, line)] of its definitions}, {title: [(file, line)] of its citations})."""
    defined, cited = {}, {}
    for rel in text_files(root):
        lines = read_lines(os.path.join(root, rel))
        if lines is None:
            continue
        if rel.endswith(".md"):
            # Markdown shows the notation itself in code spans (`// Note [Title]`); a citation is
            # written in the text.
            lines = [CODE_SPAN_RE.sub(lambda m: " " * len(m.group(0)), l) for l in lines]
        for i, line in enumerate(lines):
            m = DEFINITION_RE.fullmatch(line)
            if m:
                defined.setdefault(title(m.group(1)), []).append((rel, i + 1))
                continue
            if "Note" not in line:
                continue
            # This line's text, and the next line's after its comment marker: a citation that
            # starts here may end there.
            here = TRAIL_RE.sub("", line)
            nxt = LEAD_RE.sub("", lines[i + 1]) if i + 1 < len(lines) else ""
            joined = here + ("" if here.endswith("-") else " ") + nxt
            for c in CITATION_RE.finditer(joined):
                if c.start() < len(here):
                    cited.setdefault(title(c.group(1)), []).append((rel, i + 1))
    return defined, cited


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="report problems, exit 1 if any")
    ap.add_argument("--list", action="store_true", help="print every definition")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="repository root (default: the one holding this script)")
    args = ap.parse_args()
    defined, cited = scan(args.root)
    if args.list:
        for t in sorted(defined):
            for path, line in defined[t]:
                print(f"{path}:{line}: [{t}] cited {len(cited.get(t, []))} times")
    if not args.check and args.list:
        return 0
    problems = []
    for t in sorted(cited):
        if t not in defined:
            for path, line in cited[t]:
                problems.append(f"{path}:{line}: cites Note [{t}], which is defined nowhere")
    for t in sorted(defined):
        places = defined[t]
        for path, line in places[1:]:
            first = f"{places[0][0]}:{places[0][1]}"
            problems.append(f"{path}:{line}: defines Note [{t}] again (first at {first})")
    for p in problems:
        print(p)
    n_cites = sum(len(v) for v in cited.values())
    if problems:
        missing = sum(1 for t in cited if t not in defined)
        dup = sum(1 for t in defined if len(defined[t]) > 1)
        print(f"notes: {missing} cited but undefined, {dup} defined more than once "
              f"({len(defined)} Notes defined, {n_cites} citations)")
        return 1
    print(f"notes: {len(defined)} Notes defined, {n_cites} citations, every cited Note defined once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
