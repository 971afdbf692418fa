"""loom.initializer (issue 17 item 5): SINGA's initialiser names, each checked against its
formula: the fans of Linear (in, out) and convolution (out, in, kh, kw) weights, and the spread
of the values drawn (a large tensor's sample standard deviation or bound)."""
import math

import numpy as np
import pytest

import loom
from loom import initializer, tensor

LINEAR = (300, 200)      # (in, out): fan_in 300, fan_out 200
CONV = (48, 16, 5, 3)    # (out, in, kh, kw): fan_in 16 * 15 = 240, fan_out 48 * 15 = 720
FANS = {LINEAR: (300, 200), CONV: (240, 720)}


@pytest.mark.parametrize("shape, fans", [(LINEAR, FANS[LINEAR]), (CONV, FANS[CONV]), ((7,), (7, 7)),
                                         ((4, 6, 2), (12, 8))])
def test_fans(shape, fans):
    assert initializer.fans(shape) == fans


def _normal_std(fan_in, fan_out):
    return {"he_normal": math.sqrt(2 / fan_in), "glorot_normal": math.sqrt(2 / (fan_in + fan_out)),
            "xavier_normal": math.sqrt(2 / (fan_in + fan_out)), "lecun_normal": math.sqrt(1 / fan_in)}


def _uniform_bound(fan_in, fan_out):
    return {"he_uniform": math.sqrt(6 / fan_in), "glorot_uniform": math.sqrt(6 / (fan_in + fan_out)),
            "xavier_uniform": math.sqrt(6 / (fan_in + fan_out)), "lecun_uniform": math.sqrt(3 / fan_in)}


@pytest.mark.parametrize("shape", [LINEAR, CONV])
@pytest.mark.parametrize("name", ["he_normal", "glorot_normal", "xavier_normal", "lecun_normal"])
def test_normal_initialisers(dev, shape, name):
    t = tensor.Tensor(shape, dev)
    assert getattr(initializer, name)(t) is t
    v = t.to_numpy()
    want = _normal_std(*FANS[shape])[name]
    assert v.std() == pytest.approx(want, rel=0.03)
    assert abs(v.mean()) < 0.03 * want
    assert np.abs(v).max() > 3 * want  # untruncated


@pytest.mark.parametrize("shape", [LINEAR, CONV])
@pytest.mark.parametrize("name", ["he_uniform", "glorot_uniform", "xavier_uniform", "lecun_uniform"])
def test_uniform_initialisers(dev, shape, name):
    t = tensor.Tensor(shape, dev)
    getattr(initializer, name)(t)
    v = t.to_numpy()
    bound = _uniform_bound(*FANS[shape])[name]
    assert np.abs(v).max() <= bound
    assert np.abs(v).max() > 0.99 * bound
    assert v.std() == pytest.approx(bound / math.sqrt(3), rel=0.03)


@pytest.mark.parametrize("fan_in, fan_out, n", [(300, 200, 250.0), (300, 0, 300.0), (0, 200, 200.0)])
def test_singa_uniform_and_gaussian_with_given_fans(dev, fan_in, fan_out, n):
    t = tensor.Tensor(LINEAR, dev)
    initializer.uniform(t, fan_in, fan_out)
    v = t.to_numpy()
    assert np.abs(v).max() <= math.sqrt(3 / n) and np.abs(v).max() > 0.99 * math.sqrt(3 / n)
    initializer.gaussian(t, fan_in, fan_out)
    assert t.to_numpy().std() == pytest.approx(math.sqrt(2 / n), rel=0.03)


def test_matrix_initialisers(dev):
    t = tensor.Tensor((400, 100), dev)
    initializer.xavier(t)
    assert np.abs(t.to_numpy()).max() <= math.sqrt(6 / 500)
    assert t.to_numpy().std() == pytest.approx(math.sqrt(6 / 500) / math.sqrt(3), rel=0.03)
    initializer.glorot(t)
    assert t.to_numpy().std() == pytest.approx(math.sqrt(2 / 500), rel=0.03)
    initializer.msra(t)
    assert t.to_numpy().std() == pytest.approx(math.sqrt(2 / 400), rel=0.03)
    e = tensor.Tensor((3, 4), dev, "float64")
    initializer.eye(e)
    np.testing.assert_array_equal(e.to_numpy(), np.eye(3, 4))
    initializer.constant(e, 2.5)
    np.testing.assert_array_equal(e.to_numpy(), 2.5)


def test_seeded_draws_repeat(dev):
    a, b = tensor.Tensor(LINEAR, dev), tensor.Tensor(LINEAR, dev)
    dev.SetRandSeed(11)
    initializer.he_normal(a)
    dev.SetRandSeed(11)
    initializer.he_normal(b)
    np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())


def test_errors_are_typed(dev):
    with pytest.raises(loom.TypeError, match=r"\[initializer.he_normal\] expects a defined loom Tensor"):
        initializer.he_normal(np.zeros((3, 3)))
    with pytest.raises(loom.DTypeError, match=r"\[initializer.glorot_uniform\] needs a float tensor"):
        initializer.glorot_uniform(tensor.Tensor((3, 3), dev, "int32"))
    with pytest.raises(loom.ShapeError, match=r"\[initializer.he_uniform\] .* has an empty axis"):
        initializer.he_uniform(tensor.Tensor((0, 3), dev))
    with pytest.raises(loom.ShapeError, match=r"\[initializer.xavier\] expects a non-empty matrix"):
        initializer.xavier(tensor.Tensor(CONV, dev))
    with pytest.raises(loom.ValueError, match=r"\[initializer.uniform\] fan_in and fan_out cannot both be 0"):
        initializer.uniform(tensor.Tensor(LINEAR, dev))
    with pytest.raises(loom.ValueError, match=r"\[initializer.gaussian\] fan_in must be a non-negative int"):
        initializer.gaussian(tensor.Tensor(LINEAR, dev), -1, 3)
    t = tensor.Tensor(LINEAR, dev)
    dev.EnableGraph(True)
    try:
        with pytest.raises(loom.GraphError, match=r"\[initializer.lecun_normal\] .* is capturing"):
            initializer.lecun_normal(t)
    finally:
        dev.EnableGraph(False)
