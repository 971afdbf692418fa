"""loom.layer: layers. The built-in ones are C++ layers (src/nn) behind a thin Python class, so a
forward pass through them is one C++ call; Layer is also the base of layers written in Python,
which compose by attribute (SINGA's style):

    class Block(layer.Layer):
        def __init__(self):
            super().__init__()
            self.fc1 = layer.Linear(784, 256)
            self.relu = layer.ReLU()
            self.fc2 = layer.Linear(256, 10)
        def forward(self, x):
            return self.fc2(self.relu(self.fc1(x)))

Parameters are created on `device` (default: the CPU) at construction, initialised (Kaiming for
ReLU networks), marked persistent for graphs and require gradients. Create layers before a
capture: their initialisation is setup, not part of the step.
"""
import math
from collections import OrderedDict

from . import autograd, core, creators, errors
from .tensor import _check_device, _enum, _shape

_c = core._core  # the extension's functions

__all__ = ["Layer", "Linear", "ReLU", "LeakyReLU", "Sigmoid", "Tanh", "GELU", "Softplus", "Dropout", "Flatten",
           "Sequential", "Conv2d", "BatchNorm2d", "SyncBatchNorm2d", "LayerNorm", "MaxPool2d", "AvgPool2d", "GlobalAvgPool",
           "Embedding", "BasicBlock", "Bottleneck", "Pooling2d", "SoftMaxCrossEntropy", "MeanSquareError",
           "CrossEntropy", "Add", "Cat", "RNN", "LSTM", "SeparableConv2d", "Gemm"]


class Layer:
    """Base class. Sub-layers are found among the attributes (and lists/tuples of layers), and so
    are parameters: a leaf Tensor attribute that requires grad (SINGA's Tensor(shape, dev,
    requires_grad=True, stores_grad=True)) is one, named after the attribute and marked
    persistent for graphs.

    SINGA's layers written in Python create their parameters in initialize(*inputs), which the
    first call runs before forward, once; its ops run at once even while the device captures
    (they are setup, not part of the step), as SINGA runs them with the graph off."""

    def __init__(self):
        self.training = True
        self._initialized = type(self).initialize is Layer.initialize

    def __setattr__(self, name, value):
        if (isinstance(value, core.Tensor) and not name.startswith("_") and value.defined() and value.requires_grad
                and not value._has_grad_fn()):  # a leaf: a parameter, not a result kept for later
            value._set_persistent(True)
            if not value.name:
                value.name = name
            self.__dict__.setdefault("_tensor_params", OrderedDict())[name] = value
        elif name in self.__dict__.get("_tensor_params", ()):
            del self.__dict__["_tensor_params"][name]
        object.__setattr__(self, name, value)

    def __call__(self, *args, **kwargs):
        if not self.__dict__.get("_initialized", True):
            self._run_initialize(args, kwargs)
        return self.forward(*args, **kwargs)

    def initialize(self, *args, **kwargs):
        """SINGA's hook: creates the parameters from the first inputs (override it)."""

    @property
    def initialized(self):
        return self.__dict__.get("_initialized", True)

    def _run_initialize(self, args, kwargs):
        device = next((a.device for a in args if isinstance(a, core.Tensor)), None)
        setup = core.SetupGuard(device) if device is not None else None
        try:
            self.initialize(*args, **kwargs)
        finally:
            del setup
        self._initialized = True

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not defined")

    def _sublayers(self):
        for name, value in vars(self).items():
            if isinstance(value, Layer):
                yield name, value
            elif isinstance(value, (list, tuple)):
                for i, v in enumerate(value):
                    if isinstance(v, Layer):
                        yield f"{name}.{i}", v

    def get_params(self):
        """Trainable tensors by path ("fc1.weight"), in definition order."""
        out = OrderedDict(self.__dict__.get("_tensor_params", {}))
        for name, sub in self._sublayers():
            for k, v in sub.get_params().items():
                out[f"{name}.{k}"] = v
        return out

    def get_states(self):
        """Parameters and non-trainable state (BatchNorm's running statistics) by path."""
        out = OrderedDict(self.__dict__.get("_tensor_params", {}))
        for name, sub in self._sublayers():
            for k, v in sub.get_states().items():
                out[f"{name}.{k}"] = v
        return out

    def set_params(self, values=None, **kwargs):
        """Copies values (numpy arrays or Tensors) into the parameters of the same names: a dict,
        or SINGA's keywords, set_params(W=w, b=b)."""
        self._set(self.get_params(), dict(values or {}, **kwargs))

    def set_params_initializer(self, **fns):
        """SINGA's: fns maps a parameter's name to a function that fills a tensor in place
        (W=lambda t: t.gaussian(0, 1)). Applied now to the parameters that exist; a layer that
        makes its parameters at its first input applies the rest then."""
        for key, fn in fns.items():
            if not callable(fn):
                raise errors.TypeError(f"[{type(self).__name__}] initializer '{key}' is a {type(fn).__name__}, "
                                       "not a function")
        pending = self.__dict__.setdefault("_pending_initializers", {})
        pending.update(fns)
        self._apply_initializers()

    def _apply_initializers(self):
        pending = self.__dict__.get("_pending_initializers")
        if not pending:
            return
        params = self.get_params()
        for key in [k for k in pending if k in params]:
            with autograd.no_grad():
                pending.pop(key)(params[key])

    def set_states(self, values):
        self._set(self.get_states(), values)

    @staticmethod
    def _set(mine, values):
        for k, v in values.items():
            if k not in mine:
                raise errors.ValueError(f"[set_params] no parameter '{k}'; have {', '.join(mine)}")
            if isinstance(v, core.Tensor):
                core.copy_into(mine[k], v)
            else:
                mine[k].copy_from_numpy(v)

    def train(self, mode=True):
        """Train mode: BatchNorm uses batch statistics, Dropout drops. Propagates to sub-layers."""
        self.training = bool(mode)
        for _, sub in self._sublayers():
            sub.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def __repr__(self):
        subs = ", ".join(f"{n}={s!r}" for n, s in self._sublayers())
        return f"{type(self).__name__}({subs})"


def _options(device, dtype):
    o = core.LayerOptions()
    o.device = _check_device(device)
    o.dtype = _enum(dtype)
    if o.device.buffering():
        raise errors.GraphError(f"[layer] {o.device.name()} is capturing {o.device.capture_name()}: create "
                                "layers before the capture (their initialisation would be replayed every step)")
    return o


# Note [SINGA's parameter names]
# The C++ layers name their tensors as torch does (weight and
# bias; gamma and beta for the normalisations); SINGA's scripts and checkpoints use W, b, scale
# and bias. The two sets map one to one, so the last part of every C++ path is renamed here, and
# get_params / get_states / set_params of the Python layers speak SINGA's names only.
_CXX_TO_SINGA = {"weight": "W", "bias": "b", "gamma": "scale", "beta": "bias"}


