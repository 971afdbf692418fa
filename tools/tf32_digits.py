#!/usr/bin/env python3
"""TF32 against full float32 on the GPU, where it matters to a user: the digits CNN
(examples/python/cnn.py --data data/digits) trained once in each float32 math, same seed, same
data order, then the held-out accuracies compared (Note [Float32 math on the GPU] in
src/core/device.h). Passes when they are within --points (default 0.5) of each other.

    python3 tools/tf32_digits.py [--epochs 1] [--batch 64] [--points 0.5] [--json FILE]

Each run is its own process (the math is process-wide). Needs a GPU and the digits in
data/digits (tools/setup.sh fetches them; tools/gpu_bundle.sh packs them).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(math, a):
    cmd = [sys.executable, os.path.join(ROOT, "examples", "python", "cnn.py"), "--data", a.data, "--device", "cuda",
           "--cuda-float32-math", math, "--epochs", str(a.epochs), "--batch", str(a.batch), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=os.path.join(ROOT, "examples", "python"))
    sys.stderr.write(p.stderr[-2000:])
    if p.returncode != 0:
        raise SystemExit(f"tf32_digits: {math} run failed (exit {p.returncode}): {' '.join(cmd)}")
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise SystemExit(f"tf32_digits: {math} run printed no JSON line")
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "digits"))
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--points", type=float, default=0.5, help="largest accepted gap in held-out top-1, in points")
    ap.add_argument("--json", help="also write the result here")
    a = ap.parse_args()
    if a.epochs < 1 or a.batch < 1 or not a.points > 0:
        ap.error("--epochs and --batch must be positive integers and --points a positive number")
    runs = {m: train(m, a) for m in ("full", "tf32")}
    gap = 100 * abs(runs["tf32"]["heldout_top1"] - runs["full"]["heldout_top1"])
    result = {"tool": "tf32_digits", "epochs": a.epochs, "batch": a.batch,
              "top1_full": runs["full"]["heldout_top1"], "top1_tf32": runs["tf32"]["heldout_top1"],
              "loss_full": runs["full"]["heldout_loss"], "loss_tf32": runs["tf32"]["heldout_loss"],
              "gap_points": round(gap, 3), "max_gap_points": a.points, "passed": gap <= a.points}
    print(json.dumps(result))
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            f.write(json.dumps(result) + "\n")
        os.replace(a.json + ".tmp", a.json)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
