"""loom.singa_wrap: the names of SINGA's SWIG module (singa.singa_wrap) that SINGA's Python code
and tests call, over loom's own ops.

SINGA's C++ tensor and its Python tensor are two objects (`t.data` is the C++ one); loom's
Tensor is both, so `singa_wrap.Tensor` is loom's Tensor, the functions here take and return loom
tensors, and the C++ tensor's methods (GetFloatValue, data_type, AsType, ToHost, ...) are methods
of loom's Tensor (installed when loom is imported). SINGA's dtype constants (kFloat32, kInt, ...)
are loom's DType values, which data_type() returns. A handle (BatchNormHandle, PoolingHandle,
ConvHandle) is a description of an op's settings: the functions below and loom.autograd's
batchnorm_2d / pooling_2d read it. Everything runs on the tensors' device, CPU or CUDA: the Cpu* and
Gpu* spellings are the same functions.
"""
import numpy as np

from . import autograd, core, errors
from .core import Tensor

USE_DNNL = False  # SINGA's oneDNN code paths: loom chooses its CPU kernels itself
USE_DIST = bool(core.mpi_built())



def __getattr__(name):
    """USE_CUDA is asked when read, not at import: asking opens the CUDA backend (Note [Backends
    loaded on first use] in core/backend_library.h), which a CPU-only program never maps."""
    if name == "USE_CUDA":
        return bool(core.cuda_available())
    raise AttributeError(f"module 'loom.singa_wrap' has no attribute '{name}'")


kFloat16 = core.DType_kFloat16
kFloat32 = core.DType_kFloat32
kFloat64 = core.DType_kFloat64
kInt = core.DType_kInt32
kInt64 = core.DType_kInt64
kUChar = core.DType_kUInt8
kBool = core.DType_kBool


def _tensor(fn, t):
    if not isinstance(t, Tensor):
        raise errors.TypeError(f"[singa_wrap.{fn}] expects a loom Tensor, got {type(t).__name__}")
    return t


def Gaussian(mean, std, t):
    """Fills t in place with N(mean, std) samples."""
    _tensor("Gaussian", t).gaussian(mean, std)


def Uniform(low, high, t):
    """Fills t in place with U(low, high) samples."""
    _tensor("Uniform", t).uniform(low, high)


def Reshape(t, shape):
    return core.reshape(_tensor("Reshape", t), tuple(int(d) for d in shape))


def SoftMax(t, axis=1):
    """SINGA's softmax: over the axes from `axis` on, taken together (x seen as a matrix of
    prod(shape[:axis]) rows), as ONNX's Softmax before opset 13."""
    shape = tuple(_tensor("SoftMax", t).shape)
    axis = axis % len(shape) if shape else 0
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    return core.reshape(core.softmax(core.reshape(t, (rows, -1)), 1), shape)


class VecTensor(list):
    """SINGA's std::vector<Tensor>: a list of loom tensors."""


def ConcatOn(tensors, axis):
    return core.cat([_tensor("ConcatOn", t) for t in tensors], int(axis))


def _binary(name, tensor_op, scalar_op):
    def f(a, b):
        _tensor(name, a)
        return tensor_op(a, b) if isinstance(b, Tensor) else scalar_op(a, float(b))
    f.__name__ = name
    return f


__add__ = Add = _binary("__add__", core.add, core.add_scalar)
__sub__ = Sub = _binary("__sub__", core.sub, core.sub_scalar)
__mul__ = EltwiseMult = _binary("__mul__", core.mul, core.mul_scalar)
__div__ = Div = _binary("__div__", core.div, core.div_scalar)
Pow = _binary("Pow", core.pow, core.pow_scalar)


def _unary(name, op):
    def f(t):
        return op(_tensor(name, t))
    f.__name__ = name
    return f


Abs, Exp, Log, Sqrt, Square = (_unary("Abs", core.abs), _unary("Exp", core.exp), _unary("Log", core.log),
                               _unary("Sqrt", core.sqrt), _unary("Square", lambda t: core.mul(t, t)))
Tanh, Sigmoid, ReLU, Sign = (_unary("Tanh", core.tanh), _unary("Sigmoid", core.sigmoid), _unary("ReLU", core.relu),
                             _unary("Sign", core.sign))
Erf, Ceil, Floor = _unary("Erf", core.erf), _unary("Ceil", core.ceil), _unary("Floor", core.floor)
Round, RoundE = _unary("Round", core.round), _unary("RoundE", core.rounde)  # half away from zero, half to even


