"""loom.autograd: the ops, under SINGA's names, and backward.

Most functions here are the C++ op functions (one C call), the SINGA-named ones behind a thin
wrapper that hangs SINGA's y.creator on the result (Note [Creators of op results]); the rest
adapt SINGA's argument conventions (pairs for conv strides, None for "no bias"). Every op records
autograd history when an input requires grad and gradients are enabled; on a buffering device
it is recorded into the graph instead of running.

    loss = softmax_cross_entropy(add_bias(matmul(x, w), b), target)
    for p, g in backward(loss):          # (parameter, gradient) pairs
        sgd.apply(0, g, p, "")
"""
import builtins
import contextlib
import gc
import itertools
import math
import sys

import numpy as np

from . import core, creators as _creators, errors
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
from .core import sum_to  # noqa: E402,F401  (a core/ops.h function made of other ops)
from .singa_ops import (_nchw, depth_to_space, expand, pad, reduce_mean, reduce_sum,  # noqa: E402,F401
                        space_to_depth)  # SINGA's ONNX spellings


# ---- losses: SINGA's shape (1,) ----
# Note [Loss shape]
# loom's C++ losses are 0-d (shape ()), SINGA's autograd losses are (1,). The
# functions here return a (1,) view of the C++ loss (a reshape: no copy, and backward from it
# seeds the 0-d loss with the same single value), so a SINGA script's loss.shape, indexing
# (loss[0]) and tensor.to_numpy(loss) see what they see in SINGA.

def _loss(y):
    return core.reshape(y, (1,))


def softmax_cross_entropy(x, t):
    """The mean over the batch of the cross-entropy of softmax(x) (N, C) against t, class indices
    (N) (int32/int64) or probabilities (N, C); shape (1,). An integer t of x's shape is SINGA's
    one-hot target: it is read as the probabilities it spells (cast to x's dtype)."""
    if isinstance(t, Tensor) and isinstance(x, Tensor) and t.shape == x.shape and not core.is_floating(_c_dtype(t)):
        t = core.cast(t, _c_dtype(x))
    return _loss(core.softmax_cross_entropy(x, t))


def linear_cross_entropy(h, w, t, w_is_table=True):
    """softmax_cross_entropy(h w^T, t) (w (V, D), an embedding's table; w_is_table=False: of h w,
    w (D, V)) without the (N, V) logits: the rows in chunks, the gradients computed with the loss
    (Note [Cross-entropy fused with the head's product]). h (N, D); t class indices (N); shape (1,)."""
    return _loss(core.linear_cross_entropy(h, w, t, bool(w_is_table)))


def mse_loss(x, t):
    """The mean over all elements of (x - t)^2; shape (1,)."""
    return _loss(core.mse_loss(x, t))


mse = mse_loss  # the registered op's name

# SINGA's global mode flag: the default `training` of dropout and batchnorm here. Model.train()
# and Model.eval() set it.
training = True

_UNDEFINED = Tensor()  # "no tensor" for optional arguments (bias=None)


def backward(y, dy=None):
    """Backpropagates from `y` (gradient `dy`, ones when None) and returns the (param, grad) pairs
    of every leaf that requires grad, in the order their gradients became final."""
    return core.backward(y, _UNDEFINED if dy is None else dy)


class _Gradients(dict):
    """{param: grad} whose lookups also find a parameter by another Python handle on the same
    tensor (its storage, offset, shape and dtype): autograd returns new handles, and SINGA's
    scripts look gradients up with their own (grads[layer.W])."""

    @staticmethod
    def _key(t):
        return (t._block_id(), t.offset(), tuple(t.shape), t.dtype)

    def _find(self, t):
        if isinstance(t, Tensor) and t.defined():
            k = self._key(t)
            for p in self.keys():
                if self._key(p) == k:
                    return p
        return None

    def __missing__(self, t):
        p = self._find(_tensor_of_id(t) if isinstance(t, int) else t)
        if p is None:
            raise KeyError(t)
        return dict.__getitem__(self, p)

    def __contains__(self, t):
        return dict.__contains__(self, t) or self._find(_tensor_of_id(t) if isinstance(t, int) else t) is not None

    def get(self, t, default=None):
        return self[t] if t in self else default


def _tensor_of_id(key):
    """The live Tensor whose id() is `key`, or None: SINGA's scripts look gradients up by
    id(param) (auto_grads[id(p)]). A scan of the collector's objects, so slow: for that spelling only."""
    for obj in gc.get_objects():
        if id(obj) == key and isinstance(obj, Tensor):
            return obj
    return None


def gradients(y, dy=None):
    """{param: grad}: keyed by the parameter Tensor objects autograd returned; a lookup with
    another handle on the same parameter finds it too, and so does one by id(handle) (SINGA's)."""
    return _Gradients(backward(y, dy))


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

def _variadic(name, xs):
    """The tensors of SINGA's (ONNX's) variadic sum/mean/max/min(*tensors), or None when the call
    is a reduction, f(x, axis, keepdims)."""
    if len(xs) >= 2 and all(isinstance(x, Tensor) for x in xs):
        return xs
    if len(xs) > 3 or (len(xs) >= 2 and isinstance(xs[1], Tensor)):
        raise errors.TypeError(f"[{name}] takes tensors only (element-wise over several) or "
                               f"(x, axis, keepdims) (a reduction)")
    return None


def _variadic_or_reduction(name, combine, reduction, doc, finish=None):
    """f(a, b, ...) folds tensors element-wise with `combine` (then `finish(out, count)`);
    f(x, axis=None, keepdims=False) is `reduction(x, axes, keepdims)`."""
    def f(x, *rest, axis=None, keepdims=False):
        xs = _variadic(name, (x,) + rest)
        if xs is not None:
            out = xs[0]
            for t in xs[1:]:
                out = combine(out, t)
            return finish(out, len(xs)) if finish else out
        axis, keepdims = (rest + (axis, keepdims)[len(rest):])[:2]
        return reduction(x, _axes(axis, name), bool(keepdims))
    f.__name__, f.__doc__ = name, doc
    return f


