"""SINGA's Device and Model semantics (issue 17 item 7): EnableGraph(False) with nothing
buffering is a no-op; model(x, y) is train_one_batch in training and forward in eval."""
import numpy as np
import pytest

import loom
from loom import autograd, layer, model, opt, tensor
from loom.tensor import Tensor

RNG = np.random.default_rng(5)
X = RNG.normal(size=(8, 6)).astype(np.float32)
Y = RNG.integers(0, 3, 8).astype(np.int32)


def test_enable_graph_false_without_capture_is_a_noop(dev):
    assert not dev.buffering()
    dev.EnableGraph(False)  # SINGA's: nothing to end
    dev.SetBufferFlag(False)
    assert not dev.buffering() and not dev.HasGraph()
    # a real capture still ends and replays
    t = tensor.from_numpy(X, dev)
    dev.EnableGraph(True)
    y = t * 2.0
    dev.EnableGraph(False)
    dev.RunGraph(True)
    np.testing.assert_array_equal(y.to_numpy(), X * 2)


def test_enable_graph_false_does_not_end_someone_elses_capture(dev):
    g = loom.core.new_graph(dev, "other", None)
    g.begin_capture()
    try:
        assert dev.buffering()
        with pytest.raises(loom.GraphError, match="without a capture in progress"):
            dev.EnableGraph(False)
        assert dev.buffering()
    finally:
        g.abort_capture()


class Net(model.Model):
    def __init__(self):
        super().__init__()
        self.fc = layer.Linear(6, 3)
        self.calls = []

    def forward(self, x):
        self.calls.append("forward")
        return self.fc(x)

    def train_one_batch(self, x, y):
        self.calls.append("train_one_batch")
        out = self(x)  # inside train_one_batch, self(x) is forward
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


@pytest.mark.parametrize("use_graph", [False, True])
def test_call_dispatches_by_mode(dev, use_graph):
    m = Net()
    m.set_optimizer(opt.SGD(0.1))
    x, y = tensor.from_numpy(X, dev), tensor.from_numpy(Y, dev)
    m.compile([x], is_train=True, use_graph=use_graph, sequential=True)
    params = m.get_params()
    (wname,) = [k for k in params if k.endswith("weight")]
    (bname,) = [k for k in params if k.endswith("bias")]
    w0 = params[wname].to_numpy().copy()
    m.calls.clear()
    out, loss = m(x, y)  # training: a step
    assert m.calls[:2] == ["train_one_batch", "forward"]
    assert out.shape == (8, 3) and np.isfinite(loss.item())
    assert not np.array_equal(w0, params[wname].to_numpy())  # the step updated the weights
    m.eval()
    m.calls.clear()
    with autograd.no_grad():
        pred = m(x)  # eval: forward only
    assert m.calls == ["forward"]
    w, b = params[wname].to_numpy(), params[bname].to_numpy()
    ref = X.astype(np.float64) @ w + b  # weight (in, out)
    np.testing.assert_allclose(pred.to_numpy(), ref, rtol=1e-5, atol=1e-5)


def test_call_without_train_one_batch_is_forward(dev):
    class Plain(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(6, 2)

        def forward(self, x):
            return self.fc(x)

    m = Plain()
    assert m.training
    assert m(tensor.from_numpy(X, dev)).shape == (8, 2)


@pytest.mark.parametrize("use_graph", [False, True])
def test_compile_accepts_placeholders(dev, use_graph):
    """SINGA's examples compile with Tensor(shape, dev) never written, and fill it later."""
    m = Net()
    m.set_optimizer(opt.SGD(0.1))
    tx, ty = Tensor((8, 6), dev), Tensor((8,), dev, "int32")
    m.compile([tx], is_train=True, use_graph=use_graph, sequential=True)
    assert not tx._allocated()  # the check did not write the placeholder
    params = m.get_params()
    w = next(v for k, v in params.items() if k.endswith("weight")).to_numpy().astype(np.float64)
    b = next(v for k, v in params.items() if k.endswith("bias")).to_numpy().astype(np.float64)
    tx.copy_from_numpy(X)
    ty.copy_from_numpy(Y)
    _, loss = m(tx, ty)
    z = X @ w + b
    z -= z.max(1, keepdims=True)
    want = np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(8), Y])
    assert loss.item() == pytest.approx(want, rel=1e-5)
    with pytest.raises(loom.ShapeError):  # the check still finds shape errors, with placeholders too
        Net().compile([Tensor((8, 5), dev)], is_train=True, use_graph=True)