def _singa_names(pairs):
    out = OrderedDict()
    for path, t in pairs:
        head, dot, last = path.rpartition(".")
        out[head + dot + _CXX_TO_SINGA.get(last, last)] = t
    return out


# Note [Creators of layer results]
# SINGA's layers are made of autograd operators, so a layer's output carries y.creator, whose
# backward(dy) gives (dx, dW, db). loom's C++ layers are one C++ call, so NativeLayer.__call__
# hangs a _LayerCreator on a one-tensor call's result, as autograd does for its op functions
# (Note [Creators of op results] in creators.py): it holds the input weakly and, when asked,
# runs the layer's forward again on a detached handle of it and differentiates the whole layer
# (a Conv2d with activation="RELU" included: its pre-activation is an intermediate that a
# creator holding it weakly could not reach). A layer with running states (BatchNorm2d) gets
# one too: its backward keeps copies of the states and writes them back after the second
# forward, so they move once, as SINGA's. A layer that draws random numbers (Dropout) gets none:
# a second forward would draw another mask.

class _LayerCreator:
    """The creator of a C++ layer's result (Note [Creators of layer results])."""

    __slots__ = ("name", "_layer", "_x")

    def __init__(self, layer, x):
        self.name, self._layer, self._x = type(layer).__name__, layer, creators.Arg(x)

    @property
    def src(self):
        x = self._x.ref()
        return [] if x is None else [x]

    def arg_records(self):
        return [self._x]

    def replay(self, tensor_of):
        """The layer's forward again, on tensor_of(the input's record) (Note [Exporting eager outputs])."""
        return self._layer.forward(tensor_of(self._x))

    def backward(self, dy=None):
        """(dx, then the gradient of each parameter in get_params() order) given dy (ones when
        None), dx alone for a layer without parameters; dx is zeros for an integer input
        (Embedding's indices), as SINGA's."""
        x = self._x.ref()
        if x is None:
            raise errors.GraphError(f"[{self.name}] creator.backward: the layer's input has been freed (loom's "
                                    "creators do not keep inputs alive; keep a reference to it)")
        leaf = x.detach()
        if core.is_floating(_c.Tensor_dtype(leaf)):
            leaf.requires_grad = True
        else:
            leaf = x
        running = [(t, t.clone()) for name, t in self._layer.get_states().items()
                   if name not in self._layer.get_params()]
        try:
            grads = autograd.gradients(self._layer.forward(leaf), dy)
        finally:
            with autograd.no_grad():
                for t, saved in running:  # the states as the first forward left them
                    core.copy_into(t, saved)
        out = [grads.get(leaf) if leaf is not x else creators.zero_gradient(x)]
        params = list(self._layer.get_params().values())
        if not params:
            return out[0]  # SINGA's pooling, flatten...: dx alone
        return tuple(out + [grads[p] if p in grads else core.zeros_like(p) for p in params])


class NativeLayer(Layer):
    """A C++ layer (loom::nn::Layer). `forward` is the C++ method itself; a call's result
    carries SINGA's y.creator (Note [Creators of layer results])."""

    def __init__(self, impl):
        super().__init__()
        self._impl = impl
        self.forward = impl.forward

    def __call__(self, *args, **kwargs):
        y = Layer.__call__(self, *args, **kwargs)
        if (autograd.training and len(args) == 1 and not kwargs and isinstance(y, core.Tensor)
                and isinstance(args[0], core.Tensor) and self._replayable()):
            y.creator = _LayerCreator(self, args[0])
        return y

    def _replayable(self):
        """Whether forward can run again for a creator (Note [Creators of layer results]): it
        draws no random numbers; known once the layer is sized."""
        return self.initialized and not self._draws_random

    _draws_random = False

    def _renamed(self, pairs):
        return _singa_names(pairs)

    def get_params(self):
        return self._renamed(self._impl.params()) if self._impl is not None else OrderedDict()

    def get_states(self):
        if self._impl is None:  # a lazy layer before its first input
            return OrderedDict()
        out = self._renamed(self._impl.params())
        out.update(self._renamed(self._impl.states()))
        return out

    def train(self, mode=True):
        self.training = bool(mode)
        if self._impl is not None:
            self._impl.train(bool(mode))
        return self

    def __repr__(self):
        return f"{type(self).__name__}()" if type(self) is not NativeLayer else f"NativeLayer({self._impl.type_name()})"

    def _first_options(self, x):
        """The options of a layer sized at its first input x: the device and dtype given at
        construction, else x's (refused during a capture, as _options says)."""
        device, dtype = self._lazy_options
        return _options(device or x.device, dtype or x.dtype)

    def _become(self, impl, x):
        """A lazy layer's first call: from now on it is the C++ layer `impl`, made for x."""
        self._impl = impl
        impl.train(self.training)
        self.forward = impl.forward
        self._apply_initializers()
        return self.forward(x)


class Linear(NativeLayer):
    """x: (..., in_features) -> (..., out_features); weight (in, out), bias (out).

    Linear(in_features, out_features, bias=True, device=None, dtype=None) creates the parameters
    now. Linear(out_features, bias=True) is SINGA's form: the input size, device and dtype come
    from the first input, and the parameters are created at that first call (which therefore
    must not happen during a capture: Model.compile runs one eager forward pass first)."""

    def __init__(self, in_features=None, out_features=None, bias=True, device=None, dtype=None):
        if in_features is None and out_features is not None:  # Linear(out_features=3)
            in_features, out_features = out_features, None
        if out_features is None or isinstance(out_features, bool):  # SINGA's Linear(out, bias)
            if isinstance(out_features, bool):
                bias = out_features
            Layer.__init__(self)
            self._impl = None
            self.in_features, self.out_features, self._bias = None, _size("Linear", in_features), bool(bias)
            self._lazy_options = (device, dtype)
            return
        super().__init__(core.Linear(in_features, out_features, bool(bias), _options(device, dtype)))
        self.in_features, self.out_features = in_features, out_features

    def forward(self, x):  # SINGA's form before its first call; replaced by the C++ method then
        if not isinstance(x, core.Tensor):
            raise errors.TypeError(f"[Linear] expected a loom Tensor, got {type(x).__name__}")
        if x.ndim < 1:
            raise errors.ShapeError(f"[Linear] input {x.describe()} has no feature axis")
        self.in_features = x.shape[-1]
        return self._become(core.Linear(self.in_features, self.out_features, self._bias, self._first_options(x)), x)

    @property
    def initialized(self):
        """False for SINGA's Linear(out) until its first call has created the parameters."""
        return self._impl is not None

    def set_params(self, values=None, **kwargs):
        """As Layer's; on SINGA's Linear(out) before its first call, W (in, out) creates the
        parameters first (its first axis is the input size)."""
        values = dict(values or {}, **kwargs)
        if self._impl is None and "W" in values:
            w = values["W"]
            shape = tuple(w.shape)
            if len(shape) != 2 or shape[1] != self.out_features:
                raise errors.ShapeError(f"[Linear] W is {shape}, expected (in_features, {self.out_features})")
            device, dtype = self._lazy_options
            dev = device or (w.device if isinstance(w, core.Tensor) else None)
            dt = dtype or (w.dtype if isinstance(w, core.Tensor) else None)
            self.in_features = shape[0]
            self._impl = core.Linear(shape[0], self.out_features, self._bias, _options(dev, dt))
            self._impl.train(self.training)
            self.forward = self._impl.forward
            self._apply_initializers()
        Layer.set_params(self, values)

    def get_params(self):
        return super().get_params() if self._impl is not None else OrderedDict()

    def get_states(self):
        return super().get_states() if self._impl is not None else OrderedDict()

    def train(self, mode=True):
        if self._impl is None:
            return Layer.train(self, mode)
        return super().train(mode)

    def __repr__(self):
        return f"Linear({self.in_features}, {self.out_features})"


