"""SINGA's calling conventions that its published Python suite exercises (issue 17): tensor
module functions and methods, integer arithmetic, in-place on a new tensor, optimizer forms,
SINGA's parameter names and keyword set_params. Numbers are checked against numpy."""
import numpy as np
import pytest

import loom
from loom import autograd, layer, opt, tensor
from loom.tensor import Tensor

RNG = np.random.default_rng(17)


def test_module_functions_match_numpy(dev):
    a = RNG.uniform(0.5, 9.0, size=(2, 3, 4)).astype(np.float32)
    t = tensor.from_numpy(a, dev)
    np.testing.assert_allclose(tensor.log(t).to_numpy(), np.log(a), rtol=1e-6)
    np.testing.assert_array_equal(tensor.ceil(t).to_numpy(), np.ceil(a))
    np.testing.assert_array_equal(tensor.floor(t).to_numpy(), np.floor(a))
    b = RNG.normal(size=(2, 3, 1)).astype(np.float32)
    np.testing.assert_array_equal(tensor.concatenate((t, tensor.from_numpy(b, dev)), 2).to_numpy(),
                                  np.concatenate((a, b), 2))
    with pytest.raises(loom.TypeError, match=r"\[tensor.log\]"):
        tensor.log(a)


def test_ndim_reads_and_calls(dev):
    t = tensor.zeros((2, 3, 4), dev)
    assert t.ndim == 3 and t.ndim() == 3 and t.size() == 24 and t.memsize() == 96 and not t.is_transpose()


def test_inplace_on_a_new_tensor_starts_from_zeros(dev):
    t = Tensor((2, 3), dev)
    t += 1.25
    np.testing.assert_array_equal(t.to_numpy(), np.full((2, 3), 1.25, np.float32))
    t *= 2
    np.testing.assert_array_equal(t.to_numpy(), np.full((2, 3), 2.5, np.float32))
    fresh = Tensor((2,), dev)
    with pytest.raises(loom.ValueError, match="never written"):
        fresh + 1.0  # only op= starts from zeros; reading a never-written tensor stays an error


def test_copy_shares_and_clone_does_not(dev):
    t = tensor.from_numpy(np.arange(4, dtype=np.float32), dev)
    shallow, deep = t.copy(), t.deepcopy()
    t += 1
    assert shallow.to_numpy().tolist() == [1, 2, 3, 4] and deep.to_numpy().tolist() == [0, 1, 2, 3]


def test_integer_arithmetic_matches_numpy(dev):
    a = RNG.integers(-30, 30, size=(3, 4, 5)).astype(np.int32)
    b = RNG.integers(-30, 30, size=(4, 5)).astype(np.int32)
    ta, tb = tensor.from_numpy(a, dev), tensor.from_numpy(b, dev)
    for got, want in ((ta - tb, a - b), (ta + tb, a + b), (ta * tb, a * b), (tb - ta, b - a)):
        assert got.dtype == "int32"
        np.testing.assert_array_equal(got.to_numpy(), want)
    y = ta + 2.5
    assert y.dtype == "float32"
    np.testing.assert_allclose(y.to_numpy(), a + 2.5, rtol=1e-6)
    z = 3 - ta
    assert z.dtype == "int32"
    np.testing.assert_array_equal(z.to_numpy(), 3 - a)
    i64 = tensor.from_numpy(np.array([1, 2, 3], np.int64), dev)
    assert (i64 + 0.5).dtype == "float32" and (i64 + 0.5).to_numpy().tolist() == [1.5, 2.5, 3.5]
    big = tensor.from_numpy(np.array([3_000_000_000], np.int64), dev)
    assert (big + 1).dtype == "int64" and (big + 1).to_numpy().tolist() == [3_000_000_001]


def test_placeholder_is_a_tensor_of_the_shape(dev):
    p = tensor.PlaceHolder((2, 3), device=dev)
    assert isinstance(p, Tensor) and p.shape == (2, 3) and p.dtype == "float32"


def test_sgd_apply_keyed_by_the_parameter_itself(dev):
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    w = tensor.from_numpy(np.full((2, 3), 0.5, np.float32), dev)
    g = tensor.from_numpy(np.full((2, 3), 0.2, np.float32), dev)
    ref, buf = np.full((2, 3), 0.5), np.zeros((2, 3))
    for _ in range(2):
        sgd.apply(w, w, g)  # SINGA's suite passes the parameter as param_name
        sgd.step()
        buf = 0.9 * buf + 0.2
        ref = ref - 0.1 * buf
    np.testing.assert_allclose(w.to_numpy(), ref, rtol=1e-6)
    sgd.set_states(sgd.get_states())
    with pytest.raises(loom.TypeError, match="cannot tell the form"):
        sgd.apply(w, w, g, "x")


