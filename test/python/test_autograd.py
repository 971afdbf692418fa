"""autograd: each op's forward against a numpy reference and its backward against numpy
gradients or central finite differences (float64), plus backward's contract."""
import numpy as np
import pytest

import loom
from loom import autograd as ag
from loom import tensor

RNG = np.random.default_rng(0)


def t64(a, dev, grad=True):
    return tensor.from_numpy(np.asarray(a, np.float64), dev, requires_grad=grad)


def grads_of(loss, params):
    """numpy gradients of `params` (in their order) from autograd.backward(loss)."""
    by_block = {p._block_id(): g for p, g in ag.backward(loss)}
    return [by_block[p._block_id()].to_numpy() for p in params]


def check_op(dev, fn, ref, arrays, grad_args=None, rtol=1e-6, atol=1e-8, fd=True):
    """fn(*tensors) against ref(*arrays); then d sum(fn * R) / d input against finite differences."""
    grad_args = range(len(arrays)) if grad_args is None else grad_args
    ts = [t64(a, dev, i in grad_args) for i, a in enumerate(arrays)]
    out = fn(*ts)
    want = ref(*arrays)
    assert out.shape == np.shape(want)
    np.testing.assert_allclose(out.to_numpy(), want, rtol=rtol, atol=atol)
    if not fd:
        return
    r = RNG.normal(size=np.shape(want))
    loss = ag.sum(out * t64(r, dev, False))
    got = grads_of(loss, [ts[i] for i in grad_args])
    for k, i in enumerate(grad_args):
        num = np.zeros_like(arrays[i], dtype=np.float64)
        for idx in np.ndindex(arrays[i].shape):
            plus, minus = [np.array(a, np.float64) for a in arrays], [np.array(a, np.float64) for a in arrays]
            plus[i][idx] += 1e-6
            minus[i][idx] -= 1e-6
            num[idx] = ((ref(*plus) * r).sum() - (ref(*minus) * r).sum()) / 2e-6
        np.testing.assert_allclose(got[k], num, rtol=1e-4, atol=1e-6, err_msg=f"gradient of input {i}")


def softmax_np(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_matmul_add_bias(dev):
    a, b, c = RNG.normal(size=(3, 4)), RNG.normal(size=(4, 5)), RNG.normal(size=(5,))
    check_op(dev, ag.matmul, np.matmul, [a, b])
    check_op(dev, ag.add_bias, lambda x, y: x + y, [RNG.normal(size=(3, 5)), c])


@pytest.mark.parametrize("name,ref", [
    ("relu", lambda x: np.maximum(x, 0)),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    ("tanh", np.tanh),
    ("exp", np.exp),
    ("softmax", softmax_np),
    ("log_softmax", lambda x: np.log(softmax_np(x))),
])
def test_unary(dev, name, ref):
    x = RNG.normal(size=(3, 4))
    x[np.abs(x) < 1e-3] = 0.5  # keep relu away from its kink
    check_op(dev, getattr(ag, name), ref, [x])


def test_softmax_cross_entropy_with_class_indices(dev):
    logits = RNG.normal(size=(5, 4))
    labels = np.array([0, 3, 1, 1, 2], np.int32)
    x = t64(logits, dev)
    loss = ag.softmax_cross_entropy(x, tensor.from_numpy(labels, dev))
    p = softmax_np(logits)
    assert loss.shape == (1,)
    assert loss.item() == pytest.approx(-np.log(p[np.arange(5), labels]).mean(), rel=1e-10)
    onehot = np.eye(4)[labels]
    np.testing.assert_allclose(grads_of(loss, [x])[0], (p - onehot) / 5, rtol=1e-8)


def test_softmax_cross_entropy_with_one_hot_targets(dev):
    logits, target = RNG.normal(size=(4, 3)), np.eye(3)[[0, 2, 1, 2]]
    check_op(dev, lambda x, t: ag.softmax_cross_entropy(x, t),
             lambda x, t: np.reshape(-(t * np.log(softmax_np(x))).sum(axis=1).mean(), (1,)), [logits, target],
             grad_args=[0])


def test_mse_loss(dev):
    check_op(dev, ag.mse_loss, lambda a, b: np.reshape(((a - b) ** 2).mean(), (1,)), [RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3))])