def _size(op, n):
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise errors.ValueError(f"[{op}] size must be a positive int, got {n!r}")
    if n > errors._INT64[1]:
        raise errors.ValueError(f"[{op}] size {n} is beyond int64")
    return n


def uninitialized(layer):
    """The sub-layers of `layer` (itself included) still waiting for their first input."""
    out = [layer] if getattr(layer, "initialized", True) is False else []
    for _, sub in layer._sublayers():
        out += uninitialized(sub)
    return out


def _activation(name, kind, doc):
    def init(self, *args):
        NativeLayer.__init__(self, core.Activation(kind, *args))
    return type(name, (NativeLayer,), {"__init__": init, "__doc__": doc})


ReLU = _activation("ReLU", core.Act_kReLU, "max(x, 0)")
Sigmoid = _activation("Sigmoid", core.Act_kSigmoid, "1 / (1 + exp(-x))")
Tanh = _activation("Tanh", core.Act_kTanh, "tanh(x)")
GELU = _activation("GELU", core.Act_kGELU, "GELU, tanh approximation")
Softplus = _activation("Softplus", core.Act_kSoftplus, "log(1 + exp(x))")


class LeakyReLU(NativeLayer):
    def __init__(self, slope=0.01):
        super().__init__(core.Activation(core.Act_kLeakyReLU, errors._real("LeakyReLU", "slope", slope, finite=True)))


class Dropout(NativeLayer):
    """Zeroes elements with probability `ratio` in train mode and scales the rest by
    1 / (1 - ratio) (fresh numbers every replay). SINGA's Dropout(ratio); `p` is PyTorch's name."""

    _draws_random = True  # Note [Creators of layer results]

    def __init__(self, ratio=0.5, p=None):
        super().__init__(core.Dropout(errors._real("Dropout", "ratio" if p is None else "p", ratio if p is None else p, finite=True)))


class Flatten(NativeLayer):
    """SINGA's Flatten(axis=1): (d0, ..., dn) -> (d0 * ... * d(axis-1), d(axis) * ... * dn), a
    matrix. Flatten(start_axis=k) is loom's older form, which keeps the axes before k:
    (d0, ..., dn) -> (d0, ..., d(k-1), d(k) * ... * dn). Both are the C++ layer at axis 1."""

    def __init__(self, axis=1, start_axis=None):
        if start_axis is not None or axis == 1:
            super().__init__(core.Flatten(1 if start_axis is None else errors._whole("Flatten", "start_axis", start_axis, *errors._INT64)))
            return
        Layer.__init__(self)
        self._impl = None
        self.axis = errors._whole("Flatten", "axis", axis, *errors._INT64)

    def forward(self, x):  # SINGA's axis other than 1
        return autograd.flatten(x, self.axis)


class Sequential(Layer):
    """Layers applied in order. When every layer is a built-in (C++) one, the whole sequence is a
    C++ nn::Sequential: one C++ call per forward, and usable by model.NativeModel."""

    def __init__(self, *layers):
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        for i, l in enumerate(layers):
            if not isinstance(l, Layer):
                raise errors.TypeError(f"[Sequential] item {i} is a {type(l).__name__}, not a loom layer")
        self.layers = list(layers)
        self._impl = None
        if all(isinstance(l, NativeLayer) and l._impl is not None for l in layers):
            self._impl = core.Sequential()
            for l in layers:
                self._impl.add(l._impl)
            self.forward = self._impl.forward

    def forward(self, x):  # Python layers among them
        for l in self.layers:
            x = l(x)
        return x

    def get_params(self):
        if self._impl is not None:  # the same paths ("0.W"), Note [SINGA's parameter names]
            return _singa_names(self._impl.params())
        return super().get_params()

    def train(self, mode=True):
        super().train(mode)
        if self._impl is not None:
            self._impl.train(bool(mode))
        return self

    def __getitem__(self, i):
        return self.layers[i]

    def __len__(self):
        return len(self.layers)


# ---- convolutional networks (NCHW) ----

def _pair(op, what, v):
    if isinstance(v, int) and not isinstance(v, bool):
        v = (v, v)
    v = errors._ints(op, what, v)
    if len(v) != 2:
        raise errors.TypeError(f"[{op}] {what} must be an int or a pair of ints (height, width)")
    return v


_PAD_MODES = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _pad_mode(op, mode):
    mode = str(mode).upper()
    if mode not in _PAD_MODES:
        raise errors.ValueError(f"[{op}] pad_mode must be one of {', '.join(_PAD_MODES)}, got {mode!r}")
    return mode


def _padding_for(op, mode, padding, x, kernel, stride, dilation=(1, 1)):
    """The (begin, end) paddings, each (height, width), of `x` under SINGA's pad_mode: NOTSET takes
    `padding` at both ends, VALID none, SAME_* enough for ceil(H / stride) outputs, an odd total's
    extra row at the end (SAME_UPPER) or at the beginning (SAME_LOWER), as SINGA and ONNX put it
    (Note [Asymmetric padding] in core/ops_cnn.h)."""
    if mode == "NOTSET":
        return padding, padding
    if mode == "VALID":
        return (0, 0), (0, 0)
    begin, end = [], []
    for size, k, s, d in zip(x.shape[2:], kernel, stride, dilation):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else large)
        end.append(large if mode == "SAME_UPPER" else small)
    return tuple(begin), tuple(end)


def _check_images(op, x, channels=None):
    if not isinstance(x, core.Tensor):
        raise errors.TypeError(f"[{op}] expected a loom Tensor, got {type(x).__name__}")
    if x.ndim != 4:
        raise errors.ShapeError(f"[{op}] expects images (N, C, H, W), got {x.describe()}")
    if channels is not None and x.shape[1] != channels:
        raise errors.ShapeError(f"[{op}] was built for {channels} input channels, got {x.describe()}")


class _PythonParams:
    """Parameters a layer written in Python owns (SINGA's W, b): persistent for graphs, requiring
    gradients, named, and returned by get_params / get_states."""

    def _add_param(self, name, t):
        t._set_persistent(True)
        t.requires_grad = True
        t.name = name
        self._py_params[name] = t
        return t


