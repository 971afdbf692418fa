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


def _whole(component, name, value):
    """`value` as an int when it is a whole number (a Python or numpy integer, not a bool), else a
    loom.TypeError naming the argument: int() would take 2.5, "8" and True, and raise Python's own
    ValueError or OverflowError for NaN and infinity."""
    import numbers
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"[{component}] {name} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def _real(component, name, value):
    """`value` as a float when it is a real number (not a bool or a string), else a loom.TypeError."""
    import numbers
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"[{component}] {name} must be a number, got {type(value).__name__} {value!r}")
    return float(value)
