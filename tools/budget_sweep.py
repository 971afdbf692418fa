#!/usr/bin/python3
"""A memory-budget sweep (Note [Recomputing for a memory budget], src/graph/recompute.h): one
model's planned graph under budgets of 100%, 75%, 50% and 35% of its unbudgeted arena (plus the
persistent bytes) and without a budget, every budget run by loom-bench in turn and the whole
round repeated (the order reversed on odd rounds), so the machine's drift hits all alike. Writes
the runs and a summary as JSON and a PNG: measured peak memory and median step time per budget,
and whether each budget's parameters and BatchNorm statistics after the run are bitwise those of
the unbudgeted run (loom-bench's final_params_checksum: same steps, same data).

    /usr/bin/python3 tools/budget_sweep.py [--build build] [--model resnet50] [--batch 8]
        [--fractions 1,0.75,0.5,0.35] [--steps 3] [--warmup 1] [--reps 2] [--out DIR]

A budget loom cannot meet is reported with the smallest peak the search reached (loom-bench
exits with loom's GraphError, whose message says it), not plotted as a run.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

MIB = float(1 << 20)


def run(a, fraction):
    cmd = [os.path.join(a.build, "loom-bench"), "--model", a.model, "--batch", str(a.batch), "--mode", "graph-planned",
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--threads", str(a.threads), "--json"]
    if fraction is not None:
        cmd += ["--memory-budget-fraction", str(fraction)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode == 0 and lines:
        return lines[0], None
    m = re.search(r"smallest peak reached is (\d+) bytes", p.stdout + p.stderr)
    if m:
        return None, int(m.group(1))
    sys.exit(f"budget_sweep: {' '.join(cmd)} failed (exit {p.returncode}):\n{(p.stdout + p.stderr)[-2000:]}")


def plot(summary, title, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in summary if r["met"]]
    labels = [r["budget"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    x = range(len(rows))
    ax.bar(x, [r["peak_mib"] for r in rows], color="#2ca02c", alpha=0.75, label="measured device peak, MiB")
    ax.bar(x, [r["arena_mib"] for r in rows], color="#1f77b4", alpha=0.9, width=0.45, label="planned arena, MiB")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels)
    ax.set_ylabel("MiB")
    ax.set_xlabel("memory budget (fraction of the unbudgeted arena, plus persistent bytes)")
    t = ax.twinx()
    t.plot(list(x), [r["ms_median"] for r in rows], "o-", color="#d62728", label="median ms per step")
    t.set_ylabel("ms per step")
    t.set_ylim(0, max(r["ms_median"] for r in rows) * 1.3)
    for r in summary:
        if not r["met"]:
            ax.text(0.99, 0.97, f"budget {r['budget']}: not met, smallest peak {r['floor_mib']:.0f} MiB",
                    transform=ax.transAxes, ha="right", va="top", fontsize=8)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = t.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="lower left", fontsize=8, framealpha=0.95)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--fractions", default="1,0.75,0.5,0.35")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", default="build/budget_sweep")
    a = ap.parse_args()
    budgets = [None] + [float(f) for f in a.fractions.split(",")]
    os.makedirs(a.out, exist_ok=True)
    runs = {b: [] for b in budgets}
    floors = {}
    for rep in range(a.reps):
        for b in (budgets if rep % 2 == 0 else budgets[::-1]):
            if b in floors:
                continue
            r, floor = run(a, b)
            if r is None:
                floors[b] = floor
            else:
                runs[b].append(r)
            print(f"budget_sweep: rep {rep} budget {b if b is not None else 'none'}: "
                  + (f"{r['ms_per_step_median']:.1f} ms, peak {r['peak_bytes'] / MIB:.1f} MiB" if r else
                     f"not met (smallest peak {floor / MIB:.1f} MiB)"), file=sys.stderr)
    base = statistics.median(r["ms_per_step_median"] for r in runs[None])
    summary = []
    for b in budgets:
        name = "none" if b is None else f"{b:g}"
        if b in floors:
            summary.append({"budget": name, "met": False, "floor_mib": floors[b] / MIB})
            continue
        rs = runs[b]
        ms = statistics.median(r["ms_per_step_median"] for r in rs)
        summary.append({"budget": name, "met": True, "ms_median": ms, "time_vs_unbudgeted": ms / base,
                        "peak_mib": max(r["peak_bytes"] for r in rs) / MIB,
                        "arena_mib": rs[0]["arena_bytes"] / MIB, "recomputed_ops": rs[0]["recomputed_ops"],
                        "recompute_gflop": rs[0]["recompute_flops"] / 1e9,
                        "step_gflop": rs[0]["flops_per_step"] / 1e9,
                        # the same steps on the same data: bitwise equal training shows as equal checksums
                        "bitwise_equal_to_unbudgeted": all(r["final_params_checksum"] == runs[None][0]["final_params_checksum"]
                                                           for r in rs)})
    title = f"loom memory budget sweep: {a.model}, batch {a.batch}, graph-planned, {a.threads} threads"
    with open(os.path.join(a.out, "budget_sweep.json"), "w") as f:
        json.dump({"model": a.model, "batch": a.batch, "threads": a.threads, "reps": a.reps, "summary": summary,
                   "runs": {("none" if b is None else f"{b:g}"): rs for b, rs in runs.items()}}, f, indent=1)
    png = os.path.join(a.out, "budget_sweep.png")
    plot(summary, title, png)
    print("| budget | arena MiB | measured peak MiB | recomputed ops | added GFLOP (of the step's) | ms/step | vs none "
          "| parameters bitwise equal to none |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for s in summary:
        if s["met"]:
            print(f"| {s['budget']} | {s['arena_mib']:.1f} | {s['peak_mib']:.1f} | {s['recomputed_ops']} | "
                  f"{s['recompute_gflop']:.2f} ({100 * s['recompute_gflop'] / s['step_gflop']:.1f}%) | "
                  f"{s['ms_median']:.0f} | {s['time_vs_unbudgeted']:.2f}x | {'yes' if s['bitwise_equal_to_unbudgeted'] else 'NO'} |")
        else:
            print(f"| {s['budget']} | not met: smallest peak {s['floor_mib']:.1f} MiB | | | | | |")
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
