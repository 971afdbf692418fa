"""loom.autograd: the ops, under SINGA's names, and backward.

Most functions here *are* the C++ op functions (one C call, no Python in between); the rest
adapt SINGA's argument conventions (pairs for conv strides, None for "no bias"). Every op records
autograd history when an input requires grad and gradients are enabled; on a buffering device
it is recorded into the graph instead of running.

    loss = softmax_cross_entropy(add_bias(matmul(x, w), b), target)
    for p, g in backward(loss):          # (parameter, gradient) pairs
        sgd.apply(0, g, p, "")
"""
import contextlib
import math

import numpy as np

from . import core, errors
from .tensor import Tensor, _axes, _shape


def _op_functions():
    """{name: core function} for every user-facing registered op (OpDef::internal unset) that
    loom.core binds under the op's own name: what SWIG read from core/ops.h and core/ops_cnn.h
    (Note [Bindings come from the headers] in swig/loom.i). A new op appears here by itself."""
    return {name: getattr(core, name) for name in core.list_ops()
            if not core.op_internal(name) and callable(getattr(core, name, None))}


# The op functions themselves (one C call, no Python in between). The definitions below replace
# the few whose SINGA spelling takes other arguments (numbers, None, axis=None, pairs).
globals().update(_op_functions())
from .core import mse_loss, sum_to  # noqa: E402,F401  (core/ops.h functions made of other ops)

mse = mse_loss  # the registered op's name

# SINGA's global mode flag: the default `training` of dropout and batchnorm here. Model.train()
# and Model.eval() set it.
training = True

_UNDEFINED = Tensor()  # "no tensor" for optional arguments (bias=None)


def backward(y, dy=None):
    """Backpropagates from `y` (gradient `dy`, ones when None) and returns the (param, grad) pairs
    of every leaf that requires grad, in the order their gradients became final."""
    return core.backward(y, _UNDEFINED if dy is None else dy)


def gradients(y, dy=None):
    """{param: grad} (keyed by the parameter Tensor objects autograd returned)."""
    return dict(backward(y, dy))


@contextlib.contextmanager
def no_grad():
    """Ops inside record no autograd history."""
    guard = core.NoGradGuard()
    try:
        yield
    finally:
        del guard  # restores the previous mode now (CPython frees it at once)


def grad_enabled():
    return core.grad_enabled()


# ---- element-wise, with numbers ----

def _number(op, v):
    if isinstance(v, (int, float, np.number)):
        return float(v)
    raise errors.TypeError(f"[{op.__name__}] expects a Tensor or a number, got {type(v).__name__}")


def _binary(tensor_op, scalar_op, rscalar_op):
    def op(a, b):
        if isinstance(a, Tensor):
            return tensor_op(a, b) if isinstance(b, Tensor) else scalar_op(a, _number(tensor_op, b))
        if isinstance(b, Tensor):
            return rscalar_op(b, _number(tensor_op, a))
        raise errors.TypeError(f"[{tensor_op.__name__}] needs at least one Tensor, got {type(a).__name__} and "
                               f"{type(b).__name__}")
    op.__name__ = tensor_op.__name__
    return op


add = _binary(core.add, core.add_scalar, core.add_scalar)
sub = _binary(core.sub, core.sub_scalar, core.rsub_scalar)
mul = _binary(core.mul, core.mul_scalar, core.mul_scalar)
div = _binary(core.div, core.div_scalar, core.rdiv_scalar)


def pow(x, p):
    return core.pow(x, p) if isinstance(p, Tensor) else core.pow_scalar(x, _number(core.pow, p))


def square(x):
    return core.pow_scalar(x, 2.0)


# ---- reductions ----

def sum(x, axis=None, keepdims=False):
    return core.sum(x, _axes(axis), keepdims)


def mean(x, axis=None, keepdims=False):
    return core.mean(x, _axes(axis), keepdims)


