"""SINGA's autograd functions (issue 17 item 3): the C++ math ops (sin ... atanh, ceil, floor,
round, rounde, sign) and the functions loom.autograd makes of other ops. Forward values are
checked against numpy; gradients against central differences of the loom function in float64
(independent of autograd)."""
import math

import numpy as np
import pytest

import loom
from loom import autograd, tensor

RNG = np.random.default_rng(11)


def t(a, dev, grad=False, dtype=None):
    a = np.asarray(a)
    return tensor.from_numpy(a.astype(dtype or a.dtype), dev, requires_grad=grad)


def check_grad(dev, fn, *arrays, eps=1e-6, tol=1e-5):
    """autograd's gradient of sum(fn(*xs) * r) against central differences, every input float64."""
    xs = [t(a.astype(np.float64), dev, grad=True) for a in arrays]
    y = fn(*xs)
    r = RNG.normal(size=y.shape)
    loss = autograd.sum(autograd.mul(y, t(r, dev)))
    grads = {p._block_id(): g.to_numpy() for p, g in autograd.backward(loss)}

    def value(vals):
        with autograd.no_grad():
            return float((fn(*[t(v, dev) for v in vals]).to_numpy() * r).sum())

    for i, a in enumerate(arrays):
        a = a.astype(np.float64)
        num = np.zeros_like(a)
        for k in np.ndindex(a.shape):
            hi, lo = a.copy(), a.copy()
            hi[k] += eps
            lo[k] -= eps
            vals_hi = [v.astype(np.float64) for v in arrays]
            vals_lo = [v.astype(np.float64) for v in arrays]
            vals_hi[i], vals_lo[i] = hi, lo
            num[k] = (value(vals_hi) - value(vals_lo)) / (2 * eps)
        got = grads.get(xs[i]._block_id(), np.zeros_like(a))
        np.testing.assert_allclose(got, num, rtol=tol, atol=tol, err_msg=f"input {i}")


# ---- the C++ math ops ----

MATH = [("sin", np.sin, -3, 3), ("cos", np.cos, -3, 3), ("tan", np.tan, -1.2, 1.2), ("asin", np.arcsin, -0.9, 0.9),
        ("acos", np.arccos, -0.9, 0.9), ("atan", np.arctan, -3, 3), ("sinh", np.sinh, -2, 2),
        ("cosh", np.cosh, -2, 2), ("asinh", np.arcsinh, -3, 3), ("acosh", np.arccosh, 1.1, 4),
        ("atanh", np.arctanh, -0.9, 0.9)]


@pytest.mark.parametrize("name, ref, lo, hi", MATH)
def test_math_ops(dev, name, ref, lo, hi):
    a = RNG.uniform(lo, hi, size=(3, 4))
    fn = getattr(autograd, name)
    np.testing.assert_allclose(fn(t(a, dev, dtype=np.float32)).to_numpy(), ref(a), rtol=2e-5, atol=1e-6)
    check_grad(dev, fn, a)


def test_rounding_ops(dev):
    a = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.7, 0.3, 1.2, 0.0, -3.6, 2.49], np.float32)
    x = t(a, dev, grad=True)
    np.testing.assert_array_equal(autograd.ceil(x).to_numpy(), np.ceil(a))
    np.testing.assert_array_equal(autograd.floor(x).to_numpy(), np.floor(a))
    np.testing.assert_array_equal(autograd.round(x).to_numpy(), np.sign(a) * np.floor(np.abs(a) + 0.5))
    np.testing.assert_array_equal(autograd.rounde(x).to_numpy(), np.round(a))  # numpy rounds halves to even
    np.testing.assert_array_equal(autograd.sign(x).to_numpy(), np.sign(a))
    assert not autograd.floor(x).requires_grad  # piecewise constant: no gradient
    with pytest.raises(loom.DTypeError, match=r"\[sin\] input must be float32 or float64"):
        autograd.sin(t([1, 2], dev, dtype=np.int32))


# ---- functions made of other ops ----

@pytest.mark.parametrize("name, ref", [
    ("softsign", lambda a: a / (1 + np.abs(a))),
    ("hardsigmoid", lambda a: np.clip(0.2 * a + 0.5, 0, 1)),
    ("elu", lambda a: np.where(a > 0, a, np.exp(a) - 1)),
    ("selu", lambda a: 1.0507 * np.where(a > 0, a, 1.67326 * (np.exp(a) - 1))),
    ("reciprocal", lambda a: 1 / a),
    ("negative", lambda a: -a),
    ("identity", lambda a: a),
    ("leakyrelu", lambda a: np.where(a > 0, a, 0.01 * a)),
])
def test_activations(dev, name, ref):
    a = RNG.uniform(0.2, 2, size=(3, 4)) * RNG.choice([-1, 1], size=(3, 4))
    fn = getattr(autograd, name)
    np.testing.assert_allclose(fn(t(a, dev, dtype=np.float32)).to_numpy(), ref(a), rtol=1e-5, atol=1e-6)
    if name != "identity":
        check_grad(dev, fn, a)


