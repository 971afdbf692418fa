"""An autograd.Operator with several outputs has its backward called once, with the gradients of
all outputs (SINGA's backward(*dys) -> dxs), in eager and graph mode (Note [Operators with several
outputs] in loom/autograd.py). Gradients are checked against a hand computation."""
import numpy as np
import pytest

import loom
from loom import autograd, tensor

RNG = np.random.default_rng(41)


class ProductAndSquare(autograd.Operator):
    """(x, w) -> (u = x * w, v = x * x): two outputs of different shapes from one backward.

    du/dx = w, du/dw = x, dv/dx = 2 x, so dx = du w + 2 dv x and dw = sum over rows of du x.
    Backward needs du and dv together: called with one of them zero, it still runs (that is the
    point of the count)."""
    calls = 0
    seen = []

    def forward(self, x, w):
        self.x, self.w = x, w
        return autograd.mul(x, w), autograd.reshape(autograd.mul(x, x), (-1,))

    def backward(self, du, dv):
        type(self).calls += 1
        type(self).seen.append((tuple(du.shape), tuple(dv.shape)))
        dv = autograd.reshape(dv, self.x.shape)
        dx = autograd.add(autograd.mul(du, self.w), autograd.mul_scalar(autograd.mul(dv, self.x), 2.0))
        dw = autograd.sum(autograd.mul(du, self.x), 0, True)
        return dx, dw


def reset():
    ProductAndSquare.calls = 0
    ProductAndSquare.seen = []


def hand(a, b, gu, gv):
    """The gradients of sum(u * gu) + sum(v * gv) by hand."""
    return gu * b + 2 * gv.reshape(a.shape) * a, (gu * a).sum(axis=0, keepdims=True)


def call(dev, rows, cols):
    """A fresh count, inputs x (rows, cols) and w (1, cols), and the operator's two outputs."""
    reset()
    a, b = RNG.normal(size=(rows, cols)), RNG.normal(size=(1, cols))
    u, v = ProductAndSquare()(tensor.from_numpy(a, dev, requires_grad=True),
                              tensor.from_numpy(b, dev, requires_grad=True))
    return a, b, u, v


def test_backward_once_with_both_gradients(dev):
    a, b, u, v = call(dev, 3, 4)
    assert u.shape == (3, 4) and v.shape == (12,)
    np.testing.assert_allclose(u.to_numpy(), a * b)
    np.testing.assert_allclose(v.to_numpy(), (a * a).ravel())
    assert u.creator is v.creator
    gu, gv = RNG.normal(size=(3, 4)), RNG.normal(size=(12,))
    loss = autograd.add(autograd.sum(autograd.mul(u, tensor.from_numpy(gu, dev))),
                        autograd.sum(autograd.mul(v, tensor.from_numpy(gv, dev))))
    grads = {p.shape: g.to_numpy() for p, g in autograd.backward(loss)}
    assert ProductAndSquare.calls == 1
    assert ProductAndSquare.seen == [((3, 4), (12,))]
    want_x, want_w = hand(a, b, gu, gv)
    np.testing.assert_allclose(grads[(3, 4)], want_x, rtol=1e-12)
    np.testing.assert_allclose(grads[(1, 4)], want_w, rtol=1e-12)
    assert not autograd._pending


def test_an_output_without_gradient_gets_zeros_in_the_one_call(dev):
    a, b, u, v = call(dev, 2, 3)
    grads = {p.shape: g.to_numpy() for p, g in autograd.backward(autograd.sum(v))}  # u unused
    assert ProductAndSquare.calls == 1
    want_x, want_w = hand(a, b, np.zeros((2, 3)), np.ones(6))
    np.testing.assert_allclose(grads[(2, 3)], want_x, rtol=1e-12)
    np.testing.assert_allclose(grads[(1, 3)], want_w, rtol=1e-12)
    assert not autograd._pending


def test_graph_mode_calls_backward_once_at_capture_and_replays_as_eager(dev):
    a, b = RNG.normal(size=(4, 3)).astype(np.float32), RNG.normal(size=(1, 3)).astype(np.float32)

    def make():
        x = tensor.from_numpy(a, dev)
        w = tensor.from_numpy(b, dev, requires_grad=True)
        x.requires_grad = True
        sgd = loom.opt.SGD(0.05)

        def step():
            u, v = ProductAndSquare()(x, w)
            loss = autograd.add(autograd.mean(autograd.mul(u, u)), autograd.mean(v))
            for p, g in autograd.backward(loss):
                sgd.apply(0, g, p, "")
            return loss
        return w, step

    reset()
    w_e, step_e = make()
    eager = [step_e().item() for _ in range(4)]
    assert ProductAndSquare.calls == 4
    reset()
    w_g, step_g = make()
    with dev.buffer():
        loss = step_g()
    assert ProductAndSquare.calls == 1
    graph = []
    for _ in range(4):
        dev.RunGraph(True)
        graph.append(loss.item())
    assert ProductAndSquare.calls == 1  # replays run the recorded ops, no Python
    assert graph == pytest.approx(eager, rel=1e-6)
    np.testing.assert_allclose(w_g.to_numpy(), w_e.to_numpy(), rtol=1e-6)
    assert eager[-1] != eager[0]


def test_non_float_output_and_mixed_float_dtypes(dev):
    class ValueAndIndex(autograd.Operator):
        def forward(self, x):
            self.shape = x.shape
            return autograd.mul_scalar(x, 3.0), autograd.cast(x, "int32")

        def backward(self, dy, dindex):
            assert dindex.dtype == "int32" and not dindex.to_numpy().any()
            return autograd.mul_scalar(dy, 3.0)

    x = tensor.from_numpy(np.ones((2, 2), np.float32), dev, requires_grad=True)
    y, i = ValueAndIndex()(x)
    assert not i.requires_grad
    (_, g), = autograd.backward(autograd.sum(y))
    np.testing.assert_array_equal(g.to_numpy(), np.full((2, 2), 3.0, np.float32))

    class Mixed(autograd.Operator):
        def forward(self, x):
            return x, autograd.cast(x, "float64")

    with pytest.raises(loom.DTypeError, match=r"\[Mixed\] the floating-point outputs .* share one dtype"):
        Mixed()(x)
