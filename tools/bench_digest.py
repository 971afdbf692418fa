#!/usr/bin/env python3
"""One line per loom-bench run from the JSON lines a GPU check (or anyone) wrote: what a short
GPU slot most needs to read at a glance, printed at the end of tools/gpu_check.sh.

  tools/bench_digest.py FILE_OR_DIR...

A folder means every *.jsonl in it (bench, layouts, precision, gpt2: the compare parts' lines
are compare.sh's and are skipped). Each loom-bench line gives: its file, model, batch,
precision, mode, the tags that tell runs of one model apart (a layouts run's "cudnn_layout", a
memory budget in MiB, --no-fused-loss, the gpt2 part's "passes_off"), the median
ms per step, the device peak in MB and the recomputed ops; then, for runs whose cuDNN plans were
measured, the measured milliseconds of the chosen convolution algorithms against the fastest of
any determinism (loom-bench's "kernel_counters": Note [Measured algorithms] in
src/device/cuda/cudnn.cc). Lines that are not loom-bench's JSON are skipped, and a file that
cannot be read is named on stderr; the exit status is 0 whenever something was printed.
"""
import glob
import json
import os
import sys

PASSES = ("forward", "grad input", "grad weight")


def runs(path):
    """(file name, record) for each loom-bench JSON line of path."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        print(f"bench_digest: cannot read {path}: {e.strerror}", file=sys.stderr)
        return
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and "model" in r and "mode" in r and "ms_per_step_median" in r:
            yield os.path.basename(path), r


def tags(r):
    """What tells this run apart from others of its model and mode."""
    t = []
    if r.get("cudnn_layout"):
        t.append(r["cudnn_layout"])
    if r.get("memory_budget"):
        t.append(f"budget {r['memory_budget'] / 2**20:.0f} MiB")
    if r.get("fused_loss") is False:
        t.append("loss apart")
    if r.get("passes_off"):
        t.append(f"off: {r['passes_off']}")
    return ", ".join(t)


def conv_cost(r):
    """'chosen X ms / fastest Y ms' over the three passes, or '' without measured plans."""
    c = r.get("kernel_counters") or {}
    chosen = sum(c.get(f"cudnn conv {p} chosen ms", 0) for p in PASSES)
    fastest = sum(c.get(f"cudnn conv {p} fastest ms, any determinism", 0) for p in PASSES)
    if not chosen:
        return ""
    return f"convs measured: chosen {chosen:.2f} ms, fastest of any determinism {fastest:.2f} ms"


def digest(paths):
    """The digest's lines for these files and folders."""
    files = []
    for p in paths:
        files += sorted(glob.glob(os.path.join(p, "*.jsonl"))) if os.path.isdir(p) else [p]
    out = []
    for path in files:
        for name, r in runs(path):
            peak = r.get("peak_bytes") or 0
            row = (f"{name:16} {r['model']:9} b{r.get('batch', '?'):<4} {r.get('precision', 'fp32'):5} "
                   f"{r['mode']:14} {r['ms_per_step_median']:9.3f} ms  peak {peak / 1e6:8.1f} MB")
            if r.get("recomputed_ops"):
                row += f"  recomputed {r['recomputed_ops']}"
            extra = [x for x in (tags(r), conv_cost(r)) if x]
            out.append(row + ("  (" + "; ".join(extra) + ")" if extra else ""))
    return out


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    lines = digest(argv)
    print("\n".join(lines) if lines else "bench_digest: no loom-bench lines")
    return 0 if lines else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
