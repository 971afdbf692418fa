"""SINGA's Tensor surface (issue 17 item 1): to_device / to_host, element-wise comparisons,
__getitem__, as_type, clone, copy_data, in-place random fills, repeat, and the module functions
(average, sum, transpose, sizeof, copy_data_to_from, tensordot, einsum). Numbers are checked
against numpy; bad input raises typed loom errors naming the function."""
import numpy as np
import pytest

import loom
from loom import autograd, tensor
from loom.tensor import Tensor

RNG = np.random.default_rng(11)


def t_(a, dev):
    return tensor.from_numpy(np.asarray(a), dev)


# ---- to_device / to_host ----

def test_to_device_and_to_host_are_in_place(dev):
    a = RNG.normal(size=(2, 3)).astype(np.float32)
    t = t_(a, dev)
    t.requires_grad = True
    t.name = "w"
    assert t.to_device(dev) is t  # the same device: nothing to do
    assert t.to_host() is t
    np.testing.assert_array_equal(t.to_numpy(), a)
    assert t.requires_grad and t.name == "w" and t.device == dev


def test_to_device_moves_between_devices():
    if not loom.device.cuda_available():
        pytest.skip("no GPU: the cross-device move is checked on the CPU path only")
    gpu = loom.device.create_cuda_device(0)
    a = RNG.normal(size=(4,)).astype(np.float32)
    t = t_(a, loom.device.create_cpu_device())
    t.to_device(gpu)
    assert t.device == gpu
    np.testing.assert_array_equal(t.to_numpy(), a)
    t.to_host()
    assert t.device == loom.device.create_cpu_device()


def test_rebind_keeps_other_handles(dev):
    # to_device rebinds this handle only: an alias made before keeps the old memory
    t = t_(np.arange(3, dtype=np.float32), dev)
    moved = t_(np.zeros(3, np.float32), dev)
    alias = t.reshape(3)
    t._rebind(moved)
    np.testing.assert_array_equal(t.to_numpy(), [0, 0, 0])
    np.testing.assert_array_equal(alias.to_numpy(), [0, 1, 2])


def test_to_device_errors(dev):
    t = tensor.ones((2,), dev)
    with pytest.raises(loom.TypeError, match=r"\[tensor\] device"):
        t.to_device("cuda")
    with pytest.raises(loom.ValueError, match="undefined"):
        t._rebind(Tensor())


# ---- comparisons ----

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8])
def test_comparisons_elementwise(dev, dtype):
    a = RNG.integers(0, 4, (3, 4)).astype(dtype)
    b = RNG.integers(0, 4, (4,)).astype(dtype)
    ta, tb = t_(a, dev), t_(b, dev)
    for got, want in ((ta < tb, a < b), (ta > tb, a > b), (ta <= tb, a <= b), (ta >= tb, a >= b),
                      (ta == tb, a == b), (ta != tb, a != b), (ta < 2, a < 2), (ta >= 2, a >= 2),
                      (2 > ta, 2 > a), (ta <= b, a <= b)):
        assert got.dtype == "bool"
        np.testing.assert_array_equal(got.to_numpy(), want)
    # a number the dtype cannot hold is compared exactly, in float64
    np.testing.assert_array_equal((ta < 1.5).to_numpy(), a < 1.5)
    np.testing.assert_array_equal((ta > -0.5).to_numpy(), a > -0.5)
    np.testing.assert_array_equal((ta <= 300).to_numpy(), a <= 300)
    np.testing.assert_array_equal(tensor.lt(ta, tb).to_numpy(), a < b)
    np.testing.assert_array_equal(tensor.ge(ta, 1).to_numpy(), a >= 1)


def test_comparison_nan_and_errors(dev):
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    t = t_(a, dev)
    np.testing.assert_array_equal((t < 1.5).to_numpy(), a < 1.5)
    np.testing.assert_array_equal((t >= 1.0).to_numpy(), a >= 1.0)
    with pytest.raises(loom.ShapeError, match=r"\[less\]"):
        t < tensor.ones((2,), dev)
    with pytest.raises(loom.DTypeError, match=r"\[greater\] dtypes differ"):
        t > tensor.ones((3,), dev, "float64")
    with pytest.raises(TypeError):
        t < "x"


def test_eq_is_elementwise_and_hash_is_identity(dev):
    a, b = tensor.ones((2,), dev), tensor.ones((2,), dev)
    assert (a == b).to_numpy().all()
    d = {a: "a", b: "b"}  # still hashable by identity
    assert d[a] == "a" and d[b] == "b" and len(d) == 2
    assert hash(a) != hash(b)


# ---- indexing ----

