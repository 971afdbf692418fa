"""loom.singa_ops: SINGA's ONNX-named autograd functions that are spellings of loom ops
(reduce_sum, reduce_mean, expand), kept apart from autograd.py, which exports them under these
names with SINGA's y.creator (Note [Creators of op results])."""
import numpy as np

from . import core, errors
from .tensor import Tensor, _axes


def _check(op, x):
    if not isinstance(x, Tensor):
        raise errors.TypeError(f"[{op}] expects a loom Tensor, got {type(x).__name__}")
    return x


def reduce_sum(x, axes=None, keepdims=1):
    """ONNX's ReduceSum: the sum over `axes` (all when None), keeping them as size 1 when keepdims."""
    return core.sum(_check("reduce_sum", x), _axes(axes), bool(keepdims))


def reduce_mean(x, axes=None, keepdims=1):
    """ONNX's ReduceMean: the mean over `axes` (all when None), keeping them as size 1 when keepdims."""
    return core.mean(_check("reduce_mean", x), _axes(axes), bool(keepdims))


def expand(x, shape):
    """ONNX's Expand: x broadcast with `shape` (numpy's rule, both ways: a 1 in `shape` keeps x's size)."""
    _check("expand", x)
    try:
        out = np.broadcast_shapes(tuple(x.shape), tuple(int(d) for d in shape))
    except ValueError:
        raise errors.ShapeError(f"[expand] {x.describe()} does not broadcast with {tuple(shape)}") from None
    return core.broadcast_to(x, out)
