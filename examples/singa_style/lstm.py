#!/usr/bin/python3
"""An LSTM written the way SINGA's examples are: layer.LSTM(input_size, hidden_size) called on a
list of time steps and (h0, c0), a layer.Linear(out) on the last hidden state, opt.Adam in
SINGA's positional order, Model.compile with placeholder inputs and model(x, y) for a step. The
task: read a sequence of 12 numbers in [-1, 1] and tell whether their running sum ever goes above
1 (which needs memory of the whole sequence). Backward runs through time; --graph (the default)
captures the unrolled step once and replays it, --eager runs it op by op, with the same losses.

    /usr/bin/python3 examples/singa_style/lstm.py [--graph | --eager] [--steps 200] [--json]
"""
import numpy as np

import cli

from loom import autograd, device, layer, model, opt, tensor

SEQ, HIDDEN = 12, 24


class Classifier(model.Model):
    def __init__(self):
        super().__init__()
        self.lstm = layer.LSTM(1, HIDDEN)
        self.fc = layer.Linear(2)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x, h0, c0):
        steps = [autograd.reshape(s, (x.shape[0], 1)) for s in autograd.split(x, 1, None, SEQ)]
        _, h, _ = self.lstm(steps, (h0, c0))
        return self.fc(h)

    def train_one_batch(self, x, h0, c0, y):
        out = self.forward(x, h0, c0)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def make_data(n, rng):
    x = rng.uniform(-1, 1, size=(n, SEQ)).astype(np.float32)
    y = (np.cumsum(x, 1).max(1) > 1.0).astype(np.int32)
    return x, y


def main():
    args = cli.parse(cli.parser(__doc__, steps=200, batch=32))

    dev = device.create_cpu_device()
    dev.SetRandSeed(0)
    rng = np.random.default_rng(0)
    tx = tensor.Tensor((args.batch, SEQ), dev)  # placeholders, filled every step
    ty = tensor.Tensor((args.batch,), dev, tensor.int32)
    h0 = tensor.zeros((args.batch, HIDDEN), dev)
    c0 = tensor.zeros((args.batch, HIDDEN), dev)

    m = Classifier()
    m.set_optimizer(opt.Adam(0.01, 0.9, 0.999, 1e-8))  # lr, beta_1, beta_2, epsilon
    m.compile([tx, h0, c0], is_train=True, use_graph=args.graph, sequential=True)

    losses = []
    for step in range(args.steps):
        bx, by = make_data(args.batch, rng)
        tx.copy_from_numpy(bx)
        ty.copy_from_numpy(by)
        _, loss = m(tx, h0, c0, ty)  # training mode: train_one_batch
        losses.append(float(loss.to_numpy()[0]))
        if step % 40 == 0 or step == args.steps - 1:
            print(f"step {step + 1}/{args.steps} loss {losses[-1]:.4f}")

    m.eval()
    test_x, test_y = make_data(500, np.random.default_rng(1))
    zeros = tensor.zeros((500, HIDDEN), dev)
    with autograd.no_grad():
        pred = m(tensor.from_numpy(test_x, dev), zeros, zeros).to_numpy().argmax(1)  # eval mode: forward
    accuracy = float((pred == test_y).mean())
    majority = float(max(test_y.mean(), 1 - test_y.mean()))
    cli.report(args, losses, accuracy, note=f"majority class {majority:.3f}", majority=majority)


if __name__ == "__main__":
    main()
