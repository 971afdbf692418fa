#!/usr/bin/env python3
"""Where one profiled replay's time went, by op kind: the per-op summary of a Chrome trace that
`loom-bench --timeline DIR` writes (DIR/trace.json; each op stamped after its kernels finished,
Note [Profiling an asynchronous device], so on a GPU the times are the device's plus a launch).

  tools/trace_ops.py TRACE.json [--top N] [--json FILE]

One line per op kind, the most time first: count, total ms, share of the ops' time, µs each.
An op whose record keeps an operand in a blocked layout (Note [Activation layouts]: NHWC on
CUDA) is its own kind, tagged "[blocked]". --json writes the same rows as one JSON object.
"""
import argparse
import collections
import json
import sys


def summarise(trace):
    """The ops' total µs and their rows (name, count, µs), the most time first."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    by = collections.OrderedDict()
    total = 0.0
    for e in events:
        if e.get("ph") != "X" or e.get("cat", "op") != "op":
            continue
        attrs = (e.get("args") or {}).get("attrs", "")
        name = e["name"] + (" [blocked]" if "_blocked=1" in attrs else "")
        row = by.setdefault(name, [0, 0.0])
        row[0] += 1
        row[1] += float(e["dur"])
        total += float(e["dur"])
    rows = sorted(((n, c, us) for n, (c, us) in by.items()), key=lambda r: (-r[2], r[0]))
    return total, rows


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25, help="rows to print (default 25)")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    a = ap.parse_args(argv)
    try:
        with open(a.trace) as f:
            trace = json.load(f)
        total, rows = summarise(trace)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"trace_ops: {a.trace}: not a loom-bench trace ({e})", file=sys.stderr)
        return 2
    if not rows:
        print(f"trace_ops: {a.trace}: no op events", file=sys.stderr)
        return 2
    print(f"{a.trace}: {sum(r[1] for r in rows)} ops, {total / 1e3:.3f} ms in ops")
    for name, count, us in rows[:a.top]:
        print(f"  {name:<42} {count:5d} {us / 1e3:10.3f} ms {100 * us / total:6.1f}% {us / count:9.1f} us each")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"trace": a.trace, "total_us": total,
                       "ops": [{"op": n, "count": c, "us": us} for n, c, us in rows]}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
