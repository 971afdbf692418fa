#!/usr/bin/python3
"""An MLP written the way SINGA's Python examples are: layers sized by their outputs only
(layer.Linear(out)), placeholder inputs given to Model.compile, opt.SGD with SINGA's positional
arguments, and model(x, y) for a training step (train_one_batch) and model(x) in eval mode.
It classifies points of a synthetic, separable three-class problem and prints the losses; the
same script runs eagerly (--eager) or captured once and replayed (--graph, the default), with
the same losses.

    /usr/bin/python3 examples/singa_style/mlp.py [--graph | --eager] [--steps 40] [--batch 32] [--json]
"""
import numpy as np

import cli

from loom import autograd, device, layer, model, opt, tensor


class MLP(model.Model):
    def __init__(self, hidden=32, classes=3):
        super().__init__()
        self.fc1 = layer.Linear(hidden)  # the input size comes from the first batch
        self.relu = layer.ReLU()
        self.fc2 = layer.Linear(classes)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def make_data(n, seed=0):
    """n points in 2-D around three centres, with their class labels."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 2.0], [-2.0, -1.0], [2.0, -1.0]], np.float32)
    labels = rng.integers(0, 3, n).astype(np.int32)
    points = centres[labels] + rng.normal(scale=1.0, size=(n, 2)).astype(np.float32)
    return points, labels


def main():
    args = cli.parse(cli.parser(__doc__, steps=40, batch=32))

    dev = device.create_cpu_device()
    dev.SetRandSeed(0)
    xs, ys = make_data(args.batch * args.steps)
    tx = tensor.Tensor((args.batch, 2), dev, tensor.float32)  # placeholders, filled every step
    ty = tensor.Tensor((args.batch,), dev, tensor.int32)

    m = MLP()
    m.set_optimizer(opt.SGD(0.1, 0.9, 0.0, 1e-4))  # lr, momentum, dampening, weight_decay
    m.compile([tx], is_train=True, use_graph=args.graph, sequential=True)

    losses = []
    for step in range(args.steps):
        lo = step * args.batch
        tx.copy_from_numpy(xs[lo:lo + args.batch])
        ty.copy_from_numpy(ys[lo:lo + args.batch])
        _, loss = m(tx, ty)  # training mode: train_one_batch
        losses.append(loss.item())
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step + 1}/{args.steps} loss {losses[-1]:.4f}")

    m.eval()
    test_x, test_y = make_data(512, seed=1)
    with autograd.no_grad():
        pred = m(tensor.from_numpy(test_x, dev)).to_numpy().argmax(1)  # eval mode: forward
    accuracy = float((pred == test_y).mean())
    cli.report(args, losses, accuracy)


if __name__ == "__main__":
    main()
