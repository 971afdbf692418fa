"""SINGA's sonnx.to_onnx([x], [y]) after a plain (eager) forward (Note [Exporting eager
outputs]): the model equals the one exported from the model itself, passes onnx's checker and
onnxruntime computes the same outputs; creators on every op function, several outputs included;
SingaRep.run with loom tensors. onnx / onnxruntime are optional (skipped with the reason,
test_onnx_export.need_onnx)."""
import numpy as np
import pytest

import loom
from loom import autograd, layer, sonnx, tensor
from test_onnx_export import need_onnx, need_runtime, run_onnx

RNG = np.random.default_rng(34)


def _x(shape, dev):
    return tensor.from_numpy(RNG.standard_normal(shape).astype(np.float32), dev)


class Net(layer.Layer):
    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.pool = layer.MaxPool2d(2, 2)
        self.fc = layer.Linear(5)

    def forward(self, x):
        y = self.pool(autograd.relu(self.conv(x)))
        return self.fc(autograd.flatten(autograd.tanh(y)))


def _graph_signature(proto):
    g = proto.graph
    inits = sorted((tuple(i.dims), np.frombuffer(i.raw_data, np.uint8).tobytes()) for i in g.initializer)
    return [(n.op_type, len(n.input), len(n.output)) for n in g.node], inits


def test_eager_outputs_export_as_the_model_does(dev, monkeypatch):
    need_onnx()
    import onnx
    monkeypatch.setattr(autograd, "training", True)
    net, x = Net(), _x((2, 3, 6, 6), dev)
    y = net(x)  # eager: no capture anywhere
    eager = sonnx.to_onnx([x], [y])
    from_model = sonnx.to_onnx([x], net)
    onnx.checker.check_model(eager, full_check=True)
    assert _graph_signature(eager) == _graph_signature(from_model)
    assert [n.op_type for n in eager.graph.node][:3] == ["Conv", "Relu", "MaxPool"]
    need_runtime()
    (got,) = run_onnx(eager, {eager.graph.input[0].name: x.to_numpy()})
    np.testing.assert_allclose(got, y.to_numpy(), rtol=1e-5, atol=1e-5)


def test_intermediates_may_be_freed_and_operators_and_several_inputs_replay(dev, monkeypatch):
    need_onnx()
    monkeypatch.setattr(autograd, "training", True)
    a, b = _x((3, 4), dev), _x((3, 4), dev)
    # The intermediates (a * b, its sin) are dropped at once; the creators still reach a and b.
    y = autograd.SoftMax()(autograd.add(autograd.sin(autograd.mul(a, b)), a))[0]
    proto = sonnx.to_onnx([a, b], [y])
    assert [n.op_type for n in proto.graph.node] == ["Mul", "Sin", "Add", "Softmax"]
    (got,) = sonnx.prepare(proto, device=dev).run([a, b])  # loom tensors in, loom tensors out
    assert isinstance(got, loom.Tensor)
    np.testing.assert_allclose(got.to_numpy(), y.to_numpy(), rtol=1e-6)
    (as_numpy,) = sonnx.SingaRep(sonnx.prepare(proto, device=dev).graph).run([a.to_numpy(), b.to_numpy()])
    assert isinstance(as_numpy, np.ndarray)


@pytest.mark.parametrize("op", ["sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
                                "atanh", "sign", "ceil", "floor", "rounde"])
def test_unary_ops_export_and_run_in_onnxruntime(dev, monkeypatch, op):
    need_runtime()
    monkeypatch.setattr(autograd, "training", True)
    values = RNG.uniform(-0.9, 0.9, (2, 5)).astype(np.float32)
    if op == "acosh":
        values = values + 2.0
    x = tensor.from_numpy(values, dev)
    y = getattr(autograd, op)(x)
    proto = sonnx.to_onnx([x], [y])
    (got,) = run_onnx(proto, {proto.graph.input[0].name: values})
    np.testing.assert_allclose(got, y.to_numpy(), rtol=1e-5, atol=1e-6)


