#!/usr/bin/env python3
"""Two builds of loom side by side: loom-bench from build A and build B, alternating per
configuration and repetition (A first on even repetitions, B first on odd ones), so that the
machine's drift hits both alike. Prints, per configuration and mode, the median over repetitions
of each build's median ms per step, the ratio B / A, and peak memory of each; per configuration,
the median CPU seconds (user + system) of each side's whole loom-bench run (every mode, warm-up and
set-up included), which moves less than wall time when other processes share the cores.

    tools/ab_bench.py --a OLD_BUILD --b NEW_BUILD [--reps 3] [--quick] [--out FILE.json]

A typical before/after check of a change: build the old commit in its own folder (git worktree
add /tmp/old OLD && cmake -S /tmp/old -B /tmp/old/build -G Ninja && cmake --build
/tmp/old/build --target loom-bench), then run this with --a /tmp/old/build --b build.
An option of one build against its default: the same folder twice, with --b-args (or --a-args)
adding loom-bench flags to that side, e.g. --a build --b build --b-args=--plan-layouts.
Configurations: the MLP at batch 1, 8 and 64, the small CNN at batch 32 and ResNet-18 at batch
16 (the issue targets of tools/compare.sh), every CPU mode (--modes picks some); ResNet-50
(3x224x224) at batch 8 only when named in --only (a step takes seconds on two cores).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

# model, batch, timed steps, warm-up steps, rounds, learning rate (as tools/compare.sh)
CONFIGS = [("mlp", 1, 200, 10, 4, 0.002), ("mlp", 8, 200, 10, 4, 0.01), ("mlp", 64, 100, 5, 4, 0.01),
           ("cnn", 32, 30, 3, 3, 0.01), ("resnet18", 16, 8, 2, 2, 0.01)]
OPT_IN = [("resnet50", 8, 4, 1, 2, 0.01)]  # run only when --only names them
MODES = "eager,graph-dynamic,graph-planned,graph-parallel"


def run(build, model, batch, steps, warmup, rounds, lr, threads, modes, extra):
    cmd = [os.path.join(build, "loom-bench"), "--model", model, "--batch", str(batch), "--mode", modes,
           "--steps", str(steps), "--warmup", str(warmup), "--rounds", str(rounds), "--lr", str(lr),
           "--threads", str(threads), "--json"] + extra.split()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")], cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="build folder A (the reference)")
    ap.add_argument("--b", required=True, help="build folder B")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--quick", action="store_true", help="a tenth of the steps: a smoke run, not a measurement")
    ap.add_argument("--only", default="", help="comma-separated models to keep (mlp,cnn,resnet18,resnet50)")
    ap.add_argument("--modes", default=MODES, help="comma-separated loom-bench modes (default: " + MODES + ")")
    ap.add_argument("--a-args", default="", help="extra loom-bench flags for A (space-separated)")
    ap.add_argument("--b-args", default="", help="extra loom-bench flags for B (space-separated)")
    ap.add_argument("--out", default="", help="write every run's JSON and the summary here")
    args = ap.parse_args()
    only = args.only.split(",") if args.only else []
    configs = [c for c in CONFIGS if not only or c[0] in only] + [c for c in OPT_IN if c[0] in only]
    runs = {}  # (model, batch, mode, build) -> [median ms], [peak bytes]
    cpu = {}  # (model, batch, build) -> [CPU seconds of the whole run]
    for rep in range(args.reps):
        for model, batch, steps, warmup, rounds, lr in configs:
            if args.quick:
                steps, rounds = max(2, steps // 10), 1
            order = [("A", args.a, args.a_args), ("B", args.b, args.b_args)]
            if rep % 2:
                order.reverse()
            for name, build, extra in order:
                results, seconds = run(build, model, batch, steps, warmup, rounds, lr, args.threads, args.modes, extra)
                cpu.setdefault((model, batch, name), []).append(seconds)
                for r in results:
                    key = (model, batch, r["mode"], name)
                    runs.setdefault(key, ([], []))
                    runs[key][0].append(r["ms_per_step_median"])
                    runs[key][1].append(r["peak_bytes"])
            print(f"ab_bench: repetition {rep + 1}/{args.reps}: {model} batch {batch} done", file=sys.stderr)
    rows = []
    print(f"| model | batch | mode | A ms | B ms | B / A | A peak MiB | B peak MiB |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for model, batch, *_ in configs:
        for mode in args.modes.split(","):
            a, b = runs.get((model, batch, mode, "A")), runs.get((model, batch, mode, "B"))
            if not a or not b:
                continue
            ma, mb = statistics.median(a[0]), statistics.median(b[0])
            pa, pb = max(a[1]) / 2**20, max(b[1]) / 2**20
            rows.append({"model": model, "batch": batch, "mode": mode, "a_ms": a[0], "b_ms": b[0],
                         "a_median_ms": ma, "b_median_ms": mb, "ratio": mb / ma, "a_peak_mib": pa, "b_peak_mib": pb})
            print(f"| {model} | {batch} | {mode} | {ma:.3f} | {mb:.3f} | {mb / ma:.3f} | {pa:.2f} | {pb:.2f} |")
    cpu_rows = []
    print()
    print("| model | batch | A CPU s | B CPU s | B / A |")
    print("|---|---:|---:|---:|---:|")
    for model, batch, *_ in configs:
        a, b = cpu.get((model, batch, "A")), cpu.get((model, batch, "B"))
        if a and b:
            ca, cb = statistics.median(a), statistics.median(b)
            cpu_rows.append({"model": model, "batch": batch, "a_cpu_s": a, "b_cpu_s": b})
            print(f"| {model} | {batch} | {ca:.2f} | {cb:.2f} | {cb / ca:.3f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"a": args.a, "b": args.b, "a_args": args.a_args, "b_args": args.b_args, "reps": args.reps, "threads": args.threads, "rows": rows, "cpu_rows": cpu_rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
