#!/usr/bin/env python3
"""bf16 and fp16 training against float32 where it matters to a user (issue 31): the digits CNN
(examples/python/cnn.py --data data/digits) trained from the same seeds in each precision (same
initial weights, same data order), then the held-out top-1 and the training-loss curves compared
(Note [Precision policy] in src/core/autocast.h; fp16 with dynamic loss scaling, Note [Loss
scaling]).

    python3 tools/precision_digits.py [--seeds 1,2,3,4,5] [--epochs 3] [--precisions bf16,fp16]
        [--points 0.5] [--curve-tolerance 0.05] [--device cpu|cuda] [--json FILE]

Accuracy: for each precision, the mean held-out top-1 over the seeds against float32's mean over
the same seeds; it passes within --points (percentage points). The curve: the training loss the
trainer logs every 10 steps, from identical weights; per seed, the mean over the logged points of
|loss - float32's loss| / float32's loss, averaged over the seeds; it passes within
--curve-tolerance. Each run is its own process. Prints one JSON line (also written to --json).
Exit 0 when every precision passes both, 1 when one does not, 2 on bad arguments.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(precision, seed, a, tmp):
    log = os.path.join(tmp, f"{precision}-{seed}.csv")
    cmd = [sys.executable, os.path.join(ROOT, "examples", "python", "cnn.py"), "--data", a.data, "--device", a.device,
           "--precision", precision, "--seed", str(seed), "--epochs", str(a.epochs), "--batch", str(a.batch),
           "--csv", log, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=os.path.join(ROOT, "examples", "python"))
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])
        raise SystemExit(f"precision_digits: the {precision} run (seed {seed}) failed (exit {p.returncode}): "
                         f"{' '.join(cmd)}")
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"precision_digits: the {precision} run (seed {seed}) printed no JSON line")
    with open(log) as f:
        curve = {int(r["step"]): float(r["train_loss"]) for r in csv.DictReader(f) if r["train_loss"]}
    return json.loads(lines[-1]), curve


def curve_gap(curve, reference):
    steps = sorted(set(curve) & set(reference))
    if not steps:
        raise SystemExit("precision_digits: the runs logged no common steps")
    return statistics.mean(abs(curve[s] - reference[s]) / reference[s] for s in steps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "digits"))
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--precisions", default="bf16,fp16")
    ap.add_argument("--points", type=float, default=0.5, help="largest accepted gap in mean held-out top-1, in points")
    ap.add_argument("--curve-tolerance", type=float, default=0.05,
                    help="largest accepted mean relative gap of the training-loss curve")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--json", help="also write the result here (atomically)")
    a = ap.parse_args()
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds takes integers separated by commas, got {a.seeds!r}")
    precisions = a.precisions.split(",")
    if any(p not in ("bf16", "fp16") for p in precisions):
        ap.error(f"--precisions takes bf16 and/or fp16, got {a.precisions!r}")
    if a.epochs < 1 or a.batch < 1 or not seeds or not a.points > 0 or not a.curve_tolerance > 0:
        ap.error("--epochs, --batch and --seeds must be positive integers, --points and --curve-tolerance positive")
    if not os.path.isfile(os.path.join(a.data, "SOURCE")):
        ap.error(f"the digits are not in {a.data}: run tools/setup.sh")

    with tempfile.TemporaryDirectory(prefix="loom-precision-") as tmp:
        runs = {p: [train(p, s, a, tmp) for s in seeds] for p in ["fp32"] + precisions}
    top1 = {p: [r[0]["heldout_top1"] for r in runs[p]] for p in runs}
    result = {"tool": "precision_digits", "device": a.device, "epochs": a.epochs, "batch": a.batch, "seeds": seeds,
              "top1": top1, "mean_top1": {p: statistics.mean(v) for p, v in top1.items()},
              "heldout_loss": {p: [r[0]["heldout_loss"] for r in runs[p]] for p in runs},
              "max_gap_points": a.points, "curve_tolerance": a.curve_tolerance, "passed": True}
    for p in precisions:
        gap = 100 * abs(result["mean_top1"][p] - result["mean_top1"]["fp32"])
        curve = statistics.mean(curve_gap(r[1], ref[1]) for r, ref in zip(runs[p], runs["fp32"]))
        same = all(r[1] == ref[1] for r, ref in zip(runs[p], runs["fp32"]))  # lowered at all?
        result[p] = {"gap_points": round(gap, 3), "curve_gap": round(curve, 5), "identical_to_fp32": same,
                     "passed": gap <= a.points and curve <= a.curve_tolerance}
        result["passed"] = result["passed"] and result[p]["passed"]
    text = json.dumps(result)
    print(text)
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            f.write(text + "\n")
        os.replace(a.json + ".tmp", a.json)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