def test_getitem_basic_indexing(dev):
    a = RNG.normal(size=(3, 4, 5)).astype(np.float32)
    t = t_(a, dev)
    for key in [1, -1, (1, 2), slice(1, 3), (slice(None), 2), (Ellipsis, 1), (0, Ellipsis, slice(1, 4)),
                (None, 1), (slice(None), None, slice(2, 10)), (1, 2, 3), slice(5, 2), (slice(-2, None), -3),
                slice(None, None, 2), slice(None, None, -1), (slice(None), slice(4, 0, -2)), (Ellipsis, slice(1, 5, 3)),
                [2, 0, 2], (slice(None), [3, -1, 0]), (1, [0, 3], slice(None, None, 2)), (1, slice(None), [0, 2]), ([0, 2], slice(None), 1),
                (slice(None), 1, [0, 2]), (1, None, [3, 1]), (Ellipsis, []),
                np.array([1, 1]), (slice(None), None, np.array([3, 0], np.int64))]:
        got = t[key]
        np.testing.assert_array_equal(got.to_numpy(), a[key], err_msg=repr(key))
        assert got.shape == a[key].shape
        # an int tensor takes the concatenating path, the float one the gathering one
        ai = (a * 10).astype(np.int32)
        np.testing.assert_array_equal(t_(ai, dev)[key].to_numpy(), ai[key], err_msg=repr(key))


def test_getitem_is_differentiable(dev):
    a = RNG.normal(size=(3, 4)).astype(np.float32)
    t = t_(a, dev)
    t.requires_grad = True
    loss = autograd.sum(t[1, 1:3] * 2.0)
    ((_, grad),) = autograd.backward(loss)
    want = np.zeros_like(a)
    want[1, 1:3] = 2.0
    np.testing.assert_array_equal(grad.to_numpy(), want)
    # a gather: repeated indices add up, as numpy's np.add.at does
    loss = autograd.sum(t[:, [3, 0, 3]][::2] * 3.0)
    ((_, grad),) = autograd.backward(loss)
    want = np.zeros_like(a)
    np.add.at(want, (slice(None, None, 2), [3, 0, 3]), 3.0)
    np.testing.assert_array_equal(grad.to_numpy(), want)


