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
    (wname,) = [k for k in params if k.endswith(".W")]
    (bname,) = [k for k in params if k.endswith(".b")]
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
    w = next(v for k, v in params.items() if k.endswith(".W")).to_numpy().astype(np.float64)
    b = next(v for k, v in params.items() if k.endswith(".b")).to_numpy().astype(np.float64)
    tx.copy_from_numpy(X)
    ty.copy_from_numpy(Y)
    _, loss = m(tx, ty)
    z = X @ w + b
    z -= z.max(1, keepdims=True)
    want = np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(8), Y])
    assert loss.item() == pytest.approx(want, rel=1e-5)
    with pytest.raises(loom.ShapeError):  # the check still finds shape errors, with placeholders too
        Net().compile([Tensor((8, 5), dev)], is_train=True, use_graph=True)


def test_linear_out_features_only_sizes_itself_at_first_call(dev):
    fc = layer.Linear(3)
    assert not fc.initialized and fc.get_params() == {}
    x = tensor.from_numpy(X, dev)
    y = fc(x)
    assert fc.initialized and fc.in_features == 6
    params = fc.get_params()
    w, b = params["W"].to_numpy(), params["b"].to_numpy()
    assert w.shape == (6, 3)
    np.testing.assert_allclose(y.to_numpy(), X.astype(np.float64) @ w + b, rtol=1e-5, atol=1e-5)
    assert set(layer.Linear(4, False).get_params()) == set()
    nobias = layer.Linear(4, bias=False)
    nobias(x)
    assert set(nobias.get_params()) == {"W"}
    assert layer.Linear(6, 3).initialized  # the explicit two-size form is unchanged
    with pytest.raises(loom.ValueError, match=r"\[Linear\] size"):
        layer.Linear(0)
    with pytest.raises(loom.TypeError, match=r"\[Linear\]"):
        layer.Linear(3)(X)
    seq = layer.Sequential(layer.Linear(5), layer.ReLU(), layer.Linear(2))
    assert seq(x).shape == (8, 2) and len(seq.get_params()) == 4


def test_linear_first_call_during_capture_is_a_graph_error(dev):
    fc = layer.Linear(3)
    x = tensor.from_numpy(X, dev)
    with pytest.raises(loom.GraphError, match="create layers before the capture"):
        with dev.buffer():
            fc(x)


class SingaMLP(model.Model):
    """Written as SINGA writes it: layers sized by their outputs only."""

    def __init__(self):
        super().__init__()
        self.fc1, self.relu, self.fc2 = layer.Linear(16), layer.ReLU(), layer.Linear(3)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def test_singa_style_mlp_graph_equals_eager(dev):
    losses = {}
    for use_graph in (False, True):
        dev.SetRandSeed(42)
        m = SingaMLP()
        m.set_optimizer(opt.SGD(0.1, 0.9))
        tx, ty = Tensor((8, 6), dev), Tensor((8,), dev, "int32")
        m.compile([tx], is_train=True, use_graph=use_graph, sequential=True)  # creates the parameters
        assert len(m.get_params()) == 4
        losses[use_graph] = []
        for step in range(4):
            tx.copy_from_numpy(X + 0.1 * step)
            ty.copy_from_numpy(Y)
            _, loss = m(tx, ty)
            losses[use_graph].append(loss.item())
    assert losses[True] == pytest.approx(losses[False], rel=1e-6)
    assert losses[False][-1] < losses[False][0]


# ---- save_states / load_states with SINGA-form layers and Python optimizers ----

class SingaCNN(model.Model):
    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self.flat = layer.Flatten()
        self.fc = layer.Linear(3)

    def forward(self, x):
        return self.fc(self.flat(autograd.relu(self.bn(self.conv(x)))))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


IMAGES = RNG.normal(size=(3, 6, 2, 5, 5)).astype(np.float32)
LABELS = RNG.integers(0, 3, (3, 6)).astype(np.int32)


def make_cnn(dev, make_opt, seed):
    dev.SetRandSeed(seed)
    m = SingaCNN()
    m.set_optimizer(make_opt())
    m.compile([Tensor((6, 2, 5, 5), dev)], is_train=True, use_graph=False)
    return m


@pytest.mark.parametrize("make_opt", [lambda: opt.SGD(0.05, 0.9), lambda: opt.RMSProp(0.01), lambda: opt.AdaGrad(0.05)])
def test_save_and_load_states_resume_training(dev, tmp_path, make_opt):
    a = make_cnn(dev, make_opt, 1)
    for i in range(2):
        a(tensor.from_numpy(IMAGES[i], dev), tensor.from_numpy(LABELS[i], dev))
    path = str(tmp_path / "cnn.ckpt")
    a.save_states(path, {"epoch": 2.0})
    b = make_cnn(dev, make_opt, 99)  # other initial weights, no optimizer state yet
    assert not np.array_equal(b.get_states()["conv.W"].to_numpy(), a.get_states()["conv.W"].to_numpy())
    assert b.load_states(path) == {"epoch": 2.0}
    assert b.optimizer.lr == a.optimizer.lr and b.optimizer.step_count == 2
    for k, v in a.get_states().items():
        np.testing.assert_array_equal(b.get_states()[k].to_numpy(), v.to_numpy(), err_msg=k)
    x, y = tensor.from_numpy(IMAGES[2], dev), tensor.from_numpy(LABELS[2], dev)
    _, la = a(x, y)
    _, lb = b(x, y)
    assert lb.item() == la.item()
    for k, v in a.get_states().items():  # the optimizer's state came back too: the same update
        np.testing.assert_array_equal(b.get_states()[k].to_numpy(), v.to_numpy(), err_msg=k)


def test_load_states_into_another_python_optimizer_is_refused(dev, tmp_path):
    a = make_cnn(dev, lambda: opt.RMSProp(0.01), 1)
    a(tensor.from_numpy(IMAGES[0], dev), tensor.from_numpy(LABELS[0], dev))
    path = str(tmp_path / "rms.ckpt")
    a.save_states(path)
    b = make_cnn(dev, lambda: opt.AdaGrad(0.01), 2)
    with pytest.raises(loom.IOError, match=r"optimizer state 'optimizer/[\w.]+/running_average' is not AdaGrad's"):
        b.load_states(path)


def test_save_states_aux_states_numbers_and_tensors(dev, tmp_path):
    a = make_cnn(dev, lambda: opt.SGD(0.05), 1)
    path = str(tmp_path / "aux.ckpt")
    best = tensor.from_numpy(np.array([0.25, 0.5], np.float32), dev)
    a.save_states(path, aux_states={"epoch": 3, "best": best})
    b = make_cnn(dev, lambda: opt.SGD(0.05), 2)
    aux = b.load_states(path)
    assert sorted(aux) == ["best", "epoch"] and aux["epoch"] == 3.0
    np.testing.assert_array_equal(aux["best"].to_numpy(), [0.25, 0.5])
    with pytest.raises(loom.TypeError, match=r"\[Model\] save_states: aux state 'note' is a str"):
        a.save_states(path, {"note": "x"})
