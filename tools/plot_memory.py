#!/usr/bin/python3
"""Plots one training step's memory as written by `loom-bench --timeline DIR`.

    /usr/bin/python3 tools/plot_memory.py DIR [--out DIR/memory_timeline.png]

Reads DIR/eager.csv, DIR/dynamic.csv, DIR/planned.csv and DIR/meta.json and draws, per op of the
step (x axis, issue order), the bytes the step itself holds beyond the persistent state
(parameters, optimizer state, inputs):
  - eager:            the device allocator's live bytes after each eagerly run op, minus what was
                      live before the step (measured);
  - graph, dynamic:   live intermediate bytes of a dynamic replay (allocated at the first writer,
                      freed after the last reader: the graph's liveness per op);
  - graph, planned:   the arena, held for the whole step (one allocation, bound once), and the
                      bytes of it in use at each op (in-place ops share their input's memory);
  - lower bound:      the largest sum of live intermediate sizes at any op, blocks sharing memory
                      through in-place reuse counted once (and, dotted grey, without that reuse).
Forward, backward and update phases are shaded. With DIR/budgeted.csv (written by
`loom-bench --timeline DIR --memory-budget-fraction F`) a second panel, on the same scale, shows
the budgeted plan beside it: its arena, the bytes of it in use per op (the recomputed ops add to
the x axis) and the budget. Prints the PNG's path. matplotlib, Agg backend.
"""
import argparse
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MIB = float(1 << 20)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def phases(names):
    """Shaded regions [(first op, end op, label)] from op names: the forward pass, then the
    backward pass (with the optimizer updates it interleaves, when parameters are updated as soon
    as their gradients are final), then updates that follow the last gradient op."""
    n = len(names)
    grads = [i for i, nm in enumerate(names) if nm.endswith("_grad") or "_grad_" in nm]
    if not grads:
        return [(0, n, "forward")]
    bwd, last = grads[0], grads[-1]
    if bwd > 0 and names[bwd - 1] == "fill":  # the seed gradient of the loss
        bwd -= 1
    interleaved = any(nm.endswith("_update") for nm in names[bwd:last])
    out = [(0, bwd, "forward"), (bwd, last + 1, "backward + updates" if interleaved else "backward")]
    if last + 1 < n:
        out.append((last + 1, n, "updates"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--out", default=None, help="PNG path (default DIR/memory_timeline.png)")
    a = ap.parse_args()
    try:
        eager = read_csv(os.path.join(a.dir, "eager.csv"))
        dyn = read_csv(os.path.join(a.dir, "dynamic.csv"))
        plan = read_csv(os.path.join(a.dir, "planned.csv"))
        with open(os.path.join(a.dir, "meta.json")) as f:
            meta = json.load(f)
        budgeted_path = os.path.join(a.dir, "budgeted.csv")
        budgeted = read_csv(budgeted_path) if os.path.exists(budgeted_path) else None
    except (OSError, ValueError) as e:
        print(f"plot_memory: cannot read the timeline in {a.dir}: {e} (write it with loom-bench --timeline {a.dir})",
              file=sys.stderr)
        return 1
    out = a.out or os.path.join(a.dir, "memory_timeline.png")

    e_y = [int(r["live_bytes"]) / MIB for r in eager]
    d_y = [int(r["live_bytes"]) / MIB for r in dyn]
    p_y = [int(r["planned_live_bytes"]) / MIB for r in plan] if plan and "planned_live_bytes" in plan[0] else []
    bound_plain = int(meta.get("lower_bound_no_inplace_bytes") or 0) / MIB
    arena = int(meta["arena_bytes"]) / MIB
    bound = int(meta["lower_bound_bytes"]) / MIB
    e_peak = max(e_y) if e_y else 0.0
    names = [r["name"] for r in dyn]

    if budgeted:
        fig, (ax, bx) = plt.subplots(2, 1, figsize=(11, 10), dpi=110)
    else:
        fig, ax = plt.subplots(figsize=(11, 5.5), dpi=110)
    n = max(len(e_y), len(d_y), 1)
    colors = {"forward": "#f2f2f2", "updates": "#eef7e6"}
    spans = [(lo, hi, label, colors.get(label, "#e6eef7")) for lo, hi, label in phases(names)]
    top = max(e_peak, max(d_y, default=0), arena, bound, bound_plain) * 1.18 or 1.0
    for lo, hi, label, color in spans:
        ax.axvspan(lo - 0.5, hi - 0.5, color=color, zorder=0)
        ax.text((lo + hi - 1) / 2, top * 0.985, label, ha="center", va="top", fontsize=9, color="#555555")

    steps = dict(where="mid")
    ax.step(range(len(e_y)), e_y, color="#d62728", lw=2.4, label=f"eager (measured), peak {e_peak:.2f} MiB", **steps)
    ax.step(range(len(d_y)), d_y, color="#1f77b4", lw=1.6, ls="--",
            label=f"graph, dynamic recycling, peak {max(d_y, default=0):.2f} MiB", **steps)
    ax.hlines(arena, -0.5, n - 0.5, color="#2ca02c", lw=2.0,
              label=f"graph, planned arena {arena:.2f} MiB (held all step)")
    if p_y and any(abs(a - b) > 1e-9 for a, b in zip(p_y, d_y)):
        ax.step(range(len(p_y)), p_y, color="#2ca02c", lw=1.0, alpha=0.8,
                label=f"graph, planned: arena bytes in use (in-place reuse, {meta.get('inplace_ops', '?')} ops)",
                **steps)
    if bound_plain and abs(bound_plain - bound) > 1e-9:
        ax.hlines(bound_plain, -0.5, n - 0.5, color="#777777", lw=1.0, ls=":",
                  label=f"lower bound without in-place reuse {bound_plain:.2f} MiB")
    ax.hlines(bound, -0.5, n - 0.5, color="black", lw=1.2, ls=":",
              label=f"liveness lower bound {bound:.2f} MiB")
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(0, top)
    ax.set_xlabel(f"op of one training step (issue order; {meta.get('graph_ops', n)} ops)")
    ax.set_ylabel("bytes held by the step, MiB (beyond persistent state)")
    ratio = arena / bound if bound else float("nan")
    ax.set_title(f"loom memory timeline: {meta['model']} ({meta['arch']}), batch {meta['batch']}, {meta['device']}\n"
                 f"arena / lower bound = {ratio:.3f}; persistent state (params, momentum, inputs) "
                 f"{int(meta['persistent_bytes']) / MIB:.2f} MiB not shown", fontsize=10)
    if n <= 60:
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=75, fontsize=7)
    ax.legend(loc="lower center", fontsize=8.5, framealpha=0.95)
    ax.grid(axis="y", alpha=0.3)
    if budgeted:
        plot_budgeted(bx, budgeted, meta, top, bound)
    fig.tight_layout()
    fig.savefig(out)
    print(out)
    return 0


def plot_budgeted(bx, rows, meta, top, bound):
    """The budgeted plan's panel: same y scale as the unbudgeted one above it."""
    col = "planned_live_bytes" if "planned_live_bytes" in rows[0] else "live_bytes"
    y = [int(r[col]) / MIB for r in rows]
    persistent = int(meta["budgeted_persistent_bytes"])
    arena = int(meta["budgeted_arena_bytes"]) / MIB
    budget = (int(meta["memory_budget"]) - persistent) / MIB
    n = max(len(y), 1)
    for lo, hi, label in phases([r["name"] for r in rows]):
        bx.axvspan(lo - 0.5, hi - 0.5, color={"forward": "#f2f2f2", "updates": "#eef7e6"}.get(label, "#e6eef7"), zorder=0)
    bx.step(range(len(y)), y, where="mid", color="#9467bd", lw=1.4, label="budgeted plan: arena bytes in use")
    bx.hlines(arena, -0.5, n - 0.5, color="#9467bd", lw=2.0, label=f"budgeted arena {arena:.2f} MiB")
    bx.hlines(budget, -0.5, n - 0.5, color="#d62728", lw=1.2, ls="--",
              label=f"budget {budget:.2f} MiB ({meta['budget_fraction']:g} x the unbudgeted arena)")
    bx.hlines(bound, -0.5, n - 0.5, color="black", lw=1.2, ls=":", label=f"unbudgeted liveness lower bound {bound:.2f} MiB")
    bx.set_xlim(-0.5, n - 0.5)
    bx.set_ylim(0, top)
    bx.set_xlabel(f"op of the budgeted step ({len(y)} ops: {meta['recomputed_ops']} recomputed)")
    bx.set_ylabel("bytes held by the step, MiB")
    bx.set_title("the same step under a memory budget (Note [Recomputing for a memory budget])", fontsize=10)
    bx.legend(loc="lower center", fontsize=8.5, framealpha=0.95)
    bx.grid(axis="y", alpha=0.3)


if __name__ == "__main__":
    sys.exit(main())
