"""ONNX export checked from outside loom: models exported by loom.onnx_export.to_onnx pass ONNX's
own checker (full check: types and shapes inferred and compared) and onnxruntime, an independent
runtime, computes loom's outputs from the same inputs (to 1e-5 relative).

onnx comes from Debian (python3-onnx) and onnxruntime from a pinned PyPI wheel, both installed by
tools/setup.sh; without them the tests that need them are skipped with the reason (counted by
pytest), never passed silently, except under CI (environment variable CI set), where they fail."""
import os
import sys

import numpy as np
import pytest

import loom
from loom import autograd, layer, model, onnx_export, opt, tensor

try:
    import onnx
except ImportError:
    onnx = None
try:
    import onnxruntime
except ImportError:
    onnxruntime = None

SETUP = "run tools/setup.sh (it installs python3-onnx and the onnxruntime wheel)"


def _missing(what):
    # CI runs after tools/setup.sh, which installs both: there a missing package is a failure.
    if os.environ.get("CI"):
        pytest.fail(f"{what} is not installed although CI ran tools/setup.sh")
    pytest.skip(f"{what} is not installed: {SETUP}")


def need_onnx():
    if onnx is None:
        _missing("the onnx Python package")


def need_runtime():
    need_onnx()
    if onnxruntime is None:
        _missing("onnxruntime")


def random_input(shape, seed):
    return tensor.from_numpy(np.random.RandomState(seed).standard_normal(shape).astype(np.float32))


def randomize_states(net, seed):
    """BatchNorm statistics and affine parameters away from their identity defaults, so that a
    dropped or misordered BatchNormalization input would change the outputs."""
    rng = np.random.RandomState(seed)
    values = {}
    for name, t in net.get_states().items():
        if name.endswith(("running_var", "gamma")):
            values[name] = rng.uniform(0.5, 1.5, t.shape).astype(np.float32)
        elif name.endswith(("running_mean", "beta")):
            values[name] = (0.1 * rng.standard_normal(t.shape)).astype(np.float32)
    net.set_states(values)


