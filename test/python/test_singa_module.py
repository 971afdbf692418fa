"""loom.module: SINGA 3.0's Module (issue 17). Graph mode captures forward, loss and optim at
their first calls and replays them on every later model(x); the numbers are checked against a
numpy reference of the same SGD steps, and against the eager module."""
import numpy as np
import pytest

import loom
from loom import autograd, module, opt, tensor
from loom.tensor import Tensor

RNG = np.random.default_rng(30)
X1 = RNG.normal(size=(8, 3)).astype(np.float32)
X2 = RNG.normal(size=(8, 3)).astype(np.float32)
T = np.eye(2, dtype=np.float32)[RNG.integers(0, 2, 8)]
W0 = RNG.normal(scale=0.5, size=(3, 2)).astype(np.float32)


class Tiny(module.Module):
    def __init__(self, dev):
        super().__init__()
        self.w = Tensor(data=W0, device=dev, requires_grad=True)
        self.b = Tensor(data=np.zeros(2, np.float32), device=dev, requires_grad=True)
        self.sgd = opt.SGD(lr=0.1)

    def forward(self, x):
        return autograd.add_bias(autograd.matmul(x, self.w), self.b)

    def loss(self, out, t):
        return autograd.softmax_cross_entropy(out, t)

    def optim(self, loss):
        self.sgd.backward_and_update(loss)


def reference_steps(xs):
    w, b = W0.astype(np.float64), np.zeros(2)
    outs, losses = [], []
    for x in xs:
        z = x @ w + b
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        outs.append(z)
        losses.append(-np.mean(np.log((p * T).sum(1))))
        dz = (p - T) / len(x)
        w, b = w - 0.1 * x.T @ dz, b - 0.1 * dz.sum(0)
    return outs, losses, w, b


@pytest.mark.parametrize("graph", [True, False])
def test_two_steps_match_numpy(dev, graph):
    m = Tiny(dev).on_device(dev).graph(graph, True)
    m.train()
    x, t = tensor.from_numpy(X1, dev), tensor.from_numpy(T, dev)
    ref_outs, ref_losses, w, b = reference_steps([X1, X2])
    out = m(x)
    loss = m.loss(out, t)
    m.optim(loss)
    np.testing.assert_allclose(out.to_numpy(), ref_outs[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss.to_numpy().item(), ref_losses[0], rtol=1e-5)
    x.copy_from_numpy(X2)  # the second batch: fed into the captured input
    out = m(x)
    loss = m.loss(out, t)
    m.optim(loss)
    np.testing.assert_allclose(out.to_numpy(), ref_outs[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss.to_numpy().item(), ref_losses[1], rtol=1e-5)
    np.testing.assert_allclose(m.w.to_numpy(), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.b.to_numpy(), b, rtol=1e-5, atol=1e-6)


def test_graph_mode_is_fixed_once_captured(dev):
    m = Tiny(dev).on_device(dev)
    m(tensor.from_numpy(X1, dev))
    with pytest.raises(loom.GraphError, match=r"\[Tiny\] graph\(\): the step is captured already"):
        m.graph(False)
