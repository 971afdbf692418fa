"""Asymmetric padding (Note [Asymmetric padding] in core/ops_cnn.h): convolution and pooling with
pad_mode SAME_UPPER / SAME_LOWER and an odd total, SINGA's odd_padding, and loom's padding_end,
forward and backward against torch 1.13 (explicit F.pad, then no padding), eager and graph."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import loom
from loom import autograd, layer, tensor

RNG = np.random.default_rng(23)


def t64(a, dev, grad=False):
    return tensor.from_numpy(np.asarray(a, np.float64), dev, requires_grad=grad)


def tt(a, grad=False):
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def torch_pad(x, begin, end, value=0.0):
    """F.pad with (left, right, top, bottom) from (top, left) and (bottom, right)."""
    return F.pad(x, (begin[1], end[1], begin[0], end[0]), value=value)


def same_pads(mode, size, kernel, stride, dilation=(1, 1)):
    """ONNX's SAME_*: ceil(size / stride) outputs, an odd total's extra at the end (UPPER) or the
    beginning (LOWER); computed here independently of layer.py."""
    begin, end = [], []
    for n, k, s, d in zip(size, kernel, stride, dilation):
        out = (n + s - 1) // s
        total = max(0, (out - 1) * s + d * (k - 1) + 1 - n)
        lo = total // 2 if mode == "SAME_UPPER" else (total + 1) // 2
        begin.append(lo)
        end.append(total - lo)
    return tuple(begin), tuple(end)


def grads(dev, fn, tfn, arrays):
    """fn(*loom tensors) and tfn(*torch tensors): outputs, and the gradients of sum(y * R)."""
    ts = [t64(a, dev, True) for a in arrays]
    y = fn(*ts)
    r = RNG.normal(size=y.shape)
    pairs = [(p.to_numpy(), g.to_numpy()) for p, g in autograd.backward(y, t64(r, dev))]
    assert len(pairs) == len(arrays)
    tts = [tt(a, True) for a in arrays]
    ty = tfn(*tts)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.to_numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    (ty * tt(r)).sum().backward()
    for a, torch_t in zip(arrays, tts):
        g, = [g for p, g in pairs if p.shape == a.shape and np.array_equal(p, a)]
        np.testing.assert_allclose(g, torch_t.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("size,kernel,stride,dilation", [
    ((5, 6), (3, 3), (2, 2), (1, 1)),   # W: a total of 1
    ((7, 6), (2, 2), (1, 1), (1, 1)),   # a total of 1 on both axes
    ((6, 9), (3, 2), (2, 3), (2, 1)),   # dilated, per-axis strides
])
def test_conv2d_same_modes_against_torch(dev, mode, size, kernel, stride, dilation):
    begin, end = same_pads(mode, size, kernel, stride, dilation)
    assert begin != end, "each case has an odd total"
    x = RNG.normal(size=(2, 3) + size)
    conv = layer.Conv2d(4, kernel, stride=stride, dilation=dilation, pad_mode=mode)
    y = conv(t64(x, dev))
    assert y.shape[2:] == tuple(-(-n // s) for n, s in zip(size, stride))  # ceil(H / stride)
    w, b = conv.W.to_numpy(), conv.b.to_numpy()
    ref = F.conv2d(torch_pad(tt(x), begin, end), tt(w), tt(b), stride, 0, dilation)
    np.testing.assert_allclose(y.to_numpy(), ref.numpy(), rtol=1e-10, atol=1e-12)
    grads(dev, lambda xt, wt: autograd.conv2d(xt, wt, None, stride, begin, dilation, 1, padding_end=end),
          lambda xt, wt: F.conv2d(torch_pad(xt, begin, end), wt, None, stride, 0, dilation), [x, w])


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("is_max", [True, False])
def test_pooling_same_modes_against_torch(dev, mode, is_max):
    size, kernel, stride = (6, 7), (3, 2), (2, 1)  # totals 1 and 1
    begin, end = same_pads(mode, size, kernel, stride)
    # all negative: a zero from the padding would win a max
    x = -np.abs(RNG.normal(size=(2, 3) + size)) - 0.1
    y = layer.Pooling2d(kernel, stride, is_max=is_max, pad_mode=mode)(t64(x, dev))
    if is_max:
        ref = F.max_pool2d(torch_pad(tt(x), begin, end, -np.inf), kernel, stride)
    else:  # count_include_pad: the padded zeros count, whichever end they are at
        ref = F.avg_pool2d(torch_pad(tt(x), begin, end), kernel, stride)
    np.testing.assert_allclose(y.to_numpy(), ref.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool_padding_end_both_count_conventions(dev, count_include_pad):
    x = RNG.normal(size=(2, 2, 5, 6))
    kernel, stride, begin, end = (3, 3), (2, 2), (0, 1), (1, 0)

    def ref(xt):
        s = F.avg_pool2d(torch_pad(xt, begin, end), kernel, stride, divisor_override=1)  # window sums
        if count_include_pad:
            return s / (kernel[0] * kernel[1])
        ones = torch_pad(torch.ones_like(xt), begin, end)
        return s / F.avg_pool2d(ones, kernel, stride, divisor_override=1)  # pixels inside the image

    grads(dev, lambda xt: autograd.avg_pool_2d(xt, kernel, stride, begin, count_include_pad, padding_end=end),
          ref, [x])


def test_max_pool_padding_end_gradient_and_padding_never_wins(dev):
    x = -np.abs(RNG.normal(size=(2, 3, 6, 5))) - 0.1
    kernel, stride, begin, end = (2, 3), (2, 2), (1, 0), (0, 1)
    grads(dev, lambda xt: autograd.max_pool_2d(xt, kernel, stride, begin, padding_end=end),
          lambda xt: F.max_pool2d(torch_pad(xt, begin, end, -np.inf), kernel, stride), [x])
    y = autograd.max_pool_2d(t64(x, dev), kernel, stride, begin, padding_end=end).to_numpy()
    assert (y < 0).all()


@pytest.mark.parametrize("is_max", [True, False])
def test_singa_odd_padding_pool_layers(dev, is_max):
    x = -np.abs(RNG.normal(size=(1, 2, 5, 6))) - 0.1
    odd = (1, 0, 0, 1)  # (top, bottom, left, right): one row on top, one column on the right
    make = layer.MaxPool2d if is_max else layer.AvgPool2d
    pool = make(2, 2, 0, odd_padding=odd)
    assert pool._impl is None  # the Python path: the C++ layer pads symmetrically
    y = pool(t64(x, dev))
    p = torch_pad(tt(x), (1, 0), (0, 1), -np.inf if is_max else 0.0)
    ref = F.max_pool2d(p, 2, 2) if is_max else F.avg_pool2d(p, 2, 2)
    np.testing.assert_allclose(y.to_numpy(), ref.numpy(), rtol=1e-10, atol=1e-12)


def test_singa_odd_padding_conv_and_pooling_functions(dev):
    x, w = RNG.normal(size=(2, 2, 5, 5)), RNG.normal(size=(3, 2, 3, 3))
    odd = (0, 1, 1, 0)  # the extra row at the bottom, the extra column on the left
    grads(dev, lambda xt, wt: autograd.conv2d(xt, wt, None, 2, 1, odd_padding=odd),
          lambda xt, wt: F.conv2d(torch_pad(xt, (1, 2), (2, 1)), wt, None, 2), [x, w])
    y = autograd.pooling_2d(t64(x, dev), 3, 2, 0, is_max=True, odd_padding=odd)
    ref = F.max_pool2d(torch_pad(tt(x), (0, 1), (1, 0), -np.inf), 3, 2)
    np.testing.assert_allclose(y.to_numpy(), ref.numpy(), rtol=1e-12)


def test_graph_replay_equals_eager(dev):
    """A conv + max pool + avg pool step with asymmetric padding, captured and replayed."""
    x32 = RNG.normal(size=(2, 3, 7, 6)).astype(np.float32)
    w0 = RNG.normal(0, 0.3, size=(4, 3, 3, 3)).astype(np.float32)

    def make():
        w = tensor.from_numpy(w0, dev, requires_grad=True)
        xt = tensor.from_numpy(x32, dev)
        target = tensor.from_numpy(np.zeros((2, 4, 2, 2), np.float32), dev)
        sgd = loom.opt.SGD(0.1)

        def step():
            h = autograd.conv2d(xt, w, None, 2, (0, 1), padding_end=(1, 0))
            h = autograd.max_pool_2d(autograd.relu(h), 2, 1, 0, padding_end=(1, 1))
            loss = autograd.mse_loss(autograd.avg_pool_2d(h, 2, 2, (1, 0), False, padding_end=(0, 1)), target)
            for p, g in autograd.backward(loss):
                sgd.apply(0, g, p, "")
            return loss
        return w, step

    w_e, step_e = make()
    eager = [step_e().item() for _ in range(3)]
    w_g, step_g = make()
    with dev.buffer():
        loss = step_g()
    graph = []
    for _ in range(3):
        dev.RunGraph(True)
        graph.append(loss.item())
    assert graph == eager
    np.testing.assert_array_equal(w_g.to_numpy(), w_e.to_numpy())
    assert eager[-1] < eager[0]


def test_bad_paddings_are_typed_errors(dev):
    x = t64(RNG.normal(size=(1, 1, 4, 4)), dev)
    with pytest.raises(loom.ValueError, match=r"\[max_pool2d\] padding_end \(2, 0\) must be between 0 and half"):
        autograd.max_pool_2d(x, 2, 1, 0, padding_end=(2, 0))
    with pytest.raises(loom.ValueError, match=r"\[conv2d\] padding_end \(-1, 0\) must not be negative"):
        autograd.conv2d(x, t64(np.ones((1, 1, 2, 2)), dev), None, 1, 0, padding_end=(-1, 0))
    with pytest.raises(loom.ValueError, match=r"\[conv2d\] odd_padding must be 4 non-negative ints"):
        autograd.conv2d(x, t64(np.ones((1, 1, 2, 2)), dev), None, 1, 0, odd_padding=(1, 0))


def test_onnx_export_writes_both_ends_and_imports_back_bitwise():
    onnx = pytest.importorskip("onnx")
    from loom import model, sonnx

    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.conv = layer.Conv2d(4, 3, stride=2, pad_mode="SAME_LOWER")
            self.pool = layer.MaxPool2d(2, 1, odd_padding=(0, 1, 1, 0))
            self.avg = layer.AvgPool2d(3, 2, odd_padding=(1, 0, 0, 1))

        def forward(self, x):
            return self.avg(self.pool(autograd.relu(self.conv(x))))

    net = Net()
    x = tensor.from_numpy(RNG.normal(size=(2, 3, 8, 7)).astype(np.float32))
    training = autograd.training
    net.eval()  # sets the global flag (SINGA's): restored below for the tests that follow
    try:
        with autograd.no_grad():
            want = net(x).to_numpy()
        proto = sonnx.to_onnx([x], net, "asymmetric")
    finally:
        autograd.training = training
    onnx.checker.check_model(proto, full_check=True)
    pads = {n.op_type: [list(a.ints) for a in n.attribute if a.name == "pads"][0]
            for n in proto.graph.node if n.op_type != "Relu"}
    # (h_begin, w_begin, h_end, w_end); SAME_LOWER on (8, 7), kernel 3, stride 2: totals 1 and 2
    assert pads == {"Conv": [1, 1, 0, 1], "MaxPool": [0, 1, 1, 0], "AveragePool": [1, 0, 0, 1]}
    (got,) = sonnx.prepare(proto, device="CPU").run([x.to_numpy()])
    assert got.tobytes() == want.tobytes()
