"""loom.singa_wrap, SINGA's SWIG API over loom (issue 34): the C++ tensor's methods on loom's
Tensor, the dtype constants, free functions, the batch-norm and pooling handles with their
forward/backward functions, checked against numpy; SINGA's tensor-module functions
(tensor._call_singa_func, square, mult, axpy, ...) and Optimizer.lr_value."""
import numpy as np
import pytest

import loom
from loom import autograd, core, opt, singa_wrap as sw, tensor

RNG = np.random.default_rng(3434)


def _t(a, dev):
    return tensor.from_numpy(np.asarray(a, np.float32), dev)


def test_constants_and_the_cxx_tensor_methods(dev):
    assert sw.USE_CUDA == core.cuda_available() and sw.Tensor is loom.Tensor
    t = sw.Tensor([2, 3], dev, sw.kInt)
    assert t.data_type() == sw.kInt and t.dtype == "int32" and t.data is t
    t.CopyIntDataFromHostPtr(np.arange(6))
    assert t.GetIntValue(t.Size()).tolist() == list(range(6)) and t.nDim() == 2
    f = t.AsType(sw.kFloat32)
    assert f.data_type() == sw.kFloat32 and f.GetFloatValue(4).tolist() == [0.0, 1.0, 2.0, 3.0]
    f.CopyFloatDataFromHostPtr([6, 5, 4, 3, 2, 1])
    np.testing.assert_array_equal(sw.Reshape(f, [3, 2]).to_numpy(), [[6, 5], [4, 3], [2, 1]])
    assert f.device() is not None and f.device() == f.device
    with pytest.raises(loom.ShapeError, match="takes 6 values"):
        f.CopyFloatDataFromHostPtr([1, 2])


def test_a_python_tensor_built_from_a_cxx_one_by_assignment(dev):
    c = _t([[1, 2], [3, 4]], dev)
    t = tensor.Tensor()
    t.data = c
    t.shape, t.device, t.dtype = tuple(c.shape()), c.device(), c.data_type()
    np.testing.assert_array_equal(t.to_numpy(), [[1, 2], [3, 4]])
    with pytest.raises(loom.ValueError, match="follows from the tensor's data"):
        t.shape = (4,)


