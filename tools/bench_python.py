#!/usr/bin/python3
"""Times the 784-1024-1024-10 ReLU MLP (SGD, momentum 0.9, softmax cross-entropy) from Python:
eager (every op a Python call) against graph replay (train_one_batch captured once, replayed
from C++), and against the C++ example (<build>/loom-mlp) when it is built. One JSON line per
(implementation, mode, batch) with the median milliseconds per step, then a table.

    /usr/bin/python3 tools/bench_python.py [--batches 1,8,64] [--steps N] [--warmup N]
        [--modes eager,graph,native-eager,native-graph] [--dims 784,1024,1024,10] [--repeat R]
        [--rounds K] [--no-cpp] [--build DIR] [--model mlp|resnet50]

--model resnet50: the zoo's ResNet-50 (3x224x224, 1000 classes; the architecture of loom-bench's
and tools/bench_torch.py's resnet50) through the native modes only (there is no Python-written
ResNet-50), at --batches 8 by default.

A step is: copy a new batch into the input tensors, train_one_batch, read the loss (which
synchronises). Modes: eager/graph: a loom.model.Model subclass written in Python; native-*: the
C++ nn::Model (model.NativeModel over the zoo's MLP), for comparison. The modes' models live
side by side and take turns, K chunks of steps each (--rounds), so that they are timed under the
same load; --repeat R runs the whole comparison R times and reports each mode's lowest median.
A run whose loss or parameters did not change is refused (exit 3), as loom's C++ harness does.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_loom(build):
    try:
        import loom  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(build, "python"))
    import loom
    return loom


def percentile(v, q):
    v = sorted(v)
    return v[int(round(q * (len(v) - 1)))]


def make_data(n, features, classes, seed=1234):
    rng = np.random.default_rng(seed)
    proto = (rng.random((classes, features)) < 0.15).astype(np.float32)
    y = rng.integers(0, classes, n).astype(np.int32)
    x = np.clip(proto[y] + rng.normal(0, 0.6, (n, features)), 0, 1).astype(np.float32)
    return x, y


class PythonRun:
    """One mode's model and data, trained a chunk of steps at a time (Note [Rounds] in
    tools/loom-bench.cc: the modes take turns, so a burst of load hits each of them alike)."""

    def __init__(self, loom, mode, batch, dims, model_name="mlp"):
        from loom import model, opt, tensor

        examples = os.path.join(ROOT, "examples", "python")
        if examples not in sys.path:
            sys.path.insert(0, examples)
        from mlp import MLP  # the Python example's model, written as a user would

        self.mode, self.batch, self.dims, self.model_name = mode, batch, dims, model_name
        dev = loom.device.create_cpu_device()
        dev.SetRandSeed(42)
        if model_name == "resnet50":  # images: a few batches' worth (each sample is 588 KiB)
            self.xs, self.ys = make_data(max(16, 2 * batch), 3 * 224 * 224, 1000)
            self.xs = self.xs.reshape(-1, 3, 224, 224)
        else:
            self.xs, self.ys = make_data(max(4096, batch), dims[0], dims[-1])
        self.x = tensor.from_numpy(self.xs[:batch], dev)
        self.y = tensor.from_numpy(self.ys[:batch], dev)
        sgd = opt.SGD(lr=0.01, momentum=0.9)
        self.use_graph = mode.endswith("graph")
        if model_name == "resnet50":
            self.m = model.NativeModel(model.resnet50(1000, device=dev), sgd)
        elif mode.startswith("native"):
            self.m = model.NativeModel(model.mlp(dims, device=dev), sgd)
        else:
            self.m = MLP(dims, dev)
            self.m.set_optimizer(sgd)
        self.m.compile([self.x], is_train=True, use_graph=self.use_graph, sequential=True)
        self.params = list(self.m.get_params().values())
        self.before = self.params[-2].to_numpy().copy()
        self.done, self.times, self.losses = 0, [], []

    def run(self, steps, timed=True):
        n, batch = self.xs.shape[0], self.batch
        for _ in range(steps):
            lo = (self.done * batch) % (n - batch + 1)
            t0 = time.perf_counter()
            self.x.copy_from_numpy(self.xs[lo:lo + batch])
            self.y.copy_from_numpy(self.ys[lo:lo + batch])
            _, loss = self.m.train_one_batch(self.x, self.y)
            value = loss.item()
            t1 = time.perf_counter()
            self.losses.append(value)
            self.done += 1
            if timed:
                self.times.append((t1 - t0) * 1e3)

    def result(self):
        trained = self.losses[0] != self.losses[-1] and not np.array_equal(self.before, self.params[-2].to_numpy())
        t = self.times
        name = "resnet50-3x224x224" if self.model_name == "resnet50" else "mlp-" + "-".join(map(str, self.dims))
        return {"model": name,
                "impl": "python" if not self.mode.startswith("native") else "python-native-model",
                "mode": "graph" if self.use_graph else "eager", "batch": self.batch, "steps": len(t),
                "ms_per_step_median": round(percentile(t, 0.5), 4), "ms_per_step_p10": round(percentile(t, 0.1), 4),
                "ms_per_step_p90": round(percentile(t, 0.9), 4), "first_loss": round(self.losses[0], 6),
                "last_loss": round(self.losses[-1], 6), "trained": bool(trained)}


def bench_python(loom, modes, batch, steps, warmup, dims, rounds, model_name="mlp"):
    """Every mode in `modes` trained `steps` timed steps, the modes taking turns in `rounds`."""
    runs = [PythonRun(loom, mode, batch, dims, model_name) for mode in modes]
    for r in runs:
        r.run(warmup, timed=False)
    rounds = max(1, min(rounds, steps))
    for k in range(rounds):
        for r in runs:
            r.run(steps // rounds + (1 if k < steps % rounds else 0))
    return [r.result() for r in runs]


def bench_cpp(build, batch, steps, warmup):
    exe = os.path.join(build, "loom-mlp")
    if not os.access(exe, os.X_OK):
        return None
    r = subprocess.run([exe, "--batch", str(batch), "--steps", str(steps + warmup), "--json"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench_python: {exe} failed ({r.returncode}): {r.stderr.strip()}")
    line = json.loads(r.stdout.strip().splitlines()[-1])
    return {"model": line["model"], "impl": "cpp-example", "mode": line.get("mode", "eager"), "batch": batch,
            "steps": line["steps"], "ms_per_step_median": round(line["ms_per_step_median"], 4),
            "ms_per_step_p10": round(line["ms_per_step_p10"], 4), "ms_per_step_p90": round(line["ms_per_step_p90"], 4),
            "first_loss": line["first_loss"], "last_loss": line["last_loss"], "trained": line["first_loss"] != line["last_loss"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="mlp", choices=("mlp", "resnet50"))
    ap.add_argument("--batches", default="", help="default 1,8,64 (mlp), 8 (resnet50)")
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default: 200 at batch 1, fewer above)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10, help="the Python modes take turns in this many chunks of steps")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per configuration; the one with the lowest median is reported (on a shared "
                         "machine, the least disturbed)")
    ap.add_argument("--modes", default="", help="default eager,graph (mlp), native-eager,native-graph (resnet50)")
    ap.add_argument("--dims", default="784,1024,1024,10", help="layer sizes (the C++ example is 784-1024-1024-10 only)")
    ap.add_argument("--no-cpp", action="store_true", help="skip the C++ example")
    ap.add_argument("--build", default=os.path.join(ROOT, os.environ.get("LOOM_BUILD_DIR", "build")))
    args = ap.parse_args()
    build = args.build if os.path.isabs(args.build) else os.path.join(ROOT, args.build)
    loom = import_loom(build)
    dims = [int(d) for d in args.dims.split(",")]
    r50 = args.model == "resnet50"
    cpp = not args.no_cpp and dims == [784, 1024, 1024, 10] and not r50
    modes = [m for m in (args.modes or ("native-eager,native-graph" if r50 else "eager,graph")).split(",") if m]
    for m in modes:
        if m not in ("eager", "graph", "native-eager", "native-graph"):
            ap.error(f"unknown mode {m!r}")
        if r50 and not m.startswith("native"):
            ap.error(f"--model resnet50 runs the native modes only, not {m!r}")
    rows = []
    for batch in (int(b) for b in (args.batches or ("8" if r50 else "1,8,64")).split(",")):
        steps = args.steps or (6 if r50 else 200 if batch <= 8 else 60)
        best = {}
        for rep in range(args.repeat):  # interleaved, so a burst of load hits every mode alike
            runs = bench_python(loom, modes, batch, steps, args.warmup, dims, args.rounds, args.model)
            if cpp:
                r = bench_cpp(build, batch, steps, args.warmup)
                if r is not None:
                    runs.append(r)
            for r in runs:
                r["repeats"] = args.repeat
                key = (r["impl"], r["mode"])
                if key not in best or r["ms_per_step_median"] < best[key]["ms_per_step_median"]:
                    best[key] = r
        for r in best.values():
            rows.append(r)
            print(json.dumps(r), flush=True)
    failed = [r for r in rows if not r["trained"]]
    print("\n| batch | implementation | mode | median ms/step | p10 | p90 |", file=sys.stderr)
    print("|---:|---|---|---:|---:|---:|", file=sys.stderr)
    for r in rows:
        print(f"| {r['batch']} | {r['impl']} | {r['mode']} | {r['ms_per_step_median']:.3f} | {r['ms_per_step_p10']:.3f} "
              f"| {r['ms_per_step_p90']:.3f} |", file=sys.stderr)
    for batch in sorted({r["batch"] for r in rows}):
        by = {r["mode"]: r for r in rows if r["batch"] == batch and r["impl"] == "python"}
        if "eager" in by and "graph" in by:
            ratio = by["eager"]["ms_per_step_median"] / by["graph"]["ms_per_step_median"]
            print(f"batch {batch}: Python graph replay {ratio:.2f}x faster than Python eager", file=sys.stderr)
    if failed:
        print(f"bench_python: {len(failed)} run(s) did not train; refusing to report them", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
