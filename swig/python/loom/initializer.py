"""loom.initializer: SINGA's parameter initialisers. Each fills a tensor in place from the device's
counter-based generator (so dev.SetRandSeed makes it reproducible) and returns it:

    w = tensor.Tensor((784, 256), dev)
    initializer.he_normal(w)            # N(0, 2 / fan_in)
    initializer.uniform(w, 784, 256)    # SINGA's older form: the fans given explicitly

Fans follow SINGA's layouts: a 2-D tensor is a Linear weight (in, out), so fan_in = shape[0]
and fan_out = shape[1]; a tensor of 3 or more axes is a convolution weight (out, in, k...), so
fan_in = shape[1] * prod(k) and fan_out = shape[0] * prod(k). A 1-D tensor has fan_in =
fan_out = its length. The "normal" initialisers draw from the untruncated normal distribution.

Initialise before a capture: a draw during one is part of the step and would be replayed.
"""
import math

from . import core, errors


def _check(op, t):
    if not isinstance(t, core.Tensor) or not t.defined():
        raise errors.TypeError(f"[initializer.{op}] expects a defined loom Tensor, got {type(t).__name__}")
    if t.dtype not in ("float32", "float64", "float16", "bfloat16"):
        raise errors.DTypeError(f"[initializer.{op}] needs a float tensor, got {t.describe()}")
    if t.device.buffering():
        raise errors.GraphError(f"[initializer.{op}] {t.device.name()} is capturing: initialise parameters "
                                "before the capture (the draw would be replayed every step)")
    return t


def fans(shape):
    """(fan_in, fan_out) of a parameter of `shape` (see the module's docstring)."""
    shape = errors._ints("initializer.fans", "shape", shape)
    if not shape:
        raise errors.ShapeError("[initializer] a scalar has no fans")
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _fans(op, t):
    fan_in, fan_out = fans(_check(op, t).shape)
    if fan_in <= 0 or fan_out <= 0:
        raise errors.ShapeError(f"[initializer.{op}] {t.describe()} has an empty axis: no fans")
    return fan_in, fan_out


def _normal(op, t, std):
    _check(op, t).gaussian(0.0, std)
    return t


def _uniform(op, t, limit):
    _check(op, t).uniform(-limit, limit)
    return t


def he_normal(t):
    """N(0, std = sqrt(2 / fan_in)) (He et al. 2015; SINGA's msra for Linear weights)."""
    return _normal("he_normal", t, math.sqrt(2.0 / _fans("he_normal", t)[0]))


def he_uniform(t):
    """U(-sqrt(6 / fan_in), sqrt(6 / fan_in))."""
    return _uniform("he_uniform", t, math.sqrt(6.0 / _fans("he_uniform", t)[0]))


def glorot_normal(t):
    """N(0, std = sqrt(2 / (fan_in + fan_out))) (Glorot and Bengio 2010)."""
    fan_in, fan_out = _fans("glorot_normal", t)
    return _normal("glorot_normal", t, math.sqrt(2.0 / (fan_in + fan_out)))


def glorot_uniform(t):
    """U(-sqrt(6 / (fan_in + fan_out)), +sqrt(6 / (fan_in + fan_out)))."""
    fan_in, fan_out = _fans("glorot_uniform", t)
    return _uniform("glorot_uniform", t, math.sqrt(6.0 / (fan_in + fan_out)))


xavier_normal = glorot_normal
xavier_uniform = glorot_uniform


def lecun_normal(t):
    """N(0, std = sqrt(1 / fan_in))."""
    return _normal("lecun_normal", t, math.sqrt(1.0 / _fans("lecun_normal", t)[0]))


def lecun_uniform(t):
    """U(-sqrt(3 / fan_in), sqrt(3 / fan_in))."""
    return _uniform("lecun_uniform", t, math.sqrt(3.0 / _fans("lecun_uniform", t)[0]))


def _given_fans(op, fan_in, fan_out):
    for what, v in (("fan_in", fan_in), ("fan_out", fan_out)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise errors.ValueError(f"[initializer.{op}] {what} must be a non-negative int, got {v!r}")
    if fan_in == 0 and fan_out == 0:
        raise errors.ValueError(f"[initializer.{op}] fan_in and fan_out cannot both be 0")
    # SINGA's rule: with both fans their mean is used, with one that one.
    return (fan_in + fan_out) / (2.0 if fan_in and fan_out else 1.0)


def uniform(t, fan_in=0, fan_out=0):
    """SINGA's uniform(t, fan_in, fan_out): U(-sqrt(3 / n), sqrt(3 / n)) where n is the mean of
    the two fans, or the one that is not 0."""
    return _uniform("uniform", t, math.sqrt(3.0 / _given_fans("uniform", fan_in, fan_out)))


def gaussian(t, fan_in=0, fan_out=0):
    """SINGA's gaussian(t, fan_in, fan_out): N(0, std = sqrt(2 / n)), n as in uniform."""
    return _normal("gaussian", t, math.sqrt(2.0 / _given_fans("gaussian", fan_in, fan_out)))


def xavier(t):
    """SINGA's xavier for a matrix: U(+-sqrt(6 / (rows + cols)))."""
    rows, cols = _matrix("xavier", t)
    return _uniform("xavier", t, math.sqrt(6.0 / (rows + cols)))


def glorot(t):
    """SINGA's glorot for a matrix: N(0, std = sqrt(2 / (rows + cols)))."""
    rows, cols = _matrix("glorot", t)
    return _normal("glorot", t, math.sqrt(2.0 / (rows + cols)))


def msra(t):
    """SINGA's msra for a matrix: N(0, std = sqrt(2 / rows))."""
    rows, _ = _matrix("msra", t)
    return _normal("msra", t, math.sqrt(2.0 / rows))


def _matrix(op, t):
    _check(op, t)
    if t.ndim != 2 or t.shape[0] <= 0 or t.shape[1] <= 0:
        raise errors.ShapeError(f"[initializer.{op}] expects a non-empty matrix, got {t.describe()}")
    return t.shape


def eye(t):
    """The identity matrix (a 2-D tensor; ones on the main diagonal when it is not square)."""
    rows, cols = _matrix("eye", t)
    import numpy as np
    t.copy_from_numpy(np.eye(rows, cols, dtype=np.float32 if t.dtype != "float64" else np.float64))
    return t


def constant(t, value=0.0):
    """Every element `value`."""
    _check("constant", t)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise errors.TypeError(f"[initializer.constant] value must be a number, got {type(value).__name__}")
    return t.set_value(float(value))