def test_arithmetic_and_reductions(dev):
    a, b = RNG.normal(size=(3, 4)), RNG.uniform(0.5, 2, size=(3, 4))
    check_op(dev, ag.add, np.add, [a, b])
    check_op(dev, ag.sub, np.subtract, [a, b])
    check_op(dev, ag.mul, np.multiply, [a, b])
    check_op(dev, ag.div, np.divide, [a, b])
    check_op(dev, lambda x: ag.mul(2.0, x), lambda x: 2 * x, [a])
    check_op(dev, lambda x: ag.sub(1.0, x), lambda x: 1 - x, [a])
    check_op(dev, lambda x: ag.pow(x, 3), lambda x: x ** 3, [a])
    check_op(dev, lambda x: ag.sum(x, axis=1), lambda x: x.sum(axis=1), [a])
    check_op(dev, lambda x: ag.mean(x, axis=0, keepdims=True), lambda x: x.mean(axis=0, keepdims=True), [a])
    check_op(dev, ag.sqrt, np.sqrt, [b])
    check_op(dev, ag.log, np.log, [b])


def test_shape_ops(dev):
    a = RNG.normal(size=(2, 3, 4))
    check_op(dev, lambda x: ag.reshape(x, (6, 4)), lambda x: x.reshape(6, 4), [a])
    check_op(dev, lambda x: ag.reshape(x, (-1, 2)), lambda x: x.reshape(-1, 2), [a])
    check_op(dev, ag.flatten, lambda x: x.reshape(2, 12), [a])
    check_op(dev, lambda x, y: ag.cat([x, y], 1), lambda x, y: np.concatenate([x, y], 1),
             [a, RNG.normal(size=(2, 2, 4))])
    check_op(dev, lambda x: ag.transpose(x, 0, 2), lambda x: x.transpose(2, 1, 0), [a])
    check_op(dev, lambda x: ag.slice(x, 2, 1, 3), lambda x: x[:, :, 1:3], [a])


def test_dropout(dev):
    x = t64(np.ones((200, 50)), dev)
    y = ag.dropout(x, 0.3)
    v = y.to_numpy()
    kept = v != 0
    assert 0.25 < 1 - kept.mean() < 0.35
    np.testing.assert_allclose(v[kept], 1 / 0.7)
    g = grads_of(ag.sum(y), [x])[0]
    np.testing.assert_allclose(g, v)  # d/dx of mask * x / (1-p)
    assert np.array_equal(ag.dropout(x, 0.3, training=False).to_numpy(), np.ones((200, 50)))


def conv2d_np(x, w, b, stride, pad):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    return out + (0 if b is None else b[None, :, None, None])


def pool_np(x, k, s, mode):
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = x[:, :, i * s:i * s + k, j * s:j * s + k]
            out[:, :, i, j] = win.max(axis=(2, 3)) if mode == "max" else win.mean(axis=(2, 3))
    return out


@pytest.mark.parametrize("stride,pad", [(1, 0), (1, 1), (2, 1)])
def test_conv2d(dev, stride, pad):
    x, w, b = RNG.normal(size=(2, 3, 5, 5)), RNG.normal(size=(4, 3, 3, 3)), RNG.normal(size=(4,))
    check_op(dev, lambda x, w, b: ag.conv2d(x, w, b, stride, pad), lambda x, w, b: conv2d_np(x, w, b, stride, pad),
             [x, w, b])
    check_op(dev, lambda x, w: ag.conv2d(x, w, None, stride, pad), lambda x, w: conv2d_np(x, w, None, stride, pad),
             [x, w], fd=False)


def test_pooling(dev):
    x = RNG.normal(size=(2, 2, 6, 6))
    check_op(dev, lambda x: ag.pooling(x, 2, 2), lambda x: pool_np(x, 2, 2, "max"), [x])
    check_op(dev, lambda x: ag.pooling(x, 3, 1, is_max=False), lambda x: pool_np(x, 3, 1, "avg"), [x])
    check_op(dev, lambda x: ag.max_pool_2d(x, 2), lambda x: pool_np(x, 2, 2, "max"), [x])
    check_op(dev, ag.global_avg_pool, lambda x: x.mean(axis=(2, 3)), [x])