def test_without_recorded_creators_the_export_says_how(dev, monkeypatch):
    monkeypatch.setattr(autograd, "training", False)
    x = _x((2, 3), dev)
    y = autograd.relu(x)
    with pytest.raises(loom.OnnxError, match="autograd.training"):
        sonnx.to_onnx([x], [y])


def test_a_freed_leaf_that_no_op_made_is_an_onnx_error(dev, monkeypatch):
    monkeypatch.setattr(autograd, "training", True)
    x = _x((2, 3), dev)
    y = autograd.add(x, _x((2, 3), dev))  # the constant is dropped at once
    with pytest.raises(loom.OnnxError, match="freed"):
        sonnx.to_onnx([x], [y])


def test_every_op_function_records_a_creator(dev, monkeypatch):
    monkeypatch.setattr(autograd, "training", True)
    x = _x((2, 3, 4), dev)
    for name, args in (("ceil", ()), ("floor", ()), ("reduce_sum", ((1,),)), ("max", ()), ("squeeze", ()),
                       ("unsqueeze", ([0],)), ("tile", ([1, 2, 1],)), ("globalaveragepool", ())):
        fn = getattr(autograd, name)
        arg = x if name != "globalaveragepool" else _x((2, 3, 4, 4), dev)
        y = fn(arg, *args)
        assert y.creator is not None and y.creator.name == name, name
        assert fn.__wrapped__ is not fn


def test_creator_backward_of_several_outputs_matches_numpy(dev, monkeypatch):
    monkeypatch.setattr(autograd, "training", True)
    x = _x((4, 3), dev)
    parts = autograd.split(x, 0, [1, 3])
    dy0, dy1 = np.full((1, 3), 2.0), np.arange(9.0).reshape(3, 3)  # float64, as SINGA's scripts pass
    dx = parts[0].creator.backward(tensor.from_numpy(dy0, dev), tensor.from_numpy(dy1, dev))
    assert dx.dtype == "float32"
    np.testing.assert_allclose(dx.to_numpy(), np.concatenate([dy0, dy1]), rtol=1e-6)
    assert parts[1].creator is parts[0].creator


def test_logical_ops_elu_and_attribute_inputs_round_trip(dev, monkeypatch):
    # _and/_or/_xor/_not carry creators; elu/prelu export a scalar fill (an empty int64 shape
    # initializer, which the importer reads as no values); numbers among to_onnx's inputs are
    # SINGA's attribute values, not graph inputs.
    need_onnx()
    monkeypatch.setattr(autograd, "training", True)
    a = tensor.from_numpy(np.array([[0, -0.3], [0.1, 0.9]], np.float32), dev)
    b = tensor.from_numpy(np.array([[0, 0.0], [0.1, 0.0]], np.float32), dev)
    for y, ins in ((autograd._xor(a, b), [a, b]), (autograd._not(a), [a]), (autograd.elu(a, 0.7), [a]),
                   (autograd.selu(a), [a]), (autograd.clip(a, -0.2, 0.2), [a, -0.2, 0.2])):
        proto = sonnx.to_onnx(ins, [y])
        assert len(proto.graph.input) == (2 if len(ins) == 2 else 1)
        (got,) = sonnx.prepare(proto, device=dev).run([t for t in ins if isinstance(t, loom.Tensor)])
        np.testing.assert_allclose(got.to_numpy(), y.to_numpy(), rtol=1e-6)


def test_creator_gradients_in_singa_form(dev, monkeypatch):
    monkeypatch.setattr(autograd, "training", True)
    x = _x((2, 3), dev)
    dx = autograd.ceil(x).creator.backward()  # a step function: zeros, not an error
    assert dx.shape == (2, 3) and not dx.to_numpy().any()
    t = _x((2, 3), dev)
    dx = autograd.mse_loss(x, t).creator.backward()  # the loss's input only, not the target's
    np.testing.assert_allclose(dx.to_numpy(), 2 * (x.to_numpy() - t.to_numpy()) / 6, rtol=1e-5)
    idx = tensor.from_numpy(np.array([[0, 2]], np.int32), dev)
    emb = layer.Embedding(4, 3)
    dids, dw = emb(idx).creator.backward()
    assert dids.shape == (1, 2) and dids.dtype == "float32" and dw.shape == (4, 3)
    up = autograd.upsample(tensor.from_numpy(np.ones((1, 1, 2, 2), np.float32), dev), "nearest",
                           np.array([1.0, 1.0, 2.0, 3.0], np.float32))
    assert up.shape == (1, 1, 4, 6)


