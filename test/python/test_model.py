"""Models: SINGA-style Python Model subclasses and the C++ NativeModel, compiled eager or graph;
graph replays run no Python per op; recapture, errors and optimizer settings across replays."""
import sys

import numpy as np
import pytest

import loom
from loom import autograd, layer, model, opt, tensor


class MLP(model.Model):
    def __init__(self, dims, dev, dropout=0.0):
        super().__init__()
        self.layers = []
        for i in range(len(dims) - 1):
            self.layers.append(layer.Linear(dims[i], dims[i + 1], device=dev))
        self.relu = layer.ReLU()
        self.drop = layer.Dropout(dropout) if dropout else None
        self.forward_calls = 0

    def forward(self, x):
        self.forward_calls += 1
        for i, l in enumerate(self.layers):
            x = l(x)
            if i + 1 < len(self.layers):
                x = self.relu(x)
                if self.drop is not None:
                    x = self.drop(x)
        return x

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def batches(n, batch=16, features=20, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    protos = rng.normal(size=(classes, features))
    for _ in range(n):
        y = rng.integers(0, classes, batch).astype(np.int32)
        x = (protos[y] + 0.5 * rng.normal(size=(batch, features))).astype(np.float32)
        yield x, y


def train(dev, use_graph, steps=8, sequential=True, dims=(20, 32, 32, 4), dropout=0.0, numpy_inputs=False,
          optimizer=None, memory_budget=None, batch=16):
    dev.SetRandSeed(11)
    m = MLP(dims, dev, dropout)
    m.set_optimizer(optimizer or opt.SGD(0.1, momentum=0.9, weight_decay=1e-4))
    data = list(batches(steps, batch))
    x = tensor.from_numpy(data[0][0], dev)
    y = tensor.from_numpy(data[0][1], dev)
    m.compile([x], is_train=True, use_graph=use_graph, sequential=sequential, memory_budget=memory_budget)
    losses = []
    for xb, yb in data:
        if numpy_inputs:
            out, loss = m.train_one_batch(xb, yb)
        else:
            x.copy_from_numpy(xb)
            y.copy_from_numpy(yb)
            out, loss = m.train_one_batch(x, y)
        assert out.shape == (batch, dims[-1])
        losses.append(loss.item())
    return m, losses


def test_python_model_graph_equals_eager_bitwise(dev):
    me, eager = train(dev, use_graph=False)
    mg, graph = train(dev, use_graph=True)
    assert eager == graph
    assert graph[-1] < graph[0]
    for (ka, a), (kb, b) in zip(me.get_params().items(), mg.get_params().items()):
        assert ka == kb and a.to_numpy().tobytes() == b.to_numpy().tobytes()
    # with dropout: fresh numbers every replay, the same ones as eager from the same seed
    _, eager_d = train(dev, use_graph=False, dropout=0.2)
    _, graph_d = train(dev, use_graph=True, dropout=0.2)
    assert eager_d == graph_d and eager_d != eager


def test_memory_budget_recomputes_and_stays_bitwise_equal(dev):
    kw = dict(use_graph=True, dims=(20,) + (64,) * 8 + (4,), dropout=0.2, batch=256, steps=4)
    m0, plain = train(dev, **kw)
    st = m0.graph().stats()
    budget = st["persistent_bytes"] + st["arena_bytes"] // 2
    m1, budgeted = train(dev, memory_budget=budget, **kw)
    st1 = m1.graph().stats()
    assert st1["recomputed_ops"] > 0 and st1["arena_bytes"] + st1["persistent_bytes"] <= budget
    assert budgeted == plain
    for (ka, a), (kb, b) in zip(m0.get_params().items(), m1.get_params().items()):
        assert ka == kb and a.to_numpy().tobytes() == b.to_numpy().tobytes()
    with pytest.raises(loom.GraphError, match="smallest peak reached is"):
        train(dev, memory_budget=st["persistent_bytes"] + 64, **kw)


@pytest.mark.parametrize("budget, error", [("1e9", loom.TypeError), (True, loom.TypeError), (float("nan"), loom.ValueError),
                                           (float("inf"), loom.ValueError), (-1, loom.ValueError),
                                           (1.5, loom.ValueError)])
def test_memory_budget_that_is_not_a_byte_count_is_a_loom_error(dev, budget, error):
    # A string, NaN or inf raised Python's own ValueError or OverflowError from int().
    with pytest.raises(error, match="memory_budget"):
        train(dev, use_graph=True, steps=1, memory_budget=budget)


def test_memory_budget_given_as_a_whole_float_is_taken(dev):
    m, _ = train(dev, use_graph=True, steps=1, memory_budget=float(1 << 40))
    assert m.graph().options()["memory_budget"] == 1 << 40


class ConvNet(model.Model):
    def __init__(self, dev):
        super().__init__()
        self.c1 = layer.Conv2d(3, 16, 3, padding=1, device=dev)
        self.c2 = layer.Conv2d(16, 32, 3, padding=1, device=dev)
        self.relu = layer.ReLU()
        self.pool = layer.GlobalAvgPool()
        self.fc = layer.Linear(32, 4, device=dev)

    def forward(self, x):
        return self.fc(self.pool(self.relu(self.c2(self.relu(self.c1(x))))))

    def train_one_batch(self, x, y):
        loss = autograd.softmax_cross_entropy(self.forward(x), y)
        self.optimizer(loss)
        return loss


def test_conv_weights_kept_blocked_read_as_numpy_between_replays(dev):
    """Note [Weights kept blocked] (device/cpu/passes/weight_layout.cc): a graph keeps c2's weight and momentum
    in oneDNN's layout between replays; Python reads (to_numpy, np.asarray) and writes between
    steps see and reach the usual values, bitwise as in eager mode."""
    rng = np.random.default_rng(5)
    data = [(rng.normal(size=(4, 3, 6, 6)).astype(np.float32), rng.integers(0, 4, 4).astype(np.int32))
            for _ in range(4)]

    def run(use_graph):
        dev.SetRandSeed(3)
        m = ConvNet(dev)
        m.set_optimizer(opt.SGD(0.05, momentum=0.9))
        x, y = tensor.from_numpy(data[0][0], dev), tensor.from_numpy(data[0][1], dev)
        m.compile([x], is_train=True, use_graph=use_graph)
        seen = []
        for xb, yb in data:
            x.copy_from_numpy(xb)
            y.copy_from_numpy(yb)
            seen.append(m.train_one_batch(x, y).item())
            w = m.c2.get_params()
            (key, weight), = [(k, v) for k, v in w.items() if v.shape == (32, 16, 3, 3)]
            seen.append(weight.to_numpy().tobytes())
            seen.append(np.asarray(weight).tobytes())
            # a zero-copy view would show the blocked values after the next replay: a copy instead
            assert weight.is_host_viewable() == (not use_graph)
            weight.copy_from_numpy(weight.to_numpy() * np.float32(0.9))
        stats = m.graph().stats() if use_graph else None
        return seen, stats

    eager, _ = run(False)
    graph, stats = run(True)
    assert stats["blocked_weights"] == 2  # c2's weight and its momentum; c1 has 3 input channels
    assert eager == graph


def test_python_model_parallel_replay_agrees(dev):
    _, serial = train(dev, use_graph=True, sequential=True)
    _, parallel = train(dev, use_graph=True, sequential=False)
    np.testing.assert_allclose(parallel, serial, rtol=1e-5)


def test_numpy_inputs(dev):
    _, a = train(dev, use_graph=True, numpy_inputs=True)
    _, b = train(dev, use_graph=False, numpy_inputs=True)
    _, c = train(dev, use_graph=False)
    assert a == b == c


def count_python_calls(fn):
    calls = [0]

    def prof(frame, event, arg):
        if event == "call":
            calls[0] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls[0]


def test_graph_replay_runs_no_python_per_op(dev):
    counts = {}
    for depth in (2, 6):
        dims = (20,) + (32,) * depth + (4,)
        m, _ = train(dev, use_graph=True, steps=3, dims=dims)
        assert m.forward_calls == 2  # compile's shape check and the capture; none per replay
        x, y = next(batches(1))
        xt, yt = tensor.from_numpy(x, dev), tensor.from_numpy(y, dev)
        counts[depth] = count_python_calls(lambda: m.train_one_batch(xt, yt))
        assert m.forward_calls == 2
    # A replay costs the same few Python calls however many ops the step has.
    assert counts[2] == counts[6] < 30
    me, _ = train(dev, use_graph=False, steps=1, dims=(20,) + (32,) * 6 + (4,))
    x, y = next(batches(1))
    xt, yt = tensor.from_numpy(x, dev), tensor.from_numpy(y, dev)
    assert count_python_calls(lambda: me.train_one_batch(xt, yt)) > counts[6]


def test_new_batch_shape_recaptures_or_raises(dev):
    m, _ = train(dev, use_graph=True, steps=2)
    g16 = m.graph()
    x, y = next(batches(1, batch=5))
    out, loss = m.train_one_batch(x, y)
    assert out.shape == (5, 4) and np.isfinite(loss.item())
    g5 = m.graph()
    assert g5.name() != g16.name() and g16.finalized() and g5.finalized()
    assert not dev.HasGraph(g16.name())  # a model's graphs are its own, not the device's registry's
    m.set_recapture(False)
    m.train_one_batch(*next(batches(1, batch=16)))
    with pytest.raises(loom.GraphError) as e:
        m.train_one_batch(x, y)
    assert "(5, 20)" in str(e.value) and "(16, 20)" in str(e.value)


def test_tensor_inputs_fast_path_still_checks_every_input(dev):
    # Tensor-only calls skip building a key in Python (the replay fast path): a new shape must
    # still recapture, the old shape replay again, and a new shape or dtype with recapture off
    # (or input the step cannot take) must raise a loom error, as with numpy inputs.
    m, _ = train(dev, use_graph=True, steps=3)
    key16, calls = m.graph().name(), m.forward_calls
    x5, y5 = (tensor.from_numpy(a, dev) for a in next(batches(1, batch=5)))
    out, loss = m.train_one_batch(x5, y5)
    assert out.shape == (5, 4) and np.isfinite(loss.item())
    assert m.forward_calls == calls + 1 and m.graph().name() != key16
    x16, y16 = (tensor.from_numpy(a, dev) for a in next(batches(1, seed=1)))
    out, loss = m.train_one_batch(x16, y16)
    assert out.shape == (16, 4) and m.graph().name() == key16 and m.forward_calls == calls + 1
    with pytest.raises(loom.Error):  # float64 inputs against float32 weights: refused at capture
        m.train_one_batch(x16.astype("float64"), y16)
    assert not dev.buffering()
    with pytest.raises(TypeError):
        m.train_one_batch(x16, [1, 2])
    m.set_recapture(False)
    m.train_one_batch(x16, y16)
    with pytest.raises(loom.GraphError) as e:
        m.train_one_batch(x5, y5)
    assert "(5, 20)" in str(e.value) and "(16, 20)" in str(e.value)
    with pytest.raises(loom.GraphError) as e:
        m.train_one_batch(x16, y16.astype("int64"))
    assert "int64 (16,)" in str(e.value) and "int32 (16,)" in str(e.value)
    out, loss = m.train_one_batch(x16, y16)  # the captured step is intact
    assert out.shape == (16, 4) and np.isfinite(loss.item())


def test_step_arguments_and_results_keep_their_structure(dev):
    class Step(model.Model):
        def forward(self, x):
            return x

        def train_one_batch(self, *args, result="tuple"):
            total = args[0] - args[1]
            for a in args[2:]:
                total = total - a
            if result == "tensor":
                return total
            if result == "dict":
                return {"total": total, "parts": [args[0], 3]}
            return total, total * 2

    def values(t):
        return t.to_numpy().tolist()

    m = Step()
    a, b, c = (tensor.zeros((2,), dev) for _ in range(3))
    m.compile([a], use_graph=True)
    for va in (5.0, 7.0):  # capture, then replay with new values (the tensor-only fast path)
        a.copy_from_numpy(np.full((2,), va, np.float32))
        b.copy_from_numpy(np.full((2,), 2.0, np.float32))
        c.copy_from_numpy(np.full((2,), 1.0, np.float32))
        total, double = m.train_one_batch(a, b)
        assert values(total) == [va - 2] * 2 and values(double) == [2 * (va - 2)] * 2
        assert values(m.train_one_batch(a, b, c)[0]) == [va - 3] * 2  # three tensors: a step of its own
        # a constant's position is part of the step: a - 1 is not 1 - a
        assert values(m.train_one_batch(a, 1.0)[0]) == [va - 1] * 2
        assert values(m.train_one_batch(1.0, a)[0]) == [1 - va] * 2
        assert values(m.train_one_batch(a, b, result="tensor")) == [va - 2] * 2
        d = m.train_one_batch(a, b, result="dict")
        assert values(d["total"]) == [va - 2] * 2 and values(d["parts"][0]) == [va] * 2 and d["parts"][1] == 3
    assert len(m._steps) == 6 and len({s.last_graph().name() for s, *_ in m._steps.values()}) == 6


def test_python_error_during_capture_propagates_and_cleans_up(dev):
    class Broken(MLP):
        fail = True

        def train_one_batch(self, x, y):
            out = self.forward(x)
            if Broken.fail:
                raise KeyError("user bug")
            loss = autograd.softmax_cross_entropy(out, y)
            self.optimizer(loss)
            return out, loss

    m = Broken((20, 8, 4), dev)
    m.set_optimizer(opt.SGD(0.1))
    x, y = next(batches(1))
    m.compile([tensor.from_numpy(x, dev)], use_graph=True)
    with pytest.raises(KeyError, match="user bug"):
        m.train_one_batch(x, y)
    assert not dev.buffering()
    Broken.fail = False
    out, loss = m.train_one_batch(x, y)  # captures afresh
    assert np.isfinite(loss.item())


def test_host_read_inside_a_captured_step_is_a_graph_error(dev):
    class Reads(MLP):
        def train_one_batch(self, x, y):
            loss = autograd.softmax_cross_entropy(self.forward(x), y)
            print(loss.item())
            self.optimizer(loss)
            return loss

    m = Reads((20, 8, 4), dev)
    m.set_optimizer(opt.SGD(0.1))
    x, y = next(batches(1))
    m.compile([tensor.from_numpy(x, dev)], use_graph=True)
    with pytest.raises(loom.GraphError, match="capturing"):
        m.train_one_batch(x, y)
    assert not dev.buffering()


def test_compile_checks_shapes_and_devices(dev):
    m = MLP((20, 8, 4), dev)
    m.set_optimizer(opt.SGD(0.1))
    with pytest.raises(loom.ShapeError, match="Linear"):
        m.compile([tensor.zeros((16, 21), dev)], use_graph=True)
    assert not dev.buffering()
    with pytest.raises(TypeError):
        m.set_optimizer("sgd")
    with pytest.raises(TypeError):
        m.compile([[1, 2, 3]])


def test_learning_rate_changes_reach_replays(dev):
    sgd = opt.SGD(0.1)
    m, _ = train(dev, use_graph=True, steps=2, optimizer=sgd)
    sgd.lr = 0.0
    assert sgd.lr == 0.0
    before = [p.to_numpy() for p in m.get_params().values()]
    m.train_one_batch(*next(batches(1)))
    assert all(np.array_equal(b, p.to_numpy()) for b, p in zip(before, m.get_params().values()))
    with pytest.raises(loom.ValueError):
        sgd.set_learning_rate(-1)


def test_adam_counts_replays(dev):
    adam = opt.Adam(1e-2)
    _, losses = train(dev, use_graph=True, steps=6, optimizer=adam)
    assert losses[-1] < losses[0]
    assert adam.steps_taken(dev) == 6


def test_eval_forward_after_graph_training(dev):
    m, _ = train(dev, use_graph=True, steps=3)
    m.eval()
    assert not autograd.training
    x, _ = next(batches(1))
    with autograd.no_grad():
        out = m(tensor.from_numpy(x, dev))
    assert out.shape == (16, 4)
    m.train()
    assert autograd.training


def test_native_model_mlp_graph_equals_eager(dev):
    results = {}
    for use_graph in (False, True):
        dev.SetRandSeed(3)
        net = model.mlp([20, 32, 4], device=dev)
        m = model.NativeModel(net, opt.SGD(0.1, momentum=0.9))
        data = list(batches(6))
        m.compile([tensor.from_numpy(data[0][0], dev)], is_train=True, use_graph=use_graph)
        losses = [m.train_one_batch(x, y)[1].item() for x, y in data]
        results[use_graph] = losses
        assert m.steps == 6
        assert list(m.get_params()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
        assert m.forward(data[0][0]).shape == (16, 4)
        if use_graph:
            assert "graph" in m.graph().summary()
    assert results[False] == results[True]
    assert results[True][-1] < results[True][0]


def test_native_model_that_keeps_no_output_returns_none_and_the_same_losses(dev):
    # Note [A step that keeps no output]: (None, loss), the same training, and the graph's output
    # is no longer persistent (the plan holds it instead).
    losses, persistent = {}, {}
    for keep in (True, False):
        dev.SetRandSeed(3)
        m = model.NativeModel(model.mlp([20, 32, 4], device=dev), opt.SGD(0.1, momentum=0.9))
        data = list(batches(4))
        m.compile([tensor.from_numpy(data[0][0], dev)], is_train=True, use_graph=True, keep_output=keep)
        results = [m.train_one_batch(x, y) for x, y in data]
        assert all((out is None) == (not keep) for out, _ in results)
        losses[keep] = [loss.item() for _, loss in results]
        persistent[keep] = m.graph().stats()["persistent_bytes"]
    assert losses[True] == losses[False]
    assert persistent[True] - persistent[False] == 16 * 4 * 4  # the (16, 4) float32 output


def test_native_model_errors(dev):
    class PyNet(layer.Layer):
        def forward(self, x):
            return x

    with pytest.raises(TypeError):
        model.NativeModel(PyNet(), opt.SGD(0.1))
    with pytest.raises(loom.ValueError):
        model.NativeModel(model.mlp([4, 2], device=dev), opt.SGD(0.1), loss="hinge")
    m = model.NativeModel(model.mlp([4, 2], device=dev), opt.SGD(0.1))
    with pytest.raises(loom.GraphError):  # before compile
        m.train_one_batch(np.zeros((2, 4), np.float32), np.zeros(2, np.int32))
    with pytest.raises(loom.ShapeError):
        m.compile([tensor.zeros((2, 5), dev)])


def test_cnn_models_train_in_both_modes(dev):
    class CNN(model.Model):
        def __init__(self):
            super().__init__()
            self.body = layer.Sequential(layer.Conv2d(3, 8, 3, padding=1, device=dev), layer.BatchNorm2d(8, device=dev),
                                         layer.ReLU(), layer.MaxPool2d(2, 2), layer.Flatten(),
                                         layer.Linear(8 * 4 * 4, 3, device=dev))

        def forward(self, x):
            return self.body(x)

        def train_one_batch(self, x, y):
            out = self.forward(x)
            loss = autograd.softmax_cross_entropy(out, y)
            self.optimizer(loss)
            return out, loss

    rng = np.random.default_rng(0)
    protos = rng.normal(size=(3, 3, 8, 8)).astype(np.float32)
    ys = rng.integers(0, 3, (6, 8)).astype(np.int32)
    xs = [(protos[y] + 0.3 * rng.normal(size=(8, 3, 8, 8))).astype(np.float32) for y in ys]
    results = {}
    for use_graph in (False, True):
        dev.SetRandSeed(5)
        m = CNN()
        m.set_optimizer(opt.SGD(0.05, momentum=0.9))
        m.compile([tensor.from_numpy(xs[0], dev)], is_train=True, use_graph=use_graph, sequential=True)
        results[use_graph] = [m.train_one_batch(x, y)[1].item() for x, y in zip(xs, ys)]
        states = m.get_states()
        assert any(k.endswith("running_mean") for k in states)
    assert results[False] == results[True]
    assert results[True][-1] < results[True][0]
    # the zoo's CNN through the C++ Model
    m = model.NativeModel(model.small_cnn(3, 10, device=dev), opt.SGD(0.01, momentum=0.9))
    x = rng.normal(size=(2, 3, 32, 32)).astype(np.float32)
    m.compile([tensor.from_numpy(x, dev)], use_graph=True)
    out, loss = m.train_one_batch(x, np.array([1, 7], np.int32))
    assert out.shape == (2, 10) and np.isfinite(loss.item())


def test_layer_tree_params_and_set_params(dev):
    m = MLP((4, 3, 2), dev)
    names = list(m.get_params())
    assert names == ["layers.0.W", "layers.0.b", "layers.1.W", "layers.1.b"]  # SINGA's names
    m.set_params({"layers.1.b": np.array([1.0, 2.0], np.float32)})
    assert m.get_params()["layers.1.b"].to_numpy().tolist() == [1.0, 2.0]
    with pytest.raises(loom.ValueError, match="no parameter"):
        m.set_params({"nope": np.zeros(2)})
    seq = layer.Sequential(layer.Linear(4, 3, device=dev), layer.ReLU(), layer.Linear(3, 2, device=dev))
    assert list(seq.get_params()) == ["0.W", "0.b", "2.W", "2.b"] and len(seq) == 3
    assert seq(tensor.zeros((5, 4), dev)).shape == (5, 2)