sum = _variadic_or_reduction(
    "sum", core.add, core.sum,
    "sum(x, axis=None, keepdims=False) reduces; sum(a, b, ...) adds tensors element-wise (SINGA's and "
    "ONNX's Sum, with broadcasting).")
mean = _variadic_or_reduction(
    "mean", core.add, core.mean,
    "mean(x, axis=None, keepdims=False) reduces; mean(a, b, ...) averages tensors element-wise.",
    finish=lambda out, n: core.mul_scalar(out, 1.0 / n))
max = _variadic_or_reduction(
    "max", lambda a, b: core.where(core.greater_equal(a, b), a, b), core.max,
    "max(x, axis=None, keepdims=False) reduces; max(a, b, ...) is the element-wise maximum (the gradient "
    "goes to the first of equal values).")
min = _variadic_or_reduction(
    "min", lambda a, b: core.where(core.less_equal(a, b), a, b),
    lambda x, axes, keepdims: core.neg(core.max(core.neg(x), axes, keepdims)),
    "min(x, axis=None, keepdims=False) reduces; min(a, b, ...) is the element-wise minimum.")


# ---- shape ----

def reshape(x, shape):
    """ONNX's and SINGA's reshape: a 0 keeps the input's size on that axis, one -1 is inferred."""
    shape = _shape(shape)
    if 0 in shape:
        if len(shape) > x.ndim:
            raise errors.ShapeError(f"[reshape] shape {shape} keeps an axis (0) that {x.describe()} does not have")
        shape = tuple(x.shape[i] if d == 0 else d for i, d in enumerate(shape))
    return core.reshape(x, shape)


def flatten(x, axis=1):
    """SINGA's (and ONNX's) flatten: (d0, ..., dn) -> (d0 * ... * d(axis-1), d(axis) * ... * dn),
    always a matrix; axis may be negative, 0 gives (1, size)."""
    shape = errors._tensor("flatten", "x", x).shape
    if not -len(shape) <= errors._whole("flatten", "axis", axis) <= len(shape):
        raise errors.ValueError(f"[flatten] axis {axis!r} is out of range for {x.describe()}")
    if axis < 0:
        axis += len(shape)
    if axis == 1 and len(shape) >= 2:
        return core.flatten(x, 1)  # one op, the usual case
    return core.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))


def cat(xs, axis=0):
    return core.cat(errors._tensors("cat", "xs", xs), axis)


concat = cat


def slice(x, starts, ends, axes=None, steps=None):
    """SINGA's (ONNX's) slice(x, starts, ends, axes=None, steps=None): per listed axis the
    elements [start, end) every step (negative indices count from the end; steps may be
    negative). loom's older slice(x, axis, start, end), with ints, is [start, end) of one axis."""
    x = errors._tensor("slice", "x", x)
    if not isinstance(starts, (list, tuple)):
        return core.slice(x, starts, ends, axes)  # slice(x, axis, start, end)
    n = len(starts)
    starts, ends = errors._ints("slice", "starts", starts), errors._ints("slice", "ends", ends)
    axes = list(range(n)) if axes is None else errors._ints("slice", "axes", axes)
    steps = [1] * n if steps is None else errors._ints("slice", "steps", steps)
    if not len(ends) == len(axes) == len(steps) == n:
        raise errors.ValueError(f"[slice] starts, ends, axes and steps differ in length: {starts}, {ends}, {axes}, "
                                f"{steps}")
    key = [builtins.slice(None)] * x.ndim
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        if not -x.ndim <= ax < x.ndim:
            raise errors.ValueError(f"[slice] axis {ax} is out of range for {x.describe()}")
        if sp == 0:
            raise errors.ValueError("[slice] a step cannot be 0")
        key[ax % x.ndim] = builtins.slice(int(st), int(en), int(sp))  # Python's clamping is ONNX's
    return x[tuple(key)]


def cast(x, dtype):
    from .tensor import _enum
    return core.cast(x, _enum(dtype))


# ---- regularisation ----

def dropout(x, ratio=0.5, training=None):
    """Zeroes elements with probability `ratio` and scales the rest by 1/(1-ratio) in training;
    identity otherwise. Fresh numbers on every run and every replay."""
    return core.dropout(x, errors._real("dropout", "ratio", ratio, finite=True), globals()["training"] if training is None else bool(training))


# ---- convolutional networks ----

def _pair(v, op, name):
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v), int(v))
    v = errors._ints(op, name, v)
    if len(v) != 2:
        raise errors.ValueError(f"[{op}] {name} must be an int or a pair (height, width), got {v!r}")
    return v


def _pads(op, padding, padding_end, odd_padding):
    """(begin, end) paddings (height, width) of a convolution or pooling (Note [Asymmetric padding]
    in core/ops_cnn.h): `padding` at the beginning (top, left), `padding_end` (default: padding)
    at the end (bottom, right), plus SINGA's odd_padding (top, bottom, left, right): extra rows and
    columns at one end."""
    begin = _pair(padding, op, "padding")
    end = begin if padding_end is None else _pair(padding_end, op, "padding_end")
    try:
        odd = tuple(int(v) for v in odd_padding)
    except (TypeError, ValueError):
        odd = ()
    if len(odd) != 4 or builtins.min(odd) < 0:
        raise errors.ValueError(f"[{op}] odd_padding must be 4 non-negative ints (top, bottom, left, right), "
                                f"got {odd_padding!r}")
    return (begin[0] + odd[0], begin[1] + odd[2]), (end[0] + odd[1], end[1] + odd[3])