def run_onnx(proto, feeds):
    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def expect_close(got, want):
    """Within 1e-5 relative: elementwise against the output's scale, and as a whole."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert scale > 0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)
    assert np.linalg.norm(got - want) <= 1e-5 * np.linalg.norm(want)


def check_against_runtime(net, shape, seed, name, dynamic_batch=False):
    x = random_input(shape, seed)
    proto = onnx_export.to_onnx([x], net, name, dynamic_batch=dynamic_batch)
    onnx.checker.check_model(proto, full_check=True)
    net.eval()
    with autograd.no_grad():
        want = net(x).to_numpy()
    (got,) = run_onnx(proto, {"input_0": x.to_numpy()})
    expect_close(got, want)
    return proto


class PyMLP(model.Model):
    """SINGA-style model over loom.layer, with a softmax head."""

    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = layer.Linear(12, 16), layer.ReLU(), layer.Linear(16, 5)

    def forward(self, x):
        return autograd.softmax(self.fc2(self.act(self.fc1(x))))


class PyCNN(model.Model):
    """The examples' CNN shape (conv-BN-ReLU-pool twice, then a classifier), with a grouped,
    strided, dilated convolution and average pooling."""

    def __init__(self):
        super().__init__()
        self.features = layer.Sequential(
            layer.Conv2d(3, 8, 3, padding=1, bias=False), layer.BatchNorm2d(8), layer.ReLU(), layer.MaxPool2d(2, 2),
            layer.Conv2d(8, 8, 3, stride=2, padding=2, dilation=2, groups=2), layer.Tanh(), layer.AvgPool2d(2, 2),
            layer.Flatten())
        self.classifier = layer.Linear(8 * 2 * 2, 10)

    def forward(self, x):
        return self.classifier(self.features(x))


def test_mlp_from_the_zoo_matches_onnxruntime():
    need_runtime()
    net = model.mlp([20, 32, 16, 10])
    proto = check_against_runtime(net, (3, 20), 1, "mlp")
    assert [n.op_type for n in proto.graph.node] == ["Gemm", "Relu", "Gemm", "Relu", "Gemm"]
    assert {i.name for i in proto.graph.initializer} >= set(net.get_params())


def test_python_mlp_with_softmax_matches_onnxruntime():
    need_runtime()
    proto = check_against_runtime(PyMLP(), (4, 12), 2, "py_mlp")
    assert proto.graph.node[-1].op_type == "Softmax"


def test_small_cnn_matches_onnxruntime():
    need_runtime()
    net = model.small_cnn(3, 10)
    randomize_states(net, 3)
    check_against_runtime(net, (2, 3, 32, 32), 4, "small_cnn")


def test_python_cnn_with_grouped_dilated_conv_matches_onnxruntime():
    need_runtime()
    net = PyCNN()
    randomize_states(net, 5)
    proto = check_against_runtime(net, (2, 3, 16, 16), 6, "py_cnn")
    groups = [a.i for n in proto.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "group"]
    assert groups == [1, 2]


def test_resnet18_matches_onnxruntime():
    need_runtime()
    net = model.resnet18(10)
    randomize_states(net, 7)
    check_against_runtime(net, (1, 3, 32, 32), 8, "resnet18")


def test_resnet50_matches_onnxruntime():
    need_runtime()
    net = model.resnet50(1000)  # the ImageNet stem: 64 x 64 is the smallest convenient input
    randomize_states(net, 9)
    proto = check_against_runtime(net, (1, 3, 64, 64), 10, "resnet50")
    assert sum(n.op_type == "Conv" for n in proto.graph.node) == 53


def test_dynamic_batch_runs_other_batch_sizes():
    need_runtime()
    net = model.small_cnn(3, 10)
    randomize_states(net, 11)
    proto = onnx_export.to_onnx([random_input((2, 3, 32, 32), 12)], net, "cnn", dynamic_batch=True)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    net.eval()
    for batch in (1, 5):
        x = random_input((batch, 3, 32, 32), 13 + batch)
        (got,) = run_onnx(proto, {"input_0": x.to_numpy()})
        expect_close(got, net(x).to_numpy())


def test_outputs_captured_on_the_device_singa_spelling(dev):
    need_runtime()
    net = model.mlp([6, 8, 3])
    x = random_input((2, 6), 14)
    net.eval()
    with dev.buffer():
        y = net(x)
    proto = onnx_export.to_onnx([x], [y], "captured", input_names=["features"], output_names=["logits"])
    onnx.checker.check_model(proto, full_check=True)
    assert [i.name for i in proto.graph.input] == ["features"]
    assert [o.name for o in proto.graph.output] == ["logits"]
    (got,) = run_onnx(proto, {"features": x.to_numpy()})
    expect_close(got, net(x).to_numpy())


def test_path_is_written_and_read_back(tmp_path):
    need_onnx()
    net = model.mlp([4, 3])
    path = tmp_path / "mlp.onnx"
    proto = onnx_export.to_onnx([random_input((2, 4), 15)], net, "mlp", path=str(path))
    assert onnx.load(str(path)) == proto
    assert os.listdir(tmp_path) == ["mlp.onnx"]  # no temporary file left beside it


def test_unsupported_op_raises_naming_it_before_writing(dev, tmp_path):
    x = random_input((4, 5), 16)
    path = tmp_path / "dropout.onnx"

    def noisy(x):  # training-mode dropout: a random op, no ONNX counterpart computes its mask
        return autograd.tanh(autograd.dropout(x, 0.5, training=True))

    with pytest.raises(loom.OnnxError, match=r"op 'dropout' \(node 'dropout_0' of graph 'noisy'\)"):
        onnx_export.to_onnx([x], noisy, "noisy", path=str(path))
    assert not path.exists()
    assert issubclass(loom.OnnxError, ValueError)


def test_losses_match_onnxruntime():
    need_runtime()
    rng = np.random.RandomState(22)
    logits = tensor.from_numpy(rng.standard_normal((5, 4)).astype(np.float32))
    classes = tensor.from_numpy(np.array([0, 3, 1, 1, 2], np.int32))
    probs = rng.uniform(0, 1, (5, 4)).astype(np.float32)
    probs = tensor.from_numpy(probs / probs.sum(1, keepdims=True))
    target = tensor.from_numpy(rng.standard_normal((5, 4)).astype(np.float32))

    def losses(logits, classes, probs, target):
        return [autograd.softmax_cross_entropy(logits, classes), autograd.softmax_cross_entropy(logits, probs),
                autograd.mse_loss(logits, target)]

    feeds = [logits, classes, probs, target]
    proto = onnx_export.to_onnx(feeds, losses, "losses")
    onnx.checker.check_model(proto, full_check=True)
    got = run_onnx(proto, {f"input_{i}": t.to_numpy() for i, t in enumerate(feeds)})
    for g, w in zip(got, losses(*feeds)):
        expect_close(g, w.to_numpy())


def test_eager_outputs_export_by_their_creators_else_are_refused_with_advice(dev, monkeypatch):
    need_onnx()
    net = model.mlp([4, 3])
    x = random_input((2, 4), 17)
    monkeypatch.setattr(autograd, "training", False)  # no creators recorded
    y = net(x)
    with pytest.raises(loom.OnnxError, match="captured graph"):
        onnx_export.to_onnx([x], [y])
    monkeypatch.setattr(autograd, "training", True)  # SINGA's scripts: y.creator walked back to x
    y = net(x)
    eager, captured = onnx_export.to_onnx([x], [y]), onnx_export.to_onnx([x], net)
    assert [n.op_type for n in eager.graph.node] == [n.op_type for n in captured.graph.node]
    need_runtime()
    expect_close(run_onnx(eager, {eager.graph.input[0].name: x.to_numpy()})[0], y.to_numpy())


def test_training_flag_is_restored():
    net = model.small_cnn(3, 10)
    net.train()
    onnx_export.to_onnx([random_input((2, 3, 32, 32), 18)], net, "cnn")
    assert net.training
    before = autograd.training
    net.eval()
    autograd.training = before  # the global flag and the model's mode may differ; export keeps both
    onnx_export.to_onnx([random_input((2, 3, 32, 32), 18)], net, "cnn")
    assert autograd.training == before and not net.training


def test_layers_sized_by_their_first_input_are_made_before_the_capture():
    need_runtime()
    net = layer.Sequential(layer.Linear(6), layer.ReLU(), layer.Linear(2))  # SINGA's Linear(out)
    x = random_input((3, 4), 24)
    proto = onnx_export.to_onnx([x], net, "lazy")
    (got,) = run_onnx(proto, {"input_0": x.to_numpy()})
    expect_close(got, net(x).to_numpy())


def test_native_model_exports_its_network():
    need_runtime()
    x = random_input((3, 5), 20)
    m = model.NativeModel(model.mlp([5, 7, 2]), opt.SGD(lr=0.1))
    m.compile([x], is_train=True, use_graph=True)
    proto = onnx_export.to_onnx([x], m, "native")
    onnx.checker.check_model(proto, full_check=True)
    (got,) = run_onnx(proto, {"input_0": x.to_numpy()})
    expect_close(got, m.forward(x).to_numpy())


def test_exportable_ops_lists_the_table():
    rows = dict(onnx_export.exportable_ops())
    assert rows["conv2d_relu"] == "Conv + Relu"
    assert rows["batch_norm_infer"] == "BatchNormalization"
    assert rows["softmax_cross_entropy"].startswith("LogSoftmax")
    assert "dropout" not in rows and "sgd_update" not in rows and "relu_grad" not in rows


def test_every_elementwise_shape_and_reduction_op_matches_onnxruntime():
    """One graph over most rows of the export table (export_ops.cc), each result an output of its
    own, so that one op written with the wrong ONNX semantics fails by name."""
    need_runtime()
    rng = np.random.RandomState(19)
    x = tensor.from_numpy(rng.standard_normal((2, 3, 4)).astype(np.float32))
    y = tensor.from_numpy(rng.standard_normal((2, 3, 4)).astype(np.float32))
    gamma = tensor.from_numpy(rng.uniform(0.5, 1.5, (4,)).astype(np.float32))
    beta = tensor.from_numpy(rng.standard_normal((4,)).astype(np.float32))
    table = tensor.from_numpy(rng.standard_normal((7, 5)).astype(np.float32))
    idx = tensor.from_numpy(np.array([[0, 6, 2], [3, 3, 1]], np.int32))
    ag = autograd
    f32 = loom.float32

    def many(x, y, idx):
        pos = ag.add_scalar(ag.abs(y), 0.5)
        return {
            "add": ag.add(x, y), "sub": ag.sub(x, y), "mul": ag.mul(x, y), "div": ag.div(x, pos),
            "pow": ag.pow(pos, x), "add_scalar": ag.add_scalar(x, 1.5), "mul_scalar": ag.mul_scalar(x, -2.0),
            "pow_scalar": ag.pow_scalar(pos, 3.0), "rsub_scalar": ag.rsub_scalar(x, 1.0),
            "rdiv_scalar": ag.rdiv_scalar(pos, 2.0), "neg": ag.neg(x), "exp": ag.exp(x), "log": ag.log(pos),
            "sqrt": ag.sqrt(pos), "erf": ag.erf(x), "clamp": ag.clamp(x, -0.5, 0.25),
            "where": ag.where(ag.greater(x, y), x, y), "equal": ag.cast(ag.equal(ag.relu(x), ag.relu(y)), f32),
            "not_equal": ag.cast(ag.not_equal(ag.relu(x), ag.relu(y)), f32), "less": ag.cast(ag.less(x, y), f32),
            "greater_equal": ag.cast(ag.greater_equal(x, y), f32), "less_equal": ag.cast(ag.less_equal(x, y), f32),
            "sigmoid": ag.sigmoid(x), "tanh": ag.tanh(x), "softplus": ag.softplus(x),
            "leaky_relu": ag.leaky_relu(x, 0.2), "gelu": ag.gelu(x), "softmax": ag.softmax(x, 1),
            "log_softmax": ag.log_softmax(x, -1),
            "matmul_batched": ag.matmul(x, ag.transpose(y, 1, 2)),  # (2, 3, 3), a transposed view
            "permute": ag.relu(ag.permute(x, [2, 0, 1])),
            "concat": ag.concat([x, y], 1), "slice": ag.slice(ag.concat([x, y], 1), 1, 2, 5),
            "sum": ag.sum(x, 1, keepdims=True), "max": ag.max(x, 2),
            "broadcast_to": ag.broadcast_to(ag.sum(x, 0, keepdims=True), [2, 3, 4]),
            "layer_norm": ag.layernorm(x, gamma, beta, 1e-3), "embedding": ag.embedding(table, idx),
            "reshape": ag.exp(ag.reshape(x, [6, 4])),
        }

    feeds = [x, y, idx]
    proto = onnx_export.to_onnx(feeds, many, "many", input_names=["x", "y", "idx"])
    onnx.checker.check_model(proto, full_check=True)
    with autograd.no_grad():
        want = many(x, y, idx)
    got = run_onnx(proto, {"x": x.to_numpy(), "y": y.to_numpy(), "idx": idx.to_numpy()})
    assert len(got) == len(want)
    for (name, w), g in zip(want.items(), got):
        try:
            expect_close(g, w.to_numpy())
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def test_without_the_onnx_package_the_model_comes_back_as_bytes(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` now raises ImportError
    path = tmp_path / "mlp.onnx"
    data = onnx_export.to_onnx([random_input((2, 4), 21)], model.mlp([4, 3]), "mlp", path=str(path))
    assert isinstance(data, bytes) and data == path.read_bytes()


def test_padded_pooling_matches_onnxruntime():
    """Padding never wins a max (negative inputs show it) and counts in an average only with
    count_include_pad."""
    need_runtime()
    x = random_input((2, 3, 7, 6), 23)

    def pools(x):
        return [autograd.max_pool_2d(x, 3, 2, 1), autograd.avg_pool_2d(x, 3, 2, 1, count_include_pad=True),
                autograd.avg_pool_2d(x, 3, 1, 1, count_include_pad=False), autograd.global_avg_pool(x)]

    proto = onnx_export.to_onnx([x], pools, "pools")
    onnx.checker.check_model(proto, full_check=True)
    for g, w in zip(run_onnx(proto, {"input_0": x.to_numpy()}), pools(x)):
        expect_close(g, w.to_numpy())
