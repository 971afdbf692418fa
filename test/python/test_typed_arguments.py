"""Typed argument conversions (Note [Typed argument conversions] in swig/python/loom/errors.py):
the converters themselves, and a sample of the public functions that used to let Python's own
errors out for a bad argument (float('x'), int(None), iter(1.5), 'str'.shape, an int over int64,
an axis past the end). Each call must raise the loom error named, whose message names the
function, the argument and the value. tools/probe.py --only api sweeps every public function."""
import math

import numpy as np
import pytest

import loom
from loom import autograd, clip, device, errors, initializer, io, layer, opt, tensor

NAN = math.nan


@pytest.fixture(scope="module")
def dev():
    return device.create_cpu_device()


def _t(dev, *shape, dtype=np.float32):
    return tensor.from_numpy(np.full(shape or (2, 3), 0.5, dtype), dev)


# ---- the converters ----

def test_real_takes_numbers_and_refuses_the_rest():
    assert errors._real("f", "a", 2) == 2.0 and type(errors._real("f", "a", 2)) is float
    assert errors._real("f", "a", np.float32(0.5)) == 0.5
    assert math.isnan(errors._real("f", "a", NAN))  # NaN is a value unless finite or a range is asked
    assert errors._real("f", "a", math.inf, lo=-math.inf, hi=math.inf) == math.inf
    for v in ("x", None, [], True, np.zeros(2)):
        with pytest.raises(loom.TypeError, match=r"^\[f\] a must be a number, got "):
            errors._real("f", "a", v)
    for v in (NAN, math.inf, -math.inf):
        with pytest.raises(loom.ValueError, match=r"\[f\] a must be a finite number, got"):
            errors._real("f", "a", v, finite=True)
    with pytest.raises(loom.ValueError, match=r"\[f\] a must be a number in \[0, 1\], got 1.5"):
        errors._real("f", "a", 1.5, lo=0, hi=1)
    with pytest.raises(loom.ValueError, match=r"\[f\] a must be a number >= 0, got nan"):
        errors._real("f", "a", NAN, lo=0)
    with pytest.raises(loom.ValueError, match=r"\[f\] a must be a number a double can hold, got int"):
        errors._real("f", "a", 10 ** 400)


def test_whole_takes_ints_and_refuses_the_rest():
    assert errors._whole("f", "n", np.int64(3)) == 3 and type(errors._whole("f", "n", np.int64(3))) is int
    for v in ("8", None, 2.0, NAN, True, []):
        with pytest.raises(loom.TypeError, match=r"^\[f\] n must be an int, got "):
            errors._whole("f", "n", v)
    with pytest.raises(loom.ValueError, match=r"\[f\] n must be an int >= 1, got 0"):
        errors._whole("f", "n", 0, lo=1)
    with pytest.raises(loom.ValueError, match=r"\[f\] n must be an int in "):
        errors._whole("f", "n", 2 ** 70, *errors._INT64)


def test_ints_takes_sequences_of_ints():
    assert errors._ints("f", "shape", [2, np.int32(3)]) == (2, 3)
    assert errors._ints("f", "shape", range(3)) == (0, 1, 2)
    assert errors._ints("f", "shape", np.array([4, 5])) == (4, 5)
    assert errors._ints("f", "axis", 1, one=True) == (1,)
    for v in ("x", None, 1.5, 3, b"ab"):
        with pytest.raises(loom.TypeError, match=r"^\[f\] shape must be a sequence of ints, got "):
            errors._ints("f", "shape", v)
    with pytest.raises(loom.TypeError, match=r"^\[f\] axis must be an int or a sequence of ints, got str 'x'"):
        errors._ints("f", "axis", "x", one=True)
    with pytest.raises(loom.TypeError, match=r"shape must be a sequence of ints, got list \[2, 1.5\] \(holding float 1.5\)"):
        errors._ints("f", "shape", [2, 1.5])
    with pytest.raises(loom.ValueError, match=r"\[f\] each of shape must be an int >= 0, got -1"):
        errors._ints("f", "shape", [2, -1], lo=0)


def test_tensor_tensors_and_array(dev):
    x = _t(dev)
    assert errors._tensor("f", "x", x) is x
    assert errors._tensors("f", "xs", (x, x)) == [x, x]
    with pytest.raises(loom.TypeError, match=r"^\[f\] x must be a loom Tensor, got str 'x'$"):
        errors._tensor("f", "x", "x")
    with pytest.raises(loom.TypeError, match=r"^\[f\] x must be a loom Tensor, got NoneType None$"):
        errors._tensor("f", "x", None)
    with pytest.raises(loom.TypeError, match=r"^\[f\] xs must be a list of loom Tensors, got float 1.5$"):
        errors._tensors("f", "xs", 1.5)
    with pytest.raises(loom.TypeError, match=r"^\[f\] xs\[1\] must be a loom Tensor, got str 'x'$"):
        errors._tensors("f", "xs", [x, "x"])
    assert errors._array("f", "a", [[1, 2]], np.int64).dtype == np.int64
    for v in ("x", None, [[1], [2, 3]], ["a"]):
        with pytest.raises(loom.TypeError, match=r"^\[f\] a must be an array of "):
            errors._array("f", "a", v, np.int64)


