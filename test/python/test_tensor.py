"""Tensors: creation, numpy round trips, zero-copy views, operators, properties."""
import gc
import weakref

import numpy as np
import pytest

import loom
from loom import autograd, tensor
from loom.tensor import Tensor

ROUND_TRIP = [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_]


def sample(dtype, shape=(3, 4), seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.normal(size=shape).astype(dtype)


def test_creation_from_shape_dtype_device(dev):
    t = Tensor((2, 3), dev, "float64")
    assert t.shape == (2, 3) and t.dtype == "float64" and t.device == dev and t.ndim == 2 and t.size() == 6
    assert not t.requires_grad
    assert Tensor((4,), dtype=np.int32).dtype == "int32"
    assert Tensor(shape=(2,), device=dev, requires_grad=True, stores_grad=True).requires_grad
    assert not Tensor().defined()
    z = tensor.zeros((2, 2), dev, loom.int64)
    assert z.to_numpy().dtype == np.int64 and not z.to_numpy().any()
    assert np.array_equal(tensor.ones((3,), dev).to_numpy(), np.ones(3, np.float32))
    assert np.array_equal(tensor.full((2,), 7.5, dev).to_numpy(), [7.5, 7.5])
    assert tensor.gaussian((1000,), 2.0, 0.5, dev).to_numpy().mean() == pytest.approx(2.0, abs=0.1)
    u = tensor.uniform((1000,), -1, 1, dev).to_numpy()
    assert u.min() >= -1 and u.max() <= 1


@pytest.mark.parametrize("dtype", ROUND_TRIP, ids=lambda d: np.dtype(d).name)
def test_numpy_round_trip(dev, dtype):
    a = sample(dtype)
    t = tensor.from_numpy(a, dev)
    assert t.dtype == tensor.dtype_name(np.dtype(dtype)) and t.shape == a.shape
    b = t.to_numpy()
    assert b.dtype == a.dtype and np.array_equal(a, b)
    b[0, 0] = 0  # to_numpy is a copy
    assert np.array_equal(t.to_numpy(), a)
    t2 = Tensor(a.shape, dev, dtype)
    t2.copy_from_numpy(a)
    assert np.array_equal(t2.to_numpy(), a)


def test_copy_from_numpy_converts_within_a_kind(dev):
    t = Tensor((2, 2), dev)  # float32
    t.copy_from_numpy(np.array([[1.5, 2.5], [3.5, 4.5]]))  # float64
    assert np.array_equal(t.to_numpy(), np.array([[1.5, 2.5], [3.5, 4.5]], np.float32))
    t.copy_from_numpy(np.asfortranarray(np.arange(4.0).reshape(2, 2)))  # not C-contiguous
    assert np.array_equal(t.to_numpy(), np.arange(4.0).reshape(2, 2))
    i = Tensor((3,), dev, "int32")
    i.copy_from_numpy(np.array([1, 2, 3], np.int64))
    assert i.to_numpy().tolist() == [1, 2, 3]


def test_copy_from_numpy_writes_only_exact_arrays_as_they_are(dev):
    # An array of the tensor's own shape and dtype is written in one call (the fast path); any
    # other is converted or refused, never copied bit for bit.
    t = Tensor((2, 2), dev)
    a = np.arange(4, dtype=np.float32).reshape(2, 2)
    a.flags.writeable = False
    t.copy_from_numpy(a)
    assert np.array_equal(t.to_numpy(), a)
    t.copy_from_numpy(np.array([[1, 2], [3, 4]], np.int32))  # same width, other kind: converted
    assert t.to_numpy().tolist() == [[1.0, 2.0], [3.0, 4.0]]
    t.copy_from_numpy(np.arange(4, dtype=">f4").reshape(2, 2))  # big-endian
    assert t.to_numpy().tolist() == [[0.0, 1.0], [2.0, 3.0]]
    t.copy_from_numpy(np.arange(8, dtype=np.float32).reshape(2, 4)[:, ::2])  # strided
    assert t.to_numpy().tolist() == [[0.0, 2.0], [4.0, 6.0]]
    for other in (np.arange(4, dtype=np.float32), np.arange(4.0).reshape(4, 1), np.arange(4).reshape(1, 2, 2, 1)):
        t.copy_from_numpy(other)  # SINGA's rule: the same elements in another shape, read in C order
        assert t.to_numpy().tolist() == [[0.0, 1.0], [2.0, 3.0]]
        t.copy_from_numpy(np.zeros((2, 2), np.float32))
    for wrong in (np.zeros(5, np.float32), np.zeros((2, 3), np.float32)):
        with pytest.raises(loom.ShapeError):  # another number of elements
            t.copy_from_numpy(wrong)
    i = Tensor((2,), dev, "int32")
    with pytest.raises(loom.DTypeError):  # float32 has int32's width, not its kind
        i.copy_from_numpy(np.array([1.5, 2.5], np.float32))
    i.copy_from_numpy(np.array([7, 8], np.uint32))
    assert i.to_numpy().tolist() == [7, 8]
    q = Tensor((2,), dev, "int64")
    q.copy_from_numpy(np.array([-3, 2 ** 40], np.longlong))
    assert q.to_numpy().tolist() == [-3, 2 ** 40]
    u = Tensor((3,), dev, "uint8")
    u.copy_from_numpy(np.array([True, False, True]))
    assert u.to_numpy().tolist() == [1, 0, 1]
    s = Tensor((), dev)
    s.copy_from_numpy(np.float32(2.5))  # a numpy scalar, not an array: the general path
    s.copy_from_numpy(np.array(3.5, np.float32))
    assert s.item() == 3.5


def test_copy_from_numpy_errors(dev):
    t = Tensor((2, 2), dev)
    with pytest.raises(loom.ShapeError) as e:
        t.copy_from_numpy(np.zeros((3, 2), np.float32))
    assert isinstance(e.value, ValueError) and "(3, 2)" in str(e.value)
    i = Tensor((2,), dev, "int32")
    with pytest.raises(loom.DTypeError) as e:
        i.copy_from_numpy(np.array([1.5, 2.5]))
    assert isinstance(e.value, TypeError) and "astype" in str(e.value)
    with pytest.raises(loom.DTypeError):
        tensor.from_numpy(np.array(["a", "b"]), dev)
    with pytest.raises(loom.DTypeError):
        Tensor((2,), dev, "float8")


def test_bfloat16_has_no_numpy_view(dev):
    t = autograd.cast(tensor.from_numpy(np.array([1.0, 2.0], np.float32), dev), "bfloat16")
    assert t.dtype == "bfloat16"
    with pytest.raises(loom.DTypeError):
        t.to_numpy()
    assert t.astype("float32").to_numpy().tolist() == [1.0, 2.0]


def test_zero_copy_view_aliases_memory(dev):
    t = tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), dev)
    assert t.is_host_viewable()
    v = np.asarray(t)
    assert v.base is t
    assert v.shape == (2, 3) and v.dtype == np.float32
    v[1, 2] = 42.0  # writes through
    assert t.to_numpy()[1, 2] == 42.0
    t.set_value(3.0)  # and the device's writes show
    assert (v == 3.0).all()


