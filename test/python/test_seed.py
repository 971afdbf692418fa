"""The seed example: SINGA's graph-mode MLP program runs as written and its 1001 replays train,
bitwise equal to 1001 eager iterations of the same code (docs/design.md invariant 5)."""
import subprocess
import sys

import numpy as np

from conftest import python_env
from loom import autograd, opt
from loom.tensor import Tensor


def make_problem(dev, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, 400)
    y = 5 * x + 1 + 2 * rng.normal(size=400)
    data = np.stack([x, y], axis=1).astype(np.float32)
    label = np.eye(2, dtype=np.float32)[(5 * x + 1 > y).astype(int)]
    dev.SetRandSeed(seed)
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
    sgd = opt.SGD(0.05)
    return inputs, target, w0, b0, w1, b1, sgd


def eager_loss(inputs, target, w0, b0, w1, b1):
    with autograd.no_grad():
        h = autograd.relu(autograd.add_bias(autograd.matmul(inputs, w0), b0))
        return autograd.softmax_cross_entropy(autograd.add_bias(autograd.matmul(h, w1), b1), target).item()


def test_seed_program_runs_as_written_and_trains(dev):
    inputs, target, w0, b0, w1, b1, sgd = make_problem(dev)
    before = eager_loss(inputs, target, w0, b0, w1, b1)

    # ---- verbatim ----
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
    # ----

    after = eager_loss(inputs, target, w0, b0, w1, b1)
    assert loss.item() < 0.5 * before
    assert after < 0.5 * before
    assert dev.graph().stats()["replays"] == 1001


def test_seed_replays_equal_eager_iterations_bitwise(dev):
    params_e = make_problem(dev)
    inputs, target, w0, b0, w1, b1, sgd = params_e
    for _ in range(1001):
        x = autograd.add_bias(autograd.matmul(autograd.relu(autograd.add_bias(autograd.matmul(inputs, w0), b0)), w1), b1)
        loss_e = autograd.softmax_cross_entropy(x, target)
        for p, gp in autograd.backward(loss_e):
            sgd.apply(0, gp, p, "")
    params_g = make_problem(dev)
    inputs, target, w0, b0, w1, b1, sgd = params_g
    dev.SetBufferFlag(True)
    x = autograd.add_bias(autograd.matmul(autograd.relu(autograd.add_bias(autograd.matmul(inputs, w0), b0)), w1), b1)
    loss_g = autograd.softmax_cross_entropy(x, target)
    for p, gp in autograd.backward(loss_g):
        sgd.apply(0, gp, p, "")
    dev.SetBufferFlag(False)
    for _ in range(1001):
        dev.ExecBuffOps()
    assert loss_g.to_numpy().tobytes() == loss_e.to_numpy().tobytes()
    for a, b in zip(params_e[2:6], params_g[2:6]):
        assert a.to_numpy().tobytes() == b.to_numpy().tobytes()


def test_seed_example_script(root):
    r = subprocess.run([sys.executable, f"{root}/examples/python/seed_mlp.py"], capture_output=True, text=True,
                       env=python_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    before = float(lines[0].split(":")[1])
    after = float(lines[1].split(":")[1].split()[0])
    assert after < 0.5 * before