def test_batchnorm_training_and_running_statistics(dev):
    x, g, b = RNG.normal(2, 3, size=(4, 3, 2, 2)), RNG.normal(size=(3,)), RNG.normal(size=(3,))

    def ref(x, g, b):
        m, v = x.mean(axis=(0, 2, 3), keepdims=True), x.var(axis=(0, 2, 3), keepdims=True)
        return (x - m) / np.sqrt(v + 1e-5) * g[None, :, None, None] + b[None, :, None, None]

    def fn(x, g, b):
        return ag.batchnorm(x, g, b, tensor.zeros((3,), dev, "float64"), tensor.ones((3,), dev, "float64"), True)

    check_op(dev, fn, ref, [x, g, b], rtol=1e-5, atol=1e-7)
    rm, rv = tensor.zeros((3,), dev, "float64"), tensor.ones((3,), dev, "float64")
    ag.batchnorm(t64(x, dev), t64(g, dev), t64(b, dev), rm, rv, training=True, momentum=0.1)
    np.testing.assert_allclose(rm.to_numpy(), 0.1 * x.mean(axis=(0, 2, 3)), rtol=1e-8)
    np.testing.assert_allclose(rv.to_numpy(), 0.9 + 0.1 * x.var(axis=(0, 2, 3), ddof=1), rtol=1e-8)
    # eval: the running statistics
    y = ag.batchnorm(t64(x, dev), t64(g, dev), t64(b, dev), rm, rv, training=False)
    want = (x - rm.to_numpy()[None, :, None, None]) / np.sqrt(rv.to_numpy()[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(y.to_numpy(), want * g[None, :, None, None] + b[None, :, None, None], rtol=1e-8)


def test_layernorm_and_embedding(dev):
    x, g, b = RNG.normal(size=(3, 4)), RNG.normal(size=(4,)), RNG.normal(size=(4,))

    def ref(x, g, b):
        m, v = x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-5) * g + b

    check_op(dev, ag.layernorm, ref, [x, g, b], rtol=1e-5, atol=1e-7)
    table = RNG.normal(size=(5, 3))
    idx = tensor.from_numpy(np.array([[0, 4], [2, 2]], np.int64), dev)
    out = ag.embedding(t64(table, dev), idx)
    np.testing.assert_allclose(out.to_numpy(), table[[[0, 4], [2, 2]]])
    with pytest.raises(loom.ValueError):
        ag.embedding(t64(table, dev), tensor.from_numpy(np.array([7], np.int64), dev))


def test_backward_contract(dev):
    w = t64(RNG.normal(size=(3,)), dev)
    x = t64(RNG.normal(size=(3,)), dev, grad=False)
    y = ag.sum(w * w * x)
    pairs = ag.backward(y)
    assert len(pairs) == 1  # only leaves that require grad
    p, g = pairs[0]
    assert p._block_id() == w._block_id()
    np.testing.assert_allclose(g.to_numpy(), 2 * w.to_numpy() * x.to_numpy())
    # an explicit output gradient
    z = w * 3.0
    dy = t64(np.array([1.0, 2.0, 3.0]), dev, grad=False)
    (p, g), = ag.backward(z, dy)
    np.testing.assert_allclose(g.to_numpy(), [3.0, 6.0, 9.0])
    assert list(ag.gradients(ag.sum(w)).values())[0].to_numpy().tolist() == [1.0, 1.0, 1.0]


def test_no_grad(dev):
    w = t64([1.0, 2.0], dev)
    with ag.no_grad():
        assert not ag.grad_enabled()
        y = w * 2.0
    assert ag.grad_enabled()
    assert not y.requires_grad
    assert (w * 2.0).requires_grad


def test_call_any_op_by_name(dev):
    x = t64([-1.0, 2.0], dev, grad=False)
    (y,) = ag.call("relu", [x])
    assert y.to_numpy().tolist() == [0.0, 2.0]
    assert "matmul" in loom.core.list_ops()
    with pytest.raises(loom.ValueError):
        ag.call("no_such_op", [x])


def test_op_errors_name_the_op(dev):
    a, b = tensor.zeros((2, 3), dev), tensor.zeros((4, 5), dev)
    with pytest.raises(loom.ShapeError) as e:
        ag.matmul(a, b)
    assert "[matmul]" in str(e.value) and "(2, 3)" in str(e.value)
    with pytest.raises(ValueError):
        ag.add(a, b)  # shapes do not broadcast
    with pytest.raises(TypeError):
        ag.matmul(a, tensor.zeros((3, 2), dev, "int32"))  # loom.DTypeError
    with pytest.raises(loom.ShapeError):
        ag.conv2d(tensor.zeros((1, 3, 8, 8), dev), tensor.zeros((4, 2, 3, 3), dev))
    with pytest.raises(loom.ValueError):
        ag.conv2d(tensor.zeros((1, 3, 8, 8), dev), tensor.zeros((4, 3, 3, 3), dev), stride=(1, 2, 3))


def test_where_and_erf(dev):
    # Ops added with only their declaration, kernels and case-table rows: Python has them.
    import math
    x = RNG.uniform(-2, 2, (3, 4))
    y = RNG.uniform(-2, 2, (4,))
    cond = RNG.uniform(size=(3, 1)) > 0.5
    c = tensor.from_numpy(cond, dev)
    check_op(dev, lambda a, b: ag.where(c, a, b), lambda a, b: np.where(cond, a, b), [x, y])
    erf = np.vectorize(math.erf)
    check_op(dev, ag.erf, erf, [x])
    with pytest.raises(loom.DTypeError, match=r"\[where\] the condition must be bool or uint8"):
        ag.where(t64(x, dev, False), t64(x, dev), t64(x, dev))