def test_zero_copy_view_keeps_the_tensor_alive(dev):
    t = tensor.from_numpy(np.arange(1000, dtype=np.float32), dev)
    ref = weakref.ref(t)
    live = dev.memory_stats()["live_bytes"]
    v = np.asarray(t)
    del t
    gc.collect()
    assert ref() is not None  # the array's base holds it
    _ = tensor.from_numpy(np.full(1000, -1, np.float32), dev)  # would reuse freed memory
    assert np.array_equal(v, np.arange(1000, dtype=np.float32))
    del v
    gc.collect()
    assert ref() is None
    del _
    assert dev.memory_stats()["live_bytes"] <= live


def test_zero_copy_view_of_a_strided_tensor(dev):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tensor.from_numpy(a, dev)
    tt = t.T  # a view: same block, transposed strides
    v = np.asarray(tt)
    assert np.array_equal(v, a.T)
    assert np.shares_memory(v, np.asarray(t))


def test_not_host_viewable_tensors_copy_or_explain(dev):
    lazy = Tensor((3,), dev)
    assert not lazy.is_host_viewable()
    with pytest.raises(loom.ValueError) as e:
        np.asarray(lazy)
    assert "no value" in str(e.value)


def test_planned_graph_intermediates_are_not_viewable(dev):
    x = tensor.from_numpy(np.ones((4, 4), np.float32), dev)
    with dev.buffer():
        h = autograd.relu(x)   # held by us: persistent, its own memory
        y = autograd.exp(h) + 1.0
    dev.ExecBuffOps()
    assert h.is_host_viewable() and y.is_host_viewable()
    assert np.allclose(np.asarray(y), np.e + 1)


