"""SINGA's layer forms (issue 17 item 4): Conv2d(nb_kernels, kernel_size, ...) and BatchNorm2d()
sized at their first input, the pooling layers with SINGA's arguments, Dropout(ratio),
Flatten(axis), the loss layers with SINGA's (1,) loss shape, Add and Cat. Every number is
checked against numpy (direct loops for convolution and pooling, SINGA's formulas for the
rest)."""
import math

import numpy as np
import pytest

import loom
from loom import autograd, layer, model, opt, tensor

RNG = np.random.default_rng(17)


def conv_ref(x, w, b, stride, padding, dilation=(1, 1), groups=1):
    """Direct cross-correlation in float64: x (N, C, H, W), w (O, C/g, KH, KW)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    ph, pw = padding
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    oh = (h + 2 * ph - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * pw - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.zeros((n, o, oh, ow))
    per = o // groups
    for k in range(o):
        g = k // per
        for i in range(oh):
            for j in range(ow):
                r0, c0 = i * stride[0], j * stride[1]
                patch = xp[:, g * cg:(g + 1) * cg, r0:r0 + dilation[0] * (kh - 1) + 1:dilation[0],
                           c0:c0 + dilation[1] * (kw - 1) + 1:dilation[1]]
                y[:, k, i, j] = (patch * w[k]).sum(axis=(1, 2, 3))
    return y + (0 if b is None else b.reshape(1, -1, 1, 1))


def pool_ref(x, kernel, stride, padding, is_max):
    n, c, h, w = x.shape
    ph, pw = padding
    fill = -np.inf if is_max else 0.0
    xp = np.full((n, c, h + 2 * ph, w + 2 * pw), fill)
    xp[:, :, ph:ph + h, pw:pw + w] = x
    oh = (h + 2 * ph - kernel[0]) // stride[0] + 1
    ow = (w + 2 * pw - kernel[1]) // stride[1] + 1
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * stride[0]:i * stride[0] + kernel[0], j * stride[1]:j * stride[1] + kernel[1]]
            y[:, :, i, j] = win.max(axis=(2, 3)) if is_max else win.mean(axis=(2, 3))
    return y


def images(dev, shape=(2, 4, 7, 6), requires_grad=False):
    a = RNG.normal(size=shape).astype(np.float32)
    return a, tensor.from_numpy(a, dev, requires_grad=requires_grad)


# ---- Conv2d ----

def test_conv2d_singa_form_is_sized_by_its_first_input(dev):
    a, x = images(dev)
    conv = layer.Conv2d(5, 3, padding=1)
    assert not conv.initialized and not conv.get_params()
    assert layer.uninitialized(conv) == [conv]
    y = conv(x)
    assert conv.initialized and conv.in_channels == 4
    params = conv.get_params()
    assert list(params) == ["W", "b"]
    W, b = params["W"], params["b"]
    assert W.shape == (5, 4, 3, 3) and b.shape == (5,) and W.requires_grad and W._persistent()
    np.testing.assert_array_equal(b.to_numpy(), 0)
    ref = conv_ref(a, W.to_numpy(), b.to_numpy(), (1, 1), (1, 1))
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-4, atol=1e-4)


def test_conv2d_singa_form_positional_stride_padding_and_pairs(dev):
    a, x = images(dev)
    conv = layer.Conv2d(6, (3, 2), (2, 1), (1, 0), dilation=(1, 2), group=2)
    y = conv(x)
    W, b = conv.W.to_numpy(), conv.b.to_numpy()
    assert W.shape == (6, 2, 3, 2)
    ref = conv_ref(a, W, b, (2, 1), (1, 0), (1, 2), groups=2)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-4, atol=1e-4)


def test_conv2d_gradients_reach_w_b_and_x(dev):
    a, x = images(dev, (2, 3, 5, 5), requires_grad=True)
    conv = layer.Conv2d(4, 3, stride=2, padding=1, bias=True)
    y = conv(x)
    g = RNG.normal(size=y.shape)
    loss = autograd.sum(autograd.mul(y, tensor.from_numpy(g.astype(np.float32), dev)))
    grads = {p._block_id(): gr.to_numpy() for p, gr in autograd.backward(loss)}
    W = conv.W.to_numpy().astype(np.float64)
    # dL/db = sum of g over N, H, W; dL/dW and dL/dx by perturbing the reference (it is linear)
    np.testing.assert_allclose(grads[conv.b._block_id()], g.sum(axis=(0, 2, 3)), rtol=1e-4, atol=1e-4)
    dW = np.zeros_like(W)
    for idx in np.ndindex(W.shape):
        e = np.zeros_like(W)
        e[idx] = 1.0
        dW[idx] = (conv_ref(a, e, None, (2, 2), (1, 1)) * g).sum()
    np.testing.assert_allclose(grads[conv.W._block_id()], dW, rtol=1e-4, atol=1e-4)
    dx = np.zeros(a.shape)
    for idx in np.ndindex(a.shape):
        e = np.zeros(a.shape)
        e[idx] = 1.0
        dx[idx] = (conv_ref(e, W, None, (2, 2), (1, 1)) * g).sum()
    np.testing.assert_allclose(grads[x._block_id()], dx, rtol=1e-4, atol=1e-4)


def test_conv2d_singa_initialisation_scale(dev):
    dev.SetRandSeed(3)
    conv = layer.Conv2d(64, 3)
    conv(tensor.from_numpy(np.zeros((1, 32, 3, 3), np.float32), dev))
    w = conv.W.to_numpy()
    want = math.sqrt(2.0 / (32 * 3 * 3 + 64))  # SINGA's: 2 / (fan_in + nb_kernels)
    assert abs(w.mean()) < 0.05 * want
    assert w.std() == pytest.approx(want, rel=0.03)


def test_conv2d_same_padding_relu_and_valid(dev):
    a, x = images(dev, (1, 2, 7, 7))
    same = layer.Conv2d(3, 3, stride=2, pad_mode="SAME_UPPER", activation="RELU")
    y = same(x)
    assert y.shape == (1, 3, 4, 4)  # ceil(7 / 2)
    ref = np.maximum(conv_ref(a, same.W.to_numpy(), same.b.to_numpy(), (2, 2), (1, 1)), 0)
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-4, atol=1e-4)
    valid = layer.Conv2d(3, 3, padding=2, pad_mode="VALID")
    assert valid(x).shape == (1, 3, 5, 5)  # the padding is ignored
    # an odd total (one end only): test_asymmetric_padding.py


def test_conv2d_explicit_form_is_the_cxx_layer_unless_it_needs_python(dev):
    a, x = images(dev)
    native = layer.Conv2d(4, 8, 3, 1, 1)
    assert native._impl is not None and list(native.get_params()) == ["W", "b"]
    assert native(x).shape == (2, 8, 7, 6)
    rect = layer.Conv2d(4, 8, (3, 1), device=dev)  # a non-square kernel: the Python layer, sized now
    assert rect._impl is None and rect.W.shape == (8, 4, 3, 1)
    np.testing.assert_allclose(rect(x).to_numpy(), conv_ref(a, rect.W.to_numpy(), rect.b.to_numpy(), (1, 1), (0, 0)),
                               rtol=1e-4, atol=1e-4)


def test_conv2d_errors_are_typed(dev):
    _, x = images(dev)
    conv = layer.Conv2d(4, 3)
    conv(x)
    with pytest.raises(loom.ShapeError, match=r"\[Conv2d\] was built for 4 input channels"):
        conv(tensor.from_numpy(np.zeros((1, 3, 5, 5), np.float32), dev))
    with pytest.raises(loom.ShapeError, match=r"\[Conv2d\] expects images"):
        layer.Conv2d(4, 3)(tensor.from_numpy(np.zeros((3, 5, 5), np.float32), dev))
    with pytest.raises(loom.ValueError, match="do not split into 3 groups"):
        layer.Conv2d(6, 3, group=3)(x)  # 4 channels
    with pytest.raises(loom.ValueError, match="6 kernels do not split into 4 groups"):
        layer.Conv2d(6, 3, group=4)
    with pytest.raises(loom.ValueError, match="pad_mode must be one of"):
        layer.Conv2d(6, 3, pad_mode="SAME")
    with pytest.raises(loom.ValueError, match="activation must be"):
        layer.Conv2d(6, 3, activation="tanh")
    with pytest.raises(loom.TypeError, match=r"\[Conv2d\] kernel_size must be an int or a pair"):
        layer.Conv2d(6, (3, 3, 3))
    with pytest.raises(loom.TypeError, match=r"\[Conv2d\] .*unexpected keyword"):
        layer.Conv2d(6, 3, strides=2)
    with pytest.raises(loom.ValueError, match=r"\[Conv2d\] size must be a positive int"):
        layer.Conv2d(0, 3)


def test_lazy_layers_refuse_to_create_parameters_during_a_capture(dev):
    _, x = images(dev)
    conv = layer.Conv2d(4, 3)
    g = loom.core.new_graph(dev, "lazy", None)
    g.begin_capture()
    try:
        with pytest.raises(loom.GraphError, match="create layers before the capture"):
            conv(x)
        with pytest.raises(loom.GraphError, match="create layers before the capture"):
            layer.BatchNorm2d()(x)
    finally:
        g.abort_capture()
    assert not conv.initialized


# ---- BatchNorm2d ----

@pytest.mark.parametrize("momentum", [0.9, 0.7])
def test_batchnorm2d_singa_form_and_momentum(dev, momentum):
    a, x = images(dev, (4, 3, 5, 5))
    bn = layer.BatchNorm2d(momentum=momentum)
    assert not bn.initialized
    y = bn(x)
    states = bn.get_states()
    assert bn.num_features == 3 and states["scale"].shape == (3,)
    mean, var = a.mean(axis=(0, 2, 3)), a.var(axis=(0, 2, 3))
    ref = (a - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-4, atol=1e-4)
    n = a.size // 3
    # SINGA: running = momentum * running + (1 - momentum) * batch (the unbiased batch variance)
    np.testing.assert_allclose(states["running_mean"].to_numpy(), (1 - momentum) * mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(states["running_var"].to_numpy(), momentum + (1 - momentum) * var * n / (n - 1),
                               rtol=1e-4)
    bn.eval()
    y = bn(x).to_numpy()
    rm, rv = states["running_mean"].to_numpy(), states["running_var"].to_numpy()
    np.testing.assert_allclose(y, (a - rm.reshape(1, 3, 1, 1)) / np.sqrt(rv.reshape(1, 3, 1, 1) + 1e-5),
                               rtol=1e-4, atol=1e-4)


def test_batchnorm2d_explicit_form_and_errors(dev):
    a, x = images(dev, (4, 3, 5, 5))
    bn = layer.BatchNorm2d(3)
    bn(x)
    np.testing.assert_allclose(bn.get_states()["running_mean"].to_numpy(), 0.1 * a.mean(axis=(0, 2, 3)),
                               rtol=1e-4, atol=1e-6)
    with pytest.raises(loom.ValueError, match=r"\[BatchNorm2d\] momentum must be a number in \[0, 1\]"):
        layer.BatchNorm2d(momentum=1.5)
    with pytest.raises(loom.ShapeError, match=r"\[BatchNorm2d\] expects images"):
        layer.BatchNorm2d()(tensor.from_numpy(np.zeros((4, 3), np.float32), dev))


# ---- pooling ----

@pytest.mark.parametrize("make, kernel, stride, padding, is_max", [
    (lambda: layer.MaxPool2d(2), (2, 2), (2, 2), (0, 0), True),  # stride None: the kernel
    (lambda: layer.MaxPool2d((3, 2), (2, 1), (1, 0)), (3, 2), (2, 1), (1, 0), True),
    (lambda: layer.AvgPool2d(3, 1, 1), (3, 3), (1, 1), (1, 1), False),  # padded zeros count
    (lambda: layer.Pooling2d((2, 3), is_max=False), (2, 3), (2, 3), (0, 0), False),
    (lambda: layer.Pooling2d(3, 2, 1), (3, 3), (2, 2), (1, 1), True),
])
def test_pooling_layers_against_numpy(dev, make, kernel, stride, padding, is_max):
    a, x = images(dev, (2, 3, 7, 6))
    y = make()(x)
    ref = pool_ref(a.astype(np.float64), kernel, stride, padding, is_max)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-5, atol=1e-6)


def test_pooling_same_mode_and_errors(dev):
    a, x = images(dev, (1, 2, 7, 7))
    y = layer.Pooling2d(3, 1, pad_mode="SAME_UPPER")(x)  # a total of 2: one row each end
    np.testing.assert_allclose(y.to_numpy(), pool_ref(a.astype(np.float64), (3, 3), (1, 1), (1, 1), True), rtol=1e-6)
    with pytest.raises(loom.ValueError, match=r"\[MaxPool2d\] odd_padding must be 4 non-negative ints"):
        layer.MaxPool2d(2, odd_padding=(0, 1, 0))
    with pytest.raises(loom.ValueError, match=r"\[AvgPool2d\] stride must be positive"):
        layer.AvgPool2d(2, 0)
    with pytest.raises(loom.ShapeError, match=r"\[Pooling2d\] expects images"):
        layer.Pooling2d((2, 1))(tensor.from_numpy(np.zeros((2, 3), np.float32), dev))


# ---- Dropout, Flatten, Add, Cat ----

def test_dropout_ratio_and_flatten_axis(dev):
    ones = tensor.from_numpy(np.ones((200, 50), np.float32), dev)
    y = layer.Dropout(ratio=0.3)(ones).to_numpy()
    assert np.all((y == 0) | np.isclose(y, 1 / 0.7))
    assert np.mean(y == 0) == pytest.approx(0.3, abs=0.03)
    a, x = images(dev, (2, 3, 4, 5))
    assert layer.Flatten(axis=2)(x).shape == (6, 20)  # SINGA's: always a matrix
    assert layer.Flatten(axis=0)(x).shape == (1, 120)
    assert layer.Flatten(start_axis=2)(x).shape == (2, 3, 20)  # loom's older form
    np.testing.assert_array_equal(autograd.flatten(x, -1).to_numpy(), a.reshape(24, 5))
    with pytest.raises(loom.ValueError, match=r"\[flatten\] axis 5 is out of range"):
        autograd.flatten(x, 5)
    np.testing.assert_array_equal(layer.Flatten()(x).to_numpy(), a.reshape(2, 60))


def test_add_and_cat(dev):
    a, x = images(dev, (2, 3))
    b, z = images(dev, (2, 3))
    np.testing.assert_allclose(layer.Add()(x, z).to_numpy(), a + b, rtol=1e-6)
    np.testing.assert_array_equal(layer.Cat(1)([x, z]).to_numpy(), np.concatenate([a, b], 1))
    with pytest.raises(loom.TypeError, match=r"\[Cat\] xs must be a list of loom Tensors"):
        layer.Cat()(x)


# ---- losses ----

def test_softmax_cross_entropy_layer(dev):
    logits = RNG.normal(size=(5, 4)).astype(np.float32)
    labels = RNG.integers(0, 4, 5).astype(np.int32)
    x = tensor.from_numpy(logits, dev, requires_grad=True)
    loss = layer.SoftMaxCrossEntropy()(x, tensor.from_numpy(labels, dev))
    assert loss.shape == (1,)
    z = logits.astype(np.float64)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    assert loss.to_numpy()[0] == pytest.approx(-np.log(p[np.arange(5), labels]).mean(), rel=1e-5)
    (param, grad), = autograd.backward(loss)
    onehot = np.eye(4)[labels]
    np.testing.assert_allclose(grad.to_numpy(), (p - onehot) / 5, rtol=1e-4, atol=1e-6)


def test_mean_square_error_layer(dev):
    a = RNG.normal(size=(4, 3)).astype(np.float32)
    t = RNG.normal(size=(4, 3)).astype(np.float32)
    x = tensor.from_numpy(a, dev, requires_grad=True)
    loss = layer.MeanSquareError()(x, tensor.from_numpy(t, dev))
    assert loss.shape == (1,)
    diff = a.astype(np.float64) - t
    assert loss.to_numpy()[0] == pytest.approx((diff ** 2).mean(), rel=1e-5)
    (_, grad), = autograd.backward(loss)
    np.testing.assert_allclose(grad.to_numpy(), 2 * diff / diff.size, rtol=1e-4, atol=1e-6)
    with pytest.raises(loom.ShapeError, match=r"\[MeanSquareError\] input .* and target .* differ"):
        layer.MeanSquareError()(x, tensor.from_numpy(t[:, :2].copy(), dev))


def test_cross_entropy_layer(dev):
    p = RNG.uniform(0.05, 1.0, size=(3, 4))
    p /= p.sum(1, keepdims=True)
    t = np.eye(4)[[0, 3, 1]]
    x = tensor.from_numpy(p.astype(np.float32), dev, requires_grad=True)
    loss = layer.CrossEntropy()(x, tensor.from_numpy(t.astype(np.float32), dev))
    assert loss.shape == (1,)
    assert loss.to_numpy()[0] == pytest.approx(-(t * np.log(p)).sum() / 3, rel=1e-5)
    (_, grad), = autograd.backward(loss)
    np.testing.assert_allclose(grad.to_numpy(), -t / p / 3, rtol=1e-4, atol=1e-6)
    with pytest.raises(loom.ShapeError, match=r"\[CrossEntropy\] expects probabilities"):
        layer.CrossEntropy()(x, tensor.from_numpy(np.zeros((3,), np.float32), dev))
    with pytest.raises(loom.TypeError, match=r"\[CrossEntropy\] the target must be a loom Tensor"):
        layer.CrossEntropy()(x, t)


# ---- a model of SINGA-form layers: compile sizes them, graph equals eager ----

class SmallCNN(model.Model):
    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.pool = layer.MaxPool2d(2)
        self.flat = layer.Flatten()
        self.fc = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.fc(self.flat(self.pool(self.relu(self.bn(self.conv(x))))))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def train_small_cnn(dev, use_graph, steps=4):
    dev.SetRandSeed(7)
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(steps, 6, 2, 6, 6)).astype(np.float32)
    ys = rng.integers(0, 3, (steps, 6)).astype(np.int32)
    m = SmallCNN()
    m.set_optimizer(opt.SGD(0.1, 0.9))
    tx = tensor.Tensor((6, 2, 6, 6), dev)
    ty = tensor.Tensor((6,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=use_graph, sequential=True)
    assert not layer.uninitialized(m) and sorted(m.get_params()) == [
        "bn.bias", "bn.scale", "conv.W", "conv.b", "fc.W", "fc.b"]
    losses = []
    for i in range(steps):
        tx.copy_from_numpy(xs[i])
        ty.copy_from_numpy(ys[i])
        _, loss = m(tx, ty)
        assert loss.shape == (1,)
        losses.append(float(loss.to_numpy()[0]))
    return losses


def test_singa_form_model_graph_equals_eager(dev):
    eager = train_small_cnn(dev, False)
    graph = train_small_cnn(dev, True)
    assert graph == pytest.approx(eager, rel=1e-5)
    assert eager[-1] != eager[0]


# ---- SeparableConv2d and Gemm ----

def test_separable_conv2d(dev):
    a, x = images(dev, (2, 3, 6, 6))
    sep = layer.SeparableConv2d(5, 3, padding=1, bias=True)
    assert not sep.initialized
    y = sep(x)
    params = sep.get_params()
    assert sorted(params) == ["depthwise_conv.W", "depthwise_conv.b", "point_conv.W", "point_conv.b"]
    dw, db = params["depthwise_conv.W"].to_numpy(), params["depthwise_conv.b"].to_numpy()
    pw, pb = params["point_conv.W"].to_numpy(), params["point_conv.b"].to_numpy()
    assert dw.shape == (3, 1, 3, 3) and pw.shape == (5, 3, 1, 1)
    ref = conv_ref(conv_ref(a, dw, db, (1, 1), (1, 1), groups=3), pw, pb, (1, 1), (0, 0))
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("transA, transB", [(False, True), (True, False)])
def test_gemm_layer(dev, transA, transB):
    a = RNG.normal(size=(4, 3) if not transA else (3, 4)).astype(np.float32)
    g = layer.Gemm(5, alpha=0.5, beta=2.0, transA=transA, transB=transB)
    y = g(tensor.from_numpy(a, dev))
    W, b = g.W.to_numpy(), g.b.to_numpy()
    assert W.shape == ((5, 3) if transB else (3, 5)) and b.shape == (1, 5)
    b = RNG.normal(size=(1, 5)).astype(np.float32)
    g.b.copy_from_numpy(b)
    y = g(tensor.from_numpy(a, dev))
    xa = a.T if transA else a
    Wm = W.T if transB else W
    np.testing.assert_allclose(y.to_numpy(), 0.5 * xa @ Wm + 2.0 * b, rtol=1e-5, atol=1e-6)
    with pytest.raises(loom.ShapeError, match=r"\[Gemm\] W is .* the input .* has 6 features"):
        g(tensor.from_numpy(np.zeros((6, 6), np.float32), dev))


def test_autograd_cross_entropy(dev):
    p = RNG.uniform(0.05, 1.0, size=(3, 4))
    p /= p.sum(1, keepdims=True)
    t = np.eye(4)[[2, 0, 1]]
    loss = autograd.cross_entropy(tensor.from_numpy(p, dev), tensor.from_numpy(t, dev))
    assert loss.shape == (1,) and loss.item() == pytest.approx(-(t * np.log(p)).sum() / 3, rel=1e-10)


# ---- layers written in Python the SINGA way: initialize(x) and Tensor attributes ----

class Dense(layer.Layer):
    """SINGA 3's pattern: parameters made in initialize from the first input."""

    inits = 0

    def __init__(self, out):
        super().__init__()
        self.out = out

    def initialize(self, x):
        Dense.inits += 1
        self.W = tensor.Tensor((x.shape[1], self.out), x.device, requires_grad=True, stores_grad=True)
        self.W.gaussian(0.0, 0.3)
        self.b = tensor.Tensor((self.out,), x.device, requires_grad=True, stores_grad=True)
        self.b.set_value(0.0)

    def forward(self, x):
        self.last = autograd.add_bias(autograd.matmul(x, self.W), self.b)  # a result, not a parameter
        return self.last