def test_a_long_value_is_shortened_in_the_message():
    with pytest.raises(loom.TypeError) as e:
        errors._real("f", "a", "y" * 500)
    assert len(str(e.value)) < 120 and str(e.value).endswith("...")


# ---- call sites: each raised a Python built-in error before ----

def _x4(dev):
    return _t(dev, 1, 1, 4, 4)


CALLS = [  # (name, call(dev), loom error, message)
    ("tensor.full value", lambda d: tensor.full((2,), "x"), loom.TypeError, "[tensor.full] value must be a number, got str 'x'"),
    ("tensor.concatenate tensors", lambda d: tensor.concatenate(None, 0), loom.TypeError,
     "[tensor.concatenate] tensors must be a list of loom Tensors, got NoneType None"),
    ("tensor.concatenate axis", lambda d: tensor.concatenate([_t(d), _t(d)], NAN), loom.TypeError,
     "[tensor.concatenate] axis must be an int, got float nan"),
    ("tensor.to_numpy", lambda d: tensor.to_numpy("x"), loom.TypeError, "[tensor.to_numpy] t must be a loom Tensor, got str 'x'"),
    ("tensor.average axis", lambda d: tensor.average(_t(d), 1.5), loom.TypeError,
     "[tensor.average] axis must be an int or a sequence of ints, got float 1.5"),
    ("tensor.axpy alpha", lambda d: tensor.axpy(None, _t(d), _t(d)), loom.TypeError,
     "[tensor.axpy] alpha must be a number, got NoneType None"),
    ("tensor.lt x", lambda d: tensor.lt(_t(d), "x"), loom.TypeError, "[tensor.lt] x must be a number, got str 'x'"),
    ("tensor.transpose axes", lambda d: tensor.transpose(_t(d), "x"), loom.TypeError,
     "[tensor.transpose] axes must be a sequence of ints, got str 'x'"),
    ("autograd.flatten x", lambda d: autograd.flatten("x"), loom.TypeError, "[flatten] x must be a loom Tensor, got str 'x'"),
    ("autograd.transpose perm", lambda d: autograd.transpose(_t(d), "x"), loom.TypeError,
     "[transpose] perm must be a sequence of ints, got str 'x'"),
    ("autograd.tile repeats", lambda d: autograd.tile(_t(d), None), loom.TypeError,
     "[tile] repeats must be an int or a sequence of ints, got NoneType None"),
    ("autograd.split axis", lambda d: autograd.split(_t(d), 5, [1, 1]), loom.ValueError,
     "[split] axis must be an int in [-2, 1], got 5"),
    ("autograd.scatter_elements axis", lambda d: autograd.scatter_elements(_t(d), np.zeros((1, 3), np.int64),
                                                                           np.ones((1, 3), np.float32), 2 ** 70),
     loom.ValueError, "[scatter_elements] axis must be an int in"),
    ("autograd.scatter_elements indices", lambda d: autograd.scatter_elements(_t(d), "x", np.ones((1, 3), np.float32)),
     loom.TypeError, "[scatter_elements] indices must be an array of numbers, got str 'x'"),
    ("autograd.onehot depth", lambda d: autograd.onehot(-1, [0, 1], "x"), loom.TypeError,
     "[onehot] depth must be an int, got str 'x'"),
    ("autograd.onehot huge depth", lambda d: autograd.onehot(-1, [0, 1], 2 ** 70), loom.ValueError,
     "[onehot] depth must be an int in [1, 2147483647], got 1180591620717411303424"),
    ("autograd.onehot table", lambda d: autograd.onehot(-1, [0, 1], 2 ** 30), loom.DeviceError,
     "[onehot] out of memory for the (1073741824, 1073741824) table"),
    ("autograd.onehot values", lambda d: autograd.onehot(-1, [0, 1], 3, "x"), loom.TypeError,
     "[onehot] values must be a pair (off, on) of numbers, got str 'x'"),
    ("autograd.leakyrelu a", lambda d: autograd.leakyrelu(_t(d), "x"), loom.TypeError,
     "[leakyrelu] a must be a number, got str 'x'"),
    ("autograd.dropout ratio", lambda d: autograd.dropout(_t(d), NAN), loom.ValueError,
     "[dropout] ratio must be a finite number, got nan"),
    ("autograd.clip min", lambda d: autograd.clip(_t(d), NAN), loom.ValueError, "[clip] min and max must not be NaN, got nan and None"),
    ("autograd.attention scale", lambda d: autograd.attention(_t(d, 1, 2, 4), _t(d, 1, 2, 4), _t(d, 1, 2, 4), False, "x"),
     loom.TypeError, "[attention] scale must be a number, got str 'x'"),
    ("autograd.max_pool_2d kernel_size", lambda d: autograd.max_pool_2d(_x4(d), None), loom.TypeError,
     "[max_pool_2d] kernel_size must be a sequence of ints, got NoneType None"),
    ("autograd.space_to_depth blocksize", lambda d: autograd.space_to_depth(_x4(d), 0), loom.ValueError,
     "[space_to_depth] blocksize must be an int >= 1, got 0"),
    ("autograd.gather indices", lambda d: autograd.gather(_t(d), 1, ["x"]), loom.TypeError,
     "[gather] indices must be ints, got list ['x']"),
    ("autograd.identity x", lambda d: autograd.identity("x"), loom.TypeError, "[identity] x must be a loom Tensor, got str"),
    ("autograd.unsqueeze axis", lambda d: autograd.unsqueeze(_t(d), None), loom.TypeError,
     "[unsqueeze] axis must be an int or a sequence of ints, got NoneType None"),
    ("autograd.cat xs", lambda d: autograd.cat(1.5), loom.TypeError, "[cat] xs must be a list of loom Tensors, got float 1.5"),
    ("autograd.binary_cross_entropy eps", lambda d: autograd.binary_cross_entropy(_t(d), _t(d), "x"), loom.TypeError,
     "[binary_cross_entropy] eps must be a number, got str 'x'"),
    ("layer.Dropout ratio", lambda d: layer.Dropout("x"), loom.TypeError, "[Dropout] ratio must be a number, got str 'x'"),
    ("layer.Flatten axis", lambda d: layer.Flatten(axis="x"), loom.TypeError, "[Flatten] axis must be an int, got str 'x'"),
    ("layer.Flatten huge axis", lambda d: layer.Flatten(axis=2 ** 70), loom.ValueError, "[Flatten] axis must be an int in"),
    ("layer.Gemm bias_shape", lambda d: layer.Gemm(2, bias_shape=["x"]), loom.TypeError,
     "[Gemm] bias_shape must be a sequence of ints, got list ['x']"),
    ("layer.Conv2d huge", lambda d: layer.Conv2d(2 ** 70, 3), loom.ValueError, "[Conv2d] size 1180591620717411303424 is beyond int64"),
    ("layer.Cat forward", lambda d: layer.Cat(1)(None), loom.TypeError, "[Cat] xs must be a list of loom Tensors, got NoneType"),
    ("layer.LeakyReLU slope", lambda d: layer.LeakyReLU(NAN), loom.ValueError, "[LeakyReLU] slope must be a finite number"),
    ("initializer.he_normal t", lambda d: initializer.he_normal("x"), loom.TypeError,
     "[initializer.he_normal] expects a defined loom Tensor, got str"),
    ("initializer.fans shape", lambda d: initializer.fans(None), loom.TypeError,
     "[initializer.fans] shape must be a sequence of ints, got NoneType None"),
    ("opt.SGD dampening", lambda d: opt.SGD(dampening=NAN), loom.ValueError, "[SGD] dampening must be a finite number, got nan"),
    ("opt.Adam decay_on", lambda d: opt.Adam(decay_on=[]), loom.ValueError, "[Adam] decay_on must be 'all' or 'matrices'"),
    ("clip.global_grad_norm grads", lambda d: clip.global_grad_norm(None), loom.TypeError,
     "[clip.global_grad_norm] grads must be a list of loom Tensors, got NoneType None"),
    ("io.decode_checkpoint data", lambda d: io.decode_checkpoint("x"), loom.TypeError,
     "[decode_checkpoint] data must be bytes, got str 'x'"),
    ("io.save_checkpoint tensors", lambda d: io.save_checkpoint("unused.ckpt", 1.5), loom.TypeError,
     "[io] tensors must be a dict name -> Tensor or (name, Tensor) pairs, got float 1.5"),
]


