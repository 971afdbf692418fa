"""loom's exceptions. Every C++ error crosses into Python as one of these (swig/errors.i), and
each is also a standard Python exception, so `except ValueError` catches a loom.ShapeError:

    loom.Error          Exception        base of all of them
    loom.ShapeError     ValueError       wrong shapes or ranks
    loom.ValueError     ValueError       any other bad argument
    loom.DTypeError     TypeError        wrong or unsupported dtype
    loom.DeviceError    RuntimeError     wrong device, or a backend that is absent (CUDA)
    loom.GraphError     RuntimeError     misuse of capture/replay (host reads while buffering...)
    loom.InternalError  RuntimeError     a loom bug
    loom.IOError        OSError          files and bytes
    loom.TypeError      TypeError        an argument of the wrong type (a str where a Tensor goes)
    loom.CommError      RuntimeError     a collective failed: a peer rank died, raised or timed out
    loom.OnnxError      ValueError       an ONNX model loom cannot write or read (op, opset, dtype, bad file)

Every mistake a caller can make is one of these (a wrongly typed argument, None for a tensor, a
number out of range...); only Python's own call protocol (a wrong number of arguments) raises a
plain TypeError.
"""
from .core import (  # noqa: F401  (re-exported)
    CommError,
    DeviceError,
    DTypeError,
    Error,
    GraphError,
    InternalError,
    IOError,
    OnnxError,
    ShapeError,
    TypeError,
    ValueError,
)


# Note [Typed argument conversions]
# Python's own conversions raise Python's own errors, naming neither the function nor the argument:
# float('x') a ValueError, int(None) and iter(1.5) TypeErrors, int(nan) a ValueError, a str where
# a Tensor goes an AttributeError from deep inside. The public functions of loom's Python package
# pass each argument that flows into C++ or into int()/float() through one of the converters
# below, at their entry, so every mistake is a loom.TypeError (the wrong kind of thing) or a
# loom.ValueError (the right kind, out of range: NaN, negative, too large), whose message names
# the function, the argument, the value and what was expected. The common value (a float, an int,
# a Tensor) takes one type test: they run on every eager op call. Arguments SWIG converts itself
# are checked there (Note [Every user mistake is a loom.Error] in swig/errors.i), and ranges that
# C++ checks (a learning rate, a std, an axis of a given tensor) are left to it: one message each.
# A bool argument is read by its truth value, as Python's own are.
import builtins as _builtins
import numbers as _numbers

from .core import Tensor as _Tensor


_INT64 = (-2 ** 63, 2 ** 63 - 1)  # (lo, hi) of an int that C++ takes as int64_t (an axis, a size)


def _show(value):
    """The value as a message shows it: its type and a short repr."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _out_of_range(component, name, v, lo, hi, what):
    bounds = f">= {lo}" if hi is None else f"<= {hi}" if lo is None else f"in [{lo}, {hi}]"
    return ValueError(f"[{component}] {name} must be {what} {bounds}, got {v!r}")


def _whole(component, name, value, lo=None, hi=None):
    """`value` as an int when it is a whole number (a Python or numpy integer, not a bool) within
    [lo, hi] (either bound optional), else a loom.TypeError naming the argument (int() would take
    2.5, "8" and True, and raise Python's own ValueError or OverflowError for NaN and infinity) or
    a loom.ValueError out of range. Note [Typed argument conversions]."""
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, _numbers.Integral):
            raise TypeError(f"[{component}] {name} must be an int, got {_show(value)}")
        value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise _out_of_range(component, name, value, lo, hi, "an int")
    return value


def _real(component, name, value, finite=False, lo=None, hi=None):
    """`value` as a float when it is a real number (not a bool or a string), finite when `finite`,
    within [lo, hi] (either bound optional; NaN is never within bounds), else a loom.TypeError or
    loom.ValueError naming the argument. Note [Typed argument conversions]."""
    t = type(value)
    if t is float and lo is None and hi is None and (not finite or value - value == 0.0):
        return value  # the common case, first: this runs on every call of an op with a number
    if t is not float:
        if t is bool or not isinstance(value, _numbers.Real):
            raise TypeError(f"[{component}] {name} must be a number, got {_show(value)}")
        try:
            value = float(value)
        except OverflowError:  # an int beyond a double's range
            raise ValueError(f"[{component}] {name} must be a number a double can hold, got {_show(value)}") from None
    if finite and value - value != 0.0:  # inf - inf and NaN - NaN are NaN
        raise ValueError(f"[{component}] {name} must be a finite number, got {value!r}")
    if (lo is not None and not value >= lo) or (hi is not None and not value <= hi):  # NaN is in no range
        raise _out_of_range(component, name, value, lo, hi, "a number")
    return value


def _ints(component, name, value, lo=None, hi=None, one=False):
    """`value`, a sequence of whole numbers (a shape, axes, paddings), as a tuple of ints each
    within [lo, hi]; with `one`, a single int is a sequence of one. A str, None, a float or a
    sequence holding anything but ints is a loom.TypeError naming the argument (Python's own
    "object is not iterable" or int() errors before). Note [Typed argument conversions]."""
    if type(value) is tuple or type(value) is list:
        items = value
    elif one and isinstance(value, _numbers.Integral) and not isinstance(value, bool):
        items = (value,)
    elif isinstance(value, (str, bytes, _Tensor)) or not hasattr(value, "__iter__"):
        expected = "an int or a sequence of ints" if one else "a sequence of ints"
        raise TypeError(f"[{component}] {name} must be {expected}, got {_show(value)}")
    else:
        items = tuple(value)
    out = []
    for v in items:
        if type(v) is not int:
            if isinstance(v, bool) or not isinstance(v, _numbers.Integral):
                raise TypeError(f"[{component}] {name} must be a sequence of ints, got {_show(value)} "
                                f"(holding {_show(v)})")
            v = int(v)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise _out_of_range(component, f"each of {name}", v, lo, hi, "an int")
        out.append(v)
    return tuple(out)


def _array(component, name, value, dtype):
    """`value` (an array, a nested list, a number) as a numpy array of `dtype`, else a
    loom.TypeError naming the argument (numpy's own ValueError or TypeError for 'x' or None)."""
    import numpy as np
    if value is None or isinstance(value, (str, bytes)):
        raise TypeError(f"[{component}] {name} must be an array of numbers, got {_show(value)}")
    try:
        return np.asarray(value, dtype)
    except (_builtins.ValueError, _builtins.TypeError, OverflowError) as e:  # numpy's (these names are loom's here)
        raise TypeError(f"[{component}] {name} must be an array of {np.dtype(dtype).name}, got {_show(value)} "
                        f"({e})") from None


def _tensor(component, name, value):
    """`value` when it is a loom Tensor, else a loom.TypeError naming the argument and what came
    (a str or None where a Tensor goes raised an AttributeError from inside). Note [Typed argument
    conversions]."""
    if isinstance(value, _Tensor):
        return value
    raise TypeError(f"[{component}] {name} must be a loom Tensor, got {_show(value)}")


def _tensors(component, name, value):
    """`value`, a list or tuple of loom Tensors, as a list, else a loom.TypeError naming the
    argument (and the first item that is not a Tensor)."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"[{component}] {name} must be a list of loom Tensors, got {_show(value)}")
    for i, t in enumerate(value):
        if not isinstance(t, _Tensor):
            raise TypeError(f"[{component}] {name}[{i}] must be a loom Tensor, got {_show(t)}")
    return list(value)
