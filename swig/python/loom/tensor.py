"""loom.tensor: the Tensor class, creation functions and numpy interop.

A Tensor is a handle on device memory (loom::Tensor): shape, dtype, device and autograd state.
Arithmetic operators call loom's ops directly (one C++ call each). Values are read explicitly:

    t.to_numpy()        a copy (any device; refused while the device is capturing a graph)
    np.asarray(t)       zero-copy for CPU tensors whose memory is their own (see is_host_viewable);
                        a copy otherwise. The array keeps t alive.
    t.item()            one element as a Python number
    t.copy_from_numpy(a)  writes a (same shape; a dtype of the same kind) into t: a feed, allowed
                        during capture (the graph reads the new value when it runs)

dtypes are named by strings: loom.float32 == "float32"; numpy dtypes are accepted too.
"""
import operator

import numpy as np

from . import core, errors
from .core import Tensor

float32, float64, float16, bfloat16 = "float32", "float64", "float16", "bfloat16"
int32, int64, uint8, bool_ = "int32", "int64", "uint8", "bool"
_NAMES = (float32, float64, float16, bfloat16, int32, int64, uint8, bool_)
_ENUM = {n: core.dtype_from_name(n) for n in _NAMES}   # "float32" -> core.DType_kFloat32
_NAME = {e: n for n, e in _ENUM.items()}                  # and back
# numpy has no bfloat16: such tensors convert through float32 with an explicit cast.
_TO_NUMPY = {float32: np.dtype(np.float32), float64: np.dtype(np.float64), float16: np.dtype(np.float16),
             int32: np.dtype(np.int32), int64: np.dtype(np.int64), uint8: np.dtype(np.uint8),
             bool_: np.dtype(np.bool_)}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}

_c = core._core  # the extension's functions, called directly on hot paths


def dtype_name(dtype):
    """The loom name of `dtype`: a loom name, a numpy dtype or type, or float/int/bool."""
    if dtype is None:
        return float32
    if isinstance(dtype, str):
        if dtype in _ENUM:
            return dtype
        raise errors.DTypeError(f"[dtype] unknown dtype '{dtype}'; loom has {', '.join(_NAMES)}")
    if dtype is float:
        return float32
    if dtype is int:
        return int32
    if dtype is bool:
        return bool_
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise errors.DTypeError(f"[dtype] {dtype!r} is not a dtype; loom has {', '.join(_NAMES)}") from None
    if d in _FROM_NUMPY:
        return _FROM_NUMPY[d]
    raise errors.DTypeError(f"[dtype] numpy dtype {d} has no loom equivalent; loom has {', '.join(_NAMES)}")


def _enum(dtype):
    return _ENUM[dtype_name(dtype)]


def _default_device():
    return core.cpu_device()


def _check_device(device):
    if device is None:
        return _default_device()
    if not isinstance(device, core.Device):
        raise errors.TypeError(f"[tensor] device must be a loom Device (loom.device.create_cpu_device()), "
                        f"got {type(device).__name__}")
    return device


