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
import math
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
    if isinstance(dtype, int) and not isinstance(dtype, bool) and dtype in _NAME:
        return _NAME[dtype]  # a DType value: SINGA's singa_wrap.kFloat32, kInt, ...
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


class _CallableTuple(tuple):
    """A tuple that returns itself when called: t.shape (SINGA's Python tensors) and t.shape()
    (SINGA's C++ ones, which its operators' backward returns)."""

    def __call__(self):
        return tuple(self)


class _CallableInt(int):
    """An int that returns itself when called: t.ndim (numpy's spelling) and t.ndim() (SINGA's)."""

    def __call__(self):
        return int(self)


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
    try:
        out = np.empty(_c.Tensor_shape(self), dtype=_numpy_dtype(self, "to_numpy"))
    except MemoryError:  # numpy's own; the device's allocator says the same as a loom.DeviceError
        raise errors.DeviceError(f"[to_numpy] out of memory allocating the numpy copy of {self.describe()}") from None
    self._copy_to_buffer(out)
    return out


def copy_from_numpy(self, arr):
    """Writes `arr` into this tensor: the same number of elements, read in C order (SINGA's rule:
    a (N, 1, 28, 28) batch fills an (N, 784) tensor); its dtype is converted when it is of the
    same kind (float64 -> float32, int64 -> int32), refused otherwise (float -> int)."""
    if type(arr) is np.ndarray and _c.Tensor__copy_from_exact(self, arr):  # the usual batch: one call
        return self
    arr = np.asarray(arr)
    shape = _c.Tensor_shape(self)
    if arr.shape != shape:
        if arr.size != math.prod(shape):
            raise errors.ShapeError(f"[copy_from_numpy] tensor is {self.describe()}, array has shape {arr.shape} "
                                    f"({arr.size} elements, the tensor {math.prod(shape)})")
        arr = arr.reshape(shape)
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
    return errors._tensor("is_host_viewable", "self", self)._host_address() != 0


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


_INTS = ("int32", "int64", "uint8")


def _int_arith(op, a, b):
    """SINGA's arithmetic on integer tensors, which loom's element-wise kernels (floating point
    only) do not take: computed in float64, exact for the integers float64 holds (all int32
    values and sums and products below 2**53), then cast. Integer operands give int32 (SINGA's
    kInt), or int64 when a tensor is int64; an integer tensor with a float number or tensor
    gives float32, as SINGA's does."""
    def is_int(v):
        return isinstance(v, Tensor) and _NAME[_c.Tensor_dtype(v)] in _INTS
    def is_float_number(v):
        return isinstance(v, (float, np.floating))
    out = float32
    if all(is_int(v) or (not isinstance(v, Tensor) and not is_float_number(v)) for v in (a, b)):
        out = int64 if any(isinstance(v, Tensor) and _NAME[_c.Tensor_dtype(v)] == int64 for v in (a, b)) else int32
    f64 = core.dtype_from_name("float64")
    a2 = core.cast(a, f64) if isinstance(a, Tensor) and _c.Tensor_dtype(a) != f64 else a
    b2 = core.cast(b, f64) if isinstance(b, Tensor) and _c.Tensor_dtype(b) != f64 else b
    return core.cast(op(a2, b2), _enum(out))


def _binary(tensor_op, scalar_op):
    def op(self, other):
        t = _operand(self, other)
        ints = _NAME[_c.Tensor_dtype(self)] in _INTS or (t is not None and _NAME[_c.Tensor_dtype(t)] in _INTS)
        if t is not None:
            return _int_arith(tensor_op, self, t) if ints else tensor_op(self, t)
        if isinstance(other, (int, float, np.number)):
            if ints:
                return _int_arith(lambda a, b: scalar_op(a, float(b)), self, other)
            return scalar_op(self, float(other))
        return NotImplemented
    return op


def _rbinary(tensor_op, scalar_op):
    def op(self, other):
        t = _operand(self, other)
        ints = _NAME[_c.Tensor_dtype(self)] in _INTS or (t is not None and _NAME[_c.Tensor_dtype(t)] in _INTS)
        if t is not None:
            return _int_arith(tensor_op, t, self) if ints else tensor_op(t, self)
        if isinstance(other, (int, float, np.number)):
            if ints:
                return _int_arith(lambda a, b: scalar_op(a, float(b)), self, other)
            return scalar_op(self, float(other))
        return NotImplemented
    return op


# ---- truth value and comparisons (numpy's semantics) ----