def test_clip_and_prelu(dev):
    a = RNG.uniform(-2, 2, size=(2, 3, 4))
    np.testing.assert_allclose(autograd.clip(t(a, dev), -0.5, None).to_numpy(), np.maximum(a, -0.5))
    np.testing.assert_allclose(autograd.clip(t(a, dev), None, 0.3).to_numpy(), np.minimum(a, 0.3))
    slope = RNG.uniform(0.1, 0.3, size=(3, 1))
    np.testing.assert_allclose(autograd.prelu(t(a, dev), t(slope, dev)).to_numpy(), np.where(a > 0, a, slope * a))
    check_grad(dev, autograd.prelu, a, slope)


def test_shape_functions(dev):
    a = RNG.normal(size=(2, 1, 3, 1))
    x = t(a, dev)
    assert autograd.squeeze(x).shape == (2, 3)
    assert autograd.squeeze(x, 1).shape == (2, 3, 1)
    assert autograd.unsqueeze(t(np.zeros((2, 3)), dev), [0, 3]).shape == (1, 2, 3, 1)
    np.testing.assert_array_equal(autograd.transpose(x, (3, 0, 2, 1)).to_numpy(), a.transpose(3, 0, 2, 1))
    np.testing.assert_array_equal(autograd.transpose(x).to_numpy(), a.transpose())
    np.testing.assert_array_equal(autograd.reshape(x, (0, 0, -1)).to_numpy(), a.reshape(2, 1, 3))
    with pytest.raises(loom.ShapeError, match=r"\[squeeze\] axis 0 of .* has size 2"):
        autograd.squeeze(x, 0)
    b = RNG.normal(size=(2, 3))
    np.testing.assert_array_equal(autograd.tile(t(b, dev), (2, 1, 3)).to_numpy(), np.tile(b, (2, 1, 3)))
    check_grad(dev, lambda v: autograd.tile(v, (2, 2)), b)
    parts = autograd.split(t(b, dev), 1, [1, 2])
    assert [p.shape for p in parts] == [(2, 1), (2, 2)]
    np.testing.assert_array_equal(parts[1].to_numpy(), b[:, 1:])
    assert len(autograd.split(t(b, dev), 1, None, 3)) == 3
    with pytest.raises(loom.ValueError, match=r"\[split\] parts \[1, 1\] do not add up to 3"):
        autograd.split(t(b, dev), 1, [1, 1])


def test_slice_singa_form(dev):
    a = RNG.normal(size=(4, 5, 6))
    x = t(a, dev)
    np.testing.assert_array_equal(autograd.slice(x, [1, 0], [3, -1], [0, 2]).to_numpy(), a[1:3, :, 0:-1])
    np.testing.assert_array_equal(autograd.slice(x, [4], [0], [1], [-2]).to_numpy(), a[:, 4:0:-2])
    np.testing.assert_array_equal(autograd.slice(x, 1, 1, 3).to_numpy(), a[:, 1:3])  # loom's older form
    check_grad(dev, lambda v: autograd.slice(v, [0, 1], [2, 5], [0, 1], [1, 2]), a[:3, :5, :2])


def test_variadic_sum_mean_max_min(dev):
    a, b, c = (RNG.normal(size=(2, 3)) for _ in range(3))
    xs = [t(v, dev) for v in (a, b, c)]
    np.testing.assert_allclose(autograd.sum(*xs).to_numpy(), a + b + c)
    np.testing.assert_allclose(autograd.mean(*xs).to_numpy(), (a + b + c) / 3)
    np.testing.assert_allclose(autograd.max(*xs).to_numpy(), np.maximum(np.maximum(a, b), c))
    np.testing.assert_allclose(autograd.min(*xs).to_numpy(), np.minimum(np.minimum(a, b), c))
    np.testing.assert_allclose(autograd.sum(xs[0], 1).to_numpy(), a.sum(1))  # still a reduction
    np.testing.assert_allclose(autograd.min(xs[0], 0, True).to_numpy(), a.min(0, keepdims=True))
    check_grad(dev, lambda p, q: autograd.max(p, q), a, b)
    check_grad(dev, lambda p, q: autograd.mean(p, q), a, b)