class Conv2d(NativeLayer, _PythonParams):
    """x: (N, C, H, W) -> (N, nb_kernels, OH, OW). Two forms:

        Conv2d(nb_kernels, kernel_size, stride=1, padding=0, dilation=1, group=1, bias=True,
               pad_mode="NOTSET", activation="NOTSET")                        SINGA's
        Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True,
               dilation=1, groups=1, device=None, dtype=None)                 explicit

    Three or more positional arguments are the explicit form (as in SINGA), unless the second is
    a pair. SINGA's form takes the input channels, device and dtype from the
    first input and creates W (nb_kernels, C / group, kh, kw) ~ N(0, 2 / (C / group * kh * kw +
    nb_kernels)) and b = 0 then (Model.compile runs that first pass before any capture). Sizes
    may be pairs (height, width); pad_mode SAME_UPPER / SAME_LOWER pads for ceil(H / stride)
    outputs (an odd total's extra row at the end, or at the beginning for SAME_LOWER), VALID not
    at all; activation "RELU" applies a ReLU.
    The explicit form with square sizes and neither pad_mode nor activation is the C++ layer
    (weight, bias; Kaiming init); any other use is this Python layer (W, b)."""

    def __init__(self, *args, **kwargs):
        # SINGA's rule: a third positional argument means the explicit form, unless the second
        # is a pair (a kernel size, which an out_channels never is)
        explicit = ((len(args) >= 3 and isinstance(args[1], int)) or "in_channels" in kwargs
                    or "out_channels" in kwargs)
        try:
            a = (_conv_explicit if explicit else _conv_singa)(*args, **kwargs)
        except TypeError as e:
            raise errors.TypeError(f"[Conv2d] {e}; use Conv2d(nb_kernels, kernel_size, ...) or "
                                   "Conv2d(in_channels, out_channels, kernel_size, ...)") from None
        self.in_channels = None if a["in_channels"] is None else _size("Conv2d", a["in_channels"])
        self.nb_kernels = _size("Conv2d", a["out_channels"])
        self.kernel_size = _pair("Conv2d", "kernel_size", a["kernel_size"])
        self.stride = _pair("Conv2d", "stride", a["stride"])
        self.padding = _pair("Conv2d", "padding", a["padding"])
        self.dilation = _pair("Conv2d", "dilation", a["dilation"])
        self.group = _size("Conv2d", a["group"])
        self.bias = bool(a["bias"])
        self.pad_mode = _pad_mode("Conv2d", a["pad_mode"])
        self.activation = str(a["activation"]).upper()
        if self.activation not in ("NOTSET", "RELU"):
            raise errors.ValueError(f"[Conv2d] activation must be 'NOTSET' or 'RELU', got {a['activation']!r}")
        if self.nb_kernels % self.group:
            raise errors.ValueError(f"[Conv2d] {self.nb_kernels} kernels do not split into {self.group} groups")
        self._lazy_options = (a["device"], a["dtype"])
        square = all(p[0] == p[1] for p in (self.kernel_size, self.stride, self.padding, self.dilation))
        if explicit and square and self.pad_mode == "NOTSET" and self.activation == "NOTSET":
            super().__init__(core.Conv2d(self.in_channels, self.nb_kernels, self.kernel_size[0], self.stride[0],
                                         self.padding[0], self.bias, self.dilation[0], self.group,
                                         _options(a["device"], a["dtype"])))
            return
        Layer.__init__(self)
        self._impl = None
        self._py_params = OrderedDict()
        self.W = self.b = None
        if self.in_channels is not None:
            self._create(self.in_channels, _options(a["device"], a["dtype"]))

    def _create(self, channels, o):
        if channels % self.group:
            raise errors.ValueError(f"[Conv2d] {channels} input channels do not split into {self.group} groups")
        kh, kw = self.kernel_size
        shape = (self.nb_kernels, channels // self.group, kh, kw)
        std = math.sqrt(2.0 / (shape[1] * kh * kw + self.nb_kernels))
        self.in_channels = channels
        self.W = self._add_param("W", core.normal(shape, 0.0, std, o.dtype, o.device))
        if self.bias:
            self.b = self._add_param("b", core.zeros((self.nb_kernels,), o.dtype, o.device))

    @property
    def initialized(self):
        return self._impl is not None or self.W is not None

    def forward(self, x):  # the Python layer's (the C++ layer's forward replaces it)
        _check_images("Conv2d", x, self.in_channels)
        if self.W is None:
            self._create(x.shape[1], self._first_options(x))
        begin, end = _padding_for("Conv2d", self.pad_mode, self.padding, x, self.kernel_size, self.stride,
                                  self.dilation)
        y = autograd.conv2d(x, self.W, self.b, self.stride, begin, self.dilation, self.group, padding_end=end)
        return core.relu(y) if self.activation == "RELU" else y

    def get_params(self):
        return super().get_params() if self._impl is not None else OrderedDict(self._py_params)

    def get_states(self):
        return super().get_states() if self._impl is not None else OrderedDict(self._py_params)

    def __repr__(self):
        return (f"Conv2d({self.in_channels}, {self.nb_kernels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding})")


def _conv_singa(nb_kernels, kernel_size, stride=1, padding=0, dilation=1, group=1, bias=True, pad_mode="NOTSET",
                activation="NOTSET", device=None, dtype=None, groups=None):
    return dict(in_channels=None, out_channels=nb_kernels, kernel_size=kernel_size, stride=stride, padding=padding,
                dilation=dilation, group=group if groups is None else groups, bias=bias, pad_mode=pad_mode,
                activation=activation, device=device, dtype=dtype)


def _conv_explicit(in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True, dilation=1, groups=1,
                   device=None, dtype=None, group=None, pad_mode="NOTSET", activation="NOTSET"):
    return dict(in_channels=in_channels, out_channels=out_channels, kernel_size=kernel_size, stride=stride,
                padding=padding, dilation=dilation, group=groups if group is None else group, bias=bias,
                pad_mode=pad_mode, activation=activation, device=device, dtype=dtype)


class BatchNorm2d(NativeLayer):
    """Per-channel normalisation of (N, C, H, W) with scale and bias (get_params) and running
    statistics (get_states). In train mode it uses the batch's statistics and updates the
    running ones as SINGA does:

        running = momentum * running + (1 - momentum) * batch     (momentum 0.9 by default)

    (PyTorch's and the C++ nn::BatchNorm2d's momentum is 1 - this one.) In eval mode it uses the
    running statistics. BatchNorm2d(momentum=0.9) is SINGA's form: the channel count, device
    and dtype come from the first input; BatchNorm2d(num_features, ...) creates the state now."""

    def __init__(self, num_features=None, momentum=0.9, eps=1e-5, device=None, dtype=None):
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0.0 <= momentum <= 1.0:
            raise errors.ValueError(f"[BatchNorm2d] momentum must be a number in [0, 1] (SINGA's: the weight of "
                                    f"the running statistics), got {momentum!r}")
        self.momentum, self.eps = float(momentum), errors._real("BatchNorm2d", "eps", eps, finite=True)
        self._lazy_options = (device, dtype)
        if num_features is None:
            Layer.__init__(self)
            self._impl = None
            self.num_features = None
            return
        self.num_features = num_features
        super().__init__(core.BatchNorm2d(num_features, 1.0 - self.momentum, self.eps, _options(device, dtype)))

    def forward(self, x):  # SINGA's form before its first call; replaced by the C++ method then
        _check_images("BatchNorm2d", x)
        self.num_features = x.shape[1]
        return self._become(core.BatchNorm2d(self.num_features, 1.0 - self.momentum, self.eps, self._first_options(x)), x)

    @property
    def initialized(self):
        return self._impl is not None

    def __repr__(self):
        return f"BatchNorm2d({self.num_features}, momentum={self.momentum:g})"


class Pooling2d(NativeLayer):
    """SINGA's Pooling2d(kernel_size, stride=None, padding=0, is_max=True, pad_mode="NOTSET"):
    max (or average, counting padded zeros) pooling of (N, C, H, W). `stride` None is the
    kernel size; sizes may be pairs; pad_mode as Conv2d's. Padding never wins the max. Square
    sizes without a pad_mode or odd_padding run as the C++ layer."""

    def __init__(self, kernel_size, stride=None, padding=0, is_max=True, pad_mode="NOTSET", odd_padding=(0, 0, 0, 0)):
        op = type(self).__name__
        self.kernel_size = _pair(op, "kernel_size", kernel_size)
        self.stride = self.kernel_size if stride is None else _pair(op, "stride", stride)
        self.padding = _pair(op, "padding", padding)
        self.is_max = bool(is_max)
        self.pad_mode = _pad_mode(op, pad_mode)
        autograd._pads(op, 0, None, odd_padding)  # checks it: 4 non-negative ints
        self.odd_padding = tuple(int(v) for v in odd_padding)  # SINGA's (top, bottom, left, right) extra
        for what, v in (("kernel_size", self.kernel_size), ("stride", self.stride)):
            if min(v) <= 0:
                raise errors.ValueError(f"[{op}] {what} must be positive, got {v}")
        square = all(p[0] == p[1] for p in (self.kernel_size, self.stride, self.padding))
        if square and self.pad_mode == "NOTSET" and not any(self.odd_padding):
            make = core.MaxPool2d if self.is_max else core.AvgPool2d
            super().__init__(make(self.kernel_size[0], self.stride[0], self.padding[0]))
        else:
            Layer.__init__(self)
            self._impl = None

    def forward(self, x):  # the Python path's (the C++ layer's forward replaces it)
        op = type(self).__name__
        _check_images(op, x)
        begin, end = _padding_for(op, self.pad_mode, self.padding, x, self.kernel_size, self.stride)
        pool = autograd.max_pool_2d if self.is_max else autograd.avg_pool_2d
        return pool(x, self.kernel_size, self.stride, begin, padding_end=end, odd_padding=self.odd_padding)

    def __repr__(self):
        return f"{type(self).__name__}({self.kernel_size}, stride={self.stride}, padding={self.padding})"


class MaxPool2d(Pooling2d):
    """SINGA's MaxPool2d(kernel_size, stride=None, padding=0, odd_padding=(0, 0, 0, 0)):
    odd_padding adds (top, bottom, left, right) rows and columns at one end."""

    def __init__(self, kernel_size, stride=None, padding=0, odd_padding=(0, 0, 0, 0)):
        super().__init__(kernel_size, stride, padding, is_max=True, odd_padding=odd_padding)


class AvgPool2d(Pooling2d):
    """SINGA's AvgPool2d(kernel_size, stride=None, padding=0, odd_padding=(0, 0, 0, 0)); padded
    zeros count in the average (count_include_pad), at either end."""

    def __init__(self, kernel_size, stride=None, padding=0, odd_padding=(0, 0, 0, 0)):
        super().__init__(kernel_size, stride, padding, is_max=False, odd_padding=odd_padding)


class SyncBatchNorm2d(NativeLayer):
    """BatchNorm2d over the global batch of a data-parallel job (Note [SyncBatchNorm]): one
    all-reduce of the per-channel statistics in forward and one in backward, in float64; gamma
    and beta gradients stay local and are reduced once, by opt.DistOpt. `communicator`: the
    DistOpt's (opt.DistOpt(...).communicator); none: loom.comm.communicator()."""

    def __init__(self, num_features, communicator=None, momentum=0.1, eps=1e-5, device=None, dtype=None):
        if communicator is None:
            from . import comm
            communicator = comm.communicator()
        super().__init__(core.SyncBatchNorm2d(num_features, communicator, errors._real("SyncBatchNorm2d", "momentum", momentum, finite=True),
                                              errors._real("SyncBatchNorm2d", "eps", eps, finite=True),
                                              _options(device, dtype)))


class LayerNorm(NativeLayer):
    def __init__(self, normalized_shape, eps=1e-5, device=None, dtype=None):
        super().__init__(core.LayerNorm(_shape(normalized_shape), errors._real("LayerNorm", "eps", eps, finite=True), _options(device, dtype)))


class GlobalAvgPool(NativeLayer):
    """(N, C, H, W) -> (N, C)."""

    def __init__(self):
        super().__init__(core.GlobalAvgPool())


class Embedding(NativeLayer):
    """indices: int (...) -> (..., dim)."""

    def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None):
        super().__init__(core.Embedding(num_embeddings, embedding_dim, _options(device, dtype)))