def test_getitem_errors(dev):
    t = tensor.ones((3, 4), dev)
    with pytest.raises(loom.ShapeError, match=r"\[tensor.__getitem__\] index 3 is out of bounds"):
        t[3]
    with pytest.raises(loom.ShapeError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(loom.ShapeError, match="index 5 is out of bounds for axis 1"):
        t[:, [0, 5]]
    with pytest.raises(loom.ValueError, match="no boolean masks"):
        t[np.array([True, False, True])]
    with pytest.raises(loom.ValueError, match="no boolean masks"):
        t[[0, 1], [0, 1]]  # two int sequences: numpy's broadcasting advanced indexing is not supported
    with pytest.raises(loom.ValueError, match="no boolean masks"):
        t[[[0, 1]]]
    with pytest.raises(loom.ValueError, match="no boolean masks"):
        t["a"]
    with pytest.raises(loom.ValueError, match="single ellipsis"):
        t[..., ...]


# ---- conversions and copies ----

def test_as_type_clone_copy_data(dev):
    a = np.array([[1.7, -2.2], [3.5, 0.0]], np.float32)
    t = t_(a, dev)
    for name, want in (("int", a.astype(np.int32)), ("float", a), (loom.float64, a.astype(np.float64)),
                       (np.int64, a.astype(np.int64))):
        got = t.as_type(name)
        assert got.to_numpy().dtype == want.dtype
        np.testing.assert_array_equal(got.to_numpy(), want)
    c = t.clone()
    c.copy_data(t_(np.full((2, 2), 9, np.int32), dev))  # another dtype is converted
    np.testing.assert_array_equal(c.to_numpy(), np.full((2, 2), 9.0))
    np.testing.assert_array_equal(t.to_numpy(), a)  # the clone had memory of its own
    with pytest.raises(loom.ShapeError, match=r"\[tensor.copy_data\]"):
        c.copy_data(tensor.ones((4,), dev))
    with pytest.raises(loom.TypeError, match=r"\[tensor.copy_data\]"):
        c.copy_data(a)
    with pytest.raises(loom.DTypeError):
        t.as_type("complex")


def test_in_place_random_fills(dev):
    t = tensor.zeros((20000,), dev)
    assert t.bernoulli(0.3) is t
    v = t.to_numpy()
    assert set(np.unique(v)) <= {0.0, 1.0} and abs(v.mean() - 0.3) < 0.02
    assert t.bernoulli(0.0).to_numpy().sum() == 0 and t.bernoulli(1.0).to_numpy().min() == 1
    g = t.gaussian(1.0, 2.0).to_numpy()
    assert abs(g.mean() - 1.0) < 0.1 and abs(g.std() - 2.0) < 0.1
    u = t.uniform(-1.0, 3.0).to_numpy()
    assert u.min() >= -1 and u.max() <= 3 and abs(u.mean() - 1.0) < 0.05
    with pytest.raises(loom.ValueError, match=r"\[tensor.bernoulli\] p 1.5"):
        t.bernoulli(1.5)
    with pytest.raises(loom.TypeError, match=r"\[tensor.bernoulli\]"):
        t.bernoulli("0.5")


@pytest.mark.parametrize("repeats,axis", [(2, None), (3, 0), (2, 1), (2, -1), ([1, 0, 2], 0), ([2, 1, 1, 3], 1),
                                          (0, 1)])
def test_repeat(dev, repeats, axis):
    a = RNG.normal(size=(3, 4)).astype(np.float32)
    got = t_(a, dev).repeat(repeats, axis)
    np.testing.assert_array_equal(got.to_numpy(), np.repeat(a, repeats, axis))
    np.testing.assert_array_equal(tensor.repeat(t_(a, dev), repeats, axis).to_numpy(), np.repeat(a, repeats, axis))


def test_repeat_errors(dev):
    t = tensor.ones((3, 4), dev)
    with pytest.raises(loom.ValueError, match=r"\[tensor.repeat\] 2 repeats for axis 0"):
        t.repeat([1, 2], 0)
    with pytest.raises(loom.ValueError, match=r"\[tensor.repeat\] axis 2"):
        t.repeat(2, 2)
    with pytest.raises(loom.ValueError, match="must not be negative"):
        t.repeat(-1, 0)
    with pytest.raises(loom.TypeError, match=r"\[tensor.repeat\]"):
        t.repeat("x", 0)


# ---- module functions ----

def test_sum_average_transpose_sizeof(dev):
    a = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    t = t_(a, dev)
    s = tensor.sum(t)
    assert s.shape == () and float(s) == pytest.approx(float(a.sum(dtype=np.float64)), rel=1e-5)
    np.testing.assert_allclose(tensor.to_numpy(s), a.sum(), rtol=1e-5)
    np.testing.assert_allclose(tensor.sum(t, 1).to_numpy(), a.sum(1), rtol=1e-5)
    np.testing.assert_allclose(tensor.sum(t, (0, 2)).to_numpy(), a.sum((0, 2)), rtol=1e-5)
    out = tensor.zeros((2, 4), dev)
    assert tensor.sum(t, 1, out=out) is out
    np.testing.assert_allclose(out.to_numpy(), a.sum(1), rtol=1e-5)
    m = tensor.average(t)
    assert isinstance(m, float) and m == pytest.approx(float(a.mean(dtype=np.float64)), rel=1e-5)
    np.testing.assert_allclose(tensor.average(t, 2).to_numpy(), a.mean(2), rtol=1e-5)
    for axes in (None, (1, 0, 2), (2, 0, 1)):
        np.testing.assert_array_equal(tensor.transpose(t, axes).to_numpy(), np.transpose(a, axes))
    np.testing.assert_array_equal(t.transpose((2, 0, 1)).to_numpy(), np.transpose(a, (2, 0, 1)))
    np.testing.assert_array_equal(t.transpose([1, 0, 2]).to_numpy(), np.transpose(a, [1, 0, 2]))
    np.testing.assert_array_equal(t.transpose(0, 2).to_numpy(), np.swapaxes(a, 0, 2))  # loom's pair form
    with pytest.raises(loom.ValueError):
        tensor.transpose(t, (0, 1))
    assert t.memsize() == a.nbytes and not t.is_empty() and tensor.zeros((0, 3), dev).is_empty()
    c = t.deepcopy()
    c.set_value(0.0)
    np.testing.assert_array_equal(t.to_numpy(), a)
    for d in ("float32", "float64", "float16", "int32", "int64", "uint8", "bool"):
        assert tensor.sizeof(d) == np.dtype(d).itemsize
    assert tensor.sizeof("bfloat16") == 2 and tensor.sizeof(np.float64) == 8
    with pytest.raises(loom.DTypeError):
        tensor.sizeof("complex64")
    with pytest.raises(loom.TypeError, match=r"\[tensor.sum\]"):
        tensor.sum(a)
    with pytest.raises(loom.TypeError, match=r"\[tensor.average\]"):
        tensor.average([1.0])


def test_copy_data_to_from(dev):
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    dst = np.zeros((2, 5), np.float32)
    tdst = t_(dst, dev)
    want = dst.ravel().copy()
    for size, d_off, s_off in ((6, 2, 3), (3, 0, 0), (2, 8, 10), (10, 0, 1), (0, 4, 4)):
        assert tensor.copy_data_to_from(tdst, t_(src, dev), size, d_off, s_off) is tdst
        want[d_off:d_off + size] = src.ravel()[s_off:s_off + size]
        np.testing.assert_array_equal(tdst.to_numpy().ravel(), want)
    with pytest.raises(loom.ValueError, match=r"\[tensor.copy_data_to_from\].*out of range"):
        tensor.copy_data_to_from(tdst, t_(src, dev), 9, 2, 0)
    with pytest.raises(loom.DTypeError, match=r"\[tensor.copy_data_to_from\] dtypes differ"):
        tensor.copy_data_to_from(tdst, t_(src.astype(np.float64), dev), 2)


@pytest.mark.parametrize("sa,sb,axes", [((3, 4, 5), (4, 5, 2), 2), ((3, 4), (4, 6), 1), ((2, 3), (4,), 0),
                                        ((3, 4, 5), (5, 3, 2), ([0, 2], [1, 0])), ((4, 3), (2, 4), ([0], [1]))])
def test_tensordot(dev, sa, sb, axes):
    a, b = RNG.normal(size=sa).astype(np.float32), RNG.normal(size=sb).astype(np.float32)
    got = tensor.tensordot(t_(a, dev), t_(b, dev), axes)
    want = np.tensordot(a.astype(np.float64), b.astype(np.float64), axes)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-4, atol=1e-5)