def test_gather_onehot_where(dev):
    a = RNG.normal(size=(3, 4, 5))
    idx = [[2, 0], [1, -1]]
    for axis in range(3):
        want = np.take(a, np.asarray(idx) % a.shape[axis], axis=axis)
        np.testing.assert_allclose(autograd.gather(t(a, dev), axis, idx).to_numpy(), want)
    check_grad(dev, lambda v: autograd.gather(v, 1, [[3, 0], [3, 1]]), a[:2, :, :2])
    with pytest.raises(loom.ValueError, match=r"\[gather\] an index of .* is out of range for axis 0"):
        autograd.gather(t(a, dev), 0, [3])
    labels = np.array([[1, 0], [2, 2]], np.int32)
    oh = autograd.onehot(-1, t(labels, dev), 3, (0.0, 5.0)).to_numpy()
    np.testing.assert_array_equal(oh, np.eye(3)[labels] * 5)
    np.testing.assert_array_equal(autograd.onehot(0, t(labels, dev), 3).to_numpy(), np.moveaxis(np.eye(3)[labels], -1, 0))
    cond = a[0] > 0
    x, y = t(a[0], dev), t(a[1], dev)
    want = np.where(cond, a[0], a[1])
    np.testing.assert_allclose(autograd.where(x, y, t(cond, dev)).to_numpy(), want)  # SINGA's order
    np.testing.assert_allclose(autograd.where(t(cond, dev), x, y).to_numpy(), want)  # numpy's


def test_logical_functions(dev):
    a = np.array([0.0, 1.0, 0.0, -2.0], np.float32)
    b = np.array([0.0, 0.0, 3.0, 1.0], np.float32)
    x, y = t(a, dev), t(b, dev)
    np.testing.assert_array_equal(autograd._and(x, y).to_numpy(), np.logical_and(a, b))
    np.testing.assert_array_equal(autograd._or(x, y).to_numpy(), np.logical_or(a, b))
    np.testing.assert_array_equal(autograd._xor(x, y).to_numpy(), np.logical_xor(a, b))
    np.testing.assert_array_equal(autograd._not(x).to_numpy(), np.logical_not(a))
    np.testing.assert_array_equal(autograd._not(t(a != 0, dev)).to_numpy(), a == 0)


def test_cossim_pad_upsample(dev):
    a, b = RNG.normal(size=(3, 4)), RNG.normal(size=(3, 4))
    want = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    np.testing.assert_allclose(autograd.cossim(t(a, dev), t(b, dev)).to_numpy(), want, rtol=1e-6)
    check_grad(dev, autograd.cossim, a, b)
    with pytest.raises(loom.ShapeError, match=r"\[cossim\] expects two \(N, D\) tensors"):
        autograd.cossim(t(a, dev), t(b[:, :2], dev))
    padded = autograd.pad(t(a, dev), "constant", [1, 0, 0, 2], 7.0).to_numpy()
    np.testing.assert_array_equal(padded, np.pad(a, ((1, 0), (0, 2)), constant_values=7.0))
    check_grad(dev, lambda v: autograd.pad(v, "constant", [0, 1, 2, 0]), a[:2, :2])
    np.testing.assert_allclose(autograd.pad(t(a, dev), "reflect", [1, 1, 1, 1]).to_numpy(),
                               np.pad(a, 1, mode="reflect"), rtol=1e-6)
    with pytest.raises(loom.ValueError, match=r"\[pad\] mode must be 'constant', 'reflect' or 'edge'"):
        autograd.pad(t(a, dev), "wrap", [1, 1, 1, 1])
    img = RNG.normal(size=(1, 2, 2, 3))
    up = autograd.upsample(t(img, dev), "nearest", [1, 1, 2, 3]).to_numpy()
    np.testing.assert_array_equal(up, img.repeat(2, 2).repeat(3, 3))
    check_grad(dev, lambda v: autograd.upsample(v, "nearest", [1, 1, 2, 2]), img)


