"""Devices: creation, identity, CUDA errors, memory statistics, threads, random seeds."""
import numpy as np
import pytest

import loom
from loom import device, tensor


def test_cpu_device_is_one_device(dev):
    a, b = device.create_cpu_device(), device.create_cpu_device()
    assert a == b and hash(a) == hash(b)
    assert a.name() == "cpu:0" and str(a) == "cpu:0" and repr(a) == "Device(cpu:0)"
    assert a.type() == loom.core.DeviceType_kCPU and a.id() == 0
    assert device.get_default_device() == a
    assert tensor.zeros((2,)).device == a


def test_cuda_device_without_cuda_raises_device_error():
    if device.cuda_available():
        d = device.create_cuda_device(0)
        assert d.name() == "cuda:0"
        return
    with pytest.raises(loom.DeviceError) as e:
        device.create_cuda_device(0)
    assert isinstance(e.value, RuntimeError)
    assert "cuda" in str(e.value).lower()


def test_cuda_device_bad_ids():
    with pytest.raises(TypeError):
        device.create_cuda_device("0")
    with pytest.raises(loom.DeviceError):
        device.create_cuda_device(-1)
    if not device.cuda_available():
        with pytest.raises(loom.DeviceError):
            device.create_cuda_device(7)


def test_memory_stats_count_live_and_peak_bytes(dev):
    keys = {"live_bytes", "peak_bytes", "reserved_bytes", "num_allocs", "num_system_allocs"}
    s0 = dev.memory_stats()
    assert set(s0) == keys
    t = tensor.zeros((256, 256), dev)
    s1 = dev.memory_stats()
    assert s1["live_bytes"] == s0["live_bytes"] + 256 * 256 * 4
    assert s1["peak_bytes"] >= s1["live_bytes"]
    assert s1["num_allocs"] == s0["num_allocs"] + 1
    del t
    assert dev.memory_stats()["live_bytes"] == s0["live_bytes"]
    dev.ResetPeak()
    assert dev.memory_stats()["peak_bytes"] == dev.memory_stats()["live_bytes"]


def test_lazy_tensor_allocates_nothing_until_written(dev):
    live = dev.memory_stats()["live_bytes"]
    t = tensor.Tensor((1000,), dev)
    assert dev.memory_stats()["live_bytes"] == live
    t.set_value(1.0)
    assert dev.memory_stats()["live_bytes"] == live + 4000


def test_threads_setting_round_trips():
    n = device.num_threads()
    device.set_num_threads(1)
    assert device.num_threads() == 1
    device.set_num_threads(n)
    assert device.num_threads() == n


@pytest.mark.parametrize("bad", [0, -4, 100000, 2 ** 40])
def test_thread_counts_out_of_range_are_value_errors(bad):
    """Issue 16, class 7: 100000 used to start 100000 threads, 0 and -4 silently meant 1."""
    n = device.num_threads()
    cap = device.max_threads()
    with pytest.raises(loom.ValueError, match="at least 1" if bad < 1 else f"more than {cap}, 4 x the"):
        device.set_num_threads(bad)
    assert device.num_threads() == n
    device.set_num_threads(cap)  # the cap itself is allowed
    assert device.num_threads() == cap
    device.set_num_threads(n)


@pytest.mark.parametrize("value,message", [("0", "at least 1"), ("-4", "at least 1"), ("100000", "more than"),
                                           ("four", "is not a thread count"), ("2x", "is not a thread count")])
def test_an_invalid_loom_num_threads_is_a_clear_error(value, message):
    import subprocess
    import sys

    from conftest import python_env
    script = ("import loom\nfrom loom import autograd, tensor\n"
              "try:\n    autograd.relu(tensor.ones((1 << 20,)))\nexcept loom.ValueError as e:\n    print(e)\n")
    env = dict(python_env(), LOOM_NUM_THREADS=value)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("[LOOM_NUM_THREADS]") and message in r.stdout, r.stdout
    env["LOOM_NUM_THREADS"] = "2"
    r = subprocess.run([sys.executable, "-c", "from loom import device; print(device.num_threads())"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.stdout.strip() == "2", r.stderr


def test_rand_seed_reproduces_draws(dev):
    dev.SetRandSeed(5)
    a = tensor.gaussian((100,), device=dev).to_numpy()
    b = tensor.gaussian((100,), device=dev).to_numpy()
    dev.SetRandSeed(5)
    c = tensor.gaussian((100,), device=dev).to_numpy()
    assert np.array_equal(a, c) and not np.array_equal(a, b)


def test_cuda_float32_math_is_tf32_by_default_and_settable():
    import subprocess
    import sys
    # A fresh process: the default, then LOOM_CUDA_FLOAT32_MATH, then a bad value (typed error).
    code = "from loom import device; print(device.cuda_float32_math())"
    env = {k: v for k, v in __import__("os").environ.items() if k != "LOOM_CUDA_FLOAT32_MATH"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "tf32"
    out = subprocess.run([sys.executable, "-c", code], env=dict(env, LOOM_CUDA_FLOAT32_MATH="full"),
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "full"
    bad = subprocess.run([sys.executable, "-c", "import loom\nfrom loom import device\ntry:\n"
                          "    device.cuda_float32_math()\nexcept loom.ValueError as e:\n    print('typed', e)"],
                         env=dict(env, LOOM_CUDA_FLOAT32_MATH="fp16"), capture_output=True, text=True, check=True)
    assert bad.stdout.startswith("typed") and "LOOM_CUDA_FLOAT32_MATH" in bad.stdout and "'fp16'" in bad.stdout

    before = device.cuda_float32_math()
    try:
        device.set_cuda_float32_math("full")
        assert device.cuda_float32_math() == "full"
        device.set_cuda_float32_math("tf32")
        assert device.cuda_float32_math() == "tf32"
        for wrong in ("TF32", "fp32", "", None, 1):
            with pytest.raises(loom.ValueError, match="tf32"):
                device.set_cuda_float32_math(wrong)
        assert device.cuda_float32_math() == "tf32"
    finally:
        device.set_cuda_float32_math(before)