def _bool(self):
    """bool(t), `if t:`: the value of a one-element tensor (a host read); anything else is
    ambiguous, as in numpy. During a capture it is a loom.GraphError: the branch would depend
    on a value that does not exist yet (docs/design.md invariant 4)."""
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


def _scalar(self, what):
    """The value of a one-element tensor for float(t) / int(t), as numpy's."""
    n = _c.Tensor_numel(self) if self.defined() else 0
    if n != 1:
        raise errors.ValueError(f"[tensor] {what}() of a tensor needs exactly one element, "
                                f"{self.describe() if self.defined() else 'an undefined tensor'} has {n}")
    return self.item()


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


def _order(tensor_op, name):
    """<, >, <=, >= element-wise into a bool tensor. A number is compared in self's dtype when
    that holds it exactly, else (t_int < 1.5) both sides are compared as float64."""
    def op(self, other):
        t = _operand(self, other)
        if t is not None:
            return tensor_op(self, t)
        if not isinstance(other, (bool, int, float, np.number)):
            return NotImplemented
        nd = _TO_NUMPY.get(_NAME[_c.Tensor_dtype(self)])
        if nd is not None and nd.kind in "iub":
            lo, hi = (0, 1) if nd.kind == "b" else (np.iinfo(nd).min, np.iinfo(nd).max)
            v = float(other)
            exact = bool(np.isfinite(v)) and v == int(v) and lo <= v <= hi
            if not exact:
                x = core.cast(self, _ENUM[float64])
                return tensor_op(x, core.full((), v, _ENUM[float64], _c.Tensor_device(self)))
        return tensor_op(self, core.full((), float(other), _c.Tensor_dtype(self), _c.Tensor_device(self)))
    op.__name__ = name
    return op


# ---- indexing: t[i], t[a:b], t[..., i], t[:, None]: views on slice/reshape ----

def _take(x, axis, idx):
    """The entries `idx` (ints in range) of axis `axis`, in order: float tensors gather them with
    one embedding op (differentiable: its backward scatter-adds), other dtypes concatenate
    one-element slices."""
    if not idx:
        return core.slice(x, axis, 0, 0)
    shape = _c.Tensor_shape(x)
    if _NAME[_c.Tensor_dtype(x)] not in (float32, float64) or _c.Tensor_numel(x) == 0:
        return core.cat([core.slice(x, axis, i, i + 1) for i in idx], axis)
    others = [d for d in range(len(shape)) if d != axis]
    rest = tuple(shape[d] for d in others)
    table = core.reshape(core.permute(x, (axis,) + tuple(others)), (shape[axis], int(np.prod(rest, dtype=np.int64))))
    rows = core.embedding(table, from_numpy(np.asarray(idx, np.int64), _c.Tensor_device(x)))
    y = core.reshape(rows, (len(idx),) + rest)
    inverse = tuple(int(j) for j in np.argsort((axis,) + tuple(others)))
    return core.permute(y, inverse)


def _getitem(self, key):
    """numpy's indexing, less boolean masks: ints, slices (any step), Ellipsis, None, and one
    1-D sequence of ints (t[[0, 2]], t[:, idx]). Ints and slices of step 1 are slice ops, other
    steps and int sequences gather (_take); all differentiable. The result is a copy, not a
    view: writing into it leaves this tensor unchanged. An int drops its axis (a reshape)."""
    if not isinstance(key, tuple):
        key = (key,)
    n_ellipsis = len([k for k in key if k is Ellipsis])
    if n_ellipsis > 1:
        raise errors.ValueError("[tensor.__getitem__] an index can only have a single ellipsis ('...')")
    shape = _c.Tensor_shape(self)
    used = len([k for k in key if k is not None and k is not Ellipsis])
    if used > len(shape):
        raise errors.ShapeError(f"[tensor.__getitem__] too many indices for {self.describe()}: {used} given")
    if n_ellipsis:
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (len(shape) - used) + key[i + 1:]
    else:
        key = key + (slice(None),) * (len(shape) - used)
    out, axis, new_shape, gathered = self, 0, [], False
    for k in key:
        if k is None:
            new_shape.append(1)
            continue
        size = shape[axis]
        if isinstance(k, slice):
            start, stop, step = k.indices(size)
            idx = range(start, stop, step)
            if step != 1:
                out = _take(out, axis, list(idx))
            elif (start, max(start, stop)) != (0, size):
                out = core.slice(out, axis, start, max(start, stop))
            new_shape.append(len(idx))
        elif isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
            i = int(k)
            if not -size <= i < size:
                raise errors.ShapeError(f"[tensor.__getitem__] index {i} is out of bounds for axis {axis} of "
                                        f"{self.describe()}")
            i %= size
            out = core.slice(out, axis, i, i + 1)
        else:
            arr = np.asarray(k) if isinstance(k, (list, tuple, range, np.ndarray)) else None
            if arr is None or arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu") or gathered is not False:
                raise errors.ValueError(f"[tensor.__getitem__] index {k!r} on {self.describe()}: supported are "
                                        "ints, slices, '...', None and one 1-D sequence of ints (no boolean masks)")
            idx = [int(i) for i in arr]
            bad = [i for i in idx if not -size <= i < size]
            if bad:
                raise errors.ShapeError(f"[tensor.__getitem__] index {bad[0]} is out of bounds for axis {axis} of "
                                        f"{self.describe()}")
            out = _take(out, axis, [i % size for i in idx])
            gathered = len(new_shape)
            new_shape.append(len(idx))
        axis += 1
    if tuple(new_shape) != _c.Tensor_shape(out):
        out = core.reshape(out, tuple(new_shape))
    if gathered is not False:
        # numpy: with a sequence, ints are advanced indices too; when the advanced indices are
        # not side by side, their dimension goes first
        adv = [j for j, k in enumerate(key) if k is not None and not isinstance(k, slice)]
        if adv != list(range(adv[0], adv[-1] + 1)) and gathered != 0:
            out = core.permute(out, (gathered,) + tuple(d for d in range(len(new_shape)) if d != gathered))
    return out


