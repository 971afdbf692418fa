"""ONNX import from Python (loom.sonnx, loom.onnx_import): a small CNN exported by PyTorch
(torch.onnx.export) imports, runs and matches PyTorch within 1e-5; the imported CNN, a loom
model.Model (SONNXModel), fine-tunes for 20 steps with the same losses eagerly and as a replayed
graph; malformed or unsupported models are loom.OnnxError naming the node.

Needs PyTorch for the exported model (Debian's python3-torch, which tools/setup.sh installs):
without it those tests skip with the reason."""
import io
import os

import numpy as np
import pytest

import loom
from loom import autograd, onnx_import, opt, sonnx, tensor

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the machine
    torch = None
    TORCH_MISSING = f"PyTorch is not installed ({e}); tools/setup.sh installs python3-torch"

needs_torch = pytest.mark.skipif(torch is None, reason=TORCH_MISSING if torch is None else "")


def torch_cnn():
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(1, 4, 3, padding=1)
            self.bn1 = torch.nn.BatchNorm2d(4)
            self.conv2 = torch.nn.Conv2d(4, 8, 3, stride=2, padding=1)
            self.fc = torch.nn.Linear(8 * 3 * 3, 10)

        def forward(self, x):
            x = torch.nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
            x = torch.sigmoid(self.conv2(x))
            x = torch.nn.functional.avg_pool2d(x, 1)
            # x.view(x.size(0), -1) exports as Shape -> Gather -> Unsqueeze -> Concat -> Reshape:
            # a shape computed in the graph, which loom keeps on the host (also when capturing).
            return torch.log_softmax(self.fc(x.view(x.size(0), -1)), dim=1)

    net = Net()
    with torch.no_grad():  # running statistics that are not the identity
        net.bn1.running_mean.uniform_(-0.5, 0.5)
        net.bn1.running_var.uniform_(0.5, 2.0)
    return net.eval()


def export(net, x):
    f = io.BytesIO()
    # A dynamic batch dimension keeps the Shape -> ... -> Reshape chain (a static one folds away).
    torch.onnx.export(net, torch.from_numpy(x), f, opset_version=13, do_constant_folding=False, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return f.getvalue()


def data(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 1, 12, 12)).astype(np.float32), rng.integers(0, 10, n).astype(np.int32)


@needs_torch
def test_pytorch_cnn_imports_and_matches(dev):
    net = torch_cnn()
    x, _ = data()
    model = export(net, x)
    graph = onnx_import.import_model(model, dev)
    ops = set(graph._impl.node_op_types())
    # PyTorch folds eval-mode BatchNorm into the convolution before export.
    assert {"Conv", "MaxPool", "AveragePool", "Shape", "Gather", "Concat", "Reshape", "Gemm", "LogSoftmax"} <= ops
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    got = sonnx.prepare(model, "CPU").run([x])[0]
    assert got.shape == want.shape == (8, 10)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # Another batch size through the same imported graph (the batch dimension is symbolic).
    x3 = x[:3]
    with torch.no_grad():
        np.testing.assert_allclose(sonnx.prepare(model).run([x3])[0], net(torch.from_numpy(x3)).numpy(),
                                   rtol=1e-5, atol=1e-5)
    # Parameters: the float initializers (2 convolutions and the linear layer, weight and bias).
    params = graph.parameters()
    assert len(params) == 6 and all(p.requires_grad for p in params.values())


class Finetune(sonnx.SONNXModel):
    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def finetune(dev, model, use_graph, steps=20, batch=data, lr=0.05):
    """`steps` SGD steps of the imported `model` over four batches `batch(seed=...)` in turn."""
    m = Finetune(model, dev)
    m.set_optimizer(opt.SGD(lr=lr, momentum=0.9))
    x0, y0 = batch(seed=1)
    x, y = tensor.from_numpy(x0, dev), tensor.from_numpy(y0, dev)
    m.compile([x], is_train=True, use_graph=use_graph, sequential=True)
    losses = []
    for i in range(steps):
        xb, yb = batch(seed=100 + i % 4)
        x.copy_from_numpy(xb)
        y.copy_from_numpy(yb)
        _, loss = m.train_one_batch(x, y)
        losses.append(loss.item())
    return m, losses


