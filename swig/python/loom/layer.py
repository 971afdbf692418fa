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
from collections import OrderedDict

from . import core, errors
from .tensor import _check_device, _enum, _shape

__all__ = ["Layer", "Linear", "ReLU", "LeakyReLU", "Sigmoid", "Tanh", "GELU", "Softplus", "Dropout", "Flatten",
           "Sequential", "Conv2d", "BatchNorm2d", "SyncBatchNorm2d", "LayerNorm", "MaxPool2d", "AvgPool2d", "GlobalAvgPool",
           "Embedding", "BasicBlock", "Bottleneck"]


class Layer:
    """Base class. Sub-layers are found among the attributes (and lists/tuples of layers)."""

    def __init__(self):
        self.training = True

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

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
        out = OrderedDict()
        for name, sub in self._sublayers():
            for k, v in sub.get_params().items():
                out[f"{name}.{k}"] = v
        return out

    def get_states(self):
        """Parameters and non-trainable state (BatchNorm's running statistics) by path."""
        out = OrderedDict()
        for name, sub in self._sublayers():
            for k, v in sub.get_states().items():
                out[f"{name}.{k}"] = v
        return out

    def set_params(self, values):
        """Copies values (numpy arrays or Tensors) into the parameters of the same names."""
        self._set(self.get_params(), values)

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


class NativeLayer(Layer):
    """A C++ layer (loom::nn::Layer). `forward` is the C++ method itself."""

    def __init__(self, impl):
        super().__init__()
        self._impl = impl
        self.forward = impl.forward

    def get_params(self):
        return OrderedDict(self._impl.params())

    def get_states(self):
        out = OrderedDict(self._impl.params())
        out.update(self._impl.states())
        return out

    def train(self, mode=True):
        self.training = bool(mode)
        self._impl.train(bool(mode))
        return self

    def __repr__(self):
        return f"{type(self).__name__}()" if type(self) is not NativeLayer else f"NativeLayer({self._impl.type_name()})"


class Linear(NativeLayer):
    """x: (..., in_features) -> (..., out_features); weight (in, out), bias (out).

    Linear(in_features, out_features, bias=True, device=None, dtype=None) creates the parameters
    now. Linear(out_features, bias=True) is SINGA's form: the input size, device and dtype come
    from the first input, and the parameters are created at that first call (which therefore
    must not happen during a capture: Model.compile runs one eager forward pass first)."""

    def __init__(self, in_features, out_features=None, bias=True, device=None, dtype=None):
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
        device, dtype = self._lazy_options
        if x.ndim < 1:
            raise errors.ShapeError(f"[Linear] input {x.describe()} has no feature axis")
        self.in_features = x.shape[-1]
        self._impl = core.Linear(self.in_features, self.out_features, self._bias,
                                 _options(device or x.device, dtype or x.dtype))
        self._impl.train(self.training)
        self.forward = self._impl.forward
        return self.forward(x)

    @property
    def initialized(self):
        """False for SINGA's Linear(out) until its first call has created the parameters."""
        return self._impl is not None

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
        super().__init__(core.Activation(core.Act_kLeakyReLU, float(slope)))


class Dropout(NativeLayer):
    """Zeroes elements with probability p in train mode (fresh numbers every replay)."""

    def __init__(self, p=0.5):
        super().__init__(core.Dropout(float(p)))


class Flatten(NativeLayer):
    """(N, ...) -> (N, prod(...)) from `start_axis`."""

    def __init__(self, start_axis=1):
        super().__init__(core.Flatten(int(start_axis)))


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
        if self._impl is not None:  # the C++ names ("0.weight"), the same paths
            return OrderedDict(self._impl.params())
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

class Conv2d(NativeLayer):
    """x: (N, in_channels, H, W) -> (N, out_channels, OH, OW); square kernel, zero padding."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True, dilation=1,
                 groups=1, device=None, dtype=None):
        super().__init__(core.Conv2d(in_channels, out_channels, kernel_size, stride, padding, bool(bias), dilation,
                                     groups, _options(device, dtype)))


class BatchNorm2d(NativeLayer):
    """Per-channel normalisation; running statistics are states (get_states), updated in train
    mode as running = (1 - momentum) running + momentum batch."""

    def __init__(self, num_features, momentum=0.1, eps=1e-5, device=None, dtype=None):
        super().__init__(core.BatchNorm2d(num_features, float(momentum), float(eps), _options(device, dtype)))


class SyncBatchNorm2d(NativeLayer):
    """BatchNorm2d over the global batch of a data-parallel job (Note [SyncBatchNorm]): one
    all-reduce of the per-channel statistics in forward and one in backward, in float64; gamma
    and beta gradients stay local and are reduced once, by opt.DistOpt. `communicator`: the
    DistOpt's (opt.DistOpt(...).communicator); none: loom.comm.communicator()."""

    def __init__(self, num_features, communicator=None, momentum=0.1, eps=1e-5, device=None, dtype=None):
        if communicator is None:
            from . import comm
            communicator = comm.communicator()
        super().__init__(core.SyncBatchNorm2d(num_features, communicator, float(momentum), float(eps),
                                              _options(device, dtype)))


class LayerNorm(NativeLayer):
    def __init__(self, normalized_shape, eps=1e-5, device=None, dtype=None):
        super().__init__(core.LayerNorm(_shape(normalized_shape), float(eps), _options(device, dtype)))


class MaxPool2d(NativeLayer):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__(core.MaxPool2d(kernel_size, 0 if stride is None else stride, padding))


class AvgPool2d(NativeLayer):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__(core.AvgPool2d(kernel_size, 0 if stride is None else stride, padding))


class GlobalAvgPool(NativeLayer):
    """(N, C, H, W) -> (N, C)."""

    def __init__(self):
        super().__init__(core.GlobalAvgPool())


class Embedding(NativeLayer):
    """indices: int (...) -> (..., dim)."""

    def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None):
        super().__init__(core.Embedding(num_embeddings, embedding_dim, _options(device, dtype)))


class BasicBlock(NativeLayer):
    """ResNet basic block (two 3x3 convolutions and a shortcut)."""

    def __init__(self, in_channels, out_channels, stride=1, device=None, dtype=None):
        super().__init__(core.BasicBlock(in_channels, out_channels, stride, _options(device, dtype)))


class Bottleneck(NativeLayer):
    """ResNet bottleneck block (1x1, 3x3, 1x1; output channels 4 * mid_channels)."""

    def __init__(self, in_channels, mid_channels, stride=1, device=None, dtype=None):
        super().__init__(core.Bottleneck(in_channels, mid_channels, stride, _options(device, dtype)))
