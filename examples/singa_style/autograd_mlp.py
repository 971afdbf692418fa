#!/usr/bin/python3
"""An autograd-level script written the way SINGA's first examples are: parameters are tensors
made by hand (tensor.Tensor + initializer), the network is autograd.matmul / add_bias / relu
calls, the loss is autograd.softmax_cross_entropy, and opt.SGD.apply(param_name, param_value,
param_grad) updates each parameter. In graph mode (the default) one iteration is buffered with
dev.SetBufferFlag(True) ... SetBufferFlag(False) and then replayed with dev.ExecBuffOps(); --eager
runs every iteration op by op. Both print the same losses. The data: points of two interleaved
spirals, new ones every step (copied into the buffered input tensors).

    /usr/bin/python3 examples/singa_style/autograd_mlp.py [--graph | --eager] [--steps 300] [--json]
"""
import numpy as np

import cli

from loom import autograd, device, initializer, opt, tensor


def spirals(n, rng):
    """n points of two spirals (classes 0 and 1) with a little noise."""
    labels = rng.integers(0, 2, n)
    r = rng.uniform(0.2, 1.0, n)
    angle = 3.0 * np.pi * r + np.pi * labels
    points = np.stack([r * np.cos(angle), r * np.sin(angle)], 1) + rng.normal(scale=0.03, size=(n, 2))
    return points.astype(np.float32), labels.astype(np.int32)


def main():
    args = cli.parse(cli.parser(__doc__, steps=300, batch=64))

    dev = device.create_cpu_device()
    dev.SetRandSeed(0)
    hidden = 64
    params = {}
    for name, shape in (("w0", (2, hidden)), ("w1", (hidden, hidden)), ("w2", (hidden, 2))):
        w = tensor.Tensor(shape, dev, requires_grad=True, stores_grad=True)
        initializer.he_normal(w)
        params[name] = w
    for name, size in (("b0", hidden), ("b1", hidden), ("b2", 2)):
        b = tensor.Tensor((size,), dev, requires_grad=True, stores_grad=True)
        b.set_value(0.0)
        params[name] = b
    for name, p in params.items():
        p.name = name
    sgd = opt.SGD(0.1, 0.9)

    x = tensor.Tensor((args.batch, 2), dev)                   # the inputs every step writes
    target = tensor.Tensor((args.batch,), dev, tensor.int32)

    def step():
        h = autograd.relu(autograd.add_bias(autograd.matmul(x, params["w0"]), params["b0"]))
        h = autograd.relu(autograd.add_bias(autograd.matmul(h, params["w1"]), params["b1"]))
        out = autograd.add_bias(autograd.matmul(h, params["w2"]), params["b2"])
        loss = autograd.softmax_cross_entropy(out, target)
        for p, g in autograd.backward(loss):
            sgd.apply(p.name, p, g)
        return loss

    rng = np.random.default_rng(0)
    batches = [spirals(args.batch, rng) for _ in range(args.steps)]
    losses = []
    if args.graph:
        x.copy_from_numpy(batches[0][0])
        target.copy_from_numpy(batches[0][1])
        dev.SetBufferFlag(True)   # buffer one iteration: nothing runs
        loss = step()
        dev.SetBufferFlag(False)
    for i, (bx, by) in enumerate(batches):
        x.copy_from_numpy(bx)
        target.copy_from_numpy(by)
        if args.graph:
            dev.ExecBuffOps()     # replay the buffered iteration on the new batch
        else:
            loss = step()
        losses.append(loss.item())
        if i % 50 == 0 or i == args.steps - 1:
            print(f"step {i + 1}/{args.steps} loss {losses[-1]:.4f}")

    test_x, test_y = spirals(1000, np.random.default_rng(1))
    with autograd.no_grad():
        t = tensor.from_numpy(test_x, dev)
        h = autograd.relu(autograd.add_bias(autograd.matmul(t, params["w0"]), params["b0"]))
        h = autograd.relu(autograd.add_bias(autograd.matmul(h, params["w1"]), params["b1"]))
        out = autograd.add_bias(autograd.matmul(h, params["w2"]), params["b2"])
    accuracy = float((out.to_numpy().argmax(1) == test_y).mean())
    cli.report(args, losses, accuracy)


if __name__ == "__main__":
    main()