@needs_torch
def test_imported_cnn_finetunes_equally_in_eager_and_graph_mode(dev):
    model = export(torch_cnn(), data()[0])
    me, eager = finetune(dev, model, use_graph=False)
    mg, graph = finetune(dev, model, use_graph=True)
    assert len(eager) == 20 and eager == graph
    assert np.mean(eager[-4:]) < np.mean(eager[:4])  # it learns the four repeated batches
    pe, pg = me.get_params(), mg.get_params()
    assert list(pe) == list(pg) and len(pe) >= 6
    for k in pe:
        assert pe[k].to_numpy().tobytes() == pg[k].to_numpy().tobytes(), k
    # Fine-tuning changed the imported weights; a fresh import still has the file's.
    fresh = onnx_import.import_model(model, dev).parameters()
    assert any(not np.array_equal(fresh[k].to_numpy(), pe[k].to_numpy()) for k in pe)


def tiny_model_bytes(op_type="Relu", attrs=None, opset=13):
    """A one-node float model written with the onnx package (skips without it)."""
    onnx = pytest.importorskip("onnx", reason="the onnx package is not installed; tools/setup.sh installs python3-onnx")
    from onnx import TensorProto, helper

    node = helper.make_node(op_type, ["x"], ["y"], name="the_node", **(attrs or {}))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def test_errors_name_the_node(dev):
    with pytest.raises(loom.OnnxError, match=r"node 'the_node' \(Det\).*not supported"):
        sonnx.prepare(tiny_model_bytes("Det"))
    with pytest.raises(loom.OnnxError, match=r"node 'the_node' \(LeakyRelu\): attribute 'beta' is not supported"):
        sonnx.prepare(tiny_model_bytes("LeakyRelu", {"beta": 2.0}))
    with pytest.raises(loom.OnnxError, match=r"node 'the_node' \(Relu\): Relu at opset 3 is not supported \(loom implements it for opsets 6 to 17\)"):
        sonnx.prepare(tiny_model_bytes("Relu", opset=3))
    assert not sonnx.is_compatible(tiny_model_bytes("Det"))
    assert sonnx.is_compatible(tiny_model_bytes("Relu"))
    good = tiny_model_bytes("Relu").SerializeToString()
    with pytest.raises(loom.OnnxError, match="not a valid ONNX ModelProto"):
        sonnx.prepare(good[: len(good) // 2] + b"\xff\xff\xff")
    with pytest.raises(loom.TypeError):
        onnx_import.import_model(12, dev)


def test_the_host_value_limit_bounds_what_a_node_builds(dev):
    """Range's values are built on the host: a limit below them is the node's OnnxError
    (Note [Host-built index arrays]); the default is restored after."""
    onnx = pytest.importorskip("onnx", reason="the onnx package is not installed; tools/setup.sh installs python3-onnx")
    from onnx import TensorProto, helper

    consts = [helper.make_tensor(n, TensorProto.FLOAT, [], [v]) for n, v in (("s", 0.0), ("l", 100.0), ("d", 1.0))]
    node = helper.make_node("Range", ["s", "l", "d"], ["y"], name="the_range")
    g = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [100])],
                          initializer=consts)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    graph = onnx_import.import_model(m, dev)
    assert onnx_import.host_value_limit() == 2**26
    assert len(tensor.to_numpy(graph.forward([])[0])) == 100
    try:
        onnx_import.set_host_value_limit(99)
        with pytest.raises(loom.OnnxError, match=r"node 'the_range' \(Range\): range\(0, 100, 1\) has 100 elements, more than the 99"):
            graph.forward([])
    finally:
        onnx_import.set_host_value_limit(2**26)
    with pytest.raises(loom.ValueError, match=r"host value limit 0 must be in \[1, 67108864\]"):
        onnx_import.set_host_value_limit(0)
    assert onnx_import.host_value_limit() == 2**26


def test_backend_runs_and_checks_dtypes(dev):
    rep = sonnx.prepare(tiny_model_bytes("Relu"), "CPU")
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(rep.run([x])[0], np.maximum(x, 0))
    with pytest.raises(loom.OnnxError, match="input 0 'x' is float64, the graph declares float32"):
        rep.run([x.astype(np.float64)])
    assert sonnx.supports_device("CPU")
    assert "Conv" in sonnx.supported_ops() and len(sonnx.supported_ops()) >= 75


