"""SINGA's loss shape: every autograd loss, its class form and its loss layer return (1,), in
eager and in graph mode; backward from a (1,) loss gives the gradient a numpy reference gives,
and item() reads it (Note [Loss shape] in loom/autograd.py)."""
import numpy as np
import pytest

from loom import autograd, errors, layer, opt, tensor

RNG = np.random.default_rng(17)
X = RNG.normal(size=(4, 3))
P = 1.0 / (1.0 + np.exp(-X))  # probabilities, for the losses that take them
Q = np.exp(X) / np.exp(X).sum(axis=1, keepdims=True)
LABELS = np.array([0, 2, 1, 2], np.int32)
TARGET = RNG.normal(size=(4, 3))
BINARY = (RNG.random((4, 3)) > 0.5).astype(np.float64)


def _sce(x, t):
    q = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    return -np.log(q[np.arange(len(t)), t]).mean()


# name: (function, input, target, numpy loss of (input, target))
LOSSES = {
    "softmax_cross_entropy": (autograd.softmax_cross_entropy, X, LABELS, _sce),
    "mse_loss": (autograd.mse_loss, X, TARGET, lambda x, t: ((x - t) ** 2).mean()),
    "mse": (autograd.mse, X, TARGET, lambda x, t: ((x - t) ** 2).mean()),
    "cross_entropy": (autograd.cross_entropy, Q, np.eye(3)[LABELS], lambda x, t: -(t * np.log(x)).sum() / 4),
    "binary_cross_entropy": (autograd.binary_cross_entropy, P, BINARY,
                             lambda x, t: -(t * np.log(x + 1e-4) + (1 - t) * np.log(1 - x + 1e-4)).sum() / 4),
}


def _inputs(dev, x, t):
    xt = tensor.from_numpy(x, dev, requires_grad=True)
    tt = tensor.from_numpy(t, dev)
    return xt, tt


def _fd_grad(ref, x, t, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        g[i] = (ref(xp, t) - ref(xm, t)) / (2 * h)
    return g


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_eager_loss_is_1_with_its_value_and_gradient(dev, name):
    fn, x, t, ref = LOSSES[name]
    xt, tt = _inputs(dev, x, t)
    loss = fn(xt, tt)
    assert loss.shape == (1,)
    assert loss.item() == pytest.approx(ref(x, t), rel=1e-10)
    assert tensor.to_numpy(loss)[0] == pytest.approx(ref(x, t), rel=1e-10)
    (p, g), = autograd.backward(loss)
    assert np.array_equal(p.to_numpy(), x)
    np.testing.assert_allclose(g.to_numpy(), _fd_grad(ref, x, t), rtol=1e-5, atol=1e-8)
    # dy of the loss's own shape scales the gradient
    (_, g3), = autograd.backward(fn(xt, tt), tensor.from_numpy(np.array([3.0]), dev))
    np.testing.assert_allclose(g3.to_numpy(), 3 * g.to_numpy(), rtol=1e-12)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_class_form_loss_is_1(dev, name):
    cls = {"softmax_cross_entropy": "SoftMaxCrossEntropy", "mse_loss": "MeanSquareError", "mse": "MeanSquareError",
           "cross_entropy": "CrossEntropy", "binary_cross_entropy": "BinaryCrossEntropy"}[name]
    fn, x, t, ref = LOSSES[name]
    y, = getattr(autograd, cls)()(*_inputs(dev, x, t))
    assert y.shape == (1,) and y.item() == pytest.approx(ref(x, t), rel=1e-10)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_graph_loss_is_1_and_replays_as_eager(dev, name):
    fn, _, t, _ = LOSSES[name]
    w_e = tensor.from_numpy(np.ones((3,), np.float32), dev, requires_grad=True)
    w_g = tensor.from_numpy(np.ones((3,), np.float32), dev, requires_grad=True)
    xt = tensor.from_numpy(X.astype(np.float32), dev)
    tt = tensor.from_numpy(t.astype(np.float32) if t.dtype == np.float64 else t, dev)
    sgd_e, sgd_g = opt.SGD(0.05), opt.SGD(0.05)
    # the losses of probabilities get them from an activation of the logits x * w
    act = {"cross_entropy": lambda z: autograd.softmax(z, 1), "binary_cross_entropy": autograd.sigmoid}

    def step(w, sgd):
        loss = fn(act.get(name, lambda z: z)(autograd.mul(xt, w)), tt)
        for p, g in autograd.backward(loss):
            sgd.apply(0, g, p, "")
        return loss

    eager = [step(w_e, sgd_e).item() for _ in range(3)]
    with dev.buffer():
        loss = step(w_g, sgd_g)
    assert loss.shape == (1,)
    graph = []
    for _ in range(3):
        dev.RunGraph(True)
        graph.append(loss.item())
    assert graph == pytest.approx(eager, rel=1e-6)
    np.testing.assert_allclose(w_g.to_numpy(), w_e.to_numpy(), rtol=1e-6)


def test_loss_layers_are_1(dev):
    xt, tt = _inputs(dev, X, LABELS)
    assert layer.SoftMaxCrossEntropy()(xt, tt).shape == (1,)
    xt, tt = _inputs(dev, X, TARGET)
    assert layer.MeanSquareError()(xt, tt).shape == (1,)
    xt, tt = _inputs(dev, Q, np.eye(3)[LABELS])
    assert layer.CrossEntropy()(xt, tt).shape == (1,)


def test_binary_cross_entropy_refuses_mismatched_shapes(dev):
    with pytest.raises(errors.ShapeError, match=r"\[binary_cross_entropy\]"):
        autograd.binary_cross_entropy(*_inputs(dev, P, BINARY[:, :2]))