def test_depth_space_and_pooling(dev):
    a = RNG.normal(size=(2, 8, 3, 2))
    b = 2
    n, c, h, w = a.shape
    dcr = a.reshape(n, b, b, c // 4, h, w).transpose(0, 3, 4, 1, 5, 2).reshape(n, c // 4, h * b, w * b)
    crd = a.reshape(n, c // 4, b, b, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // 4, h * b, w * b)
    x = t(a, dev)
    np.testing.assert_array_equal(autograd.depth_to_space(x, 2).to_numpy(), dcr)
    np.testing.assert_array_equal(autograd.depth_to_space(x, 2, "CRD").to_numpy(), crd)
    back = autograd.space_to_depth(autograd.depth_to_space(x, 2), 2).to_numpy()
    np.testing.assert_array_equal(back, a)
    with pytest.raises(loom.ShapeError, match=r"\[depth_to_space\] 8 channels .* do not divide by 3\^2"):
        autograd.depth_to_space(x, 3)
    g = autograd.globalaveragepool(x)
    assert g.shape == (2, 8, 1, 1)
    np.testing.assert_allclose(g.to_numpy(), a.mean(axis=(2, 3), keepdims=True))


def test_gemm_shape_constant_nonzero_scatter(dev):
    A, B, C = RNG.normal(size=(4, 3)), RNG.normal(size=(5, 4)), RNG.normal(size=(5,))
    got = autograd.gemm(t(A, dev), t(B, dev), t(C, dev), 0.5, 2.0, transA=1, transB=1).to_numpy()
    np.testing.assert_allclose(got, 0.5 * A.T @ B.T + 2.0 * C, rtol=1e-6)
    s = autograd.shape(t(A, dev))
    assert s.dtype == "int64" and s.to_numpy().tolist() == [4, 3]
    c = autograd.constant_of_shape(s, 2.5)
    assert c.shape == (4, 3) and np.all(c.to_numpy() == 2.5)
    m = np.array([[0, 1.5], [2, 0]], np.float32)
    np.testing.assert_array_equal(autograd.nonzero(t(m, dev)).to_numpy(), np.array(np.nonzero(m)))
    x = np.zeros((2, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    upd = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = x.copy()
    np.put_along_axis(want, idx, upd, 1)
    np.testing.assert_array_equal(autograd.scatter_elements(t(x, dev), t(idx, dev), t(upd, dev), 1).to_numpy(), want)


# ---- SINGA's class forms: F(*attributes)(*inputs) is (f(*inputs, *attributes),) ----

@pytest.mark.parametrize("make, fn", [
    (lambda: autograd.ReLU(), lambda x: np.maximum(x, 0)),
    (lambda: autograd.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    (lambda: autograd.Reshape((4, 3)), lambda x: x.reshape(4, 3)),
    (lambda: autograd.Transpose((1, 0)), lambda x: x.T),
    (lambda: autograd.LeakyRelu(0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    (lambda: autograd.Clip(-0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5)),
    (lambda: autograd.SoftMax(), lambda x: np.exp(x) / np.exp(x).sum(1, keepdims=True)),
    (lambda: autograd.ReduceSum([1]), lambda x: x.sum(1, keepdims=True)),
    (lambda: autograd.ReduceMean([0], 0), lambda x: x.mean(0)),
    (lambda: autograd.Slice([0], [2], [1]), lambda x: x[:, 0:2]),
    (lambda: autograd.Tile([1, 2]), lambda x: np.tile(x, (1, 2))),
    (lambda: autograd.Gather(1, [3, 0]), lambda x: x[:, [3, 0]]),
    (lambda: autograd.Flatten(0), lambda x: x.reshape(1, -1)),
])
def test_class_forms_unary(dev, make, fn):
    a = RNG.normal(size=(3, 4))
    x = t(a, dev, grad=True)
    out = make()(x)
    assert isinstance(out, tuple) and len(out) == 1 and isinstance(out[0].creator, autograd.Operator)
    np.testing.assert_allclose(out[0].to_numpy(), fn(a), rtol=1e-6, atol=1e-12)
    assert out[0].requires_grad  # differentiated by loom's autograd


def test_class_forms_with_several_inputs(dev):
    a, b = RNG.normal(size=(2, 3)), RNG.normal(size=(3,))
    x, y = t(a, dev, grad=True), t(b, dev)
    np.testing.assert_allclose(autograd.AddBias()(x, y)[0].to_numpy(), a + b)
    np.testing.assert_allclose(autograd.Concat(1)(x, x)[0].to_numpy(), np.concatenate([a, a], 1))
    np.testing.assert_allclose(autograd.Matmul()(x, t(a.T.copy(), dev))[0].to_numpy(), a @ a.T)
    lo, hi = autograd.Split(1, [1, 2])(x)
    np.testing.assert_allclose(hi.to_numpy(), a[:, 1:])
    labels = np.array([2, 0], np.int32)
    loss, = autograd.SoftMaxCrossEntropy(t(labels, dev))(x)
    (_, g), = autograd.backward(loss)
    p = np.exp(a) / np.exp(a).sum(1, keepdims=True)
    np.testing.assert_allclose(g.to_numpy(), (p - np.eye(3)[labels]) / 2, rtol=1e-6, atol=1e-12)
    oh, = autograd.OneHot(-1, 3)(t(labels, dev))
    np.testing.assert_array_equal(oh.to_numpy(), np.eye(3)[labels])
    with pytest.raises(loom.GraphError, match=r"\[ReLU\] loom's autograd differentiates ReLU itself"):
        autograd.ReLU().backward(x)