def test_operators_against_numpy(dev):
    a_np = np.array([[1.0, -2.0], [3.0, 4.0]], np.float32)
    b_np = np.array([[0.5, 2.0], [-1.0, 8.0]], np.float32)
    a, b = tensor.from_numpy(a_np, dev), tensor.from_numpy(b_np, dev)
    cases = {
        "a+b": (a + b, a_np + b_np), "a-b": (a - b, a_np - b_np), "a*b": (a * b, a_np * b_np),
        "a/b": (a / b, a_np / b_np), "a@b": (a @ b, a_np @ b_np), "-a": (-a, -a_np),
        "a+2": (a + 2, a_np + 2), "2+a": (2 + a, 2 + a_np), "a-2": (a - 2, a_np - 2), "2-a": (2 - a, 2 - a_np),
        "3*a": (3 * a, 3 * a_np), "a/4": (a / 4, a_np / 4), "1/b": (1 / b, 1 / b_np), "b**2": (b ** 2, b_np ** 2),
        "abs": (abs(a), np.abs(a_np)), "a+np": (a + b_np, a_np + b_np), "T": (a.T, a_np.T),
        "sum": (a.sum(), a_np.sum()), "mean0": (a.mean(0), a_np.mean(0)), "max1": (a.max(1), a_np.max(1)),
        "reshape": (a.reshape(4), a_np.reshape(4)), "reshape2": (a.reshape(1, 4), a_np.reshape(1, 4)),
    }
    for name, (got, want) in cases.items():
        assert np.allclose(got.to_numpy(), want, rtol=1e-6), name


def test_item_returns_python_numbers(dev):
    assert tensor.full((), 2.5, dev).item() == 2.5
    i = tensor.full((1,), 7, dev, "int64").item()
    assert i == 7 and isinstance(i, int)
    assert tensor.full((), 1, dev, "bool").item() is True
    with pytest.raises(loom.ShapeError):
        tensor.zeros((2,), dev).item()


def test_requires_grad_name_and_repr(dev):
    t = tensor.zeros((2,), dev)
    t.requires_grad = True
    t.name = "w"
    assert t.requires_grad and t.name == "w"
    assert "float32 (2,) on cpu:0" in repr(t)
    y = t * 2
    assert y.requires_grad
    with pytest.raises(loom.ValueError):  # only leaves
        y.requires_grad = False
    assert repr(Tensor()) == "Tensor(undefined)"


def test_copy_and_astype(dev):
    a = tensor.from_numpy(np.arange(3, dtype=np.float32), dev)
    c, d = a.copy(), a.clone()  # SINGA's: copy() shares the data, clone()/deepcopy() do not
    a.set_value(0)
    assert d.to_numpy().tolist() == [0, 1, 2] and c.to_numpy().tolist() == [0, 0, 0]
    assert a.astype(np.int32).dtype == "int32"


def test_wrong_argument_types_are_type_errors(dev):
    t = tensor.zeros((2,), dev)
    with pytest.raises(TypeError):
        autograd.relu(np.zeros(2))
    with pytest.raises(TypeError):
        autograd.reshape(t, ["a"])
    with pytest.raises(TypeError):
        Tensor((2,), "cpu")


# ---- truth value and comparisons (issue 16, class 4) ----

def test_bool_is_numpys(dev):
    assert bool(tensor.zeros((1,), dev)) is False
    assert bool(tensor.full((), 2.5, dev)) is True
    assert bool(tensor.from_numpy(np.array([[True]]), dev)) is True
    assert not tensor.zeros((1, 1), dev, "int32")
    for shape in [(2,), (2, 3), (0,)]:
        with pytest.raises(loom.ValueError, match="truth value .* ambiguous"):
            bool(tensor.ones(shape, dev))
    with pytest.raises(loom.ValueError, match="undefined"):
        bool(Tensor())


def test_a_branch_on_a_value_during_capture_is_a_graph_error(dev):
    x = tensor.ones((1,), dev)
    with pytest.raises(loom.GraphError, match="branch on a tensor's value cannot be captured"):
        with dev.buffer():
            loss = autograd.mul(x, 2.0)
            if loss:  # docs/design.md invariant 4: raises, never silently taken
                autograd.relu(loss)


