#!/usr/bin/python3
"""Trains a 784-1024-1024-10 ReLU MLP with SGD and momentum on synthetic MNIST-shaped data,
written as a SINGA-style loom.model.Model. With --graph (the default) the first
train_one_batch is captured and every later one is replayed from C++; --eager runs every op from
Python. Prints a progress bar, then the loss and the median time per step.

    /usr/bin/python3 examples/python/mlp.py [--graph | --eager] [--batch 64] [--steps 100]
        [--lr 0.01] [--momentum 0.9] [--parallel] [--dist [--shard]] [--json]

--dist trains data-parallel over the ranks of `python3 -m loom.launch -n N` (opt.DistOpt;
--batch is the global batch, each rank trains its rows; rank 0 prints). --shard keeps 1/N of the
optimizer state on each rank (ZeRO stage 1: opt.DistOpt(shard=True)).
"""
import argparse
import json
import time

from common import ProgressBar, Ranks, median, mnist_like

from loom import autograd, device, layer, model, opt, tensor


class MLP(model.Model):
    def __init__(self, dims, dev):
        super().__init__()
        layers = []
        for i in range(len(dims) - 1):
            layers.append(layer.Linear(dims[i], dims[i + 1], device=dev))
            if i + 2 < len(dims):
                layers.append(layer.ReLU())
        self.net = layer.Sequential(*layers)

    def forward(self, x):
        return self.net(x)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--graph", dest="graph", action="store_true", default=True, help="capture once, replay (default)")
    mode.add_argument("--eager", dest="graph", action="store_false", help="run every op from Python")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--parallel", action="store_true", help="replay independent ops on worker threads")
    ap.add_argument("--dist", action="store_true", help="data-parallel over the ranks of python3 -m loom.launch")
    ap.add_argument("--shard", action="store_true", help="with --dist: each rank keeps 1/N of the optimizer state")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of results")
    args = ap.parse_args()
    if args.batch < 1 or args.steps < 1:
        ap.error("--batch and --steps must be positive")

    dev = device.create_cpu_device()
    dev.SetRandSeed(42)
    xs, ys = mnist_like(max(4096, args.batch))
    m = MLP([784, 1024, 1024, 10], dev)
    ranks = Ranks(opt.SGD(lr=args.lr, momentum=args.momentum), args.dist, dev, shard=args.shard)
    mine = ranks.rows(args.batch)  # this rank's rows of each global batch
    ranks.broadcast(m.get_params().values())
    m.set_optimizer(ranks.optimizer)
    x = tensor.from_numpy(xs[:args.batch][mine], dev)
    y = tensor.from_numpy(ys[:args.batch][mine], dev)
    m.compile([x], is_train=True, use_graph=args.graph, sequential=not args.parallel)
    ranks.print(f"mlp: 784-1024-1024-10, SGD lr {args.lr} momentum {args.momentum}, batch {args.batch}, "
          f"{args.steps} steps, {'graph' if args.graph else 'eager'}" + (f", {ranks.world} ranks" if args.dist else ""))

    bar = ProgressBar(args.steps) if ranks.root else None
    times, losses = [], []
    n = xs.shape[0]
    for step in range(args.steps):
        lo = (step * args.batch) % (n - args.batch + 1)
        t0 = time.perf_counter()
        x.copy_from_numpy(xs[lo:lo + args.batch][mine])
        y.copy_from_numpy(ys[lo:lo + args.batch][mine])
        out, loss = m.train_one_batch(x, y)
        value = ranks.mean(loss.item())  # synchronises; the global batch's loss
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(value)
        if bar:
            bar.update(step + 1, loss=value, ms=f"{times[-1]:.2f}")
    ranks.check_same_parameters(m.get_params().values())
    timed = times[2:] if len(times) > 2 else times  # leave out capture and warm-up
    ranks.print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}; median {median(timed):.2f} ms/step")
    if args.graph:
        ranks.print(m.graph().summary())
    if args.json:
        ranks.print(json.dumps({"model": "mlp-784-1024-1024-10", "mode": "graph" if args.graph else "eager",
                                "batch": args.batch, "ranks": ranks.world, "steps": args.steps,
                                "ms_per_step_median": median(timed), "first_loss": losses[0],
                                "last_loss": losses[-1], "optimizer_state_bytes": ranks.optimizer.state_bytes}))


if __name__ == "__main__":
    main()