def conv2d(*args, **kwargs):
    """conv2d(x, W, b=None, stride=1, padding=0, dilation=1, groups=1, padding_end=None,
    odd_padding=(0, 0, 0, 0)): x: (N, C, H, W), W: (O, C/groups, KH, KW), b: (O) or None ->
    (N, O, OH, OW). Zero padding `padding` before, `padding_end` (default: padding) after each
    axis, plus SINGA's odd_padding (top, bottom, left, right). SINGA's conv2d(handle, x, W, b=None,
    odd_padding=...) takes stride, padding and groups from a singa_wrap.ConvHandle."""
    if args and not isinstance(args[0], Tensor) and hasattr(args[0], "groups"):
        return _conv2d_of_handle(*args, **kwargs)
    return _conv2d(*args, **kwargs)


def _conv2d_of_handle(handle, x, W, b=None, odd_padding=(0, 0, 0, 0)):
    return _conv2d(x, W, b, handle.stride, handle.padding, 1, handle.groups, None, odd_padding)


def _conv2d(x, W, b=None, stride=1, padding=0, dilation=1, groups=1, padding_end=None, odd_padding=(0, 0, 0, 0)):
    begin, end = _pads("conv2d", padding, padding_end, odd_padding)
    return core.conv2d(x, W, _UNDEFINED if b is None else b, _pair(stride, "conv2d", "stride"), begin,
                       _pair(dilation, "conv2d", "dilation"), groups, end)


def max_pool_2d(x, kernel_size, stride=None, padding=0, padding_end=None, odd_padding=(0, 0, 0, 0)):
    """Max pooling; padding as conv2d's, and never the maximum."""
    begin, end = _pads("max_pool_2d", padding, padding_end, odd_padding)
    return core.max_pool2d(x, _pair(kernel_size, "max_pool_2d", "kernel_size"),
                           () if stride is None else _pair(stride, "max_pool_2d", "stride"), begin, end)


def avg_pool_2d(x, kernel_size, stride=None, padding=0, count_include_pad=True, padding_end=None,
                odd_padding=(0, 0, 0, 0)):
    """Average pooling; padding as conv2d's. count_include_pad: divide by the window's size (the
    padded positions count as zeros), else by its pixels inside the image."""
    begin, end = _pads("avg_pool_2d", padding, padding_end, odd_padding)
    return core.avg_pool2d(x, _pair(kernel_size, "avg_pool_2d", "kernel_size"),
                           () if stride is None else _pair(stride, "avg_pool_2d", "stride"), begin,
                           count_include_pad, end)


def pooling(x, kernel_size, stride=None, padding=0, is_max=True, odd_padding=(0, 0, 0, 0)):
    """SINGA's pooling_2d: max pooling, or average pooling when is_max=False."""
    if is_max:
        return max_pool_2d(x, kernel_size, stride, padding, odd_padding=odd_padding)
    return avg_pool_2d(x, kernel_size, stride, padding, odd_padding=odd_padding)


def pooling_2d(x, *args, **kwargs):
    """pooling(x, ...), or SINGA's pooling_2d(handle, x) with a singa_wrap.PoolingHandle."""
    if not isinstance(x, Tensor) and hasattr(x, "is_max"):
        handle, (x,) = x, args
        return pooling(x, handle.kernel, handle.stride, handle.padding, handle.is_max)
    return pooling(x, *args, **kwargs)


def global_avg_pool(x):
    return core.global_avg_pool(x)


def batchnorm(x, scale, bias, running_mean, running_var, training=None, momentum=0.1, eps=1e-5):
    """x: (N, C, ...); scale, bias, running_mean, running_var: (C). Training: batch statistics,
    running statistics updated in place; otherwise the running statistics."""
    t = globals()["training"] if training is None else bool(training)
    return core.batch_norm(x, scale, bias, running_mean, running_var, t, errors._real("batchnorm", "momentum", momentum, finite=True),
                           errors._real("batchnorm", "eps", eps, finite=True))


def batchnorm_2d(x, *args, **kwargs):
    """batchnorm(x, ...), or SINGA's batchnorm_2d(handle, x, scale, bias, running_mean,
    running_var) with a singa_wrap.BatchNormHandle (its factor is the momentum)."""
    if not isinstance(x, Tensor) and hasattr(x, "factor"):
        handle, (x, scale, bias, running_mean, running_var) = x, args
        return batchnorm(x, scale, bias, running_mean, running_var, momentum=handle.factor, eps=handle.eps)
    return batchnorm(x, *args, **kwargs)


def layernorm(x, gamma, beta, eps=1e-5):
    return core.layer_norm(x, gamma, beta, errors._real("layernorm", "eps", eps, finite=True))


def embedding(table, indices):
    return core.embedding(table, indices)


def attention(q, k, v, causal=False, scale=0.0):
    """softmax(scale q k^T) v without keeping the score matrix (Note [Attention keeps no score
    matrix] in core/ops_transformer.h). q: (..., Tq, D), k: (..., Tk, D), v: (..., Tk, Dv);
    causal: query i sees keys j <= i; scale 0: 1 / sqrt(D)."""
    return core.attention(q, k, v, bool(causal), errors._real("attention", "scale", scale))


def call(op, inputs, **attrs):
    """Any registered op by name (core.list_ops()), attributes as keywords: a list of outputs."""
    return core.call_op(op, list(inputs), attrs)


# ---- SINGA's Operator protocol: operators written in Python (Note [External ops]) ----

# Note [Operators with several outputs]
# SINGA calls an operator's backward once, with the gradients of all its outputs: backward(*dys)
# -> dxs. loom's external op (core/ops/external.h) is a view of one tensor, so an operator with
# several floating-point outputs packs them: their values, flattened, are concatenated into one
# tensor (one copy), the external op joins that tensor to the inputs, and each output is a
# reshaped slice of it. Autograd sums the outputs' gradients into the packed tensor's (zeros where
# an output got none), the external op's backward runs once, and backward(*dys) gets the slices.
# Outputs that are not floating point (indices, masks) carry no gradient: their dys are zeros.
# The floating-point outputs must share one dtype (a typed error otherwise).

