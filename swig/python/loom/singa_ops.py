"""loom.singa_ops: SINGA's ONNX-named autograd functions that are spellings of loom ops
(reduce_sum, reduce_mean, expand, pad, depth_to_space, space_to_depth), kept apart from
autograd.py, which exports them under these names with SINGA's y.creator (Note [Creators of op
results])."""
import builtins

import numpy as np

from . import core, errors
from .tensor import Tensor, _axes


def _check(op, x):
    return errors._tensor(op, "x", x)


def reduce_sum(x, axes=None, keepdims=1):
    """ONNX's ReduceSum: the sum over `axes` (all when None), keeping them as size 1 when keepdims."""
    return core.sum(_check("reduce_sum", x), _axes(axes, "reduce_sum"), bool(keepdims))


def reduce_mean(x, axes=None, keepdims=1):
    """ONNX's ReduceMean: the mean over `axes` (all when None), keeping them as size 1 when keepdims."""
    return core.mean(_check("reduce_mean", x), _axes(axes, "reduce_mean"), bool(keepdims))


def expand(x, shape):
    """ONNX's Expand: x broadcast with `shape` (numpy's rule, both ways: a 1 in `shape` keeps x's size)."""
    _check("expand", x)
    shape = errors._ints("expand", "shape", shape)
    try:
        out = np.broadcast_shapes(tuple(x.shape), shape)
    except ValueError:
        raise errors.ShapeError(f"[expand] {x.describe()} does not broadcast with {tuple(shape)}") from None
    return core.broadcast_to(x, out)


def _nchw(op, x):
    if errors._tensor(op, "x", x).ndim != 4:
        raise errors.ShapeError(f"[{op}] expects (N, C, H, W), got {x.describe()}")
    return x.shape


def _pad_indices(mode, n, before, after):
    """The source index of each padded position along an axis of size n: 'reflect' mirrors about
    the edge element, again past the far edge when the pad is longer than the axis (numpy's
    reflect: period 2 (n - 1)), 'edge' repeats it."""
    i = np.arange(-before, n + after)
    if mode == "edge" or n == 1:
        return np.clip(i, 0, n - 1)
    r = np.mod(i, 2 * (n - 1))
    return np.where(r < n, r, 2 * (n - 1) - r)


def pad(x, mode="constant", pads=None, constant=0.0):
    """ONNX's Pad: pads [b1, ..., bn, e1, ..., en] (before and after each axis) with `constant`,
    or mode 'reflect' (mirrored about the edge) or 'edge' (the edge repeated), as ONNX's."""
    if mode not in ("constant", "reflect", "edge"):
        raise errors.ValueError(f"[pad] mode must be 'constant', 'reflect' or 'edge', got {mode!r}")
    _check("pad", x)
    pads = list(errors._ints("pad", "pads", pads or []))
    constant = errors._real("pad", "constant", constant)
    if len(pads) != 2 * x.ndim or builtins.min(pads, default=0) < 0:
        raise errors.ValueError(f"[pad] pads {pads} must be 2 x {x.ndim} non-negative sizes for {x.describe()}")
    for axis in range(x.ndim):
        before, after = pads[axis], pads[axis + x.ndim]
        if mode != "constant":
            if before or after:
                x = _gather(x, axis, _pad_indices(mode, x.shape[axis], before, after))
            continue
        parts = []
        for n in (before, None, after):
            if n is None:
                parts.append(x)
            elif n:
                s = list(x.shape)
                s[axis] = n
                parts.append(core.full(tuple(s), constant, core._core.Tensor_dtype(x), x.device))
        x = core.cat(parts, axis) if len(parts) > 1 else x
    return x


def depth_to_space(x, blocksize, mode="DCR"):
    """(N, C, H, W) -> (N, C / b^2, H b, W b); mode DCR (depth, column, row) or CRD, as ONNX."""
    n, c, h, w = _nchw("depth_to_space", x)
    b = errors._whole("depth_to_space", "blocksize", blocksize, lo=1)
    if c % (b * b):
        raise errors.ShapeError(f"[depth_to_space] {c} channels of {x.describe()} do not divide by {b}^2")
    if mode == "DCR":
        y = core.permute(core.reshape(x, (n, b, b, c // (b * b), h, w)), (0, 3, 4, 1, 5, 2))
    elif mode == "CRD":
        y = core.permute(core.reshape(x, (n, c // (b * b), b, b, h, w)), (0, 1, 4, 2, 5, 3))
    else:
        raise errors.ValueError(f"[depth_to_space] mode must be 'DCR' or 'CRD', got {mode!r}")
    return core.reshape(y, (n, c // (b * b), h * b, w * b))


def space_to_depth(x, blocksize, mode="DCR"):
    """(N, C, H, W) -> (N, C b^2, H / b, W / b), the inverse of depth_to_space in the same mode."""
    n, c, h, w = _nchw("space_to_depth", x)
    b = errors._whole("space_to_depth", "blocksize", blocksize, lo=1)
    if h % b or w % b:
        raise errors.ShapeError(f"[space_to_depth] {x.describe()}'s height and width do not divide by {b}")
    if mode not in ("DCR", "CRD"):
        raise errors.ValueError(f"[space_to_depth] mode must be 'DCR' or 'CRD', got {mode!r}")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    y = core.permute(core.reshape(x, (n, c, h // b, b, w // b, b)), perm)
    return core.reshape(y, (n, c * b * b, h // b, w // b))


def _gather(x, axis, indices):
    from .autograd import gather  # autograd imports this module
    return gather(x, axis, indices)