def test_tensordot_errors(dev):
    a, b = tensor.ones((3, 4), dev), tensor.ones((5, 6), dev)
    with pytest.raises(loom.ShapeError, match=r"\[tensor.tensordot\]"):
        tensor.tensordot(a, b, 1)
    with pytest.raises(loom.ValueError, match=r"\[tensor.tensordot\] axes=3"):
        tensor.tensordot(a, b, 3)
    with pytest.raises(loom.ValueError, match="differ in length"):
        tensor.tensordot(a, b, ([0, 1], [0]))
    with pytest.raises(loom.ValueError, match="out of range"):
        tensor.tensordot(a, b, ([5], [0]))


@pytest.mark.parametrize("spec,shapes", [("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]),
                                         ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]),
                                         ("ij->", [(3, 4)]), ("i,j->ij", [(3,), (4,)]),
                                         ("ijk,ik->j", [(2, 3, 4), (2, 4)]), ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)])])
def test_einsum(dev, spec, shapes):
    arrs = [RNG.normal(size=s).astype(np.float32) for s in shapes]
    got = tensor.einsum(spec, *(t_(a, dev) for a in arrs))
    want = np.einsum(spec, *(a.astype(np.float64) for a in arrs))
    assert got.shape == want.shape
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-4, atol=1e-5)


def test_einsum_errors(dev):
    a = tensor.ones((3, 4), dev)
    with pytest.raises(loom.ValueError, match=r"\[tensor.einsum\] '.*' names 2 operands, 1 given"):
        tensor.einsum("ij,jk->ik", a)
    with pytest.raises(loom.ValueError, match="no diagonals"):
        tensor.einsum("ii->i", tensor.ones((3, 3), dev))
    with pytest.raises(loom.ShapeError, match="letter 'j'"):
        tensor.einsum("ij,jk->ik", a, tensor.ones((5, 2), dev))
    with pytest.raises(loom.ShapeError, match="has 3 letters"):
        tensor.einsum("ijk->i", a)
    with pytest.raises(loom.ValueError, match="output"):
        tensor.einsum("ij->iz", a)
    with pytest.raises(loom.TypeError, match=r"\[tensor.einsum\]"):
        tensor.einsum(3, a)


