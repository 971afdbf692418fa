"""SINGA's autograd.Operator protocol (issue 17 item 2): operators written in Python with forward
and backward on loom Tensors join loom's autograd (Note [External ops]); their gradients are
checked against numpy, in eager mode and inside captured, replayed steps."""
import numpy as np
import pytest

import loom
from loom import autograd, layer, model, opt, tensor

RNG = np.random.default_rng(2)


class Cube(autograd.Operator):
    calls = 0

    def forward(self, x):
        self.x = x
        return autograd.mul(autograd.mul(x, x), x)

    def backward(self, dy):
        Cube.calls += 1
        return autograd.mul(autograd.mul_scalar(autograd.mul(self.x, self.x), 3.0), dy)


class ScaledProduct(autograd.Operator):
    """(a, b) -> 2 a b; b gets no gradient (None), as a SINGA operator may say."""

    def forward(self, a, b):
        self.a, self.b = a, b
        return autograd.mul_scalar(autograd.mul(a, b), 2.0)

    def backward(self, dy):
        return autograd.mul_scalar(autograd.mul(dy, self.b), 2.0), None


class Halves(autograd.Operator):
    """x (N, 2k) -> (x[:, :k], x[:, k:]): two outputs."""

    def forward(self, x):
        k = x.shape[1] // 2
        return autograd.slice(x, 1, 0, k), autograd.slice(x, 1, k, x.shape[1])

    def backward(self, da, db):
        return autograd.cat([da, db], 1)


def test_operator_forward_and_backward_against_numpy(dev):
    a = RNG.normal(size=(3, 4)).astype(np.float32)
    x = tensor.from_numpy(a, dev, requires_grad=True)
    out = Cube()(x)
    assert isinstance(out, tuple) and len(out) == 1
    y, = out
    np.testing.assert_allclose(y.to_numpy(), a ** 3, rtol=1e-6)
    assert isinstance(y.creator, Cube) and x.creator is None
    g = RNG.normal(size=(3, 4)).astype(np.float32)
    (p, dx), = autograd.backward(y, tensor.from_numpy(g, dev))
    np.testing.assert_allclose(dx.to_numpy(), 3 * a ** 2 * g, rtol=1e-5)
    assert not autograd._pending


def test_operator_between_parameters(dev):
    """W -> matmul -> Cube -> matmul V -> loss: gradients of both parameters through the operator."""
    xa = RNG.normal(size=(5, 3)).astype(np.float32)
    wa = RNG.normal(size=(3, 4)).astype(np.float32) * 0.5
    va = RNG.normal(size=(4, 2)).astype(np.float32) * 0.5
    W = tensor.from_numpy(wa, dev, requires_grad=True)
    V = tensor.from_numpy(va, dev, requires_grad=True)
    h = autograd.matmul(tensor.from_numpy(xa, dev), W)
    c, = Cube()(h)
    loss = autograd.sum(autograd.matmul(c, V))
    grads = {p._block_id(): g.to_numpy() for p, g in autograd.backward(loss)}
    h64 = xa.astype(np.float64) @ wa
    dc = np.ones((5, 2)) @ va.T.astype(np.float64)
    np.testing.assert_allclose(grads[V._block_id()], (h64 ** 3).T @ np.ones((5, 2)), rtol=1e-4)
    np.testing.assert_allclose(grads[W._block_id()], xa.T @ (3 * h64 ** 2 * dc), rtol=1e-4, atol=1e-5)


def test_operator_with_two_inputs_and_a_none_gradient(dev):
    a = RNG.normal(size=(4,)).astype(np.float32)
    b = RNG.normal(size=(4,)).astype(np.float32)
    ta = tensor.from_numpy(a, dev, requires_grad=True)
    tb = tensor.from_numpy(b, dev, requires_grad=True)
    y, = ScaledProduct()(ta, tb)
    np.testing.assert_allclose(y.to_numpy(), 2 * a * b, rtol=1e-6)
    grads = {p._block_id(): g.to_numpy() for p, g in autograd.backward(autograd.sum(y))}
    np.testing.assert_allclose(grads[ta._block_id()], 2 * b, rtol=1e-6)
    assert tb._block_id() not in grads