# ---- batch normalisation: SINGA's handle, forward (training, inference) and backward ----

class BatchNormHandle:
    """SINGA's batch-norm description: the running statistics' momentum (`factor`, weighting the
    batch: running = factor * batch + (1 - factor) * running) and the input's shape."""

    def __init__(self, factor, x):
        self.factor, self.shape = float(factor), tuple(_tensor("BatchNormHandle", x).shape)
        if len(self.shape) not in (2, 4):
            raise errors.ShapeError(f"[BatchNormHandle] expects an input (N, C) or (N, C, H, W), got {x.describe()}")
        self.channels, self.eps = self.shape[1], 1e-5


CudnnBatchNormHandle = BatchNormHandle


def _per_channel(h, t):
    """t (a (C,) or (1, C, 1, 1) parameter) shaped to broadcast over x."""
    return core.reshape(t, (1, h.channels) + (1,) * (len(h.shape) - 2))


def _batch_axes(h):
    return (0,) + tuple(range(2, len(h.shape)))


def _bn_train(h, x, scale, bias):
    axes = _batch_axes(h)
    mean = core.mean(x, axes, True)
    centered = core.sub(x, mean)
    var = core.mean(core.mul(centered, centered), axes, True)
    inv_std = core.rdiv_scalar(core.sqrt(core.add_scalar(var, h.eps)), 1.0)
    y = core.add(core.mul(core.mul(centered, inv_std), _per_channel(h, scale)), _per_channel(h, bias))
    return y, mean, var, inv_std


def CpuBatchNormForwardTraining(h, x, scale, bias, running_mean, running_var):
    """(y, batch mean, batch 1/sqrt(var + eps)) from batch statistics; the running statistics are
    updated in place (the variance unbiased), as SINGA's."""
    with autograd.no_grad():
        y, mean, var, inv_std = _bn_train(h, x, scale, bias)
        n = x.size() // h.channels
        unbiased = core.mul_scalar(var, n / max(n - 1, 1))
        for running, batch in ((running_mean, mean), (running_var, unbiased)):
            new = core.add(core.mul_scalar(core.reshape(batch, running.shape), h.factor),
                           core.mul_scalar(running, 1.0 - h.factor))
            core.copy_into(running, new)
    return y, core.reshape(mean, running_mean.shape), core.reshape(inv_std, running_var.shape)


def CpuBatchNormForwardInference(h, x, scale, bias, running_mean, running_var):
    inv_std = core.rdiv_scalar(core.sqrt(core.add_scalar(_per_channel(h, running_var), h.eps)), 1.0)
    centered = core.sub(x, _per_channel(h, running_mean))
    return core.add(core.mul(core.mul(centered, inv_std), _per_channel(h, scale)), _per_channel(h, bias))


def CpuBatchNormBackwardx(h, y, dy, x, scale, bias, mean, var):
    """(dx, dscale, dbias) of the training forward at x, given dy (y, mean and var are what the
    forward gave; loom recomputes them from x)."""
    leaves = [t.detach() for t in (x, scale, bias)]
    for leaf in leaves:
        leaf.requires_grad = True
    out, _, _, _ = _bn_train(h, *leaves)
    grads = autograd.gradients(out, dy)
    return tuple(grads[leaf] if leaf in grads else core.zeros_like(leaf) for leaf in leaves)


GpuBatchNormForwardTraining = CpuBatchNormForwardTraining
GpuBatchNormForwardInference = CpuBatchNormForwardInference
GpuBatchNormBackward = CpuBatchNormBackwardx


# ---- pooling and convolution handles ----

class PoolingHandle:
    """SINGA's pooling description: kernel, stride and padding (height, width) and max or average."""

    def __init__(self, x, kernel, stride, padding, is_max=True):
        _tensor("PoolingHandle", x)
        self.kernel, self.stride = tuple(int(k) for k in kernel), tuple(int(s) for s in stride)
        self.padding, self.is_max = tuple(int(p) for p in padding), bool(is_max)

    def forward(self, x):
        if self.is_max:
            return autograd.max_pool_2d(x, self.kernel, self.stride, self.padding)
        return autograd.avg_pool_2d(x, self.kernel, self.stride, self.padding)


CudnnPoolingHandle = PoolingHandle


def CpuPoolingForward(h, x):
    with autograd.no_grad():
        return h.forward(x)