def _shape(shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    try:
        return tuple(operator.index(s) for s in shape)
    except TypeError:
        raise errors.TypeError(f"[tensor] shape must be a sequence of ints, got {shape!r}") from None


# ---------------------------------------------------------------------------------------------
# Methods added to the SWIG proxy class core.Tensor (so every op result already has them).

_swig_init = Tensor.__init__


def _init(self, shape=None, device=None, dtype=None, requires_grad=False, stores_grad=False, data=None):
    """Tensor(shape, device=None, dtype="float32", requires_grad=False) — lazy: no memory until
    first written. Tensor(data=array_like, device=None, dtype=None) copies data (float64 data
    becomes float32 unless dtype says otherwise). Tensor() is undefined.
    `stores_grad` is accepted for SINGA compatibility (gradients come from autograd.backward)."""
    if data is not None:
        arr = np.asarray(data)
        if dtype is None:  # SINGA's default: float data becomes float32, other dtypes are kept
            dtype = float32 if arr.dtype == np.float64 else _FROM_NUMPY.get(arr.dtype, float32)
        elif dtype_name(dtype) in _TO_NUMPY:  # an explicit dtype converts the data
            arr = arr.astype(_TO_NUMPY[dtype_name(dtype)])
        shape = arr.shape if shape is None else shape
    if shape is None:
        if device is not None or dtype is not None or requires_grad:
            raise errors.ValueError("[tensor] Tensor(device=..., dtype=...) needs a shape")
        _swig_init(self)
        return
    _swig_init(self, _shape(shape), _enum(dtype), _check_device(device))
    if data is not None:
        self.copy_from_numpy(arr)
    if requires_grad:
        self._set_requires_grad(True)


def _repr(self):
    if not self.defined():
        return "Tensor(undefined)"
    try:
        if _NAME[_c.Tensor_dtype(self)] in (float32, float64, int32, int64):
            return self.to_string(8)
        # C++'s to_string prints the values of those four dtypes only (src/core/tensor.cc)
        flat = self.astype(float32).to_numpy().ravel() if self.dtype == bfloat16 else self.to_numpy().ravel()
        values = ", ".join(str(v) for v in flat[:8].tolist()) + (", ..." if flat.size > 8 else "")
        return f"Tensor({self.describe()}, [{values}])"
    except errors.Error:  # capturing, or no value yet: describe without reading
        return f"Tensor({self.describe()}, <no value on the host>)"


def _set_requires_grad(self, value):
    self._set_requires_grad(bool(value))


def _numpy_dtype(self, what):
    d = _NAME[_c.Tensor_dtype(self)]
    nd = _TO_NUMPY.get(d)
    if nd is None:
        raise errors.DTypeError(f"[{what}] numpy has no {d}; convert first: t.astype('float32').{what}()")
    return nd


def to_numpy(self):
    """A numpy copy of the values (synchronises the device)."""
    out = np.empty(_c.Tensor_shape(self), dtype=_numpy_dtype(self, "to_numpy"))
    self._copy_to_buffer(out)
    return out


def copy_from_numpy(self, arr):
    """Writes `arr` into this tensor: same shape; its dtype is converted when it is of the same
    kind (float64 -> float32, int64 -> int32), refused otherwise (float -> int)."""
    if type(arr) is np.ndarray and self._copy_from_exact(arr):  # the usual batch: one call
        return self
    arr = np.asarray(arr)
    shape = _c.Tensor_shape(self)
    if arr.shape != shape:
        raise errors.ShapeError(f"[copy_from_numpy] tensor is {self.describe()}, array has shape {arr.shape}")
    target = _numpy_dtype(self, "copy_from_numpy")
    if arr.dtype != target and not np.can_cast(arr.dtype, target, casting="same_kind"):
        raise errors.DTypeError(f"[copy_from_numpy] cannot write a {arr.dtype} array into {self.describe()}: "
                                f"convert it first (arr.astype(np.{target}))")
    self._copy_from_buffer(np.ascontiguousarray(arr, dtype=target))
    return self


def is_host_viewable(self):
    """True when np.asarray(self) aliases the tensor's memory instead of copying it: a CPU tensor
    with memory of its own (not a slot in a graph's planned arena), on a device not capturing.
    See Note [Zero-copy views from Python] in swig/tensor.i."""
    return self._host_address() != 0


def _array_interface(self):
    addr = self._host_address()
    if not addr:
        # numpy then falls back to __array__ (a copy, with a clear error when there is no value).
        raise AttributeError("__array_interface__: not host-viewable (see Tensor.is_host_viewable)")
    nd = _TO_NUMPY.get(_NAME[_c.Tensor_dtype(self)])
    if nd is None:
        raise AttributeError("__array_interface__: numpy has no bfloat16")
    shape = _c.Tensor_shape(self)
    strides = None
    if not _c.Tensor_is_contiguous(self):
        strides = tuple(s * nd.itemsize for s in _c.Tensor_strides(self))
    return {"version": 3, "shape": shape, "typestr": nd.str, "data": (addr, False), "strides": strides}


def _array(self, dtype=None):
    a = self.to_numpy()
    return a if dtype is None else a.astype(dtype, copy=False)


# ---- operators: one op call each; numbers use the *_scalar ops, arrays become tensors ----

def _operand(self, other):
    if isinstance(other, Tensor):
        return other
    if isinstance(other, np.ndarray):
        return from_numpy(other.astype(_numpy_dtype(self, "operator"), copy=False), _c.Tensor_device(self))
    return None


def _binary(tensor_op, scalar_op):
    def op(self, other):
        t = _operand(self, other)
        if t is not None:
            return tensor_op(self, t)
        if isinstance(other, (int, float, np.number)):
            return scalar_op(self, float(other))
        return NotImplemented
    return op


def _rbinary(tensor_op, scalar_op):
    def op(self, other):
        t = _operand(self, other)
        if t is not None:
            return tensor_op(t, self)
        if isinstance(other, (int, float, np.number)):
            return scalar_op(self, float(other))
        return NotImplemented
    return op


# ---- truth value and comparisons (numpy's semantics) ----

def _bool(self):
    """bool(t), `if t:`: the value of a one-element tensor (a host read); anything else is
    ambiguous, as in numpy. During a capture it is a loom.GraphError: the branch would depend
    on a value that does not exist yet (DESIGN.md invariant 4)."""
    if not self.defined():
        raise errors.ValueError("[tensor] the truth value of an undefined tensor is ambiguous")
    dev = _c.Tensor_device(self)
    if dev.buffering():
        raise errors.GraphError(f"[tensor] bool() / `if` on {self.describe()} while {dev.name()} is capturing "
                                f"{dev.capture_name()}: a branch on a tensor's value cannot be captured (capture "
                                "runs nothing, so there is no value yet). Branch outside the step, or compute both "
                                "sides with ops")
    n = _c.Tensor_numel(self)
    if n != 1:
        raise errors.ValueError(f"[tensor] the truth value of {self.describe()} ({n} elements) is ambiguous: "
                                "reduce it first (t.sum(), t.max()) or compare element-wise")
    return bool(self.item())


def _comparand(self, other):
    """`other` as a tensor of self's dtype for == and !=; None when it cannot be one. A number
    is a scalar of self's dtype (numpy's weak scalars: t_float32 == 0.1 compares with float32
    0.1); one that self's dtype cannot hold exactly (1.5 or 300 for uint8) equals no element:
    False is returned for it."""
    t = _operand(self, other)
    if t is not None:
        return t
    if not isinstance(other, (bool, int, float, np.number)):
        return None
    d = _NAME[_c.Tensor_dtype(self)]
    nd = _TO_NUMPY.get(d)
    if nd is not None and nd.kind in "iub":
        info = np.iinfo(nd) if nd.kind != "b" else None
        v = float(other)
        exact = v == other and (v in (0.0, 1.0) if info is None else info.min <= v <= info.max)
        if not (exact and v == int(v)):
            return False
    return core.full((), float(other), _c.Tensor_dtype(self), _c.Tensor_device(self))


def _compare(tensor_op, const_result):
    def op(self, other):
        t = _comparand(self, other)
        if t is None:
            return NotImplemented
        if t is False:  # a number self's dtype cannot hold: equal to no element
            return core.full(_c.Tensor_shape(self), const_result, _ENUM[bool_], _c.Tensor_device(self))
        return tensor_op(self, t)
    return op


def _reshape(self, *shape):
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = shape[0]
    return core.reshape(self, _shape(shape))


def _axes(axis):
    if axis is None:
        return ()
    return (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)


def _astype(self, dtype):
    return core.cast(self, _enum(dtype))


def _copy(self):
    out = core.empty(_c.Tensor_shape(self), _c.Tensor_dtype(self), _c.Tensor_device(self))
    core.copy_into(out, self)
    return out


def _gaussian(self, mean=0.0, std=1.0):
    core.normal_into(self, float(mean), float(std))
    return self


def _uniform(self, low=0.0, high=1.0):
    core.uniform_into(self, float(low), float(high))
    return self


def _set_value(self, value):
    core.fill(self, float(value))
    return self


_METHODS = {
    "__init__": _init,
    "__repr__": _repr,
    "__str__": _repr,
    # properties (SWIG's accessors stay reachable as core._core.Tensor_*)
    "shape": property(_c.Tensor_shape, doc="The shape, a tuple of ints."),
    "dtype": property(lambda self: _NAME[_c.Tensor_dtype(self)], doc="The dtype's name, e.g. 'float32'."),
    "device": property(_c.Tensor_device, doc="The Device holding the tensor."),
    "ndim": property(_c.Tensor_ndim),
    "strides": property(_c.Tensor_strides, doc="Strides in elements."),
    "requires_grad": property(_c.Tensor_requires_grad, _set_requires_grad,
                              doc="Whether autograd computes a gradient for this leaf."),
    "name": property(_c.Tensor_name, lambda self, n: self._set_name(str(n))),
    "T": property(lambda self: core.transpose(self, -2, -1)),
    "size": lambda self: _c.Tensor_numel(self),
    # item() is the extension's own (swig/tensor.i): one call returning an int, bool or float.
    "to_numpy": to_numpy,
    "numpy": to_numpy,
    "copy_from_numpy": copy_from_numpy,
    "is_host_viewable": is_host_viewable,
    "__array_interface__": property(_array_interface),
    "__array__": _array,
    "__array_priority__": 100,  # `ndarray + tensor` asks the tensor first
    # SINGA's initialisers (in place; ops, so they are buffered while capturing)
    "gaussian": _gaussian,
    "uniform": _uniform,
    "set_value": _set_value,
    "copy": _copy,
    "clone": _copy,
    "astype": _astype,
    "reshape": _reshape,
    "transpose": lambda self, a=-2, b=-1: core.transpose(self, a, b),
    "flatten": lambda self, start_axis=1: core.flatten(self, start_axis),
    "sum": lambda self, axis=None, keepdims=False: core.sum(self, _axes(axis), keepdims),
    "mean": lambda self, axis=None, keepdims=False: core.mean(self, _axes(axis), keepdims),
    "max": lambda self, axis=None, keepdims=False: core.max(self, _axes(axis), keepdims),
    "__add__": _binary(core.add, core.add_scalar),
    "__radd__": _rbinary(core.add, core.add_scalar),
    "__sub__": _binary(core.sub, core.sub_scalar),
    "__rsub__": _rbinary(core.sub, core.rsub_scalar),
    "__mul__": _binary(core.mul, core.mul_scalar),
    "__rmul__": _rbinary(core.mul, core.mul_scalar),
    "__truediv__": _binary(core.div, core.div_scalar),
    "__rtruediv__": _rbinary(core.div, core.rdiv_scalar),
    "__pow__": _binary(core.pow, core.pow_scalar),
    "__matmul__": lambda self, other: core.matmul(self, other),
    # Element-wise, to bool tensors (numpy's ==, !=); bool(t) as numpy's. Tensors stay hashable by
    # identity (autograd.gradients keys a dict by them), which defining __eq__ would otherwise undo.
    "__eq__": _compare(core.equal, 0.0),
    "__ne__": _compare(core.not_equal, 1.0),
    "__hash__": object.__hash__,
    "__bool__": _bool,
    "__neg__": lambda self: core.neg(self),
    "__abs__": lambda self: core.abs(self),
}
for _k, _v in _METHODS.items():
    setattr(Tensor, _k, _v)
del _k, _v


# ---------------------------------------------------------------------------------------------
# Creation

def from_numpy(arr, device=None, requires_grad=False):
    """A new tensor holding a copy of `arr`, with its dtype (float64 stays float64)."""
    arr = np.asarray(arr)
    t = Tensor(arr.shape, _check_device(device), dtype_name(arr.dtype))
    t.copy_from_numpy(arr)
    if requires_grad:
        t.requires_grad = True
    return t


def to_numpy(t):
    """SINGA's tensor.to_numpy(t): a copy of t's values."""
    return t.to_numpy()


def empty(shape, device=None, dtype=None):
    """Lazy: no memory until an op writes it."""
    return core.empty(_shape(shape), _enum(dtype), _check_device(device))


def zeros(shape, device=None, dtype=None):
    return core.zeros(_shape(shape), _enum(dtype), _check_device(device))


def ones(shape, device=None, dtype=None):
    return core.ones(_shape(shape), _enum(dtype), _check_device(device))


def full(shape, value, device=None, dtype=None):
    return core.full(_shape(shape), float(value), _enum(dtype), _check_device(device))


def gaussian(shape, mean=0.0, std=1.0, device=None, dtype=None):
    """Normal samples from the device's counter-based generator (dev.SetRandSeed)."""
    return core.normal(_shape(shape), float(mean), float(std), _enum(dtype), _check_device(device))


def uniform(shape, low=0.0, high=1.0, device=None, dtype=None):
    return core.uniform(_shape(shape), float(low), float(high), _enum(dtype), _check_device(device))


def zeros_like(t):
    return core.zeros_like(t)


def ones_like(t):
    return core.ones_like(t)