def test_optimizer_step_counter_and_partial_states(dev):
    o = opt.Optimizer(0.1)
    o.step()
    o.step()
    assert o.get_states()["step_counter"] == 2
    o.set_states({"step_counter": 5})
    assert o.step_counter.to_numpy().tolist() == [5.0] and o.lr == pytest.approx(0.1)
    s = opt.SGD(0.1, 0.9)
    s.set_states({"step_counter": 7})
    assert s.step_count == 7
    with pytest.raises(loom.ValueError, match="no 'lr'"):
        s.set_states({})


def test_schedule_takes_a_float32_step_tensor(dev):
    e = opt.ExponentialDecay(0.5, 10, 0.5, staircase=False)
    step = Tensor((1,), dev).set_value(5)
    np.testing.assert_allclose(float(e(step).to_numpy()), 0.5 * 0.5 ** 0.5, rtol=1e-6)
    with pytest.raises(loom.ShapeError, match="one value"):
        e(tensor.zeros((2,), dev))


def test_singa_names_keywords_and_initializers(dev):
    x = RNG.normal(size=(4, 2)).astype(np.float32)
    W = RNG.normal(size=(2, 3)).astype(np.float32)
    b = RNG.normal(size=(3,)).astype(np.float32)
    for li in (autograd.Linear(3), layer.Linear(2, 3, device=dev), layer.Linear(out_features=3)):
        li.set_params(W=tensor.from_numpy(W, dev), b=tensor.from_numpy(b, dev))
        assert list(li.get_params()) == ["W", "b"]
        np.testing.assert_allclose(li(tensor.from_numpy(x, dev)).to_numpy(), x @ W + b, rtol=1e-5)
    lazy = layer.Linear(3)
    lazy.set_params_initializer(W=lambda t: t.set_value(0.5), b=lambda t: t.set_value(-1.0))
    np.testing.assert_allclose(lazy(tensor.from_numpy(x, dev)).to_numpy(), np.repeat(x.sum(1, keepdims=True) * 0.5 - 1.0, 3, 1),
                               rtol=1e-5)
    bn = layer.BatchNorm2d(2)
    bn(tensor.from_numpy(RNG.normal(size=(2, 2, 3, 3)).astype(np.float32), dev))
    assert list(bn.get_states()) == ["scale", "bias", "running_mean", "running_var"]
    with pytest.raises(loom.ShapeError, match=r"\[Linear\] W is"):
        layer.Linear(3).set_params(W=np.zeros((2, 4), np.float32))
    with pytest.raises(loom.TypeError, match="not a function"):
        layer.Linear(3).set_params_initializer(W=1.0)


def test_gradients_found_by_the_callers_own_handle(dev):
    w = tensor.from_numpy(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), dev)
    w.requires_grad = True
    v = tensor.from_numpy(np.array([0.5, -1.0], np.float32), dev)
    v.requires_grad = True
    grads = autograd.gradients(autograd.sum(autograd.mul(autograd.mul(w, w), v)))
    assert w in grads and v in grads and len(grads) == 2
    np.testing.assert_allclose(grads[w].to_numpy(), 2 * w.to_numpy() * v.to_numpy())
    np.testing.assert_allclose(grads.get(v).to_numpy(), (w.to_numpy() ** 2).sum(0))
    other = tensor.from_numpy(np.zeros((2, 2), np.float32), dev)
    assert other not in grads and grads.get(other) is None
    with pytest.raises(KeyError):
        grads[other]


def test_creator_backward_of_op_results(dev):
    """SINGA's y.creator.backward(dy) (Note [Creators of op results]), against numpy."""
    x = RNG.uniform(-0.9, 0.9, size=(3, 2)).astype(np.float32)
    s = RNG.uniform(0.5, 2.0, size=(3, 2)).astype(np.float32)
    dy = RNG.normal(size=(3, 2)).astype(np.float32)
    tx, ts, tdy = (tensor.from_numpy(a, dev) for a in (x, s, dy))
    y = autograd.asin(tx)
    dx = y.creator.backward(tdy.data)  # .data: SINGA's C++ handle, a loom Tensor itself
    assert dx.shape() == (3, 2) and tensor.from_raw_tensor(dx) is dx
    np.testing.assert_allclose(dx.to_numpy(), dy / np.sqrt(1 - x.astype(np.float64) ** 2), rtol=1e-5)
    d0, d1 = autograd.pow(ts, tx).creator.backward(tdy)
    np.testing.assert_allclose(d0.to_numpy(), dy * x * s ** (x - 1), rtol=1e-5)
    np.testing.assert_allclose(d1.to_numpy(), dy * s ** x * np.log(s), rtol=1e-5)
    assert [t.shape for t in y.creator.src] == [(3, 2)]
    assert not tx.requires_grad  # the inputs themselves are left alone
    autograd.training = False
    try:
        assert autograd.relu(tx).creator is None  # nothing is made outside training
    finally:
        autograd.training = True


def test_creator_does_not_keep_inputs_alive(dev):
    y = autograd.exp(tensor.from_numpy(np.ones(3, np.float32), dev))  # the input's only handle dies here
    assert y.creator.src == []
    with pytest.raises(loom.GraphError, match=r"\[exp\] creator.backward: an input of the op has been freed"):
        y.creator.backward()
