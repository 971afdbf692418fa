#!/usr/bin/python3
"""loom against PyTorch on the demo's real-data run: the same model (the small CNN with one input
channel), initialisation distribution, recipe and data, several seeds each; prints the held-out
top-1 accuracy of every run and the means. A benchmark to run by hand, not a test.

    /usr/bin/python3 tools/compare_digits.py [--epochs 4] [--lr 0.01] [--lr-drop 3] [--batch 32]
        [--seeds 3] [--threads 2] [--json]

The data: the digits that tools/setup.sh installs (LOOM_DATA_DIR/digits, default <repo>/data/digits),
read with loom's own reader on both sides, each 28x28 digit centred in 32x32 and normalised as
loom-cnn does ((pixel / 255 - 0.1307) / 0.3081). loom: build/loom-cnn --graph --seed S. PyTorch:
tools/bench_torch.py's loom_init (weights N(0, 2 / fan_in), as loom's layers), SGD with momentum 0.9
and weight decay 5e-4 (loom-cnn's), shuffled batches without the last partial one, the learning
rate / 10 after --lr-drop epochs, then eval mode (running statistics) on the 1,000 held-out digits.
The seeds draw different weights and orders on the two sides: compare the means, and mind that one
run's accuracy on 1,000 digits has a standard error of about 0.6 percentage points.
Needs python3-torch (tools/compare.sh installs it).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from bench_torch import loom_init  # noqa: E402

MEAN, STD = 0.1307, 0.3081


def load(digits, train):
    from loom import io
    d = io.load_mnist_dir(digits, train=train)
    x = np.zeros((d.n, 1, 32, 32), np.float32)
    x[:, :, 2:30, 2:30] = d.images() / np.float32(255)
    return (x - np.float32(MEAN)) / np.float32(STD), d.labels().astype(np.int64)


def torch_run(a, data, seed):
    (xt, yt), (xe, ye) = data
    torch.manual_seed(seed)
    model = loom_init(nn.Sequential(
        nn.Conv2d(1, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
    xt, yt, xe, ye = map(torch.from_numpy, (xt, yt, xe, ye))
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    for epoch in range(1, a.epochs + 1):
        model.train()
        order = torch.randperm(len(yt), generator=gen)
        for i in range(len(yt) // a.batch):
            idx = order[i * a.batch:(i + 1) * a.batch]
            loss = nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        if epoch == a.lr_drop:
            for g in opt.param_groups:
                g["lr"] = a.lr / 10
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(xe[i:i + 200]) for i in range(0, len(ye), 200)])
    top1 = float((logits.argmax(1) == ye).float().mean())
    return {"framework": "pytorch " + torch.__version__, "seed": seed, "heldout_top1": top1,
            "heldout_loss": float(nn.functional.cross_entropy(logits, ye)), "seconds": time.perf_counter() - start}


def loom_run(a, digits, seed):
    build = os.environ.get("LOOM_BUILD_DIR", "build")
    exe = os.path.join(build if os.path.isabs(build) else os.path.join(ROOT, build), "loom-cnn")
    r = subprocess.run([exe, "--data", digits, "--graph", "--epochs", str(a.epochs), "--lr", str(a.lr),
                        "--lr-drop", str(a.lr_drop), "--batch", str(a.batch), "--seed", str(seed), "--json"],
                       capture_output=True, text=True, env=dict(os.environ, LOOM_NUM_THREADS=str(a.threads)))
    if r.returncode != 0:
        sys.exit(f"compare_digits: loom-cnn failed:\n{r.stderr}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    return {"framework": "loom (graph)", "seed": seed, "heldout_top1": res["heldout_top1"],
            "heldout_loss": res["heldout_loss"], "seconds": res["seconds"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--lr-drop", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="one JSON line per run")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    digits = os.path.join(os.environ.get("LOOM_DATA_DIR") or os.path.join(ROOT, "data"), "digits")
    if not os.path.isfile(os.path.join(digits, "SOURCE")):
        sys.exit(f"compare_digits: no digits in {digits}: run tools/setup.sh")
    data = (load(digits, True), load(digits, False))
    runs = []
    for seed in range(1, a.seeds + 1):  # alternating, so that a busy moment hits both
        runs.append(loom_run(a, digits, seed))
        runs.append(torch_run(a, data, seed))
        for r in runs[-2:]:
            print(json.dumps(r) if a.json else
                  f"{r['framework']:>22}  seed {r['seed']}  held-out top-1 {100 * r['heldout_top1']:.2f}%  "
                  f"loss {r['heldout_loss']:.4f}  {r['seconds']:.1f} s", flush=True)
    for name in dict.fromkeys(r["framework"] for r in runs):
        acc = [100 * r["heldout_top1"] for r in runs if r["framework"] == name]
        print(f"{name:>22}  mean held-out top-1 {np.mean(acc):.2f}% over {len(acc)} seeds "
              f"(min {min(acc):.2f}, max {max(acc):.2f})")


if __name__ == "__main__":
    main()