def _setitem(self, key, value):
    """t[:] = value and t[...] = value (SINGA's `out[:] = result`): writes every element, from a
    tensor (converted like copy_data), a number (a fill) or an array of t's shape. Assigning to
    part of a tensor is a loom.ValueError (loom's slices are copies, not views)."""
    keys = key if isinstance(key, tuple) else (key,)
    whole = all(k is Ellipsis or k == slice(None) for k in keys)
    if not whole or len([k for k in keys if k is not Ellipsis]) > len(_c.Tensor_shape(self)):
        raise errors.ValueError(f"[tensor.__setitem__] only whole-tensor assignment (t[:] = v, t[...] = v) is "
                                f"supported, got index {key!r} on {self.describe()}")
    if isinstance(value, Tensor):
        _copy_data(self, value)
    elif isinstance(value, (bool, int, float, np.number)):
        core.fill(self, float(value))
    else:
        self.copy_from_numpy(np.broadcast_to(np.asarray(value), _c.Tensor_shape(self)))


# ---- SINGA's in-place and copying methods ----

def _to_device(self, device):
    """Moves the tensor to `device` in place (SINGA's semantics: this handle then refers to the
    new memory; other handles on the old memory keep it). Returns self. A host round trip: not
    allowed while a device captures (loom.GraphError)."""
    device = _check_device(device)
    if _c.Tensor_device(self) == device:
        return self
    d = _NAME[_c.Tensor_dtype(self)]
    arr = (core.cast(self, _ENUM[float32]) if d == bfloat16 else self).to_numpy()
    moved = from_numpy(arr, device)
    if d == bfloat16:
        moved = core.cast(moved, _ENUM[bfloat16])
    requires_grad, name = _c.Tensor_requires_grad(self), _c.Tensor_name(self)
    self._rebind(moved)
    if requires_grad:
        self._set_requires_grad(True)
    if name:
        self._set_name(name)
    return self


def _to_host(self):
    """to_device(the CPU device), in place; returns self."""
    return _to_device(self, core.cpu_device())


def _as_type(self, dtype):
    """A new tensor of `dtype` (SINGA also accepts 'int' and 'float')."""
    return core.cast(self, _enum({"int": int32, "float": float32}.get(dtype, dtype) if isinstance(dtype, str)
                                 else dtype))


def _copy_data(self, other):
    """Writes other's values into this tensor (SINGA's copy_data): the same shape; another dtype
    is converted, another device is copied through the host. Returns self."""
    if not isinstance(other, Tensor):
        raise errors.TypeError(f"[tensor.copy_data] expected a loom Tensor, got {type(other).__name__}")
    if _c.Tensor_shape(other) != _c.Tensor_shape(self):
        raise errors.ShapeError(f"[tensor.copy_data] cannot copy {other.describe()} into {self.describe()}: "
                                "shapes differ")
    if _c.Tensor_dtype(other) != _c.Tensor_dtype(self):
        other = core.cast(other, _c.Tensor_dtype(self))
    if _c.Tensor_device(other) != _c.Tensor_device(self):
        other = _to_device(_copy(other), _c.Tensor_device(self))
    core.copy_into(self, other)
    return self


