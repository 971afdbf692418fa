"""CUDA from Python. Skipped, with a message, unless loom was built with CUDA and a GPU is visible."""
import os

import numpy as np
import pytest

import loom
from loom import autograd, device, model, opt, tensor


def test_cuda_is_usable_or_absent():
    """A driver that is installed but fails is a setup error, not a skip (Note [No GPU, or a broken
    one]); LOOM_REQUIRE_GPU=1 (tools/gpu_check.sh) turns "no GPU" into a failure too."""
    assert device.cuda_setup_error() == "", "CUDA is installed but unusable: " + device.cuda_setup_error()
    if os.environ.get("LOOM_REQUIRE_GPU") == "1":
        assert device.cuda_available(), "LOOM_REQUIRE_GPU=1 but no CUDA GPU is visible"


@pytest.fixture
def gpu():
    if not device.cuda_available():
        pytest.skip("no CUDA: loom built without it or no GPU visible")
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