class MultiHeadAttention(NativeLayer):
    """Self-attention: x (B, T, dim) -> (B, T, dim). One (dim, 3 dim) projection to q, k, v,
    `heads` heads of width dim / heads, the attention op (causal: each position sees itself and
    the positions before it), an output projection; weights normal(0, 0.02) as GPT-2's."""

    def __init__(self, dim, num_heads, causal=True, dropout=0.0, device=None, dtype=None):
        super().__init__(core.MultiHeadAttention(_size("MultiHeadAttention", dim),
                                                 _size("MultiHeadAttention", num_heads), bool(causal),
                                                 errors._real("MultiHeadAttention", "dropout", dropout, finite=True),
                                                 _options(device, dtype)))
        self._draws_random = dropout > 0


class TransformerBlock(NativeLayer):
    """A pre-norm transformer block: x + attn(ln1(x)), then x + fc2(gelu(fc1(ln2(x)))), fc1 to
    mlp_ratio * dim. x: (B, T, dim) -> (B, T, dim)."""

    _ACTS = {"gelu": "kGELU", "relu": "kReLU", "tanh": "kTanh"}

    def __init__(self, dim, num_heads, mlp_ratio=4, causal=True, dropout=0.0, activation="gelu", device=None,
                 dtype=None):
        if activation not in self._ACTS:
            raise errors.ValueError(f"[TransformerBlock] activation must be one of {sorted(self._ACTS)}, "
                                    f"got {activation!r}")
        super().__init__(core.TransformerBlock(_size("TransformerBlock", dim), _size("TransformerBlock", num_heads),
                                               _size("TransformerBlock", mlp_ratio), bool(causal),
                                               errors._real("TransformerBlock", "dropout", dropout, finite=True),
                                               getattr(core, "Act_" + self._ACTS[activation]),
                                               _options(device, dtype)))
        self._draws_random = dropout > 0