def _bernoulli(self, p):
    """Fills this tensor in place with 0/1 samples, 1 with probability p. Returns self."""
    if isinstance(p, bool) or not isinstance(p, (int, float, np.number)):
        raise errors.TypeError(f"[tensor.bernoulli] p must be a number, got {type(p).__name__}")
    if not 0.0 <= float(p) <= 1.0:
        raise errors.ValueError(f"[tensor.bernoulli] p {p} must lie in [0, 1]")
    core.copy_into(self, core.bernoulli(_c.Tensor_shape(self), float(p), _c.Tensor_dtype(self),
                                        _c.Tensor_device(self)))
    return self


def _repeat(self, repeats, axis=None):
    """numpy's repeat: each element `repeats` times along `axis` (None: of the flattened tensor);
    `repeats` an int, or one int per element of that axis. Built from reshape, broadcast_to
    and concatenation, so it is differentiable."""
    x = self
    if axis is None:
        x, axis = core.reshape(x, (_c.Tensor_numel(x),)), 0
    shape = _c.Tensor_shape(x)
    if not isinstance(axis, (int, np.integer)) or not -len(shape) <= axis < len(shape):
        raise errors.ValueError(f"[tensor.repeat] axis {axis!r} is out of range for {x.describe()}")
    axis = int(axis) % len(shape)
    n = shape[axis]
    if isinstance(repeats, (int, np.integer)) and not isinstance(repeats, bool):
        counts = [int(repeats)] * n
    else:
        try:
            counts = [operator.index(r) for r in repeats]
        except TypeError:
            raise errors.TypeError(f"[tensor.repeat] repeats must be an int or a sequence of ints, got "
                                   f"{repeats!r}") from None
        if len(counts) != n:
            raise errors.ValueError(f"[tensor.repeat] {len(counts)} repeats for axis {axis} of size {n}")
    if any(c < 0 for c in counts):
        raise errors.ValueError(f"[tensor.repeat] repeats must not be negative, got {repeats!r}")
    if len(set(counts)) <= 1:  # the same count for all: one broadcast
        r = counts[0] if counts else 0
        y = core.reshape(x, shape[:axis + 1] + (1,) + shape[axis + 1:])
        y = core.broadcast_to(y, shape[:axis + 1] + (r,) + shape[axis + 1:])
        return core.reshape(y, shape[:axis] + (n * r,) + shape[axis + 1:])
    parts = [_repeat(core.slice(x, axis, i, i + 1), c, axis) for i, c in enumerate(counts) if c > 0]
    return core.cat(parts, axis)


def _reshape(self, *shape):
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = shape[0]
    return core.reshape(self, _shape(shape))


def _axes(axis, op="reduce"):
    if axis is None:
        return ()
    return (axis,) if type(axis) is int else errors._ints(op, "axis", axis, one=True)


def _astype(self, dtype):
    return core.cast(self, _enum(dtype))


def _transpose_method(self, a=-2, b=-1):
    """t.transpose(a, b) swaps two axes (the last two by default); t.transpose(axes), with a
    sequence, permutes them as numpy and SINGA do. Views."""
    if isinstance(a, (list, tuple)):
        return core.permute(self, errors._ints("tensor.transpose", "axes", a))
    return core.transpose(self, a, b)


def _copy(self):
    out = core.empty(_c.Tensor_shape(self), _c.Tensor_dtype(self), _c.Tensor_device(self))
    core.copy_into(out, self)
    return out


def _gaussian(self, mean=0.0, std=1.0):
    core.normal_into(errors._tensor("tensor.gaussian", "t", self), errors._real("tensor.gaussian", "mean", mean),
                     errors._real("tensor.gaussian", "std", std))
    return self


def _uniform(self, low=0.0, high=1.0):
    core.uniform_into(errors._tensor("tensor.uniform", "t", self), errors._real("tensor.uniform", "low", low),
                      errors._real("tensor.uniform", "high", high))
    return self


def _set_value(self, value):
    core.fill(self, errors._real("tensor.set_value", "value", value))
    return self


