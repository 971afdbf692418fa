"""CUDA from Python. Skipped, with a message, unless loom was built with CUDA and a GPU is visible."""
import numpy as np
import pytest

import loom
from loom import autograd, device, model, opt, tensor

pytestmark = pytest.mark.skipif(not device.cuda_available(),
                                reason="no CUDA: loom built without it or no GPU visible")


@pytest.fixture
def gpu():
    d = device.create_cuda_device(0)
    d.ResetGraph()
    yield d
    if d.buffering():
        d.EnableGraph(False)
    d.ResetGraph()


def test_round_trip_and_copying_views(gpu):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tensor.from_numpy(a, gpu)
    assert t.device == gpu and gpu.name() == "cuda:0"
    assert np.array_equal(t.to_numpy(), a)
    assert not t.is_host_viewable()
    v = np.asarray(t)  # a copy through __array__
    v[0, 0] = 99
    assert t.to_numpy()[0, 0] == 0


def test_ops_agree_with_cpu(gpu):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(8, 16)).astype(np.float32), rng.normal(size=(16, 4)).astype(np.float32)
    cpu = device.create_cpu_device()
    got = autograd.relu(autograd.matmul(tensor.from_numpy(a, gpu), tensor.from_numpy(b, gpu))).to_numpy()
    want = autograd.relu(autograd.matmul(tensor.from_numpy(a, cpu), tensor.from_numpy(b, cpu))).to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_mixing_devices_is_a_device_error(gpu):
    with pytest.raises(loom.DeviceError):
        autograd.add(tensor.zeros((2,), gpu), tensor.zeros((2,), device.create_cpu_device()))


def test_graph_mode_model_on_gpu(gpu):
    m = model.NativeModel(model.mlp([20, 32, 4], device=gpu), opt.SGD(0.1, momentum=0.9))
    rng = np.random.default_rng(1)
    x = rng.normal(size=(16, 20)).astype(np.float32)
    y = rng.integers(0, 4, 16).astype(np.int32)
    m.compile([tensor.from_numpy(x, gpu)], use_graph=True)
    losses = [m.train_one_batch(x, y)[1].item() for _ in range(10)]
    assert losses[-1] < losses[0]