def test_singa_rep_runs_part_of_the_graph_and_retrains(dev, monkeypatch):
    need_onnx()
    monkeypatch.setattr(autograd, "training", True)
    x = _x((2, 3, 3, 3), dev)
    conv1, conv2 = layer.Conv2d(1, 2), layer.Conv2d(1, 2)
    y = autograd.flatten(conv2(conv1(x)))
    first = conv1(x)
    rep = sonnx.prepare(sonnx.to_onnx([x], [y]), device=dev)
    # SINGA's count: last_layers=-1 is node (−1 + 1) mod n = 0, the first convolution
    (got,) = rep.run([x], last_layers=-1)
    np.testing.assert_allclose(got.to_numpy(), first.to_numpy(), rtol=1e-5, atol=1e-6)
    (out,) = rep.run([x])
    target = _x((2, 1), dev)
    loss = autograd.MeanSquareError(target)(out)[0]  # SINGA's class form broadcasts the target
    want = np.mean((out.to_numpy() - target.to_numpy()) ** 2)
    np.testing.assert_allclose(loss.to_numpy(), [want], rtol=1e-5)
    grads = dict(autograd.backward(loss))  # the imported initializers are parameters
    assert len(grads) == len(rep.graph.parameters()) > 0
    with pytest.raises(loom.OnnxError, match="outside"):
        rep.run([x], last_layers=7)


@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_pad_modes_match_numpy_differentiate_and_export(dev, monkeypatch, mode):
    monkeypatch.setattr(autograd, "training", True)
    x = RNG.standard_normal((3, 2)).astype(np.float32)
    tx = tensor.from_numpy(x, dev)
    for pads in ([0, 2, 0, 0], [2, 5, 3, 4]):  # the second longer than the axis: reflected again
        y = autograd.pad(tx, mode, pads)
        np.testing.assert_array_equal(y.to_numpy(), np.pad(x, [(pads[0], pads[2]), (pads[1], pads[3])], mode=mode))
    dy = RNG.standard_normal(y.shape).astype(np.float32)
    dx = y.creator.backward(tensor.from_numpy(dy, dev)).to_numpy()
    idx0 = np.pad(np.arange(3), (2, 3), mode=mode)
    idx1 = np.pad(np.arange(2), (5, 4), mode=mode)
    want = np.zeros_like(x)
    np.add.at(want, (idx0[:, None], idx1[None, :]), dy)
    np.testing.assert_allclose(dx, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(loom.ValueError, match="mode must be"):
        autograd.pad(tx, "wrap", [0, 1, 0, 1])
    need_runtime()
    proto = sonnx.to_onnx([tx], [y])
    (got,) = run_onnx(proto, {proto.graph.input[0].name: x})
    np.testing.assert_array_equal(got, y.to_numpy())


def test_eager_outputs_export_even_after_a_capture_on_the_device(dev, monkeypatch):
    need_onnx()
    monkeypatch.setattr(autograd, "training", True)
    x = _x((2, 3), dev)  # the fixture resets the device's graphs afterwards
    with dev.buffer():
        autograd.relu(x)  # the device now has a default graph, holding another computation
    assert dev.HasGraph("default")
    y = autograd.tanh(autograd.mul(x, x))  # eager, after the capture
    proto = sonnx.to_onnx([x], [y])
    assert [n.op_type for n in proto.graph.node] == ["Mul", "Tanh"]


def test_a_chain_longer_than_the_recursion_limit_exports(dev, monkeypatch):
    need_onnx()
    import sys
    monkeypatch.setattr(autograd, "training", True)
    x = _x((2, 3), dev)
    y = x
    for _ in range(sys.getrecursionlimit() + 200):
        y = autograd.tanh(y)
    proto = sonnx.to_onnx([x], [y])
    assert len(proto.graph.node) == sys.getrecursionlimit() + 200