def test_module_in_place_fills_and_helpers(dev):
    t = tensor.zeros((20000,), dev)
    assert tensor.gaussian(3.0, 0.5, t) is t
    v = t.to_numpy()
    assert abs(v.mean() - 3.0) < 0.05 and abs(v.std() - 0.5) < 0.05
    assert tensor.uniform(2.0, 4.0, t) is t
    v = t.to_numpy()
    assert v.min() >= 2.0 and v.max() <= 4.0 and abs(v.mean() - 3.0) < 0.05
    assert tensor.bernoulli(0.25, t) is t and abs(t.to_numpy().mean() - 0.25) < 0.02
    assert tensor.gaussian((2, 3), 0.0, 1.0, dev).shape == (2, 3)  # loom's creating form is kept
    assert tensor.product((2, 3, 4)) == 24 and tensor.product(()) == 1
    with pytest.raises(loom.TypeError, match=r"\[tensor.product\]"):
        tensor.product((2, 1.5))
    a = RNG.normal(size=(3, 4)).astype(np.float32)
    x = t_(a, dev)
    np.testing.assert_array_equal(tensor.reshape(x, (4, 3)).to_numpy(), a.reshape(4, 3))
    c = tensor.contiguous(x.transpose())
    assert c.is_contiguous()
    np.testing.assert_array_equal(c.to_numpy(), a.T)
    h = tensor.to_host(x)
    assert h is not x and h.device == loom.device.create_cpu_device()
    np.testing.assert_array_equal(h.to_numpy(), a)
    assert float(t_(np.array([2.5], np.float32), dev)) == 2.5 and int(t_(np.array(7, np.int32), dev)) == 7
    with pytest.raises(loom.ValueError, match=r"\[tensor\] float\(\) of a tensor needs exactly one element"):
        float(x)
    with pytest.raises(loom.TypeError, match=r"\[tensor.bernoulli\]"):
        tensor.bernoulli(0.5, a)


def test_setitem_whole_tensor(dev):
    a = RNG.normal(size=(2, 3)).astype(np.float32)
    t = tensor.zeros((2, 3), dev)
    t[:] = t_(a, dev)
    np.testing.assert_array_equal(t.to_numpy(), a)
    t[...] = 2.5
    np.testing.assert_array_equal(t.to_numpy(), np.full((2, 3), 2.5))
    t[:, :] = np.arange(3)  # broadcast, as numpy's
    np.testing.assert_array_equal(t.to_numpy(), np.tile(np.arange(3, dtype=np.float32), (2, 1)))
    out = tensor.zeros((3,), dev)
    assert tensor.sum(t_(a, dev), 0, out=out) is out
    np.testing.assert_allclose(out.to_numpy(), a.sum(0), rtol=1e-6)
    for key in (0, slice(1, None), (slice(None), 1), (slice(None), slice(None), slice(None)),
                (Ellipsis, slice(None, 2)), slice(0, 5)):
        with pytest.raises(loom.ValueError, match=r"\[tensor.__setitem__\] only whole-tensor"):
            t[key] = 1.0
    with pytest.raises(loom.ShapeError, match=r"\[tensor.copy_data\]"):
        t[:] = tensor.ones((4,), dev)


# ---- in-place operators (SINGA writes into the tensor) ----

def test_inplace_operators_write_into_the_tensor(dev):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = tensor.from_numpy(a.copy(), dev)
    alias = t
    t += 1.0
    t *= tensor.from_numpy(np.array([1.0, 2.0, 3.0], np.float32), dev)  # broadcast into t's shape
    t -= 0.5
    t /= 2.0
    assert t is alias
    np.testing.assert_allclose(alias.to_numpy(), ((a + 1) * [1, 2, 3] - 0.5) / 2)
    with pytest.raises(loom.ShapeError, match=r"\[tensor.__iadd__\] the result is .* does not fit"):
        s = tensor.from_numpy(np.ones(3, np.float32), dev)
        s += tensor.from_numpy(np.ones((2, 3), np.float32), dev)


def test_inplace_update_of_parameters_and_autograd_results(dev):
    w = tensor.from_numpy(np.ones(3, np.float32), dev, requires_grad=True)
    params = [w]
    loss = autograd.sum(autograd.mul(w, w))
    for p, g in autograd.backward(loss):
        p -= g * 0.25  # SINGA's hand-written SGD: updates the parameter itself
    np.testing.assert_allclose(params[0].to_numpy(), 0.5)
    # a result with history keeps it: `loss += reg` is the new tensor, and backward sees both terms
    x = tensor.from_numpy(np.array([1.0, 2.0], np.float32), dev, requires_grad=True)
    total = autograd.sum(autograd.mul(x, x))
    before = total
    total += autograd.sum(x)
    assert total is not before
    (_, g), = autograd.backward(total)
    np.testing.assert_allclose(g.to_numpy(), [3.0, 5.0])


def test_inplace_in_a_capture_is_replayed(dev):
    t = tensor.from_numpy(np.zeros(2, np.float32), dev)
    dev.SetBufferFlag(True)
    t += 1.0
    dev.SetBufferFlag(False)
    np.testing.assert_array_equal(t.to_numpy(), 0.0)  # captured, not run
    dev.ExecBuffOps()
    dev.ExecBuffOps()
    np.testing.assert_array_equal(t.to_numpy(), 2.0)