_pending = {}  # external-op id -> (operator, [(output index, offset, size)] of the joined outputs)
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
    and loom's backward (autograd.backward, optimizer(loss)) calls backward once, with the
    gradients of all outputs (zeros for an output that got none; Note [Operators with several
    outputs]). The operator's loom ops are recorded like any other while a device captures, so a
    captured step replays them without running Python (a host read inside forward or backward is
    then a loom.GraphError at capture). Until its backward has run, an operator with recorded
    history stays referenced by loom.autograd (with what it saved)."""

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
        outs = self._with_history(name, ys, xs) if self.requires_grad else ys
        for out in outs:
            out.creator = self
        return tuple(outs)

    def _with_history(self, name, ys, xs):
        """ys joined to xs by one external op (Note [Operators with several outputs])."""
        joined_outputs = [k for k, y in enumerate(ys) if core.is_floating(_c_dtype(y))]
        if not joined_outputs:
            return ys
        dtypes = sorted({ys[k].dtype for k in joined_outputs})
        if len(dtypes) > 1:
            raise errors.DTypeError(f"[{name}] the floating-point outputs of an operator with several outputs must "
                                    f"share one dtype for its backward, got {', '.join(dtypes)}")
        op_id, layout, offset = next(_ids), [], 0
        for k in joined_outputs:
            layout.append((k, offset, ys[k].size()))
            offset += ys[k].size()
        if len(layout) == 1:
            joined = core.external(ys[layout[0][0]], list(xs), op_id)
        else:
            with no_grad():
                flat = core.cat([core.reshape(ys[k], (-1,)) for k in joined_outputs], 0)
            joined = core.external(flat, list(xs), op_id)
        if joined.requires_grad:
            _pending[op_id] = (self, layout)
        outs = list(ys)
        for k, start, size in layout:
            outs[k] = joined if len(layout) == 1 else core.reshape(core.slice(joined, 0, start, start + size),
                                                                   ys[k].shape)
        return outs


def _c_dtype(t):
    return core._core.Tensor_dtype(t)


def _external_backward(op_id, dy, needs):
    """loom's backward calling the operator behind external op `op_id` (Note [External ops])."""
    entry = _pending.pop(op_id, None)
    if entry is None:
        raise errors.GraphError(f"[Operator] no operator awaits backward {op_id}: its backward ran already "
                                "(loom calls an operator's backward once)")
    op, layout = entry
    name = getattr(op, "name", type(op).__name__)
    dys = [core.zeros(shape, dtype, device) for shape, dtype, device in op._output_metas]
    if dy is not None:
        for k, start, size in layout:  # Note [Operators with several outputs]
            dys[k] = dy if len(layout) == 1 else core.reshape(core.slice(dy, 0, start, start + size),
                                                                op._output_metas[k][0])
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


# ---- SINGA's other autograd functions, made of loom's ops (differentiable through them) ----

def _full_like(x, value, shape=None):
    shape = x.shape if shape is None else errors._ints("full", "shape", shape)
    return core.full(shape, errors._real("full", "value", value), core._core.Tensor_dtype(x), x.device)


def identity(x):
    return errors._tensor("identity", "x", x)


def negative(x):
    return core.neg(x)


def reciprocal(x):
    return core.rdiv_scalar(x, 1.0)


def clip(x, min=None, max=None):
    """Elements limited to [min, max] (None: unbounded on that side)."""
    lo = -math.inf if min is None else errors._real("clip", "min", min)
    hi = math.inf if max is None else errors._real("clip", "max", max)
    if lo != lo or hi != hi:  # infinities are bounds, NaN is none
        raise errors.ValueError(f"[clip] min and max must not be NaN, got {min!r} and {max!r}")
    return core.clamp(x, lo, hi)


def leakyrelu(x, a=0.01):
    return core.leaky_relu(x, errors._real("leakyrelu", "a", a, finite=True))


def softsign(x):
    """x / (1 + |x|)."""
    return core.div(x, core.add_scalar(core.abs(x), 1.0))


def hardsigmoid(x, alpha=0.2, gamma=0.5):
    """max(0, min(1, alpha x + gamma))."""
    return core.clamp(core.add_scalar(core.mul_scalar(x, errors._real("hardsigmoid", "alpha", alpha, finite=True)),
                                      errors._real("hardsigmoid", "gamma", gamma, finite=True)), 0.0, 1.0)


def elu(x, alpha=1.0):
    """x where x > 0, alpha (exp(x) - 1) elsewhere."""
    neg = core.mul_scalar(core.add_scalar(core.exp(core.clamp(x, -math.inf, 0.0)), -1.0), errors._real("elu", "alpha", alpha, finite=True))
    return core.where(core.greater(x, _full_like(x, 0.0, ())), x, neg)


def selu(x, alpha=1.67326, gamma=1.0507):
    """gamma * (x where x > 0, alpha (exp(x) - 1) elsewhere)."""
    return core.mul_scalar(elu(x, alpha), errors._real("selu", "gamma", gamma, finite=True))


def prelu(x, slope):
    """x where x > 0, slope * x elsewhere; slope (a tensor) broadcasts against x and is learnt."""
    return core.where(core.greater(x, _full_like(x, 0.0, ())), x, core.mul(x, slope))


def squeeze(x, axis=None):
    """Drops the axes of size 1 listed in `axis` (an int or a list; None: every one)."""
    shape = errors._tensor("squeeze", "x", x).shape
    axes = [i for i, d in enumerate(shape) if d == 1] if axis is None else [a % x.ndim for a in _axes(axis, "squeeze")]
    for a in axes:
        if shape[a] != 1:
            raise errors.ShapeError(f"[squeeze] axis {a} of {x.describe()} has size {shape[a]}, not 1")
    return core.reshape(x, tuple(d for i, d in enumerate(shape) if i not in axes))