def CpuPoolingBackward(h, dy, x, y):
    """dx of the pooling at x, given dy."""
    leaf = x.detach()
    leaf.requires_grad = True
    return autograd.gradients(h.forward(leaf), dy)[leaf]


GpuPoolingForward, GpuPoolingBackward = CpuPoolingForward, CpuPoolingBackward


class ConvHandle:
    """SINGA's convolution description: kernel, stride, padding, channels, bias and groups."""

    def __init__(self, x, kernel, stride, padding, in_channels, out_channels, bias, groups=1):
        _tensor("ConvHandle", x)
        self.kernel, self.stride = tuple(int(k) for k in kernel), tuple(int(s) for s in stride)
        self.padding, self.bias, self.groups = tuple(int(p) for p in padding), bool(bias), int(groups)
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)


CudnnConvHandle = ConvHandle


# ---- the C++ tensor's methods, on loom's Tensor ----

def _values(self, count, dtype):
    flat = np.ascontiguousarray(self.to_numpy(), dtype=dtype).reshape(-1)
    return flat[:int(count)]


def _copy_from_host(dtype):
    def copy(self, values, count=None):
        arr = np.asarray(values, dtype=dtype).reshape(-1)
        n = self.size() if count is None else int(count)
        if n != self.size() or arr.size < n:
            raise errors.ShapeError(f"[Tensor.CopyDataFromHostPtr] {self.describe()} takes {self.size()} values, "
                                    f"got {arr.size} (count {n})")
        self.copy_from_numpy(arr[:n].reshape(tuple(self.shape)).astype(np.dtype(self.dtype), copy=False))
    return copy


def _as_type(self, dtype):
    return self.as_type(core.dtype_name(dtype) if isinstance(dtype, int) else dtype)


_CXX_METHODS = {
    "data_type": lambda self: core._core.Tensor_dtype(self),
    "GetFloatValue": lambda self, count: _values(self, count, np.float32),
    "GetIntValue": lambda self, count: _values(self, count, np.int32),
    "CopyFloatDataFromHostPtr": _copy_from_host(np.float32),
    "CopyIntDataFromHostPtr": _copy_from_host(np.int32),
    "AsType": _as_type,
    "Size": lambda self: self.size(),
    "nDim": lambda self: core._core.Tensor_ndim(self),
    "MemSize": lambda self: self.memsize(),
    "ToHost": lambda self: self.to_host(),
    "ToDevice": lambda self, device: self.to_device(device),
    "Clone": lambda self, device=None: self.clone() if device is None else self.clone().to_device(device),
    "Reshape": lambda self, shape: Reshape(self, shape),
}
for _name, _method in _CXX_METHODS.items():
    setattr(Tensor, _name, _method)


# SINGA's scripts build a Python tensor from a C++ one by assignment (t = Tensor(); t.data = c;
# t.shape = c.shape(); t.device = c.device(); t.dtype = c.data_type()). `data` rebinds the
# handle; the others must then agree with what the tensor is.
def _agreeing(name, fget, same):
    def fset(self, value):
        if not same(fget(self), value):
            raise errors.ValueError(f"[Tensor.{name}] {self.describe()} cannot be given {name} {value!r}: "
                                    "it follows from the tensor's data (assign .data)")
    return property(fget, fset, doc=getattr(Tensor, name).__doc__)


def _same_dtype(current, value):
    return current == (core.dtype_name(value) if isinstance(value, int) else value)


Tensor.data = property(lambda self: self, lambda self, other: self._rebind(_tensor("Tensor.data", other)),
                       doc=Tensor.data.__doc__)
Tensor.shape = _agreeing("shape", Tensor.shape.fget, lambda a, b: tuple(a) == tuple(b))
Tensor.device = _agreeing("device", Tensor.device.fget, lambda a, b: a == b)
Tensor.dtype = _agreeing("dtype", Tensor.dtype.fget, _same_dtype)
# SINGA's stores_grad marks a parameter, whose gradient autograd computes: loom's requires_grad.
Tensor.stores_grad = property(lambda self: self.requires_grad,
                              lambda self, value: setattr(self, "requires_grad", bool(value)),
                              doc="SINGA's name for requires_grad on a parameter.")
# SINGA's C++ tensor has device() a method; loom's Tensor.device is a property, so a Device called
# returns itself (d = t.device(); t.ToDevice(d)).
core.Device.__call__ = lambda self: self
del _name, _method