_METHODS = {
    "__init__": _init,
    "__repr__": _repr,
    "__str__": _repr,
    # properties (SWIG's accessors stay reachable as core._core.Tensor_*)
    "shape": property(lambda self: _CallableTuple(_c.Tensor_shape(self)),
                      doc="The shape, a tuple of ints; SINGA's C++ tensors call it, t.shape()."),
    "data": property(lambda self: self, doc="SINGA's handle on the C++ tensor: a loom Tensor is its own."),
    "dtype": property(lambda self: _NAME[_c.Tensor_dtype(self)], doc="The dtype's name, e.g. 'float32'."),
    "device": property(_c.Tensor_device, doc="The Device holding the tensor."),
    "ndim": property(lambda self: _CallableInt(_c.Tensor_ndim(self)),
                     doc="The number of axes; SINGA calls it, t.ndim(), numpy reads it, t.ndim."),
    "is_transpose": lambda self: False,  # SINGA's flag for a transposed view; loom's views are strided
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
    "copy": lambda self: core.reshape(self, _c.Tensor_shape(self)),  # SINGA's shallow copy: shares the data
    "clone": _copy,
    "astype": _astype,
    "reshape": _reshape,
    "transpose": _transpose_method,
    "deepcopy": _copy,
    "memsize": lambda self: _c.Tensor_nbytes(self),
    "is_empty": lambda self: _c.Tensor_numel(self) == 0,
    "flatten": lambda self, start_axis=1: core.flatten(self, start_axis),
    "sum": lambda self, axis=None, keepdims=False: core.sum(self, _axes(axis, "sum"), keepdims),
    "mean": lambda self, axis=None, keepdims=False: core.mean(self, _axes(axis, "mean"), keepdims),
    "max": lambda self, axis=None, keepdims=False: core.max(self, _axes(axis, "max"), keepdims),
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
    "__lt__": _order(core.less, "__lt__"),
    "__gt__": _order(core.greater, "__gt__"),
    "__le__": _order(core.less_equal, "__le__"),
    "__ge__": _order(core.greater_equal, "__ge__"),
    "__getitem__": _getitem,
    "__setitem__": _setitem,
    "to_device": _to_device,
    "to_host": _to_host,
    "as_type": _as_type,
    "copy_data": _copy_data,
    "bernoulli": _bernoulli,
    "repeat": _repeat,
    "__bool__": _bool,
    "__float__": lambda self: float(_scalar(self, "float")),
    "__int__": lambda self: int(_scalar(self, "int")),
    "__neg__": lambda self: core.neg(self),
    "__abs__": lambda self: core.abs(self),
}


def _inplace(name, method):
    """t op= x writes into t, as SINGA's does (other handles on t see the new values; a loop
    `for p, g in ...: p -= lr * g` updates the parameters). The new value must keep t's shape;
    another dtype is converted. It is one copy op, recorded like any other during a capture.
    While gradients are recorded, a t with autograd history or an x that requires a gradient
    (`loss += reg`) gets the new tensor bound instead, with its history.

    Note [In-place on a tensor never written]
    SINGA's Tensor(shape) holds zeros, and its
    scripts accumulate into one (`t = Tensor(s); t += 1.23`). loom's stays unwritten (and
    unallocated: Model.compile's placeholders must stay so), so an eager `op=` on a tensor no op
    has written fills it with zeros first. While a device captures, the tensor may be written by
    a recorded op that has not run, so nothing is filled there."""
    def op(self, other):
        if core.grad_enabled() and (self._has_grad_fn() or (isinstance(other, Tensor) and other.requires_grad)):
            return _METHODS[method](self, other)
        guard = core.NoGradGuard()
        try:
            if not _c.Tensor_device(self).buffering() and not self._allocated():
                core.fill(self, 0.0)  # Note [In-place on a tensor never written]
            value = _METHODS[method](self, other)
            if value is NotImplemented:
                return NotImplemented
            if _c.Tensor_shape(value) != _c.Tensor_shape(self):
                raise errors.ShapeError(f"[tensor.{name}] the result is {value.describe()}, which does not fit "
                                        f"in place into {self.describe()}")
            if _c.Tensor_dtype(value) != _c.Tensor_dtype(self):
                value = core.cast(value, _c.Tensor_dtype(self))
            core.copy_into(self, value)
        finally:
            del guard
        return self
    op.__name__ = name
    return op


for _name, _method in (("__iadd__", "__add__"), ("__isub__", "__sub__"), ("__imul__", "__mul__"),
                       ("__itruediv__", "__truediv__")):
    _METHODS[_name] = _inplace(_name, _method)
del _name, _method

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
    return _check_tensor("to_numpy", t).to_numpy()


def empty(shape, device=None, dtype=None):
    """Lazy: no memory until an op writes it."""
    return core.empty(_shape(shape), _enum(dtype), _check_device(device))


def zeros(shape, device=None, dtype=None):
    return core.zeros(_shape(shape), _enum(dtype), _check_device(device))


