"""ONNX round trip (issue 18): loom's MLP, small CNN, ResNet-18 and ResNet-50 in eval mode,
exported by loom.sonnx.to_onnx and imported again by loom.sonnx.prepare, give the original's
outputs bitwise (the same kernels run: Gemm -> matmul + bias, Conv -> conv2d, BatchNormalization
-> batch_norm_infer...); the imported small CNN fine-tunes for 20 steps with losses equal in eager
and graph mode. Needs only loom (the onnx package, when present, checks the exported model too)."""
import numpy as np
import pytest

from loom import autograd, model, sonnx, tensor
from test_onnx_import import finetune  # the SONNXModel fine-tuning loop

try:
    import onnx
except ImportError:
    onnx = None


def randomize_states(net, seed):
    """BatchNorm statistics away from their defaults, so a dropped statistic changes outputs."""
    rng = np.random.RandomState(seed)
    values = {}
    for name, t in net.get_states().items():
        if name.endswith("running_var"):
            values[name] = rng.uniform(0.5, 1.5, t.shape).astype(np.float32)
        elif name.endswith("running_mean"):
            values[name] = (0.1 * rng.standard_normal(t.shape)).astype(np.float32)
    net.set_states(values)


def roundtrip(net, shape, seed, name):
    x = tensor.from_numpy(np.random.RandomState(seed).standard_normal(shape).astype(np.float32))
    proto = sonnx.to_onnx([x], net, name)
    if onnx is not None:
        onnx.checker.check_model(proto, full_check=True)
    net.eval()
    with autograd.no_grad():
        want = net(x).to_numpy()
    rep = sonnx.prepare(proto, device="CPU")
    (got,) = rep.run([x.to_numpy()])
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes(), f"{name}: max |diff| {np.abs(got - want).max()}"
    return proto


@pytest.mark.parametrize("name,make,shape,states", [
    ("mlp", lambda: model.mlp([20, 32, 16, 10]), (3, 20), False),
    ("small_cnn", lambda: model.small_cnn(3, 10), (2, 3, 32, 32), True),
    ("resnet18", lambda: model.resnet18(10), (1, 3, 32, 32), True),
    ("resnet50", lambda: model.resnet50(1000), (1, 3, 64, 64), True),
])
def test_export_then_import_gives_the_same_outputs_bitwise(name, make, shape, states):
    net = make()
    if states:
        randomize_states(net, 5)
    roundtrip(net, shape, 6, name)


def batch(seed, n=8):
    rng = np.random.RandomState(seed)
    return rng.standard_normal((n, 3, 32, 32)).astype(np.float32), rng.randint(0, 10, n).astype(np.int32)


def test_exported_small_cnn_imports_and_finetunes_equally_in_eager_and_graph_mode(dev):
    net = model.small_cnn(3, 10)
    randomize_states(net, 7)
    proto = roundtrip(net, (8, 3, 32, 32), 8, "small_cnn")
    # Imported BatchNorm is the inference form (frozen statistics): a small rate keeps it stable.
    me, eager = finetune(dev, proto, use_graph=False, batch=batch, lr=0.002)
    mg, graph = finetune(dev, proto, use_graph=True, batch=batch, lr=0.002)
    assert len(eager) == 20 and eager == graph
    assert np.mean(eager[-4:]) < np.mean(eager[:4])  # it learns the four repeated batches
    pe, pg = me.get_params(), mg.get_params()
    assert list(pe) == list(pg) and len(pe) >= 4
    for k in pe:
        assert pe[k].to_numpy().tobytes() == pg[k].to_numpy().tobytes(), k