def max(x, axis=None, keepdims=False):
    return core.max(x, _axes(axis), keepdims)


# ---- shape ----

def reshape(x, shape):
    return core.reshape(x, _shape(shape))


def flatten(x, axis=1):
    """SINGA's (and ONNX's) flatten: (d0, ..., dn) -> (d0 * ... * d(axis-1), d(axis) * ... * dn),
    always a matrix; axis may be negative, 0 gives (1, size)."""
    shape = x.shape
    if not isinstance(axis, int) or not -len(shape) <= axis <= len(shape):
        raise errors.ValueError(f"[flatten] axis {axis!r} is out of range for {x.describe()}")
    if axis < 0:
        axis += len(shape)
    if axis == 1 and len(shape) >= 2:
        return core.flatten(x, 1)  # one op, the usual case
    return core.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))


def cat(xs, axis=0):
    return core.cat(list(xs), axis)


concat = cat


def slice(x, axis, start, end):
    return core.slice(x, axis, start, end)


def cast(x, dtype):
    from .tensor import _enum
    return core.cast(x, _enum(dtype))


# ---- regularisation ----

def dropout(x, ratio=0.5, training=None):
    """Zeroes elements with probability `ratio` and scales the rest by 1/(1-ratio) in training;
    identity otherwise. Fresh numbers on every run and every replay."""
    return core.dropout(x, float(ratio), globals()["training"] if training is None else bool(training))


# ---- convolutional networks ----

def _pair(v, what):
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    if len(v) != 2:
        raise errors.ValueError(f"[{what}] expects an int or a pair (height, width), got {v!r}")
    return v


def conv2d(x, W, b=None, stride=1, padding=0, dilation=1, groups=1):
    """x: (N, C, H, W), W: (O, C/groups, KH, KW), b: (O) or None -> (N, O, OH, OW)."""
    return core.conv2d(x, W, _UNDEFINED if b is None else b, _pair(stride, "conv2d stride"),
                       _pair(padding, "conv2d padding"), _pair(dilation, "conv2d dilation"), groups)


def max_pool_2d(x, kernel_size, stride=None, padding=0):
    return core.max_pool2d(x, _pair(kernel_size, "max_pool_2d kernel"),
                           () if stride is None else _pair(stride, "max_pool_2d stride"),
                           _pair(padding, "max_pool_2d padding"))


def avg_pool_2d(x, kernel_size, stride=None, padding=0, count_include_pad=True):
    return core.avg_pool2d(x, _pair(kernel_size, "avg_pool_2d kernel"),
                           () if stride is None else _pair(stride, "avg_pool_2d stride"),
                           _pair(padding, "avg_pool_2d padding"), count_include_pad)


def pooling(x, kernel_size, stride=None, padding=0, is_max=True):
    """SINGA's pooling_2d: max pooling, or average pooling when is_max=False."""
    if is_max:
        return max_pool_2d(x, kernel_size, stride, padding)
    return avg_pool_2d(x, kernel_size, stride, padding)


pooling_2d = pooling


def global_avg_pool(x):
    return core.global_avg_pool(x)


def batchnorm(x, scale, bias, running_mean, running_var, training=None, momentum=0.1, eps=1e-5):
    """x: (N, C, ...); scale, bias, running_mean, running_var: (C). Training: batch statistics,
    running statistics updated in place; otherwise the running statistics."""
    t = globals()["training"] if training is None else bool(training)
    return core.batch_norm(x, scale, bias, running_mean, running_var, t, float(momentum), float(eps))


batchnorm_2d = batchnorm


def layernorm(x, gamma, beta, eps=1e-5):
    return core.layer_norm(x, gamma, beta, float(eps))


def embedding(table, indices):
    return core.embedding(table, indices)


def call(op, inputs, **attrs):
    """Any registered op by name (core.list_ops()), attributes as keywords: a list of outputs."""
    return core.call_op(op, list(inputs), attrs)