def ones(shape, device=None, dtype=None):
    return core.ones(_shape(shape), _enum(dtype), _check_device(device))


def full(shape, value, device=None, dtype=None):
    return core.full(_shape(shape), errors._real("tensor.full", "value", value), _enum(dtype), _check_device(device))


def gaussian(shape, mean=0.0, std=1.0, device=None, dtype=None):
    """Normal samples from the device's counter-based generator (dev.SetRandSeed): a new tensor
    of `shape`. SINGA's in-place form gaussian(mean, std, t), a Tensor third, fills t instead
    and returns it."""
    if isinstance(std, Tensor):
        return _gaussian(std, shape, mean)
    return core.normal(_shape(shape), errors._real("tensor.gaussian", "mean", mean),
                       errors._real("tensor.gaussian", "std", std), _enum(dtype), _check_device(device))


def uniform(shape, low=0.0, high=1.0, device=None, dtype=None):
    """Uniform samples in [low, high): a new tensor of `shape`. SINGA's in-place form
    uniform(low, high, t), a Tensor third, fills t instead and returns it."""
    if isinstance(high, Tensor):
        return _uniform(high, shape, low)
    return core.uniform(_shape(shape), errors._real("tensor.uniform", "low", low),
                        errors._real("tensor.uniform", "high", high), _enum(dtype), _check_device(device))


def bernoulli(p, t):
    """SINGA's: fills t in place with 1 (probability p) or 0; returns t."""
    return _bernoulli(_check_tensor("bernoulli", t), p)


def zeros_like(t):
    return core.zeros_like(t)


def ones_like(t):
    return core.ones_like(t)


# ---------------------------------------------------------------------------------------------
# SINGA's module functions

def _check_tensor(op, t, name="t"):
    return errors._tensor(f"tensor.{op}", name, t)


def _compared(op, x):
    """The right side of a comparison function (lt, le, gt, ge, eq): a Tensor, an array or a number."""
    if isinstance(x, (Tensor, np.ndarray)):
        return x
    return errors._real(f"tensor.{op}", "x", x)


def sum(t, axis=None, out=None):
    """SINGA's tensor.sum: a tensor with `axis` (an int or a tuple) summed away; axis None sums
    every element into a one-element tensor (float(result) is the number). `out`, when given,
    receives the result and is returned."""
    _check_tensor("sum", t)
    r = core.sum(t, _axes(axis, "tensor.sum"), False)
    if out is not None:
        return _copy_data(_check_tensor("sum", out), r)
    return r


def average(t, axis=None):
    """SINGA's tensor.average: the mean of all elements as a Python float when axis is None,
    else a tensor of the means along `axis`."""
    _check_tensor("average", t)
    if axis is None:
        return float(core.mean(t, (), False).item())
    return core.mean(t, _axes(axis, "tensor.average"), False)


def transpose(t, axes=None):
    """numpy's transpose: axes permuted by `axes` (None: reversed). A view."""
    _check_tensor("transpose", t)
    if axes is None:
        axes = tuple(range(t.ndim))[::-1]
    return core.permute(t, errors._ints("tensor.transpose", "axes", axes))


def product(shape):
    """The product of a sequence of ints (a shape's number of elements); 1 for an empty one."""
    try:
        return int(np.prod([operator.index(n) for n in shape], dtype=np.int64))
    except TypeError:
        raise errors.TypeError(f"[tensor.product] expected a sequence of ints, got {shape!r}") from None


def reshape(t, shape):
    """A tensor of t's values in `shape` (a view when t is contiguous)."""
    return _reshape(_check_tensor("reshape", t), shape)


def contiguous(t):
    """t itself when contiguous, else a contiguous copy."""
    return t if _c.Tensor_is_contiguous(_check_tensor("contiguous", t)) else _copy(t)


def to_host(t):
    """SINGA's: a new tensor on the CPU with t's values (t is unchanged)."""
    return _to_host(_copy(_check_tensor("to_host", t)))


def sizeof(dtype):
    """Bytes per element of `dtype`."""
    return {float32: 4, float64: 8, float16: 2, bfloat16: 2, int32: 4, int64: 8, uint8: 1, bool_: 1}[dtype_name(dtype)]


