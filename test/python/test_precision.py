"""Note [Precision policy] (src/core/autocast.h) from Python: loom.autocast and
Model.compile(precision=...), eager and graph, with graph == eager bitwise."""
import numpy as np
import pytest

import loom
from loom import autograd, device, layer, model, opt, tensor


class Mlp(model.Model):
    def __init__(self, dev):
        super().__init__()
        self.l1 = layer.Linear(24, 32, device=dev)
        self.l2 = layer.Linear(32, 5, device=dev)

    def forward(self, x):
        return self.l2(autograd.relu(self.l1(x)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def train(precision, use_graph, steps=4):
    dev = device.create_cpu_device()
    dev.SetRandSeed(3)
    m = Mlp(dev)
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    rng = np.random.default_rng(0)
    x = tensor.from_numpy(rng.uniform(-1, 1, (8, 24)).astype(np.float32), dev)
    y = tensor.from_numpy(np.arange(8, dtype=np.int32) % 5, dev)
    m.compile([x], is_train=True, use_graph=use_graph, precision=precision)
    for _ in range(steps):
        m.train_one_batch(x, y)
    return [tensor.to_numpy(p) for p in m.get_params().values()]


def test_bf16_graph_equals_bf16_eager_bitwise_and_differs_from_fp32():
    eager, graph = train("bf16", False), train("bf16", True)
    for a, b in zip(eager, graph):
        assert a.dtype == np.float32 and np.array_equal(a, b)  # float32 masters, the same bits
    fp32 = train("fp32", False)
    gap = max(float(np.abs(a - b).max()) for a, b in zip(eager, fp32))
    assert 0 < gap < 0.05


def test_autocast_scope_lowers_products_and_restores():
    dev = device.create_cpu_device()
    rng = np.random.default_rng(1)
    a = tensor.from_numpy(rng.uniform(-1, 1, (9, 70)).astype(np.float32), dev)
    b = tensor.from_numpy(rng.uniform(-1, 1, (70, 11)).astype(np.float32), dev)
    full = tensor.to_numpy(autograd.matmul(a, b))
    with loom.autocast("bf16"):
        low = tensor.to_numpy(autograd.matmul(a, b))
        with loom.autocast("fp32"):  # scopes nest
            assert np.array_equal(tensor.to_numpy(autograd.matmul(a, b)), full)
    assert low.dtype == np.float32 and 0 < np.abs(low - full).max() < 0.2
    assert np.array_equal(tensor.to_numpy(autograd.matmul(a, b)), full)  # restored


@pytest.mark.parametrize("bad", ["fp8", "BF16", "", None, 16])
def test_bad_precisions_are_typed_errors(bad):
    dev = device.create_cpu_device()
    m = Mlp(dev)
    m.set_optimizer(opt.SGD(lr=0.1))
    x = tensor.from_numpy(np.zeros((2, 24), np.float32), dev)
    with pytest.raises(loom.ValueError, match="precision"):
        m.compile([x], precision=bad)
    with pytest.raises(loom.ValueError, match="precision"):
        with loom.autocast(bad):
            pass
