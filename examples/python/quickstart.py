"""Quick start: a small MLP trained as a graph on numpy data, after `pip install .`.

    python -m venv venv && venv/bin/pip install <loom's repository>     (or a wheel from tools/wheel.sh)
    venv/bin/python examples/python/quickstart.py [--steps 40]

The data: 512 points in the plane, labelled by which side of the circle of radius 1 they lie
on; a 2-32-32-2 ReLU MLP learns the boundary with SGD and momentum. model.compile(...,
use_graph=True) makes the first train_one_batch a capture: its ops (forward, backward, the SGD
update) are recorded, and every later call replays them from C++ on the values copied into the
same input tensors. Prints the loss before and after and exits non-zero unless it fell by half.
tools/test.sh package runs it in a fresh virtualenv.
"""
import argparse

import numpy as np

from loom import autograd, device, layer, model, opt, tensor


class MLP(model.Model):
    def __init__(self, dev):
        super().__init__()
        self.net = layer.Sequential(layer.Linear(2, 32, device=dev), layer.ReLU(),
                                    layer.Linear(32, 32, device=dev), layer.ReLU(),
                                    layer.Linear(32, 2, device=dev))

    def forward(self, x):
        return self.net(x)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)  # backward and the SGD update, captured with the forward
        return out, loss


def circle_data(n, rng):
    """n points in [-2, 2)^2 and their one-hot labels: inside the unit circle or not."""
    xs = rng.uniform(-2, 2, size=(n, 2)).astype(np.float32)
    inside = (xs ** 2).sum(axis=1) < 1.0
    ys = np.zeros((n, 2), dtype=np.float32)
    ys[np.arange(n), inside.astype(int)] = 1
    return xs, ys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    if args.steps < 6 or args.batch < 1:
        ap.error("--steps must be at least 6 (the first 3 losses are compared with the last 3), --batch positive")

    rng = np.random.default_rng(0)
    xs, ys = circle_data(512, rng)
    dev = device.create_cpu_device()
    dev.SetRandSeed(0)
    m = MLP(dev)
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    x = tensor.from_numpy(xs[:args.batch], dev)  # the step's inputs: refilled before each step
    y = tensor.from_numpy(ys[:args.batch], dev)
    m.compile([x], is_train=True, use_graph=True)

    losses = []
    for step in range(args.steps):
        lo = (step * args.batch) % len(xs)
        x.copy_from_numpy(xs[lo:lo + args.batch])
        y.copy_from_numpy(ys[lo:lo + args.batch])
        _, loss = m.train_one_batch(x, y)  # step 0 captures the graph, later steps replay it
        losses.append(loss.item())
    first = float(np.mean(losses[:3]))
    last = float(np.mean(losses[-3:]))
    print(f"quickstart: loss {first:.4f} -> {last:.4f} over {args.steps} steps (mean of 3, graph replay)")
    print(m.graph().summary())
    if not last < 0.5 * first:
        raise SystemExit(f"quickstart: the loss did not fall by half ({first:.4f} -> {last:.4f})")


if __name__ == "__main__":
    main()
