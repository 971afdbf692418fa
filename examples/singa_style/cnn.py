#!/usr/bin/python3
"""A CNN written the way SINGA's Python examples are, trained on real handwritten digits (the
4,000 training and 1,000 held-out MNIST digits that tools/setup.sh puts in data/digits):
layer.Conv2d(nb_kernels, kernel_size, padding=...) and layer.BatchNorm2d() sized by their first
input, layer.MaxPool2d, layer.Flatten, layer.Linear(out), the layer.SoftMaxCrossEntropy loss
(shape (1,), as SINGA's), opt.SGD in SINGA's positional order, placeholder inputs given to
Model.compile, model(x, y) for a training step and model(x) in eval mode. The same script runs
eagerly (--eager) or captured once and replayed (--graph, the default), with the same losses.

    /usr/bin/python3 examples/singa_style/cnn.py [--graph | --eager] [--epochs 3] [--batch 50]
                                                 [--data DIR] [--json]
"""
import os

import numpy as np

import cli

from loom import autograd, device, io, layer, model, opt, tensor


class CNN(model.Model):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = layer.Conv2d(8, 3, padding=1)  # input channels: from the first batch
        self.bn1 = layer.BatchNorm2d()
        self.relu1 = layer.ReLU()
        self.pool1 = layer.MaxPool2d(2)
        self.conv2 = layer.Conv2d(16, 3, padding=1, activation="RELU")
        self.pool2 = layer.MaxPool2d(2)
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(classes)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        x = self.pool1(self.relu1(self.bn1(self.conv1(x))))
        x = self.pool2(self.conv2(x))
        return self.fc(self.flatten(x))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def load(directory, train):
    """float32 images (N, 1, 28, 28) scaled to [0, 1] and standardised, int32 labels."""
    d = io.load_mnist_dir(directory, train=train)
    x = d.images().astype(np.float32) / 255.0
    return (x - 0.1307) / 0.3081, d.labels().astype(np.int32)


def main():
    ap = cli.parser(__doc__, epochs=3, batch=50)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--data", default=os.path.join(os.environ.get("LOOM_DATA_DIR") or os.path.join(root, "data"),
                                                   "digits"), help="the digits' directory (tools/setup.sh makes it)")
    args = cli.parse(ap)
    if not os.path.isdir(args.data):
        ap.error(f"no digits in {args.data}: run tools/setup.sh (or give --data)")

    dev = device.create_cpu_device()
    dev.SetRandSeed(0)
    train_x, train_y = load(args.data, True)
    test_x, test_y = load(args.data, False)
    tx = tensor.Tensor((args.batch, 1, 28, 28), dev, tensor.float32)  # placeholders, filled every step
    ty = tensor.Tensor((args.batch,), dev, tensor.int32)

    m = CNN()
    m.set_optimizer(opt.SGD(0.02, 0.9, 0.0, 5e-4))  # lr, momentum, dampening, weight_decay
    m.compile([tx], is_train=True, use_graph=args.graph, sequential=True)

    rng = np.random.default_rng(0)
    steps = len(train_x) // args.batch  # the last, partial batch is dropped: one graph
    losses = []
    for epoch in range(args.epochs):
        order = rng.permutation(len(train_x))
        for step in range(steps):
            idx = order[step * args.batch:(step + 1) * args.batch]
            tx.copy_from_numpy(train_x[idx])
            ty.copy_from_numpy(train_y[idx])
            _, loss = m(tx, ty)  # training mode: train_one_batch
            losses.append(float(loss.to_numpy()[0]))
            if step % 20 == 0 or step == steps - 1:
                print(f"epoch {epoch + 1} step {step + 1}/{steps} loss {losses[-1]:.4f}")

    m.eval()
    correct = 0
    with autograd.no_grad():
        for lo in range(0, len(test_x), 500):
            out = m(tensor.from_numpy(test_x[lo:lo + 500], dev))  # eval mode: forward
            correct += int((out.to_numpy().argmax(1) == test_y[lo:lo + 500]).sum())
    accuracy = correct / len(test_x)
    cli.report(args, losses, accuracy, "held-out accuracy", f"{len(test_x)} digits")


if __name__ == "__main__":
    main()