def copy_data_to_from(dst, src, size, dst_offset=0, src_offset=0):
    """Copies `size` elements of src (flattened, from src_offset) into dst (flattened, from
    dst_offset), in place. The two have one dtype and one device; dst is contiguous."""
    _check_tensor("copy_data_to_from", dst, "dst")
    _check_tensor("copy_data_to_from", src, "src")
    size, dst_offset, src_offset = (errors._whole("tensor.copy_data_to_from", n, v)
                                    for n, v in (("size", size), ("dst_offset", dst_offset), ("src_offset", src_offset)))
    nd, ns = _c.Tensor_numel(dst), _c.Tensor_numel(src)
    if size < 0 or dst_offset < 0 or src_offset < 0 or dst_offset + size > nd or src_offset + size > ns:
        raise errors.ValueError(f"[tensor.copy_data_to_from] {size} elements from offset {src_offset} of "
                                f"{src.describe()} into offset {dst_offset} of {dst.describe()}: out of range")
    if _c.Tensor_dtype(dst) != _c.Tensor_dtype(src):
        raise errors.DTypeError(f"[tensor.copy_data_to_from] dtypes differ: {dst.describe()} and {src.describe()}")
    if not _c.Tensor_is_contiguous(dst):
        raise errors.ValueError(f"[tensor.copy_data_to_from] the destination {dst.describe()} must be contiguous")
    if size == 0:
        return dst
    part = core.slice(core.reshape(src, (ns,)), 0, src_offset, src_offset + size)
    if _c.Tensor_device(src) != _c.Tensor_device(dst):
        part = _to_device(part, _c.Tensor_device(dst))
    # slice copies (it is no view), so the new contents are assembled and written whole
    flat = core.reshape(dst, (nd,))
    pieces = [p for p in (core.slice(flat, 0, 0, dst_offset), part, core.slice(flat, 0, dst_offset + size, nd))
              if _c.Tensor_numel(p)]
    core.copy_into(dst, core.reshape(core.cat(pieces, 0) if len(pieces) > 1 else pieces[0], _c.Tensor_shape(dst)))
    return dst


def repeat(t, repeats, axis=None):
    """numpy's repeat (see Tensor.repeat)."""
    return _repeat(_check_tensor("repeat", t), repeats, axis)


def lt(t, x):
    return _check_tensor("lt", t) < _compared("lt", x)


def le(t, x):
    return _check_tensor("le", t) <= _compared("le", x)


def gt(t, x):
    return _check_tensor("gt", t) > _compared("gt", x)


def ge(t, x):
    return _check_tensor("ge", t) >= _compared("ge", x)


def eq(t, x):
    return _check_tensor("eq", t) == _compared("eq", x)


def tensordot(a, b, axes=2):
    """numpy's tensordot: sums the products over `axes` (an int k: the last k axes of a with the
    first k of b; or a pair of axis lists), as one matmul between reshaped operands."""
    _check_tensor("tensordot", a, "a")
    _check_tensor("tensordot", b, "b")
    sa, sb = _c.Tensor_shape(a), _c.Tensor_shape(b)
    if isinstance(axes, (int, np.integer)):
        k = int(axes)
        if not 0 <= k <= min(len(sa), len(sb)):
            raise errors.ValueError(f"[tensor.tensordot] axes={k} for {a.describe()} and {b.describe()}")
        ax_a, ax_b = list(range(len(sa) - k, len(sa))), list(range(k))
    else:
        try:
            ax_a, ax_b = ([axes_] if isinstance(axes_, (int, np.integer)) else list(axes_) for axes_ in axes)
        except (TypeError, ValueError):
            raise errors.TypeError(f"[tensor.tensordot] axes must be an int or a pair of axis lists, "
                                   f"got {axes!r}") from None
        if len(ax_a) != len(ax_b):
            raise errors.ValueError(f"[tensor.tensordot] axes {axes!r}: the two lists differ in length")
        try:
            ax_a = [int(x) % len(sa) if -len(sa) <= int(x) < len(sa) else None for x in ax_a]
            ax_b = [int(x) % len(sb) if -len(sb) <= int(x) < len(sb) else None for x in ax_b]
        except ZeroDivisionError:
            ax_a = ax_b = [None]
        if None in ax_a or None in ax_b:
            raise errors.ValueError(f"[tensor.tensordot] axes {axes!r} out of range for {a.describe()} and "
                                    f"{b.describe()}")
    for i, j in zip(ax_a, ax_b):
        if sa[i] != sb[j]:
            raise errors.ShapeError(f"[tensor.tensordot] axis {i} of {a.describe()} and axis {j} of "
                                    f"{b.describe()} differ in size")
    free_a = [i for i in range(len(sa)) if i not in ax_a]
    free_b = [j for j in range(len(sb)) if j not in ax_b]
    k = int(np.prod([sa[i] for i in ax_a], dtype=np.int64))
    m = int(np.prod([sa[i] for i in free_a], dtype=np.int64))
    n = int(np.prod([sb[j] for j in free_b], dtype=np.int64))
    a2 = core.reshape(core.permute(a, tuple(free_a + ax_a)), (m, k))
    b2 = core.reshape(core.permute(b, tuple(ax_b + free_b)), (k, n))
    return core.reshape(core.matmul(a2, b2), tuple(sa[i] for i in free_a) + tuple(sb[j] for j in free_b))


