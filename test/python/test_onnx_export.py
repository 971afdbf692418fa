"""ONNX export checked from outside loom: models exported by loom.onnx_export.to_onnx pass ONNX's
own checker (full check: types and shapes inferred and compared) and onnxruntime, an independent
runtime, computes loom's outputs from the same inputs (to 1e-5 relative).

onnx comes from Debian (python3-onnx) and onnxruntime from a pinned PyPI wheel, both installed by
tools/setup.sh; without them the tests that need them are skipped with the reason (counted by
pytest), never passed silently."""
import os

import numpy as np
import pytest

import loom
from loom import autograd, layer, model, onnx_export, tensor

try:
    import onnx
except ImportError:
    onnx = None
try:
    import onnxruntime
except ImportError:
    onnxruntime = None

SETUP = "run tools/setup.sh (it installs python3-onnx and the onnxruntime wheel)"


def need_onnx():
    if onnx is None:
        pytest.skip(f"the onnx Python package is not installed: {SETUP}")


def need_runtime():
    need_onnx()
    if onnxruntime is None:
        pytest.skip(f"onnxruntime is not installed: {SETUP}")


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
    labels = tensor.from_numpy(np.array([0, 1, 2, 3], np.int32))
    path = tmp_path / "loss.onnx"

    def loss_of(x):
        return autograd.softmax_cross_entropy(autograd.tanh(x), labels)

    with pytest.raises(loom.OnnxError, match=r"op 'softmax_cross_entropy' \(node 'softmax_cross_entropy_\d+'"):
        onnx_export.to_onnx([x], loss_of, "loss", path=str(path))
    assert not path.exists()
    assert issubclass(loom.OnnxError, ValueError)


def test_eagerly_computed_outputs_are_refused_with_advice(dev):
    net = model.mlp([4, 3])
    x = random_input((2, 4), 17)
    y = net(x)
    with pytest.raises(loom.OnnxError, match="captured graph"):
        onnx_export.to_onnx([x], [y])


def test_training_flag_is_restored():
    net = model.small_cnn(3, 10)
    net.train()
    onnx_export.to_onnx([random_input((2, 3, 32, 32), 18)], net, "cnn")
    assert net.training


def test_exportable_ops_lists_the_table():
    rows = dict(onnx_export.exportable_ops())
    assert rows["conv2d_relu"] == "Conv + Relu"
    assert rows["batch_norm_infer"] == "BatchNormalization"
    assert "softmax_cross_entropy" not in rows