@pytest.mark.parametrize("name,call,kind,message", CALLS, ids=[c[0] for c in CALLS])
def test_a_bad_argument_is_a_typed_loom_error_naming_it(dev, name, call, kind, message):
    with pytest.raises(loom.Error) as e:
        call(dev)
    assert type(e.value) is kind, (name, type(e.value), str(e.value))
    assert message in str(e.value), (name, str(e.value))


def test_the_converted_values_are_used(dev):
    """The converters hand on what they checked: numpy scalars and sequences work as before."""
    x = _t(dev)
    np.testing.assert_allclose(autograd.leakyrelu(autograd.mul_scalar(x, -1.0), np.float32(0.5)).to_numpy(),
                               np.full((2, 3), -0.25))
    assert autograd.tile(x, np.array([2, 1])).shape == (4, 3)
    assert autograd.transpose(x, [np.int64(1), 0]).shape == (3, 2)
    assert [p.shape for p in autograd.split(x, -1, (1, 2))] == [(2, 1), (2, 2)]
    np.testing.assert_allclose(autograd.onehot(-1, [0, 2], np.int64(3), (1, 5.0)).to_numpy(),
                               [[5, 1, 1], [1, 1, 5]])
    assert tensor.concatenate((x, x), np.int32(1)).shape == (2, 6)