def einsum(subscripts, *operands):
    """numpy's einsum for explicit or implicit subscripts over letters ('ij,jk->ik', 'ii' is
    not supported: a letter appears at most once per operand). Exact, from broadcasting
    products and sums: each operand is permuted to one order of all letters, the products
    broadcast, the letters not in the output are summed."""
    if not isinstance(subscripts, str):
        raise errors.TypeError(f"[tensor.einsum] subscripts must be a str, got {type(subscripts).__name__}")
    for t in operands:
        _check_tensor("einsum", t)
    spec = subscripts.replace(" ", "")
    inputs, arrow, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands) or not operands:
        raise errors.ValueError(f"[tensor.einsum] '{subscripts}' names {len(terms)} operands, {len(operands)} given")
    letters = []
    for term in terms:
        if not all(ch.isalpha() for ch in term) or len(set(term)) != len(term):
            raise errors.ValueError(f"[tensor.einsum] term '{term}' of '{subscripts}': letters only, each at most "
                                    "once per operand (no '...', no diagonals)")
        letters += [ch for ch in term if ch not in letters]
    if not arrow:
        output = "".join(sorted(ch for ch in letters if inputs.count(ch) == 1))
    if not all(ch in letters for ch in output) or len(set(output)) != len(output):
        raise errors.ValueError(f"[tensor.einsum] output '{output}' of '{subscripts}' must name distinct input letters")
    sizes = {}
    for term, t in zip(terms, operands):
        shape = _c.Tensor_shape(t)
        if len(shape) != len(term):
            raise errors.ShapeError(f"[tensor.einsum] term '{term}' has {len(term)} letters, {t.describe()} has "
                                    f"{len(shape)} axes")
        for ch, n in zip(term, shape):
            if sizes.setdefault(ch, n) != n:
                raise errors.ShapeError(f"[tensor.einsum] letter '{ch}' is {sizes[ch]} and {n} long in '{subscripts}'")
    order = list(output) + [ch for ch in letters if ch not in output]  # summed letters last
    prod = None
    for term, t in zip(terms, operands):
        present = [ch for ch in order if ch in term]
        x = core.permute(t, tuple(term.index(ch) for ch in present))
        x = core.reshape(x, tuple(sizes[ch] if ch in term else 1 for ch in order))
        prod = x if prod is None else core.mul(prod, x)
    summed = tuple(range(len(output), len(order)))
    # every letter is full-sized in the operand that has it, so the product is too
    return core.sum(prod, summed, False) if summed else prod


# ---- SINGA's element-wise module functions: tensor.log(t) etc., the ops themselves ----

def _unary(name):
    fn = getattr(core, name)

    def f(t):
        return fn(_check_tensor(name, t))
    f.__name__ = name
    f.__doc__ = f"SINGA's tensor.{name}(t): the element-wise op {name} (autograd.{name} is the same op)."
    return f


for _n in ("abs", "exp", "log", "sqrt", "sigmoid", "relu", "tanh", "sign", "ceil", "floor", "round",
           "rounde", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf"):
    globals()[_n] = _unary(_n)
del _n


def concatenate(tensors, axis):
    """SINGA's tensor.concatenate(tensors, axis): the tensors joined along `axis`."""
    tensors = errors._tensors("tensor.concatenate", "tensors", tensors)
    return core.cat(tensors, errors._whole("tensor.concatenate", "axis", axis))


def PlaceHolder(shape, device=None, dtype=float32):
    """SINGA's tensor.PlaceHolder: a tensor standing for a model's input at compile time (shape,
    device and dtype are what matter). It stays unwritten: reading it is an error, and an op= on
    it starts from zeros (Note [In-place on a tensor never written])."""
    return Tensor(shape, device, dtype)


def from_raw_tensor(t):
    """SINGA's: the Python tensor of a C++ one. A loom Tensor is both, so it is returned."""
    return _check_tensor("from_raw_tensor", t)


from .tensor_funcs import (_call_singa_func, add, add_column, add_row, axpy, div, eltwise_mult,  # noqa: E402,F401
                           from_raw_tensors, mult, pow, random, softmax, square, sub, sum_columns, sum_rows)