class DenseNet(model.Model):
    def __init__(self):
        super().__init__()
        self.d1, self.d2 = Dense(6), Dense(3)

    def forward(self, x):
        return self.d2(autograd.relu(self.d1(x)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def test_python_layer_initialize_and_tensor_parameters(dev):
    Dense.inits = 0
    d = Dense(4)
    assert not d.initialized and d.get_params() == {}
    a = RNG.normal(size=(2, 3)).astype(np.float32)
    y = d(tensor.from_numpy(a, dev))
    d(tensor.from_numpy(a, dev))
    assert Dense.inits == 1 and d.initialized
    params = d.get_params()
    assert list(params) == ["W", "b"] and params["W"]._persistent()
    np.testing.assert_allclose(y.to_numpy(), a @ params["W"].to_numpy(), rtol=1e-5, atol=1e-6)
    d.W = tensor.from_numpy(np.zeros((3, 4), np.float32), dev)  # no longer a parameter
    assert list(d.get_params()) == ["b"]


def train_dense(dev, use_graph, steps=4):
    dev.SetRandSeed(9)
    rng = np.random.default_rng(2)
    m = DenseNet()
    m.set_optimizer(opt.SGD(0.1, 0.9))
    tx, ty = tensor.Tensor((8, 5), dev), tensor.Tensor((8,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=use_graph, sequential=True)
    assert list(m.get_params()) == ["d1.W", "d1.b", "d2.W", "d2.b"]
    losses = []
    for _ in range(steps):
        tx.copy_from_numpy(rng.normal(size=(8, 5)).astype(np.float32))
        ty.copy_from_numpy(rng.integers(0, 3, 8).astype(np.int32))
        losses.append(m(tx, ty)[1].item())
    return losses


def test_python_layers_in_a_model_graph_equals_eager(dev):
    eager = train_dense(dev, False)
    graph = train_dense(dev, True)
    assert graph == pytest.approx(eager, rel=1e-5) and eager[-1] != eager[0]


def test_initialize_inside_a_capture_runs_once_not_every_replay(dev):
    """SINGA runs initialize with the graph off; loom runs its ops at once during the capture."""
    d = Dense(2)
    x = tensor.from_numpy(np.ones((1, 3), np.float32), dev)
    dev.SetBufferFlag(True)
    y = d(x)
    dev.SetBufferFlag(False)
    w = d.W.to_numpy()
    assert np.abs(w).sum() > 0  # drawn already, outside the graph
    d.W.copy_from_numpy(np.ones((3, 2), np.float32))
    dev.ExecBuffOps()
    np.testing.assert_array_equal(d.W.to_numpy(), 1.0)  # the replay did not draw it again
    np.testing.assert_allclose(y.to_numpy(), [[3.0, 3.0]])