def test_a_branch_in_a_graph_model_step_is_a_graph_error(dev):
    from loom import layer, model, opt

    class Branchy(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(3, 2, device=dev)

        def forward(self, x):
            return self.fc(x)

        def train_one_batch(self, x, y):
            loss = autograd.softmax_cross_entropy(self.forward(x), y)
            if loss:
                self.optimizer(loss)
            return loss

    m = Branchy()
    m.set_optimizer(opt.SGD(0.1))
    m.compile([tensor.zeros((4, 3), dev)], use_graph=True)
    with pytest.raises(loom.GraphError, match="capturing"):
        m.train_one_batch(np.zeros((4, 3), np.float32), np.zeros(4, np.int32))
    assert not dev.buffering()


def test_eq_and_ne_are_element_wise(dev):
    a = tensor.from_numpy(np.array([[1, 2, 3], [4, 5, 6]], np.float32), dev)
    b = tensor.from_numpy(np.array([[1, 0, 3], [4, 5, 0]], np.float32), dev)
    eq = a == b
    assert isinstance(eq, Tensor) and eq.dtype == "bool" and eq.shape == (2, 3)
    assert eq.to_numpy().tolist() == [[True, False, True], [True, True, False]]
    assert (a != b).to_numpy().tolist() == [[False, True, False], [False, False, True]]
    assert (a == a.copy()).to_numpy().all()  # equal values, distinct tensors: was False (identity)
    row = tensor.from_numpy(np.array([1, 5, 6], np.float32), dev)
    assert (a == row).to_numpy().tolist() == [[True, False, False], [False, True, True]]  # broadcast
    assert (a == np.array([4, 5, 6])).to_numpy().tolist() == [[False] * 3, [True] * 3]
    assert (np.array([4, 5, 6], np.float32) == a).to_numpy().tolist() == [[False] * 3, [True] * 3]
    assert (a == 2).to_numpy().tolist() == [[False, True, False], [False] * 3]
    assert (a != 2.0).to_numpy().tolist() == [[True, False, True], [True] * 3]
    f32 = tensor.from_numpy(np.array([0.1], np.float32), dev)
    assert (f32 == 0.1).to_numpy().tolist() == [True]  # numpy's weak scalar: compared in float32
    i = tensor.from_numpy(np.array([1, 2], np.int32), dev)
    assert (i == 1.5).to_numpy().tolist() == [False, False] and (i != 1.5).to_numpy().tolist() == [True, True]
    assert (i == 2 ** 40).to_numpy().tolist() == [False, False]
    assert (i == 2).to_numpy().tolist() == [False, True]
    assert autograd.equal(i, i).to_numpy().all() and not autograd.not_equal(i, i).to_numpy().any()
    assert (a == "x") is False and (a != None) is True  # noqa: E711  other types: Python's default
    with pytest.raises(loom.DTypeError):
        a == i  # noqa: B015  dtypes differ, as for a + i


def test_tensors_stay_hashable_by_identity(dev):
    w = tensor.ones((2,), dev)
    w.requires_grad = True
    twin = tensor.ones((2,), dev)
    d = {w: "w", twin: "twin"}
    assert d[w] == "w" and d[twin] == "twin" and hash(w) != hash(twin)
    assert w in [w] and w in {w}
    loss = autograd.sum(autograd.mul(w, w))
    grads = autograd.gradients(loss)
    assert len(grads) == 1 and next(iter(grads.values())).to_numpy().tolist() == [2.0, 2.0]


def test_repr_shows_the_values_of_every_dtype(dev):
    """C++'s to_string prints float32/64 and int32/64 only; a comparison's bool result printed []."""
    assert repr(tensor.from_numpy(np.array([1.0, 2.0]) == 1.0, dev)) == "Tensor(bool (2,) on cpu:0, [True, False])"
    t = tensor.from_numpy(np.array([1, 2], np.float32), dev)
    assert repr(t == 1) == "Tensor(bool (2,) on cpu:0, [True, False])"
    assert repr(tensor.from_numpy(np.arange(10, dtype=np.uint8), dev)).endswith("[0, 1, 2, 3, 4, 5, 6, 7, ...])")
    assert repr(tensor.ones((1,), dev, "bfloat16")).endswith("[1.0])")
