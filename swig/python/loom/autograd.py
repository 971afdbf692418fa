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
import itertools
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


# ---- SINGA's Operator protocol: operators written in Python (Note [External ops]) ----

_pending = {}  # external-op id -> (operator, output index, number of outputs)
_ids = itertools.count(1)


class Operator:
    """SINGA's autograd.Operator: subclass it with forward(*xs) -> y (or a tuple of ys) and
    backward(*dys) -> dx (or a tuple, one per x; None where x gets no gradient), both taking and
    returning loom Tensors, and call an instance on tensors: it returns the tuple of outputs.

        class Cube(autograd.Operator):
            def forward(self, x):
                self.x = x
                return autograd.mul(autograd.mul(x, x), x)
            def backward(self, dy):
                return autograd.mul(autograd.mul_scalar(autograd.mul(self.x, self.x), 3.0), dy)

        y, = Cube()(x)

    forward runs without autograd history; when training (autograd.training) with gradients
    enabled and an input that requires a gradient, each output gets history back to the inputs,
    and loom's backward (autograd.backward, optimizer(loss)) calls backward once with dy. The
    operator's loom ops are recorded like any other while a device captures, so a captured step
    replays them without running Python (a host read inside forward or backward is then a
    loom.GraphError at capture). An operator with several outputs has backward called once per
    output that receives a gradient, with zeros for the other outputs' dys (backward is linear in
    them), and the inputs' gradients summed. Until its backward has run, an operator with
    recorded history stays referenced by loom.autograd (with what it saved)."""

    def __init__(self, name=None):
        self.name = name or type(self).__name__
        self.requires_grad = False
        self.src = []

    def __call__(self, *xs):
        return self._do_forward(*xs)

    def forward(self, *xs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not defined")

    def backward(self, *dys):
        raise NotImplementedError(f"{type(self).__name__}.backward is not defined")

    def _do_forward(self, *xs):
        name = getattr(self, "name", type(self).__name__)
        if not xs:
            raise errors.ValueError(f"[{name}] an operator needs at least one input tensor")
        for i, x in enumerate(xs):
            if not isinstance(x, Tensor):
                raise errors.TypeError(f"[{name}] input {i} is a {type(x).__name__}, not a loom Tensor")
        with no_grad():
            ys = self.forward(*xs)
        ys = tuple(ys) if isinstance(ys, (tuple, list)) else (ys,)
        for i, y in enumerate(ys):
            if not isinstance(y, Tensor) or not y.defined():
                raise errors.TypeError(f"[{name}] forward's output {i} is a {type(y).__name__}, not a loom Tensor")
        self.src = list(xs)
        self._input_metas = [(x.shape, x.dtype) for x in xs]
        self._output_metas = [(y.shape, _c_dtype(y), y.device) for y in ys]
        self.requires_grad = bool(training) and grad_enabled() and any(x.requires_grad for x in xs)
        if not self.requires_grad:
            outs = ys
        else:
            outs = []
            for k, y in enumerate(ys):
                op_id = next(_ids)
                out = core.external(y, list(xs), op_id)
                if out.requires_grad:
                    _pending[op_id] = (self, k, len(ys))
                outs.append(out)
        for out in outs:
            out.creator = self
        return tuple(outs)


def _c_dtype(t):
    return core._core.Tensor_dtype(t)


def _external_backward(op_id, dy, needs):
    """loom's backward calling the operator behind external op `op_id` (Note [External ops])."""
    entry = _pending.pop(op_id, None)
    if entry is None:
        raise errors.GraphError(f"[Operator] no operator awaits backward {op_id}: its backward ran already "
                                "(loom calls an operator's backward once per output)")
    op, k, n = entry
    name = getattr(op, "name", type(op).__name__)
    dys = [dy if i == k else core.zeros(shape, dtype, device)
           for i, (shape, dtype, device) in enumerate(op._output_metas)]
    if dys[k] is None:
        shape, dtype, device = op._output_metas[k]
        dys[k] = core.zeros(shape, dtype, device)
    dxs = op.backward(*dys)
    dxs = list(dxs) if isinstance(dxs, (tuple, list)) else [dxs]
    if len(dxs) != len(op._input_metas):
        raise errors.ValueError(f"[{name}] backward returned {len(dxs)} gradients for {len(op._input_metas)} inputs")
    for i, (dx, (shape, dtype)) in enumerate(zip(dxs, op._input_metas)):
        if dx is None:
            continue
        if not isinstance(dx, Tensor):
            raise errors.TypeError(f"[{name}] backward's gradient {i} is a {type(dx).__name__}, not a loom Tensor")
        if dx.shape != shape or dx.dtype != dtype:
            raise errors.ShapeError(f"[{name}] backward's gradient {i} is {dx.describe()}, but input {i} is "
                                    f"{dtype} {shape}")
    return [dx if need else None for dx, need in zip(dxs, needs)]


core.set_external_backward(_external_backward)
Tensor.creator = None  # the Operator that made a tensor (set on Operator outputs)