def two_input_model():
    """y = a - b: two graph inputs, so that binding them by name can go wrong."""
    onnx = pytest.importorskip("onnx", reason="the onnx package is not installed; tools/setup.sh installs python3-onnx")
    from onnx import TensorProto, helper

    node = helper.make_node("Sub", ["a", "b"], ["y"], name="sub")
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("a", "b")]
    g = helper.make_graph([node], "g", info, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_run_with_a_dict_binds_inputs_by_name(dev):
    rep = sonnx.prepare(two_input_model())
    a, b = np.array([5, 7], np.float32), np.array([1, 2], np.float32)
    np.testing.assert_array_equal(rep.run({"b": b, "a": a})[0], a - b)
    # Without 'a', 'b' was bound to it and a - b ran as b - (nothing): now an error naming 'a'.
    with pytest.raises(loom.ValueError, match="input 'a' is missing from the dict"):
        rep.run({"b": b})
    with pytest.raises(loom.ValueError, match="'c' is not an input of the graph"):
        rep.run({"a": a, "b": b, "c": b})


def test_a_fifo_is_refused_before_reading(tmp_path, dev):
    # Reading a FIFO waits for a writer for ever (the test would hang, not fail, without the check).
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    with pytest.raises(loom.IOError, match=r"not a regular file \(a FIFO\)"):
        sonnx.prepare(str(fifo))
    with pytest.raises(loom.IOError, match=r"not a regular file \(a FIFO\)"):
        onnx_import.import_problem(fifo)
    with pytest.raises(loom.IOError, match="cannot open"):
        sonnx.prepare(str(tmp_path / "missing.onnx"))
    path = tmp_path / "relu.onnx"
    path.write_bytes(tiny_model_bytes("Relu").SerializeToString())
    assert sonnx.is_compatible(str(path))


def test_depth_to_space_with_a_huge_block_size_is_an_error(dev):
    # blocksize 2^32 squared is 0 in int64: SIGFPE killed the interpreter.
    rep = sonnx.prepare(tiny_model_bytes("DepthToSpace", {"blocksize": 2 ** 32}))
    with pytest.raises(loom.OnnxError, match=r"node 'the_node' \(DepthToSpace\): blocksize 4294967296 times"):
        rep.run([np.zeros((2, 3), np.float32).reshape(1, 6, 1, 1)])


def test_paths_that_are_not_model_files_are_loom_errors(tmp_path, dev):
    # Found by tools/probe.py: a directory raised Python's IsADirectoryError (the file object was
    # opened before the check), a NUL byte Python's ValueError, and a sparse 3 GiB file was read
    # whole before protobuf's 2 GiB limit refused it (over 20 s).
    folder = tmp_path / "folder.onnx"
    folder.mkdir()
    huge = tmp_path / "huge.onnx"
    with open(huge, "wb") as f:
        f.truncate(3 << 30)
    for path, error, needle in [(str(folder), loom.IOError, r"not a regular file \(a directory\)"),
                                (str(tmp_path / "a\0b.onnx"), loom.ValueError, "contains a NUL byte"),
                                (str(huge), loom.IOError, "it is 3221225472 bytes, more than the 2147483647")]:
        for call in (sonnx.prepare, onnx_import.import_model, onnx_import.import_problem):
            with pytest.raises(error, match=needle):
                call(path)


def test_backend_arguments_are_loom_errors(dev):
    # Found by tools/probe.py: Python's ValueError from int() and np.asarray.
    rep = sonnx.prepare(two_input_model())
    a = np.array([5, 7], np.float32)
    with pytest.raises(loom.ValueError, match="unknown device 'CUDA:x'"):
        sonnx.prepare(two_input_model(), "CUDA:x")
    with pytest.raises(loom.TypeError, match="last_layers must be a node index"):
        rep.run([a, a], last_layers="x")
    with pytest.raises(loom.TypeError, match="input 0 'a' is not an array"):
        rep.run([[1, [2]], a])
    np.testing.assert_array_equal(rep.run([a, a], last_layers=-1)[0], a - a)