def test_fills_and_free_functions_match_numpy(dev):
    t = sw.Tensor([20000], dev)
    sw.Gaussian(2.0, 0.5, t)
    a = t.to_numpy()
    assert abs(a.mean() - 2.0) < 0.02 and abs(a.std() - 0.5) < 0.02
    sw.Uniform(-1.0, 3.0, t)
    a = t.to_numpy()
    assert a.min() >= -1.0 and a.max() <= 3.0 and abs(a.mean() - 1.0) < 0.05
    with pytest.raises(loom.TypeError, match="singa_wrap.Gaussian"):
        sw.Gaussian(0.0, 1.0, np.zeros(3))
    x = RNG.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
    tx = _t(x, dev)
    for axis in (0, 1, 2, -1):
        rows = int(np.prod(x.shape[:axis % 3]))
        m = x.reshape(rows, -1)
        want = (np.exp(m) / np.exp(m).sum(1, keepdims=True)).reshape(x.shape)
        np.testing.assert_allclose(tensor._call_singa_func(sw.SoftMax, tx, axis).to_numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(sw.__div__(tx, _t(x[0, 0], dev)).to_numpy(), x / x[0, 0], rtol=1e-6)
    np.testing.assert_allclose(sw.Pow(tx, 2.0).to_numpy(), x ** 2, rtol=1e-6)
    halves = _t([0.5, 1.5, 2.5, -0.5], dev)
    assert sw.Round(halves).to_numpy().tolist() == [1.0, 2.0, 3.0, -1.0]
    assert sw.RoundE(halves).to_numpy().tolist() == [0.0, 2.0, 2.0, -0.0]
    parts = sw.VecTensor([tx, tx])
    assert sw.ConcatOn(parts, 2).shape == (2, 3, 8)
    with pytest.raises(loom.TypeError, match="returned a list"):
        tensor._call_singa_func(lambda: [tx])


def _np_bn(x, s, b, eps=1e-5):
    m, v = x.mean((0, 2, 3), keepdims=True), x.var((0, 2, 3), keepdims=True)
    return s * (x - m) / np.sqrt(v + eps) + b, m, v


def test_batch_norm_handle_forward_and_backward(dev):
    x = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
    s, b = RNG.uniform(0.5, 1.5, (1, 3, 1, 1)).astype(np.float32), RNG.standard_normal((1, 3, 1, 1)).astype(np.float32)
    rm, rv = np.zeros((1, 3, 1, 1), np.float32), np.ones((1, 3, 1, 1), np.float32)
    h = sw.BatchNormHandle(0.1, _t(x, dev))
    trm, trv = _t(rm, dev), _t(rv, dev)
    y, mean, _ = sw.CpuBatchNormForwardTraining(h, _t(x, dev), _t(s, dev), _t(b, dev), trm, trv)
    want, m, v = _np_bn(x, s, b)
    np.testing.assert_allclose(y.to_numpy(), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mean.to_numpy(), m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(trm.to_numpy(), 0.1 * m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(trv.to_numpy(), 0.1 * v * 16 / 15 + 0.9, rtol=1e-5)
    yi = sw.CpuBatchNormForwardInference(h, _t(x, dev), _t(s, dev), _t(b, dev), _t(m, dev), _t(v, dev))
    np.testing.assert_allclose(yi.to_numpy(), want, rtol=1e-4, atol=1e-5)
    dy = RNG.standard_normal(x.shape).astype(np.float32)
    dx, ds, db = sw.CpuBatchNormBackwardx(h, y, _t(dy, dev), _t(x, dev), _t(s, dev), _t(b, dev), mean, mean)
    xhat = (x - m) / np.sqrt(v + 1e-5)
    n = x.size / 3
    want_dx = s / np.sqrt(v + 1e-5) / n * (n * dy - dy.sum((0, 2, 3), keepdims=True)
                                           - xhat * (dy * xhat).sum((0, 2, 3), keepdims=True))
    np.testing.assert_allclose(dx.to_numpy(), want_dx, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(db.to_numpy(), dy.sum((0, 2, 3), keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ds.to_numpy(), (dy * xhat).sum((0, 2, 3), keepdims=True), rtol=1e-4, atol=1e-4)
    with pytest.raises(loom.ShapeError, match="BatchNormHandle"):
        sw.BatchNormHandle(0.1, _t(np.zeros(3), dev))


@pytest.mark.parametrize("is_max", [True, False])
def test_pooling_handle_forward_and_backward(dev, is_max):
    x = np.arange(1, 13, dtype=np.float32).reshape(1, 3, 2, 2)
    h = sw.PoolingHandle(_t(x, dev), [2, 2], [1, 1], [0, 0], is_max)
    y = sw.CpuPoolingForward(h, _t(x, dev))
    np.testing.assert_allclose(y.to_numpy().ravel(), x.max((2, 3)).ravel() if is_max else x.mean((2, 3)).ravel())
    dy = _t(np.array([1, 2, 3]).reshape(1, 3, 1, 1), dev)
    dx = sw.CpuPoolingBackward(h, dy, _t(x, dev), y).to_numpy()
    want = np.zeros_like(x)
    if is_max:
        want[0, :, 1, 1] = [1, 2, 3]
    else:
        want += np.array([1, 2, 3], np.float32).reshape(1, 3, 1, 1) / 4
    np.testing.assert_allclose(dx, want)


def test_tensor_module_functions_match_numpy(dev):
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal((4, 2)).astype(np.float32)
    ta, tb = _t(a, dev), _t(b, dev)
    np.testing.assert_allclose(tensor.square(ta).to_numpy(), a * a, rtol=1e-6)
    np.testing.assert_allclose(tensor.pow(ta, 2).to_numpy(), a ** 2, rtol=1e-6)
    c = _t(np.ones((3, 2)), dev)
    assert tensor.mult(ta, tb, c, alpha=2.0, beta=0.5) is c
    np.testing.assert_allclose(c.to_numpy(), 2 * a @ b + 0.5, rtol=1e-5, atol=1e-6)
    y = _t(np.ones((3, 4)), dev)
    tensor.axpy(3.0, ta, y)
    np.testing.assert_allclose(y.to_numpy(), 1 + 3 * a, rtol=1e-6)
    out = _t(np.zeros((3, 4)), dev)
    assert tensor.add(ta, 1.5, out) is out and np.allclose(out.to_numpy(), a + 1.5)
    np.testing.assert_allclose(tensor.sum_rows(ta).to_numpy(), a.sum(0, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(tensor.sum_columns(ta).to_numpy(), a.sum(1, keepdims=True), rtol=1e-5)
    m = _t(np.zeros((3, 4)), dev)
    tensor.add_row(2.0, _t(np.arange(4), dev), 1.0, m)
    tensor.add_column(1.0, _t(np.arange(3), dev), 1.0, m)
    np.testing.assert_allclose(m.to_numpy(), 2 * np.arange(4)[None, :] + np.arange(3)[:, None])
    r = tensor.random((1000,), dev).to_numpy()
    assert r.min() >= 0 and r.max() <= 1 and 0.4 < r.mean() < 0.6
    with pytest.raises(loom.ShapeError, match="does not fit"):
        tensor.add(ta, 1.0, _t(np.zeros(2), dev))
    with pytest.raises(loom.ShapeError, match="matrix"):
        tensor.sum_rows(_t(np.zeros(3), dev))


def test_lr_value_follows_the_schedule():
    sgd = opt.SGD(lr=opt.ExponentialDecay(0.1, 2, 0.5, True))
    seen = []
    for _ in range(5):
        seen.append(float(tensor.to_numpy(sgd.lr_value)[0]))
        sgd.step()
    np.testing.assert_allclose(seen, [0.1, 0.1, 0.05, 0.05, 0.025], rtol=1e-6)
    assert float(opt.SGD(lr=0.3).lr_value.to_numpy()[0]) == pytest.approx(0.3)


def test_batchnorm_2d_and_pooling_2d_take_handles(dev, monkeypatch):
    monkeypatch.setattr(autograd, "training", False)
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    s, b = np.ones(3, np.float32), np.zeros(3, np.float32)
    m, v = RNG.standard_normal(3).astype(np.float32), RNG.uniform(0.5, 2, 3).astype(np.float32)
    h = sw.BatchNormHandle(0.9, _t(x, dev))
    y = autograd.batchnorm_2d(h, _t(x, dev), _t(s, dev), _t(b, dev), _t(m, dev), _t(v, dev))
    np.testing.assert_allclose(y.to_numpy(), (x - m[:, None, None]) / np.sqrt(v[:, None, None] + 1e-5),
                               rtol=1e-4, atol=1e-5)
    p = sw.PoolingHandle(_t(x, dev), [2, 2], [2, 2], [0, 0], True)
    np.testing.assert_allclose(autograd.pooling_2d(p, _t(x, dev)).to_numpy(),
                               x.reshape(2, 3, 2, 2, 2, 2).max((3, 5)))


def test_gradients_by_id_and_stores_grad(dev):
    a = _t(RNG.standard_normal((2, 3)), dev)
    a.stores_grad = True  # SINGA's mark of a parameter
    assert a.requires_grad and a.stores_grad
    b = _t(RNG.standard_normal((2, 3)), dev)
    grads = autograd.gradients(autograd.mse_loss(autograd.mul(a, b), _t(np.zeros((2, 3)), dev)))
    want = 2 * a.to_numpy() * b.to_numpy() ** 2 / 6
    np.testing.assert_allclose(grads[id(a)].to_numpy(), want, rtol=1e-5)  # SINGA's auto_grads[id(p)]
    np.testing.assert_allclose(grads[a].to_numpy(), want, rtol=1e-5)
    assert id(b) not in grads
    with pytest.raises(KeyError):
        grads[id(b)]


def test_conv2d_takes_a_conv_handle(dev):
    x = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)
    w = RNG.standard_normal((6, 2, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    h = sw.ConvHandle(_t(x, dev), [3, 3], [2, 2], [1, 1], 4, 6, True, 2)
    got = autograd.conv2d(h, _t(x, dev), _t(w, dev), _t(b, dev)).to_numpy()
    want = autograd.conv2d(_t(x, dev), _t(w, dev), _t(b, dev), 2, 1, 1, 2).to_numpy()
    assert got.shape == (1, 6, 3, 3)
    np.testing.assert_array_equal(got, want)
    import torch
    ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride=2, padding=1, groups=2)
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-4, atol=1e-5)