class GPT(NativeLayer):
    """GPT-2's architecture: token and learned position embeddings, `num_layers` pre-norm
    TransformerBlocks, a final LayerNorm and logits through the token embedding (tied weights).
    tokens: int32/int64 (B, T), T <= context -> logits (B * T, vocab_size), rows in (b, t)
    order: softmax_cross_entropy against the targets reshaped to (B * T,)."""

    def __init__(self, vocab_size, context=256, num_layers=4, dim=256, num_heads=4, mlp_ratio=4, dropout=0.0,
                 tie_weights=True, device=None, dtype=None):
        c = core.GptConfig()
        c.vocab, c.context, c.layers = (_size("GPT", vocab_size), _size("GPT", context), _size("GPT", num_layers))
        c.dim, c.heads, c.mlp_ratio = _size("GPT", dim), _size("GPT", num_heads), _size("GPT", mlp_ratio)
        c.dropout, c.tie_weights = errors._real("GPT", "dropout", dropout, finite=True), bool(tie_weights)
        self.config = c
        super().__init__(core.Gpt(c, _options(device, dtype)))
        self._draws_random = c.dropout > 0


class BasicBlock(NativeLayer):
    """ResNet basic block (two 3x3 convolutions and a shortcut)."""

    def __init__(self, in_channels, out_channels, stride=1, device=None, dtype=None):
        super().__init__(core.BasicBlock(in_channels, out_channels, stride, _options(device, dtype)))


class Bottleneck(NativeLayer):
    """ResNet bottleneck block (1x1, 3x3, 1x1; output channels 4 * mid_channels)."""

    def __init__(self, in_channels, mid_channels, stride=1, device=None, dtype=None):
        super().__init__(core.Bottleneck(in_channels, mid_channels, stride, _options(device, dtype)))


class SeparableConv2d(Layer):
    """SINGA's SeparableConv2d(nb_kernels, kernel_size, stride=1, padding=0, bias=False): a
    depthwise convolution (one kernel_size filter per input channel, group = C) then a pointwise
    1x1 convolution to nb_kernels channels; both are made at the first input."""

    def __init__(self, nb_kernels, kernel_size, stride=1, padding=0, bias=False):
        super().__init__()
        self.nb_kernels = _size("SeparableConv2d", nb_kernels)
        self.kernel_size = _pair("SeparableConv2d", "kernel_size", kernel_size)
        self.stride = _pair("SeparableConv2d", "stride", stride)
        self.padding = _pair("SeparableConv2d", "padding", padding)
        self.bias = bool(bias)
        self.depthwise_conv = self.point_conv = None

    @property
    def initialized(self):
        return self.depthwise_conv is not None

    def forward(self, x):
        _check_images("SeparableConv2d", x)
        if self.depthwise_conv is None:
            channels = x.shape[1]
            depthwise = Conv2d(channels, self.kernel_size, stride=self.stride, padding=self.padding, group=channels,
                               bias=self.bias)
            depthwise(x)  # made now, on x's device and in its dtype (refused during a capture)
            self.depthwise_conv, self.point_conv = depthwise, Conv2d(self.nb_kernels, 1, bias=self.bias)
        return self.point_conv(self.depthwise_conv(x))


class Gemm(Layer, _PythonParams):
    """SINGA's Gemm(nb_kernels, alpha=1.0, beta=1.0, transA=False, transB=True, bias=True,
    bias_shape=None): y = alpha x' W' + beta b, x' = x^T when transA, W' = W^T when transB, so W
    is (nb_kernels, in) with transB and (in, nb_kernels) without; b (1, nb_kernels), or
    bias_shape. W ~ N(0, 2 / (in + nb_kernels)) and b = 0 are made at the first input."""

    def __init__(self, nb_kernels, alpha=1.0, beta=1.0, transA=False, transB=True, bias=True, bias_shape=None):
        super().__init__()
        self.nb_kernels = _size("Gemm", nb_kernels)
        self.alpha, self.beta = errors._real("Gemm", "alpha", alpha), errors._real("Gemm", "beta", beta)
        self.transA, self.transB, self.bias = bool(transA), bool(transB), bool(bias)
        self.bias_shape = (1, self.nb_kernels) if bias_shape is None else errors._ints("Gemm", "bias_shape", bias_shape, 1, 2 ** 63 - 1)
        self._py_params = OrderedDict()
        self.W = self.b = None

    @property
    def initialized(self):
        return self.W is not None

    def forward(self, x):
        if not isinstance(x, core.Tensor) or x.ndim != 2:
            raise errors.ShapeError(f"[Gemm] expects a matrix, got "
                                    f"{x.describe() if isinstance(x, core.Tensor) else type(x).__name__}")
        in_features = x.shape[0] if self.transA else x.shape[1]
        if self.W is None:
            o = _options(x.device, x.dtype)
            shape = (self.nb_kernels, in_features) if self.transB else (in_features, self.nb_kernels)
            std = math.sqrt(2.0 / (in_features + self.nb_kernels))
            self.W = self._add_param("W", core.normal(shape, 0.0, std, o.dtype, o.device))
            if self.bias:
                self.b = self._add_param("b", core.zeros(self.bias_shape, o.dtype, o.device))
        elif self.W.shape[1 if self.transB else 0] != in_features:
            raise errors.ShapeError(f"[Gemm] W is {self.W.describe()}, the input {x.describe()} has {in_features} "
                                    "features")
        return autograd.gemm(x, self.W, self.b, self.alpha, self.beta, self.transA, self.transB)

    def get_params(self):
        return OrderedDict(self._py_params)

    def get_states(self):
        return OrderedDict(self._py_params)


# ---- SINGA's loss layers (losses of shape (1,), as SINGA's are) and combinators ----

def _check_pair(op, x, t):
    for what, v in (("input", x), ("target", t)):
        if not isinstance(v, core.Tensor):
            raise errors.TypeError(f"[{op}] the {what} must be a loom Tensor, got {type(v).__name__}")


class SoftMaxCrossEntropy(Layer):
    """forward(x, t): softmax cross-entropy of logits x (N, C) against t, class indices (N)
    (int32/int64) or probabilities (N, C); the mean over the batch, shape (1,)."""

    def forward(self, x, t):
        _check_pair("SoftMaxCrossEntropy", x, t)
        return autograd.softmax_cross_entropy(x, t)


class MeanSquareError(Layer):
    """forward(x, t): the mean over all elements of (x - t)^2, shape (1,) (SINGA 3's; its gradient
    is 2 (x - t) / x.size). x and t have one shape."""

    def forward(self, x, t):
        _check_pair("MeanSquareError", x, t)
        if x.shape != t.shape:
            raise errors.ShapeError(f"[MeanSquareError] input {x.describe()} and target {t.describe()} differ in shape")
        return autograd.mse_loss(x, t)


