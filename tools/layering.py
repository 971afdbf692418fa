#!/usr/bin/env python3
"""Include layering check: which folder of src/ may include which (docs/design.md, "Include arrows
point one way": the layout shows the architecture, and only CI keeps it that way).

    tools/layering.py --check          exit 0 and one summary line when clean; exit 1 and one
                                       line per violation otherwise
    tools/layering.py --check --root DIR   the same on another tree (the tests plant violations)
    tools/layering.py --edges          the folder graph: every folder -> folder edge, with one
                                       include that makes it

Reads every `#include "..."` in src/**/*.{h,cc,cu,cuh}; quoted paths are relative to src/.
A violation line reads
    src/graph/replay.cc:11: includes "device/cpu/parallel.h" (graph -> device/cpu): <rule>
Includes of files that are not under src/ (generated protobuf headers) are not checked.
"""
import argparse
import os
import posixpath
import re
import sys

# The folders, by path under src/. src/device/cpu/kernels/ (and any later src/device/cpu/<sub>/)
# is device/cpu; "device" is only the files directly in src/device: what the backends share
# (collective kernels, kernel shapes and reports). A file in a folder not listed here is a
# violation, so that a new folder gets its place in the layering when it is made.
FOLDERS = [
    "core", "core/ops",
    "graph",
    "device", "device/cpu", "device/cuda", "device/cuda_stub",
    "nn",
    "io", "io/onnx", "io/comm",
]

CORE = ["core", "core/ops"]
BACKENDS = ["device/cpu", "device/cuda", "device/cuda_stub"]
ANY_DEVICE = ["device"] + BACKENDS
ANY_IO = ["io", "io/onnx", "io/comm"]

# The table of docs/design.md ("Include arrows point one way"): (these folders, may include only
# these and themselves, why). A cycle between any two folders is a violation too, in or out of
# the table (core and core/ops may include each other's files, but not both ways).
RULES = [
    (CORE, CORE,
     "core is the bottom layer: what a tensor, an op and a device are, whatever runs them"),
    (["graph"], CORE + ["graph"],
     "graph sees only core: it asks the Device interface, never a backend"),
    (ANY_DEVICE, CORE + ["graph", "device"],
     "a backend sees core, the graph's pass frame and the shared device headers, no other backend"),
    (ANY_IO, CORE + ["graph"] + ANY_IO,
     "io reads and writes tensors and graphs: never nn, never a backend"),
    (["nn"], CORE + ["graph"] + ANY_IO,
     "nn builds on core, graph and io, never on a backend"),
]

SOURCE_EXTS = (".h", ".cc", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def folder_of(rel):
    """The folder of a path relative to src/, or None when it is in none of the table's."""
    d = posixpath.dirname(rel)
    for f in sorted(FOLDERS, key=len, reverse=True):
        if d == f:
            return f
        # A folder holds its whole subtree unless the table splits it (device/cpu/kernels is
        # device/cpu; a new device/metal is nothing until the table says what it is).
        if d.startswith(f + "/") and not any(g.startswith(f + "/") for g in FOLDERS):
            return f
    return None


def read_includes(root):
    """[(file relative to root, line, included path)] for every quoted include under src/."""
    src = os.path.join(root, "src")
    out = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith(SOURCE_EXTS):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE_RE.match(line)
                    if m:
                        out.append((os.path.relpath(path, root), n, m.group(1)))
    return out


def find_cycles(edges, limit=50):
    """Elementary cycles of the folder graph, each as a list of folders starting at its smallest
    (so each cycle is found once); at most `limit` of them."""
    succ = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
    cycles = []

    def walk(start, node, path, seen):
        for nxt in sorted(succ.get(node, ())):
            if nxt == start:
                cycles.append(list(path))
            elif nxt > start and nxt not in seen and len(cycles) < limit:
                seen.add(nxt)
                path.append(nxt)
                walk(start, nxt, path, seen)
                path.pop()
                seen.discard(nxt)

    for start in sorted(succ):
        walk(start, start, [start], {start})
    return cycles[:limit]


def check(root):
    """(violation lines, {(from folder, to folder): its first include})."""
    src = os.path.join(root, "src")
    violations = []
    edges = {}  # (from folder, to folder) -> first (file, line, include) seen
    for path, line, inc in read_includes(root):
        here = folder_of(os.path.relpath(os.path.join(root, path), src).replace(os.sep, "/"))
        there = folder_of(inc)
        where = f'{path}:{line}: includes "{inc}"'
        if here is None:
            violations.append(f"{where}: the file is in no folder of the table in tools/layering.py")
            continue
        if there is None:
            if os.path.exists(os.path.join(src, inc)):
                violations.append(f"{where}: the included file is in no folder of the table in "
                                  "tools/layering.py")
            continue  # not under src/: a generated or system header
        if there == here:
            continue
        edges.setdefault((here, there), (path, line, inc))
        for froms, allowed, why in RULES:
            if here in froms and there not in allowed:
                violations.append(f"{where} ({here} -> {there}): {why}")
    for cycle in find_cycles(edges):
        ring = " -> ".join(cycle + [cycle[0]])
        for a, b in zip(cycle, cycle[1:] + cycle[:1]):
            path, line, inc = edges[(a, b)]
            violations.append(f'{path}:{line}: includes "{inc}" ({a} -> {b}): '
                              f"folders include each other in a cycle: {ring}")
    return violations, edges


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="report violations, exit 1 if any")
    ap.add_argument("--edges", action="store_true", help="print the folder graph")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="repository root (default: the one holding this script)")
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(args.root, "src")):
        print(f"layering: no src/ folder in {args.root}", file=sys.stderr)
        return 2
    violations, edges = check(args.root)
    if args.edges:
        for (a, b), (path, line, inc) in sorted(edges.items()):
            print(f"{a} -> {b}  (e.g. {path}:{line}: {inc})")
    if args.check or not args.edges:
        for v in violations:
            print(v)
        if violations:
            print(f"layering: {len(violations)} violations in {len(FOLDERS)} folders, "
                  f"{len(edges)} include edges between them")
            return 1
        print(f"layering: {len(FOLDERS)} folders, {len(edges)} include edges, no violation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
