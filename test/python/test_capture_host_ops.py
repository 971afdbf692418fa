"""scatter_elements and constant_of_shape as device ops (issue 17): numbers against numpy and
torch 1.13, inside a capture with graph == eager; nonzero stays eager-only and says so at
capture (its output's shape depends on the values)."""
import numpy as np
import pytest

import loom
from loom import autograd, tensor

RNG = np.random.default_rng(23)


def scattered(x, idx, upd):
    """numpy's reference along axis 1: row i's entry k goes to column idx[i, k] (the index rows
    may be fewer than x's)."""
    out = x.copy()
    for i in range(idx.shape[0]):
        for k in range(idx.shape[1]):
            out[i, idx[i, k]] = upd[i, k]
    return out


def scatter_case(dev):
    x = RNG.normal(size=(3, 5)).astype(np.float32)
    idx = np.array([[4, 0, 2], [1, 3, 0]], np.int64)  # distinct per row
    upd = RNG.normal(size=(2, 3)).astype(np.float32)
    return x, idx, upd


def test_scatter_elements_forward_and_gradients_against_torch(dev):
    torch = pytest.importorskip("torch")
    x, idx, upd = scatter_case(dev)
    tx, tu = tensor.from_numpy(x, dev), tensor.from_numpy(upd, dev)
    tx.requires_grad, tu.requires_grad = True, True
    tx.name, tu.name = "x", "u"
    w = RNG.normal(size=(3, 5)).astype(np.float32)
    y = autograd.scatter_elements(tx, tensor.from_numpy(idx, dev), tu, axis=1)
    want = scattered(x, idx, upd)
    np.testing.assert_array_equal(y.to_numpy(), want)
    grads = {p.name: g.to_numpy() for p, g in autograd.backward(autograd.sum(autograd.mul(y, tensor.from_numpy(w, dev))))}
    rx = torch.tensor(x, requires_grad=True)
    ru = torch.tensor(upd, requires_grad=True)
    (rx.scatter(1, torch.tensor(idx), ru) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(grads["x"], rx.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(grads["u"], ru.grad.numpy(), rtol=1e-6)


def test_scatter_elements_negative_axis_and_indices(dev):
    x, idx, upd = scatter_case(dev)
    y = autograd.scatter_elements(tensor.from_numpy(x, dev), idx - 5, upd, axis=-1)  # arrays are accepted
    want = scattered(x, idx, upd)
    np.testing.assert_array_equal(y.to_numpy(), want)


def test_scatter_elements_in_a_graph_equals_eager(dev):
    x, idx, upd = scatter_case(dev)
    tx, ti, tu = tensor.from_numpy(x, dev), tensor.from_numpy(idx, dev), tensor.from_numpy(upd, dev)
    eager = autograd.scatter_elements(tx, ti, tu, 1).to_numpy()
    with dev.buffer():
        y = autograd.scatter_elements(tx, ti, tu, 1)
    dev.ExecBuffOps()
    np.testing.assert_array_equal(y.to_numpy(), eager)
    tu.copy_from_numpy(upd * 2)  # fed, not baked
    dev.ExecBuffOps()
    want = scattered(x, idx, upd * 2)
    np.testing.assert_array_equal(y.to_numpy(), want)


def test_scatter_elements_errors_are_typed(dev):
    x, idx, upd = scatter_case(dev)
    tx = tensor.from_numpy(x, dev)
    with pytest.raises(loom.ValueError, match=r"\[scatter_elements\] index 5 at position 0 is out of range"):
        autograd.scatter_elements(tx, np.full((2, 3), 5), upd, 1).to_numpy()
    with pytest.raises(loom.ShapeError, match=r"\[scatter_elements\] updates"):
        autograd.scatter_elements(tx, idx, np.zeros((2, 2), np.float32), 1)
    with pytest.raises(loom.ValueError, match=r"\[scatter_elements\] axis 2 is out of range"):
        autograd.scatter_elements(tx, idx, upd, 2)
    with pytest.raises(loom.DTypeError, match=r"\[scatter_elements\] indices must be int32 or int64"):
        autograd.scatter_elements(tx, tensor.from_numpy(idx.astype(np.float32), dev), upd, 1)


def test_constant_of_shape_eager_and_captured(dev):
    y = tensor.zeros((2, 3, 4), dev)
    c = autograd.constant_of_shape(tensor.from_numpy(np.array([3, 2], np.int64), dev), 1.5)
    np.testing.assert_array_equal(c.to_numpy(), np.full((3, 2), 1.5, np.float32))
    eager = autograd.constant_of_shape(autograd.shape(y), -2.0).to_numpy()
    with dev.buffer():
        s = autograd.shape(y)
        out = autograd.add_scalar(autograd.constant_of_shape(s, -2.0), 1.0)
    dev.ExecBuffOps()
    np.testing.assert_array_equal(out.to_numpy(), eager + 1.0)
    assert out.shape == (2, 3, 4)


def test_constant_of_shape_replay_with_another_shape_raises(dev):
    s = tensor.from_numpy(np.array([2, 2], np.int64), dev)
    s._static_shape = (2, 2)  # as autograd.shape() records it
    with dev.buffer():
        out = autograd.constant_of_shape(s, 3.0)
    dev.ExecBuffOps()
    assert out.to_numpy().tolist() == [[3.0, 3.0], [3.0, 3.0]]
    s.copy_from_numpy(np.array([4, 1], np.int64))
    with pytest.raises(loom.ValueError, match=r"\[constant_of_shape\] the shape tensor holds 4 at position 0"):
        dev.ExecBuffOps()
        out.to_numpy()


def test_host_reads_at_capture_are_typed(dev):
    s = tensor.from_numpy(np.array([2, 2], np.int64), dev)
    with pytest.raises(loom.GraphError, match=r"\[constant_of_shape\] .*capturing"):
        with dev.buffer():
            autograd.constant_of_shape(s)
    x = tensor.from_numpy(np.array([0.0, 1.0, 0.0, 2.0], np.float32), dev)
    np.testing.assert_array_equal(autograd.nonzero(x).to_numpy(), np.array([[1, 3]]))
    with pytest.raises(loom.GraphError):
        with dev.buffer():
            autograd.nonzero(x)
