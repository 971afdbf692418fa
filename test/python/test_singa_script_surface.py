"""The SINGA names its example scripts call that loom lacked: one-hot integer targets of
softmax_cross_entropy, create_cuda_gpu / create_cuda_gpu_on, Device.SetVerbosity and
Device.PrintTimeProfiling."""
import numpy as np
import pytest
import torch

import loom
from loom import autograd, device, tensor


def _onehot_case(seed=3, n=6, c=4):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c)).astype(np.float32)
    labels = rng.integers(0, c, n)
    onehot = np.zeros((n, c), np.int32)
    onehot[np.arange(n), labels] = 1
    return x, labels, onehot


def test_softmax_cross_entropy_takes_an_int_onehot_target():
    x, labels, onehot = _onehot_case()
    xt = tensor.Tensor(data=x, requires_grad=True, stores_grad=True)
    t = tensor.Tensor(data=onehot).as_type(tensor.int32)
    loss = autograd.softmax_cross_entropy(xt, t)
    assert loss.shape == (1,)

    ref_x = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(ref_x, torch.tensor(labels))
    ref.backward()
    np.testing.assert_allclose(tensor.to_numpy(loss)[0], ref.item(), rtol=1e-5)
    grads = dict((id(p), g) for p, g in autograd.backward(loss))
    (g,) = grads.values()
    np.testing.assert_allclose(tensor.to_numpy(g), ref_x.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_onehot_target_equals_class_index_target():
    x, labels, onehot = _onehot_case(seed=7)
    by_index = autograd.softmax_cross_entropy(tensor.Tensor(data=x),
                                              tensor.Tensor(data=labels.astype(np.int32)))
    by_onehot = autograd.softmax_cross_entropy(tensor.Tensor(data=x), tensor.Tensor(data=onehot))
    np.testing.assert_allclose(tensor.to_numpy(by_onehot), tensor.to_numpy(by_index), rtol=1e-6)


def test_int_target_of_a_wrong_shape_is_a_shape_error():
    x, _, onehot = _onehot_case()
    with pytest.raises(loom.ShapeError):
        autograd.softmax_cross_entropy(tensor.Tensor(data=x), tensor.Tensor(data=onehot[:, :3]))


def test_native_mlp_onehot_training_matches_numpy():
    # SINGA's native MLP recipe: matmul, add_bias, relu, softmax cross-entropy on one-hot int32
    # targets, SGD(lr, momentum): three steps against the same maths in numpy (float64).
    rng = np.random.default_rng(0)
    data = rng.uniform(-1, 1, (16, 2)).astype(np.float32)
    cls = (data[:, 0] > data[:, 1]).astype(int)
    onehot = np.eye(2, dtype=np.int32)[cls]
    w0 = rng.normal(0, 0.5, (2, 3)).astype(np.float32)
    w1 = rng.normal(0, 0.5, (3, 2)).astype(np.float32)

    tw0 = tensor.Tensor(data=w0, requires_grad=True, stores_grad=True)
    tw1 = tensor.Tensor(data=w1, requires_grad=True, stores_grad=True)
    x, t = tensor.Tensor(data=data), tensor.Tensor(data=onehot).as_type(tensor.int32)
    sgd = loom.opt.SGD(0.1, 0.8)
    losses = []
    for _ in range(3):
        y = autograd.matmul(autograd.relu(autograd.matmul(x, tw0)), tw1)
        loss = autograd.softmax_cross_entropy(y, t)
        losses.append(float(tensor.to_numpy(loss)[0]))
        sgd(loss)

    a, b = w0.astype(np.float64), w1.astype(np.float64)
    va, vb = np.zeros_like(a), np.zeros_like(b)
    ref = []
    for _ in range(3):
        h = data @ a
        r = np.maximum(h, 0)
        z = r @ b
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        ref.append(-np.mean(np.log(p[np.arange(16), cls])))
        dz = (p - onehot) / 16
        gb = r.T @ dz
        ga = data.T @ ((dz @ b.T) * (h > 0))
        va, vb = 0.8 * va + ga, 0.8 * vb + gb
        a, b = a - 0.1 * va, b - 0.1 * vb
    np.testing.assert_allclose(losses, ref, rtol=1e-5)


def test_create_cuda_gpu_names():
    if device.cuda_available():
        assert device.create_cuda_gpu() == device.create_cuda_device(0)
        assert device.create_cuda_gpu_on(0) == device.create_cuda_device(0)
    else:
        with pytest.raises(loom.DeviceError):
            device.create_cuda_gpu()
        with pytest.raises(loom.DeviceError):
            device.create_cuda_gpu_on(0)
    with pytest.raises(loom.TypeError):
        device.create_cuda_gpu_on("0")


def test_set_verbosity_and_print_time_profiling(capsys):
    dev = device.create_cpu_device()
    try:
        dev.SetVerbosity(0)
        x = tensor.Tensor(data=np.ones((2, 2), np.float32))
        dev.EnableGraph(True)
        y = autograd.relu(x)
        dev.EnableGraph(False)
        dev.PrintTimeProfiling()
        assert capsys.readouterr().out == ""
        dev.SetVerbosity(1)
        dev.PrintTimeProfiling()
        out = capsys.readouterr().out
        assert out.strip() == dev.graph().summary().strip() and out.strip()
        with pytest.raises(loom.ValueError):
            dev.SetVerbosity(-1)
        with pytest.raises(loom.TypeError):
            dev.SetVerbosity(1.5)
    finally:
        dev.SetVerbosity(0)
        if dev.HasGraph():
            dev.ResetGraph("default")


def test_copy_from_numpy_fills_a_flat_tensor_from_an_image_batch():
    # SINGA's examples/cnn/train_cnn.py feeds (N, 1, H, W) batches into an (N, H*W) tensor for its
    # MLP: SINGA copies any array of the same element count, in C order.
    batch = np.random.default_rng(1).standard_normal((3, 1, 2, 2)).astype(np.float32)
    t = tensor.Tensor((3, 4))
    t.copy_from_numpy(batch)
    np.testing.assert_array_equal(tensor.to_numpy(t), batch.reshape(3, 4))
    t.copy_from_numpy(batch.astype(np.float64).transpose(0, 2, 3, 1))  # strided, converted
    np.testing.assert_array_equal(tensor.to_numpy(t), batch.transpose(0, 2, 3, 1).reshape(3, 4))
    with pytest.raises(loom.ShapeError):
        t.copy_from_numpy(np.zeros((3, 1, 2, 3), np.float32))