def unsqueeze(x, axis):
    """Inserts axes of size 1 at the positions `axis` (an int or a list) of the output."""
    axes = errors._ints("unsqueeze", "axis", axis, one=True)
    ndim = errors._tensor("unsqueeze", "x", x).ndim + len(axes)
    axes = sorted(a % ndim for a in axes)
    if len(set(axes)) != len(axes):
        raise errors.ValueError(f"[unsqueeze] repeated axes {axis!r}")
    shape, it = [], iter(x.shape)
    for i in range(ndim):
        shape.append(1 if i in axes else next(it))
    return core.reshape(x, tuple(shape))


def transpose(x, shape=None, b=None):
    """transpose(x, perm): the axes permuted (SINGA's and ONNX's; perm None reverses them);
    transpose(x, a, b) swaps two axes (loom's)."""
    x = errors._tensor("transpose", "x", x)
    if b is not None:
        return core.transpose(x, errors._whole("transpose", "a", shape), errors._whole("transpose", "b", b))
    perm = tuple(reversed(range(x.ndim))) if shape is None else errors._ints("transpose", "perm", shape)
    return core.permute(x, perm)


def tile(x, repeats):
    """numpy's tile: x repeated repeats[i] times along axis i (an int: the last axis)."""
    x = errors._tensor("tile", "x", x)
    reps = errors._ints("tile", "repeats", repeats, one=True)
    if builtins.min(reps, default=1) < 1:
        raise errors.ValueError(f"[tile] repeats must be positive, got {repeats!r}")
    shape = (1,) * (len(reps) - x.ndim) + x.shape
    reps = (1,) * (len(shape) - len(reps)) + reps
    inter = tuple(v for r, d in zip(reps, shape) for v in (1, d))
    wide = tuple(v for r, d in zip(reps, shape) for v in (r, d))
    y = core.broadcast_to(core.reshape(x, inter), wide)
    return core.reshape(y, tuple(r * d for r, d in zip(reps, shape)))