def test_operator_with_two_outputs(dev):
    a = RNG.normal(size=(2, 6)).astype(np.float32)
    x = tensor.from_numpy(a, dev, requires_grad=True)
    lo, hi = Halves()(x)
    np.testing.assert_array_equal(lo.to_numpy(), a[:, :3])
    np.testing.assert_array_equal(hi.to_numpy(), a[:, 3:])
    loss = autograd.add(autograd.sum(autograd.mul_scalar(lo, 2.0)), autograd.sum(autograd.mul_scalar(hi, 3.0)))
    (_, dx), = autograd.backward(loss)
    np.testing.assert_allclose(dx.to_numpy(), np.repeat([[2.0] * 3 + [3.0] * 3], 2, 0))
    assert not autograd._pending


def test_no_history_without_training_or_gradients(dev):
    a = RNG.normal(size=(3,)).astype(np.float32)
    x = tensor.from_numpy(a, dev, requires_grad=True)
    y, = Cube()(tensor.from_numpy(a, dev))  # no input requires a gradient
    assert not y.requires_grad and not autograd._pending
    with autograd.no_grad():
        y, = Cube()(x)
    assert not y.requires_grad and not autograd._pending
    autograd.training = False
    try:
        y, = Cube()(x)
        assert not y.requires_grad and not autograd._pending
    finally:
        autograd.training = True
    np.testing.assert_allclose(y.to_numpy(), a ** 3, rtol=1e-6)


def test_bad_operators_raise_typed_errors(dev):
    x = tensor.from_numpy(np.ones((2, 3), np.float32), dev, requires_grad=True)

    class WrongShape(Cube):
        def backward(self, dy):
            return autograd.sum(dy, 0)

    class WrongCount(Cube):
        def backward(self, dy):
            return dy, dy

    class NotATensor(autograd.Operator):
        def forward(self, x):
            return x.to_numpy()

    y, = WrongShape()(x)
    with pytest.raises(loom.ShapeError, match=r"\[WrongShape\] backward's gradient 0 is float32 \(3,\).* input 0 is "
                                              r"float32 \(2, 3\)"):
        autograd.backward(autograd.sum(y))
    y, = WrongCount()(x)
    with pytest.raises(loom.ValueError, match=r"\[WrongCount\] backward returned 2 gradients for 1 inputs"):
        autograd.backward(autograd.sum(y))
    with pytest.raises(loom.TypeError, match=r"\[NotATensor\] forward's output 0 is a ndarray"):
        NotATensor()(x)
    with pytest.raises(loom.TypeError, match=r"\[Cube\] input 0 is a ndarray"):
        Cube()(np.ones(3))
    autograd._pending.clear()


class OperatorMLP(model.Model):
    def __init__(self):
        super().__init__()
        self.fc1 = layer.Linear(6, 8)
        self.fc2 = layer.Linear(8, 3)

    def forward(self, x):
        h, = Cube()(autograd.mul_scalar(self.fc1(x), 0.5))
        return self.fc2(h)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def train(dev, use_graph, steps=5):
    dev.SetRandSeed(3)
    rng = np.random.default_rng(1)
    m = OperatorMLP()
    m.set_optimizer(opt.SGD(0.05, 0.9))
    tx, ty = tensor.Tensor((8, 6), dev), tensor.Tensor((8,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=use_graph, sequential=True)
    losses = []
    for _ in range(steps):
        tx.copy_from_numpy(rng.normal(size=(8, 6)).astype(np.float32))
        ty.copy_from_numpy(rng.integers(0, 3, 8).astype(np.int32))
        _, loss = m(tx, ty)
        losses.append(loss.item())
    return losses


def test_operator_in_a_captured_step_replays_without_python(dev):
    Cube.calls = 0
    eager = train(dev, False)
    assert Cube.calls == 5
    Cube.calls = 0
    graph = train(dev, True)
    assert Cube.calls == 1  # the capture; replays run the recorded ops
    assert graph == pytest.approx(eager, rel=1e-5)
    assert eager[-1] != eager[0]
    assert not autograd._pending


def test_host_read_inside_an_operator_fails_at_capture(dev):
    class Peek(Cube):
        def forward(self, x):
            x.to_numpy()
            return super().forward(x)

    x = tensor.from_numpy(np.ones((2, 2), np.float32), dev, requires_grad=True)
    dev.EnableGraph(True)
    try:
        with pytest.raises(loom.GraphError):
            Peek()(x)
    finally:
        dev.EnableGraph(False)
