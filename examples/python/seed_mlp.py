#!/usr/bin/python3
"""The seed example: SINGA's autograd MLP in graph (buffer) mode, as written in the SINGA pull
request that introduced it. One training step -- forward, backward, SGD update -- is buffered
once, then replayed 1001 times from C++ (dev.ExecBuffOps()), with no Python per op.

The data: 400 points (x, y) around the curve y = 5x + 1, labelled by which side they are on
(one-hot, two classes). A 2-3-2 MLP learns the boundary; the loss falls from ln 2 = 0.69.

    /usr/bin/python3 examples/python/seed_mlp.py [--seed N] [--dist]

--dist trains data-parallel over the ranks of `python3 -m loom.launch -n N`: each rank holds its
share of the 400 points, the optimizer is opt.DistOpt(opt.SGD(0.05)), and the losses printed are
the means over ranks: the same full-batch training as one rank.
"""
import argparse

import numpy as np
from common import Ranks

from loom import autograd, device, opt, tensor
from loom.tensor import Tensor


def to_categorical(y, num_classes):
    y = np.asarray(y, dtype=int)
    out = np.zeros((y.shape[0], num_classes), dtype=np.float32)
    out[np.arange(y.shape[0]), y] = 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dist", action="store_true", help="data-parallel over the ranks of python3 -m loom.launch")
    args = ap.parse_args()
    np.random.seed(args.seed)

    # ---- data, as in SINGA's examples/autograd/mlp.py ----
    def f(x):
        return 5 * x + 1

    x = np.random.uniform(-1, 1, 400)
    y = f(x) + 2 * np.random.randn(len(x))
    label = np.asarray([5 * a + 1 > b for (a, b) in zip(x, y)])
    data = np.array([[a, b] for (a, b) in zip(x, y)], dtype=np.float32)
    label = to_categorical(label, 2).astype(np.float32)

    # ---- inputs, target, parameters and optimizer, with loom's API ----
    dev = device.create_cpu_device()
    dev.SetRandSeed(args.seed)
    ranks = Ranks(opt.SGD(0.05), args.dist, dev)
    mine = ranks.rows(len(data))  # this rank's points
    data, label = data[mine], label[mine]
    inputs = Tensor(data=data, device=dev)
    target = Tensor(data=label, device=dev)
    w0 = Tensor(shape=(2, 3), device=dev, requires_grad=True, stores_grad=True)
    w0.gaussian(0.0, 0.1)
    b0 = Tensor(shape=(3,), device=dev, requires_grad=True, stores_grad=True)
    b0.set_value(0.0)
    w1 = Tensor(shape=(3, 2), device=dev, requires_grad=True, stores_grad=True)
    w1.gaussian(0.0, 0.1)
    b1 = Tensor(shape=(2,), device=dev, requires_grad=True, stores_grad=True)
    b1.set_value(0.0)
    sgd = ranks.optimizer
    ranks.broadcast([w0, b0, w1, b1])

    with autograd.no_grad():  # the loss before training, computed eagerly
        h = autograd.relu(autograd.add_bias(autograd.matmul(inputs, w0), b0))
        first = autograd.softmax_cross_entropy(autograd.add_bias(autograd.matmul(h, w1), b1), target).item()
    first = ranks.mean(first)
    ranks.print(f"loss before training: {first:.4f}")

    # ---- the program from the pull request, unchanged ----
    dev.SetBufferFlag(True)
    x = autograd.matmul(inputs, w0)
    x = autograd.add_bias(x, b0)
    x = autograd.relu(x)
    x = autograd.matmul(x, w1)
    x = autograd.add_bias(x, b1)
    loss = autograd.softmax_cross_entropy(x, target)
    for p, gp in autograd.backward(loss):
        sgd.apply(0, gp, p, "")
    dev.SetBufferFlag(False)
    for i in range(1001):
        dev.ExecBuffOps()

    # `loss` and `x` hold the values of the last replay.
    last = ranks.mean(loss.item())
    accuracy = ranks.mean(float(np.mean(np.argmax(x.to_numpy(), axis=1) == np.argmax(label, axis=1))))
    ranks.print(f"loss after 1001 replays: {last:.6f} (accuracy {accuracy:.3f})")
    ranks.print(dev.graph().summary())
    ranks.check_same_parameters([w0, b0, w1, b1])
    if not last < first:
        raise SystemExit(f"seed_mlp: the loss did not fall ({first:.4f} -> {last:.4f})")


if __name__ == "__main__":
    main()