def split(x, axis, parts, num_output=None):
    """x cut along `axis` into pieces of the sizes in `parts`, or into num_output equal pieces
    when parts is None. Returns a tuple."""
    x = errors._tensor("split", "x", x)
    size = x.shape[errors._whole("split", "axis", axis, lo=-x.ndim, hi=x.ndim - 1)]
    if parts is None:
        num_output = errors._whole("split", "num_output", num_output, lo=1)
        if size % num_output or size % num_output:
            raise errors.ValueError(f"[split] axis {axis} of {x.describe()} does not split into {num_output} parts")
        parts = [size // num_output] * num_output
    parts = errors._ints("split", "parts", parts)
    if builtins.sum(parts) != size or builtins.min(parts) < 0:
        raise errors.ValueError(f"[split] parts {list(parts)} do not add up to {size}, axis {axis} of {x.describe()}")
    out, start = [], 0
    for p in parts:
        out.append(core.slice(x, axis, start, start + p))
        start += p
    return tuple(out)


def _index_tensor(op, indices, device):
    if isinstance(indices, Tensor):
        if indices.dtype not in ("int32", "int64"):
            raise errors.DTypeError(f"[{op}] indices must be int32 or int64, got {indices.describe()}")
        return indices
    arr = np.asarray(indices)
    if arr.dtype.kind not in "iu":
        raise errors.TypeError(f"[{op}] indices must be ints, got {arr.dtype}")
    from .tensor import from_numpy
    return from_numpy(arr.astype(np.int32), device)


def gather(x, axis, indices):
    """ONNX's Gather: out = x.shape[:axis] + indices.shape + x.shape[axis+1:], taking along `axis`
    the entries `indices` (ints, or an int tensor; non-negative). Differentiable in x."""
    x = errors._tensor("gather", "x", x)
    axis = errors._whole("gather", "axis", axis, lo=-x.ndim, hi=x.ndim - 1) % x.ndim
    if isinstance(indices, (list, tuple, np.ndarray)):
        arr = np.asarray(indices)
        if arr.dtype.kind not in "iu":
            raise errors.TypeError(f"[gather] indices must be ints, got {errors._show(indices)}")
        if arr.size and (arr.min() < -x.shape[axis] or arr.max() >= x.shape[axis]):
            raise errors.ValueError(f"[gather] an index of {arr.tolist()} is out of range for axis {axis} of "
                                    f"{x.describe()}")
        indices = np.where(arr < 0, arr + x.shape[axis], arr)
    idx = _index_tensor("gather", indices, x.device)
    others = [i for i in range(x.ndim) if i != axis]
    rest = [x.shape[i] for i in others]
    table = core.reshape(core.permute(x, (axis,) + tuple(others)), (x.shape[axis], math.prod(rest)))
    y = core.reshape(core.embedding(table, idx), idx.shape + tuple(rest))
    k = idx.ndim
    perm = tuple(range(k, k + axis)) + tuple(range(k)) + tuple(range(k + axis, k + len(rest)))
    return core.permute(y, perm) if perm != tuple(range(len(perm))) else y


def onehot(axis, indices, depth, values=(0.0, 1.0)):
    """ONNX's OneHot: a new axis of size `depth` at `axis` (-1: last) holding values[1] at each
    index and values[0] elsewhere; indices an int tensor or ints."""
    device = indices.device if isinstance(indices, Tensor) else None
    if isinstance(indices, Tensor) and core.is_floating(_c_dtype(indices)):
        indices = core.cast(indices, core.dtype_from_name("int64"))  # SINGA's scripts pass float indices
    idx = _index_tensor("onehot", indices, device)
    depth = errors._whole("onehot", "depth", depth, lo=1, hi=2 ** 31 - 1)
    if not isinstance(values, (list, tuple, np.ndarray)) or len(values) != 2:
        raise errors.TypeError(f"[onehot] values must be a pair (off, on) of numbers, got {errors._show(values)}")
    off, on = (errors._real("onehot", "values", v) for v in values)
    axis = errors._whole("onehot", "axis", axis)
    from .tensor import from_numpy
    try:
        table = from_numpy(np.eye(depth, dtype=np.float32) * (on - off) + off, idx.device)
    except MemoryError:  # numpy's own, as to_numpy's
        raise errors.DeviceError(f"[onehot] out of memory for the ({depth}, {depth}) table of depth {depth}") from None
    y = core.embedding(table, idx)  # (..., depth)
    if not -y.ndim <= axis < y.ndim:
        raise errors.ValueError(f"[onehot] axis {axis} is out of range for the {y.ndim}-D output")
    axis = axis % y.ndim
    if axis == y.ndim - 1:
        return y
    perm = tuple(range(axis)) + (y.ndim - 1,) + tuple(range(axis, y.ndim - 1))
    return core.permute(y, perm)


def where(*args, condition=None):
    """where(condition, x, y) (numpy's order) or SINGA's where(x, y, condition): x where the bool
    condition holds, else y, broadcast together. Told apart by which end is the bool tensor."""
    if condition is not None:
        x, y = args
        return core.where(_condition(condition, x), x, y)
    a, b, c = args
    if not isinstance(c, Tensor) and isinstance(a, Tensor):  # SINGA's order with a list or array condition
        return core.where(_condition(c, a), a, b)
    if isinstance(c, Tensor) and c.dtype in ("bool", "uint8") and not (isinstance(a, Tensor) and a.dtype in ("bool", "uint8")):
        return core.where(c, a, b)
    return core.where(a, b, c)


def _condition(cond, like):
    if isinstance(cond, Tensor):
        return cond
    from .tensor import from_numpy
    return from_numpy(np.asarray(cond, dtype=bool), like.device if isinstance(like, Tensor) else None)


def cossim(a, b):
    """Row-wise cosine similarity of a, b (N, D) -> (N,)."""
    a, b = errors._tensor("cossim", "a", a), errors._tensor("cossim", "b", b)
    if a.ndim != 2 or a.shape != b.shape:
        raise errors.ShapeError(f"[cossim] expects two (N, D) tensors of one shape, got {a.describe()} and "
                                f"{b.describe()}")
    dot = core.sum(core.mul(a, b), (1,), False)
    na = core.sqrt(core.sum(core.mul(a, a), (1,), False))
    nb = core.sqrt(core.sum(core.mul(b, b), (1,), False))
    return core.div(dot, core.mul(na, nb))


def _as_bool(x):
    if x.dtype == "bool":
        return x
    return core.not_equal(x, _full_like(x, 0, ()))


def _count_true(a, b):
    """How many of a, b hold, element-wise, as float32 (nonzero is true)."""
    return core.add(core.cast(_as_bool(a), _F32), core.cast(_as_bool(b), _F32))


def _and(a, b):
    """Element-wise logical and (nonzero is true) -> bool."""
    n = _count_true(a, b)
    return core.greater(n, _full_like(n, 1.5, ()))


def _or(a, b):
    """Element-wise logical or (nonzero is true) -> bool."""
    n = _count_true(a, b)
    return core.greater(n, _full_like(n, 0.5, ()))


def _xor(a, b):
    return core.not_equal(_as_bool(a), _as_bool(b))


def _not(x):
    """Element-wise logical not (nonzero is true) -> bool."""
    n = core.cast(_as_bool(x), _F32)
    return core.less(n, _full_like(n, 0.5, ()))


def shape(x):
    """ONNX's Shape: the shape of x as an int64 tensor (1-D). The shape is static, so the result
    also remembers it on the host: constant_of_shape reads it from there, which lets the pair
    run inside a capture (Note [ConstantOfShape in a graph], src/core/ops/scatter.cc)."""
    from .tensor import from_numpy
    out = from_numpy(np.asarray(errors._tensor("shape", "x", x).shape, np.int64), x.device)
    out._static_shape = tuple(int(d) for d in x.shape)
    return out


def constant_of_shape(x, value=0.0):
    """ONNX's ConstantOfShape: a float32 tensor of `value`s whose shape is the values of the 1-D
    int tensor x. A device op (Note [ConstantOfShape in a graph]): the shape is recorded with it,
    read from x now when the device runs eagerly, or, while it captures, known without a read
    when x came from autograd.shape(); otherwise a capture raises loom.GraphError (a graph's
    shapes are fixed when it is captured). A replay whose x holds another shape raises."""
    if not isinstance(x, Tensor):
        raise errors.TypeError(f"[constant_of_shape] expected a loom Tensor of dims, got {type(x).__name__}")
    dims = getattr(x, "_static_shape", None)
    if dims is None:
        if x.device.buffering():
            raise errors.GraphError(f"[constant_of_shape] {x.describe()}'s values are the output's shape, and "
                                    f"{x.device.name()} is capturing: pass the tensor autograd.shape() returned "
                                    "(its values are known), or call it before the capture")
        if x.ndim != 1:
            raise errors.ShapeError(f"[constant_of_shape] the shape tensor must be 1-D, got {x.describe()}")
        dims = tuple(int(d) for d in x.to_numpy())
    return core.call_op("constant_of_shape", [x], {"shape": list(dims), "dtype": int(_F32),
                                                      "value": errors._real("constant_of_shape", "value", value)})[0]


def upsample(x, mode="nearest", scales=None):
    """ONNX's Upsample, nearest, integer scales (one per axis): each element repeated."""
    if mode != "nearest":
        raise errors.ValueError(f"[upsample] mode '{mode}' is not supported; loom has 'nearest'")
    x = errors._tensor("upsample", "x", x)
    if scales is None or isinstance(scales, (str, bytes)) or not hasattr(scales, "__iter__"):
        raise errors.TypeError(f"[upsample] scales must be a sequence of numbers, got {errors._show(scales)}")
    scales = [errors._real("upsample", "scales", s) for s in scales]
    if len(scales) != x.ndim or any(not s.is_integer() or s < 1 for s in scales):
        raise errors.ValueError(f"[upsample] scales {scales} must be one positive integer per axis of {x.describe()}")
    shape = x.shape
    inter = tuple(v for d in shape for v in (d, 1))
    wide = tuple(v for d, s in zip(shape, scales) for v in (d, int(s)))
    y = core.broadcast_to(core.reshape(x, inter), wide)
    return core.reshape(y, tuple(d * int(s) for d, s in zip(shape, scales)))


def globalaveragepool(x, data_format="channels_first"):
    """ONNX's GlobalAveragePool: (N, C, H, W) -> (N, C, 1, 1); SINGA's data_format other than
    "channels_first" reads x as (N, H, W, C) -> (N, 1, 1, C)."""
    x = errors._tensor("globalaveragepool", "x", x)
    if data_format == "channels_first":
        n, c, _, _ = _nchw("globalaveragepool", x)
        return core.reshape(core.global_avg_pool(x), (n, c, 1, 1))
    n, _, _, c = _nchw("globalaveragepool", x)
    return core.reshape(core.global_avg_pool(core.permute(x, (0, 3, 1, 2))), (n, 1, 1, c))


def gemm(A, B, C=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    """alpha A' B' + beta C, A' = A^T when transA, B' = B^T when transB; C broadcasts."""
    alpha, beta = errors._real("gemm", "alpha", alpha), errors._real("gemm", "beta", beta)
    a = core.transpose(A, 0, 1) if transA else A
    b = core.transpose(B, 0, 1) if transB else B
    y = core.matmul(a, b)
    if alpha != 1.0:
        y = core.mul_scalar(y, alpha)
    if C is not None:
        y = core.add(y, C if beta == 1.0 else core.mul_scalar(C, beta))
    return y


def cross_entropy(y, t):
    """SINGA's cross_entropy: -sum(t * log(y)) / N for probabilities y (N, C) (a softmax's output)
    and targets t of the same shape; shape (1,) (Note [Loss shape])."""
    y, t = errors._tensor("cross_entropy", "y", y), errors._tensor("cross_entropy", "t", t)
    if y.ndim != 2 or y.shape != t.shape:
        raise errors.ShapeError(f"[cross_entropy] expects probabilities (N, C) and targets of the same shape, got "
                                f"{y.describe()} and {t.describe()}")
    total = core.sum(core.mul(t, core.log(y)), (), False)
    return _loss(core.div_scalar(core.neg(total), float(y.shape[0])))


def binary_cross_entropy(x, t, eps=1e-4):
    """SINGA's binary_cross_entropy: -sum(t log(x + eps) + (1 - t) log(1 - x + eps)) / N for
    probabilities x (N, ...) (a sigmoid's output) and targets t of the same shape, N = x.shape[0];
    eps keeps log finite at 0 and 1 as SINGA's does. Shape (1,) (Note [Loss shape])."""
    x, t = errors._tensor("binary_cross_entropy", "x", x), errors._tensor("binary_cross_entropy", "t", t)
    eps = errors._real("binary_cross_entropy", "eps", eps, finite=True)
    if x.ndim < 1 or x.shape != t.shape:
        raise errors.ShapeError(f"[binary_cross_entropy] expects probabilities (N, ...) and targets of the same "
                                f"shape, got {x.describe()} and {t.describe()}")
    pos = core.mul(t, core.log(core.add_scalar(x, eps)))
    neg = core.mul(core.rsub_scalar(t, 1.0), core.log(core.rsub_scalar(x, 1.0 + eps)))
    total = core.sum(core.add(pos, neg), (), False)
    return _loss(core.div_scalar(core.neg(total), float(x.shape[0])))


def nonzero(x):
    """ONNX's NonZero: the indices of the nonzero elements, int64 (rank, count). Its size depends
    on the values, so it reads them on the host (a loom.GraphError inside a capture)."""
    from .tensor import from_numpy
    x = errors._tensor("nonzero", "x", x)
    return from_numpy(np.array(np.nonzero(x.to_numpy()), dtype=np.int64).reshape(x.ndim, -1), x.device)


def scatter_elements(x, indices, updates, axis=0):
    """ONNX's ScatterElements: a copy of x with updates written at indices along axis (Note
    [Element scatter and gather], src/core/ops/scatter.cc). A device op: it runs inside a
    capture, and its gradient reaches x (zero where overwritten) and updates. indices and
    updates may be arrays (copied to x's device)."""
    from .tensor import from_numpy
    x = errors._tensor("scatter_elements", "x", x)
    axis = errors._whole("scatter_elements", "axis", axis, *errors._INT64)  # its range: the op's check
    if not isinstance(indices, Tensor):
        indices = from_numpy(errors._array("scatter_elements", "indices", indices, np.int64), x.device)
    if not isinstance(updates, Tensor):
        updates = from_numpy(errors._array("scatter_elements", "updates", updates, np.dtype(x.dtype)), x.device)
    return core.call_op("scatter_elements", [x, indices, updates], {"axis": axis})[0]


_F32 = core.dtype_from_name("float32")


def _mse_broadcast(x, t):
    """SINGA's MeanSquareError(t)(x): the target broadcast to x's shape (mse_loss wants equal shapes)."""
    if isinstance(t, Tensor) and tuple(t.shape) != tuple(x.shape):
        t = core.broadcast_to(t, tuple(x.shape))
    return mse_loss(x, t)


# ---- SINGA's class forms of the functions: F(*attributes)(*inputs) is the tuple
# (f(*inputs, *attributes),); loom's autograd differentiates them as it does the functions ----

class _FunctionOperator(Operator):
    _fn = None

    def __init__(self, *attrs, **kwattrs):
        super().__init__()
        self._attrs, self._kwattrs = attrs, kwattrs

    def __call__(self, *xs):
        ys = type(self)._fn(*xs, *self._attrs, **self._kwattrs)
        ys = tuple(ys) if isinstance(ys, (tuple, list)) else (ys,)
        self.src = list(xs)
        for y in ys:
            y.creator = self
        return ys

    def forward(self, *xs):
        return self(*xs)

    def replay(self, tensor_of):
        """The function again, on tensor_of(each input's record) (Note [Exporting eager outputs])."""
        return type(self)._fn(*[tensor_of(_creators.Arg(x)) for x in self.src], *self._attrs, **self._kwattrs)

    def backward(self, *dys):
        raise errors.GraphError(f"[{self.name}] loom's autograd differentiates {self.name} itself: call "
                                "autograd.backward on the loss")


def _add_bias_axis(x, b, axis=0):
    return core.add_bias(x, b) if axis == 0 else core.add(x, core.reshape(b, (-1, 1)))


def _concat(*args):
    if args and not isinstance(args[-1], Tensor):
        return core.cat(errors._tensors("Concat", "inputs", args[:-1]), errors._whole("Concat", "axis", args[-1]))
    return core.cat(list(args), 0)


_CLASS_FORMS = {
    "ReLU": relu, "Sigmoid": sigmoid, "Tanh": tanh, "Exp": exp, "Log": log, "Sqrt": sqrt, "Abs": abs, "Erf": erf,
    "Sign": sign, "Ceil": ceil, "Floor": floor, "Round": round, "Rounde": rounde, "Sin": sin, "Cos": cos,
    "Tan": tan, "Asin": asin, "Acos": acos, "Atan": atan, "Sinh": sinh, "Cosh": cosh, "Asinh": asinh,
    "Acosh": acosh, "Atanh": atanh, "Matmul": matmul, "Add": add, "Sub": sub, "Mul": mul, "Div": div, "Pow": pow,
    "Negative": negative, "Reciprocal": reciprocal, "Identity": identity, "SoftPlus": softplus,
    "SoftSign": softsign, "HardSigmoid": hardsigmoid, "Elu": elu, "SeLU": selu, "PRelu": prelu,
    "LeakyRelu": leakyrelu, "Clip": clip, "Equal": equal, "Greater": greater, "Less": less, "And": _and,
    "Or": _or, "Xor": _xor, "Not": _not, "Max": max, "Min": min, "Sum": sum, "Mean": mean, "Reshape": reshape,
    "Transpose": transpose, "Squeeze": squeeze, "Unsqueeze": unsqueeze, "Flatten": flatten, "Tile": tile,
    "Split": split, "Slice": slice, "Gather": gather, "Where": where, "Pad": pad, "UpSample": upsample,
    "DepthToSpace": depth_to_space, "SpaceToDepth": space_to_depth, "GlobalAveragePool": globalaveragepool,
    "Gemm": gemm, "Shape": shape, "ConstantOfShape": constant_of_shape, "NonZero": nonzero,
    "ScatterElements": scatter_elements, "CosSim": cossim, "Cast": cast, "Dropout": dropout,
    "SoftMax": lambda x, axis=1: core.softmax(x, axis),  # SINGA's default axis
    "SoftMaxCrossEntropy": softmax_cross_entropy, "MeanSquareError": _mse_broadcast, "CrossEntropy": cross_entropy,
    "BinaryCrossEntropy": binary_cross_entropy,
    "AddBias": _add_bias_axis, "Concat": _concat,
    "ReduceSum": lambda x, axes=None, keepdims=1: core.sum(x, _axes(axes, "ReduceSum"), bool(keepdims)),
    "ReduceMean": lambda x, axes=None, keepdims=1: core.mean(x, _axes(axes, "ReduceMean"), bool(keepdims)),
    "OneHot": lambda idx, axis, depth, values=(0.0, 1.0): onehot(axis, idx, depth, values),
}
for _name, _fn in _CLASS_FORMS.items():
    globals()[_name] = type(_name, (_FunctionOperator,), {
        "_fn": staticmethod(_fn), "__module__": __name__,
        "__doc__": f"SINGA's class form: {_name}(*attributes)(*inputs) == ({getattr(_fn, '__name__', _name)}"
                   "(*inputs, *attributes),)"})
Softmax = globals()["SoftMax"]
del _name, _fn


# ---- SINGA 3.0's layers, which it kept in autograd (autograd.Linear, autograd.RNN, ...): loom's
# layers themselves, looked up on first use (loom.layer imports this module) ----

_LAYER_NAMES = ("Linear", "Conv2d", "SeparableConv2d", "BatchNorm2d", "RNN", "LSTM", "MaxPool2d", "AvgPool2d",
                "Pooling2d")


def __getattr__(name):
    if name in _LAYER_NAMES:
        from . import layer
        return getattr(layer, name)
    raise AttributeError(f"module 'loom.autograd' has no attribute '{name}'")


# ---- SINGA's y.creator on the results of the functions above (Note [Creators of op results]) ----

# Not ops, or not replayable: a creator runs its op again, so a function that draws random numbers
# or reads values on the host gets none. dropout's creator only replays for export (in eval mode,
# the identity); its backward would draw another mask, so it refuses (creators.REPLAY_ONLY).
_singa_ops = __name__.rpartition(".")[0] + ".singa_ops"
_LOGICAL = ("_and", "_or", "_xor", "_not")  # SINGA's underscored names for the logical ops
_NO_CREATOR = {"backward", "gradients", "grad_enabled", "no_grad", "call", "fill", "normal", "uniform", "bernoulli",
               "nonzero", "infer_dependency"}
for _name, _fn in list(globals().items()):
    if ((_name.startswith("_") and _name not in _LOGICAL) or _name in _NO_CREATOR or isinstance(_fn, type) or not callable(_fn)
            or getattr(_fn, "__module__", "") not in (__name__, core.__name__, core._core.__name__, _singa_ops)):
        continue
    globals()[_name] = _creators.with_creator(_name, _fn, sys.modules[__name__])
del _name, _fn
