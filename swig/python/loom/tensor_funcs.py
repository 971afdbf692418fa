"""loom.tensor_funcs: SINGA's tensor-module functions that are spellings of loom ops (square, pow,
add with an output tensor, mult, axpy, sum_rows, _call_singa_func, ...); loom.tensor exports
them. An `out` / `ret` / `C` argument is written in place (one copy op) and returned, as SINGA's."""
from . import core, errors
from .tensor import Tensor, _check_tensor, _default_device, _ENUM, float32


def _into(name, value, out):
    if out is None:
        return value
    _check_tensor(name, out)
    if tuple(out.shape) != tuple(value.shape):
        raise errors.ShapeError(f"[tensor.{name}] the result is {value.describe()}, which does not fit into "
                                f"{out.describe()}")
    core.copy_into(out, value if value.dtype == out.dtype else core.cast(value, _ENUM[out.dtype]))
    return out


def _call_singa_func(fn, *args):
    """SINGA's: calls a singa_wrap function and wraps its C++ result in a Python tensor. A loom
    tensor is both, so it is fn(*args), checked to be a tensor."""
    y = fn(*args)
    if not isinstance(y, Tensor):
        raise errors.TypeError(f"[tensor._call_singa_func] {getattr(fn, '__name__', fn)} returned a "
                               f"{type(y).__name__}, not a loom Tensor")
    return y


def from_raw_tensors(tensors):
    return errors._tensors("tensor.from_raw_tensors", "tensors", tensors)


def square(t):
    _check_tensor("square", t)
    return core.mul(t, t)


def pow(t, x, out=None):
    _check_tensor("pow", t)
    return _into("pow", core.pow(t, x) if isinstance(x, Tensor) else core.pow_scalar(t, errors._real("tensor.pow", "x", x)), out)


def softmax(t, out=None):
    """The softmax over the last axis of a matrix (SINGA's: rows of a 2-D tensor)."""
    _check_tensor("softmax", t)
    return _into("softmax", core.softmax(t, -1), out)


def _arith(name, method):
    def f(lhs, rhs, ret=None):
        _check_tensor(name, lhs)
        return _into(name, getattr(lhs, method)(rhs), ret)
    f.__name__ = name
    return f


add = _arith("add", "__add__")
sub = _arith("sub", "__sub__")
eltwise_mult = _arith("eltwise_mult", "__mul__")
div = _arith("div", "__truediv__")


def mult(A, B, C=None, alpha=1.0, beta=0.0):
    """A @ B; with C: C = alpha * A @ B + beta * C, in place."""
    _check_tensor("mult", A, "A")
    _check_tensor("mult", B, "B")
    if C is None:
        return core.matmul(A, B)
    alpha, beta = errors._real("tensor.mult", "alpha", alpha), errors._real("tensor.mult", "beta", beta)
    value = core.mul_scalar(core.matmul(A, B), alpha)
    if beta != 0.0:
        value = core.add(value, core.mul_scalar(_check_tensor("mult", C, "C"), beta))
    return _into("mult", value, C)


def axpy(alpha, x, y):
    """y += alpha * x, in place; returns y."""
    _check_tensor("axpy", x, "x")
    _check_tensor("axpy", y, "y")
    return _into("axpy", core.add(y, core.mul_scalar(x, errors._real("tensor.axpy", "alpha", alpha))), y)


def _matrix(name, M):
    _check_tensor(name, M, "M")
    if M.ndim != 2:
        raise errors.ShapeError(f"[tensor.{name}] expects a matrix, got {M.describe()}")
    return M


def add_column(alpha, v, beta, M):
    """M = alpha * v (a column, added to every column) + beta * M, in place; returns M."""
    _matrix("add_column", M)
    alpha, beta = errors._real("tensor.add_column", "alpha", alpha), errors._real("tensor.add_column", "beta", beta)
    _check_tensor("add_column", v, "v")
    column = core.reshape(v, (M.shape[0], 1))
    return _into("add_column", core.add(core.mul_scalar(M, float(beta)), core.mul_scalar(column, float(alpha))), M)


def add_row(alpha, v, beta, M):
    """M = alpha * v (a row, added to every row) + beta * M, in place; returns M."""
    _matrix("add_row", M)
    alpha, beta = errors._real("tensor.add_row", "alpha", alpha), errors._real("tensor.add_row", "beta", beta)
    _check_tensor("add_row", v, "v")
    row = core.reshape(v, (1, M.shape[1]))
    return _into("add_row", core.add(core.mul_scalar(M, float(beta)), core.mul_scalar(row, float(alpha))), M)


def sum_columns(M):
    """The sum of M's columns: (rows, 1)."""
    return core.sum(_matrix("sum_columns", M), (1,), True)


def sum_rows(M):
    """The sum of M's rows: (1, columns)."""
    return core.sum(_matrix("sum_rows", M), (0,), True)


def random(shape, device=None):
    """U(0, 1) samples of `shape`."""
    t = Tensor(shape, device if device is not None else _default_device(), float32)
    t.uniform(0.0, 1.0)
    return t