class CrossEntropy(Layer):
    """forward(x, t): -sum(t * log(x)) / N for probabilities x (N, C) (a softmax's output) and
    targets t (N, C) (one-hot or probabilities); shape (1,)."""

    def forward(self, x, t):
        _check_pair("CrossEntropy", x, t)
        if x.ndim != 2 or x.shape != t.shape:
            raise errors.ShapeError(f"[CrossEntropy] expects probabilities (N, C) and targets of the same shape, "
                                    f"got {x.describe()} and {t.describe()}")
        return autograd.cross_entropy(x, t)


class Add(Layer):
    """forward(a, b): a + b, with broadcasting."""

    def forward(self, a, b):
        return autograd.add(a, b)


class Cat(Layer):
    """forward(xs): the tensors of the list xs joined along `axis` (SINGA's Cat(axis=0))."""

    def __init__(self, axis=0):
        super().__init__()
        self.axis = errors._whole("Cat", "axis", axis, *errors._INT64)

    def forward(self, xs):
        return core.cat(errors._tensors("Cat", "xs", xs), self.axis)


# ---- recurrent layers (SINGA's RNN and LSTM), made of loom ops: backward through time comes
# from autograd, and a captured step records the unrolled sequence ----

class _Recurrent(Layer, _PythonParams):
    """Shared by RNN and LSTM: arguments, parameter creation at the first input, the stacking of
    layers and directions.

    Note [Recurrent parameter names]
    Layer 0's forward direction has SINGA's names (RNN: Wx, Wh,
    b; LSTM: Wx_g, Wh_g, Bx_g, Bh_g for each gate g of _i, _f, _o, _g); layer k > 0 appends
    "_l{k}" and the backward direction "_reverse" (torch's suffixes), so "Wx_l1_reverse" is
    torch's weight_ih_l1_reverse transposed. set_params_initializer(Wx=f) applies f to every
    parameter whose name is Wx or starts with "Wx_"."""

    _GATES = ()

    def _setup(self, input_size, hidden_size, nonlinearity, num_layers, bias, batch_first, dropout, bidirectional):
        Layer.__init__(self)
        op = type(self).__name__
        if hidden_size is None:  # SINGA's RNN(hidden_size): the input size comes from the first step
            input_size, hidden_size = None, input_size
        self.input_size = None if input_size is None else _size(op, input_size)
        self.hidden_size = _size(op, hidden_size)
        if nonlinearity not in ("tanh", "relu"):
            raise errors.ValueError(f"[{op}] nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.num_layers = _size(op, num_layers)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise errors.ValueError(f"[{op}] dropout must be a number in [0, 1), got {dropout!r}")
        if batch_first:
            raise errors.ValueError(f"[{op}] loom's {op} takes steps first: a list of (N, features) steps or one "
                                    "(T, N, features) tensor (batch_first=False)")
        self.nonlinearity, self.bias, self.dropout = nonlinearity, bool(bias), float(dropout)
        self.bidirectional = bool(bidirectional)
        self.directions = 2 if self.bidirectional else 1
        self._py_params = OrderedDict()
        self._initializers = {}

    @property
    def initialized(self):
        return bool(self._py_params)

    @property
    def params(self):
        """SINGA's rnn.params: the parameters, a list."""
        return list(self._py_params.values())

    def get_params(self):
        return OrderedDict(self._py_params)

    def get_states(self):
        return OrderedDict(self._py_params)

    @staticmethod
    def _suffix(layer, direction):
        return (f"_l{layer}" if layer else "") + ("_reverse" if direction else "")

    def _param_shapes(self, input_size):
        """[(name, shape)] of every parameter, layer by layer, direction by direction."""
        h, out = self.hidden_size, []
        for k in range(self.num_layers):
            n_in = input_size if k == 0 else h * self.directions
            for d in range(self.directions):
                sfx = self._suffix(k, d)
                for g in self._GATES:
                    out += [(f"Wx{g}{sfx}", (n_in, h)), (f"Wh{g}{sfx}", (h, h))]
                    if self.bias:
                        out += [(f"{b}{g}{sfx}", (h,)) for b in self._BIASES]
        return out

    def _create(self, x):
        o = _options(x.device, x.dtype)
        if self.input_size is None:
            self.input_size = x.shape[1]
        bound = 1.0 / math.sqrt(self.hidden_size)  # U(-1/sqrt(H), 1/sqrt(H)), PyTorch's choice
        for name, shape in self._param_shapes(self.input_size):
            if len(shape) == 2:
                self._add_param(name, core.uniform(shape, -bound, bound, o.dtype, o.device))
            else:
                self._add_param(name, core.zeros(shape, o.dtype, o.device))
        self._run_initializers()

    def _run_initializers(self):
        for key, fn in self._initializers.items():
            for name, t in self._py_params.items():
                if name == key or name.startswith(key + "_"):
                    with autograd.no_grad():
                        fn(t)

    def set_params_initializer(self, **fns):
        """SINGA's: fns maps a parameter name to a function filling a tensor in place
        (lambda t: t.gaussian(0, 1)); Note [Recurrent parameter names] says which it reaches.
        Applied now if the parameters exist, else when the first input creates them."""
        for key, fn in fns.items():
            if not callable(fn):
                raise errors.TypeError(f"[{type(self).__name__}] initializer '{key}' is a {type(fn).__name__}, "
                                       "not a function")
        self._initializers.update(fns)
        if self._py_params:
            self._run_initializers()

    def set_params(self, values=None, **kwargs):
        """Copies values (Tensors or arrays, by name) into the parameters; before the first input
        they create the parameters (the input size is read from Wx's first axis)."""
        values = dict(values or {}, **kwargs)
        if not self._py_params and values:
            wx = values.get("Wx", values.get(f"Wx{self._GATES[0]}"))
            if wx is None:
                raise errors.ValueError(f"[{type(self).__name__}] set_params before the first input needs Wx "
                                        "(it gives the input size)")
            size = wx.shape[0]
            if self.input_size is not None and size != self.input_size:
                raise errors.ShapeError(f"[{type(self).__name__}] Wx has {size} rows, input_size is {self.input_size}")
            self.input_size = size
            dev = wx.device if isinstance(wx, core.Tensor) else None
            self._create(core.zeros((1, size), _enum("float32"), _check_device(dev)))
        Layer._set(self._py_params, values)

    def _steps(self, xs, states):
        """xs as a list of (N, input_size) steps; checks the steps and the initial states, and
        creates the parameters at the first call."""
        op = type(self).__name__
        if isinstance(xs, core.Tensor):
            if xs.ndim != 3:
                raise errors.ShapeError(f"[{op}] expects a list of (N, features) steps or one (T, N, features) "
                                        f"tensor, got {xs.describe()}")
            xs = [core.reshape(core.slice(xs, 0, t, t + 1), xs.shape[1:]) for t in range(xs.shape[0])]
        xs = list(xs)
        if not xs:
            raise errors.ValueError(f"[{op}] needs at least one step")
        n_in = self.input_size if self.input_size is not None else getattr(xs[0], "shape", (0, 0))[-1]
        for t, x in enumerate(xs):
            if not isinstance(x, core.Tensor) or x.ndim != 2 or x.shape[1] != n_in or x.shape[0] != xs[0].shape[0]:
                what = x.describe() if isinstance(x, core.Tensor) else type(x).__name__
                raise errors.ShapeError(f"[{op}] step {t} is {what}; every step must be (N, {n_in}) with one N")
        n, stacked = xs[0].shape[0], self.num_layers * self.directions
        for what, h in states:
            if not isinstance(h, core.Tensor):
                raise errors.TypeError(f"[{op}] {what} is a {type(h).__name__}, not a loom Tensor")
            ok = h.shape in ((n, self.hidden_size), (1, self.hidden_size)) if stacked == 1 else \
                h.shape in ((stacked, n, self.hidden_size), (stacked, 1, self.hidden_size))
            if not ok:
                want = f"({n} or 1, {self.hidden_size})" if stacked == 1 else \
                    f"({stacked}, {n} or 1, {self.hidden_size}) (num_layers * directions first)"
                raise errors.ShapeError(f"[{op}] {what} is {h.describe()}, expected {want}")
        if not self._py_params:
            self._create(xs[0])
        return xs

    def _initial(self, h, index):
        """Layer-direction `index`'s slice of an initial state (the state itself when there is one)."""
        if self.num_layers * self.directions == 1:
            return h
        return core.reshape(core.slice(h, 0, index, index + 1), h.shape[1:])

    def _gate(self, g, sfx, x, h):
        p = self._py_params
        y = core.add(core.matmul(x, p[f"Wx{g}{sfx}"]), core.matmul(h, p[f"Wh{g}{sfx}"]))
        if self.bias:
            for b in self._BIASES:
                y = core.add_bias(y, p[f"{b}{g}{sfx}"])
        return y

    def _run(self, xs, states):
        """Every layer and direction over the steps; `states` is the list of initial states
        (h0 alone, or h0 and c0). Returns the top layer's outputs and the final states, each
        stacked as the initial states were."""
        finals = [[] for _ in states]
        for k in range(self.num_layers):
            if k and self.dropout and self.training:
                xs = [autograd.dropout(x, self.dropout, True) for x in xs]
            outs = []
            for d in range(self.directions):
                index = k * self.directions + d
                init = [self._initial(s, index) for s in states]
                seq = xs[::-1] if d else xs
                ys, last = self._cell_over(seq, init, self._suffix(k, d))
                outs.append(ys[::-1] if d else ys)
                for f, v in zip(finals, last):
                    f.append(v)
            xs = outs[0] if self.directions == 1 else [core.cat([a, b], 1) for a, b in zip(*outs)]
        if self.num_layers * self.directions == 1:
            return xs, [f[0] for f in finals]
        n = xs[0].shape[0]
        return xs, [core.cat([core.reshape(v, (1, n, self.hidden_size)) for v in f], 0) for f in finals]


class RNN(_Recurrent):
    """SINGA's RNN(input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
    batch_first=False, dropout=0, bidirectional=False), or RNN(hidden_size) with the input size
    from the first call; called on xs, a list of T steps (N, input_size) (or one (T, N,
    input_size) tensor), and h0:

        h_t = act(x_t Wx + h_(t-1) Wh + b)

    per layer and direction (a backward direction reads the steps last to first; a layer above
    the first reads the concatenated directions of the one below, after dropout when training).
    h0 is (N, hidden_size) (or (1, hidden_size), broadcast) for one unidirectional layer, else
    (num_layers * directions, N, hidden_size) as torch's. Returns (ys, h_T): ys the top layer's
    (N, directions * hidden_size) steps, h_T shaped as h0. The parameters (Note [Recurrent
    parameter names]) are made at the first call, on its device and in its dtype."""

    _GATES = ("",)
    _BIASES = ("b",)

    def __init__(self, input_size, hidden_size=None, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0, bidirectional=False):  # SINGA's order: num_layers before nonlinearity
        self._setup(input_size, hidden_size, nonlinearity, num_layers, bias, batch_first, dropout, bidirectional)

    def forward(self, xs, h0):
        xs = self._steps(xs, [("h0", h0)])
        ys, (h,) = self._run(xs, [h0])
        return ys, h

    def _cell_over(self, xs, init, sfx):
        act = core.tanh if self.nonlinearity == "tanh" else core.relu
        (h,) = init
        ys = []
        for x in xs:
            h = act(self._gate("", sfx, x, h))
            ys.append(h)
        return ys, [h]


class LSTM(_Recurrent):
    """SINGA's LSTM(input_size, hidden_size, nonlinearity="tanh", num_layers=1, bias=True,
    batch_first=False, dropout=0, bidirectional=False) (nonlinearity must stay "tanh"), or
    LSTM(hidden_size); called on xs (as RNN's) and (h0, c0), each shaped as RNN's h0, with input
    (i), forget (f), output (o) and candidate (g) gates:

        i, f, o = sigmoid(x Wx_* + h Wh_* + Bx_* + Bh_*),  g = tanh(x Wx_g + h Wh_g + Bx_g + Bh_g)
        c_t = f c_(t-1) + i g,   h_t = o tanh(c_t)

    returns (ys, h_T, c_T), stacked as RNN's."""

    _GATES = ("_i", "_f", "_o", "_g")
    _BIASES = ("Bx", "Bh")

    def __init__(self, input_size, hidden_size=None, nonlinearity="tanh", num_layers=1, bias=True, batch_first=False,
                 dropout=0, bidirectional=False):  # SINGA's order: nonlinearity before num_layers
        if nonlinearity != "tanh":
            raise errors.ValueError(f"[LSTM] the LSTM's activations are fixed (sigmoid gates, tanh cell); "
                                    f"nonlinearity must stay 'tanh', got {nonlinearity!r}")
        self._setup(input_size, hidden_size, nonlinearity, num_layers, bias, batch_first, dropout, bidirectional)

    def forward(self, xs, h0_c0):
        if not isinstance(h0_c0, (tuple, list)) or len(h0_c0) != 2:
            raise errors.TypeError("[LSTM] the initial state is a pair (h0, c0)")
        h, c = h0_c0
        xs = self._steps(xs, [("h0", h), ("c0", c)])
        ys, (h, c) = self._run(xs, [h, c])
        return ys, h, c

    def _cell_over(self, xs, init, sfx):
        h, c = init
        ys = []
        for x in xs:
            i, f, o = (core.sigmoid(self._gate(g, sfx, x, h)) for g in ("_i", "_f", "_o"))
            c = core.add(core.mul(f, c), core.mul(i, core.tanh(self._gate("_g", sfx, x, h))))
            h = core.mul(o, core.tanh(c))
            ys.append(h)
        return ys, [h, c]
