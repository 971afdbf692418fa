"""SINGA's optimizer API (issue 17 item 6): SGD's positional order, both forms of apply, step,
get_states / set_states. Every update is checked against a numpy reference."""
import numpy as np
import pytest

import loom
from loom import opt, tensor

RNG = np.random.default_rng(7)
P0 = RNG.normal(size=(3, 4)).astype(np.float32)
GRADS = [RNG.normal(size=(3, 4)).astype(np.float32) for _ in range(3)]


def sgd_reference(p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    """SGD in float64 numpy, the formulas of opt.SGD's docstring."""
    p, v = p.astype(np.float64), np.zeros(p.shape)
    for g in grads:
        d = g + weight_decay * p
        if momentum > 0:
            v = momentum * v + (1 - dampening) * d
            p = p - lr * (d + momentum * v if nesterov else v)
        else:
            p = p - lr * d
    return p


def run(sgd, dev, form="singa3"):
    p = tensor.from_numpy(P0.copy(), dev)
    for g in GRADS:
        gt = tensor.from_numpy(g, dev)
        if form == "singa3":
            sgd.apply("w", p, gt)
        else:
            sgd.apply(0, gt, p, "w")
        sgd.step()
    return p.to_numpy()


def test_sgd_positional_order_is_singas(dev):
    """SGD(lr, momentum, dampening, weight_decay, nesterov): the third is dampening."""
    out = run(opt.SGD(0.1, 0.9, 0.5), dev)
    np.testing.assert_allclose(out, sgd_reference(P0, GRADS, 0.1, 0.9, dampening=0.5), rtol=1e-5, atol=1e-6)
    # what the old order (third = weight decay) would have computed differs
    assert not np.allclose(out, sgd_reference(P0, GRADS, 0.1, 0.9, weight_decay=0.5), atol=1e-3)
    out = run(opt.SGD(0.1, 0.9, 0.5, 0.01), dev)
    np.testing.assert_allclose(out, sgd_reference(P0, GRADS, 0.1, 0.9, 0.5, 0.01), rtol=1e-5, atol=1e-6)
    out = run(opt.SGD(0.05, 0.9, 0.0, 0.01, True), dev)
    np.testing.assert_allclose(out, sgd_reference(P0, GRADS, 0.05, 0.9, 0.0, 0.01, True), rtol=1e-5, atol=1e-6)
    out = run(opt.SGD(lr=0.1, momentum=0.9, weight_decay=1e-2, dampening=0.25), dev)
    np.testing.assert_allclose(out, sgd_reference(P0, GRADS, 0.1, 0.9, 0.25, 1e-2), rtol=1e-5, atol=1e-6)


def test_apply_forms_agree(dev):
    a = run(opt.SGD(0.1, 0.9, 0.5, 0.01), dev, "singa3")
    b = run(opt.SGD(0.1, 0.9, 0.5, 0.01), dev, "seed")
    np.testing.assert_array_equal(a, b)
    # keywords of both forms
    p = tensor.from_numpy(P0.copy(), dev)
    g = tensor.from_numpy(GRADS[0], dev)
    opt.SGD(0.1).apply(param_name="w", param_value=p, param_grad=g)
    opt.SGD(0.1).apply(0, grad=g, param=p)
    np.testing.assert_allclose(p.to_numpy(), P0 - 0.2 * GRADS[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("call", [
    lambda s, p, g: s.apply(0.5, g, p),          # a float first: neither form
    lambda s, p, g: s.apply(p, g),               # a Tensor first
    lambda s, p, g: s.apply("w", p, g, "name"),  # a fourth argument after a name
    lambda s, p, g: s.apply(True, g, p),         # a bool is not an epoch
    lambda s, p, g: s.apply("w", p, 3.0),        # a gradient that is no tensor
    lambda s, p, g: s.apply(0, g, p, 5),         # a name that is no str
], ids=["float", "tensor", "four", "bool", "grad", "name"])
def test_apply_ambiguous_is_typed(dev, call):
    p, g = tensor.ones((2,), dev), tensor.ones((2,), dev)
    with pytest.raises(loom.TypeError, match=r"\[optimizer.apply\]"):
        call(opt.SGD(0.1), p, g)
    np.testing.assert_array_equal(p.to_numpy(), [1, 1])  # nothing was updated


def test_sgd_bad_arguments_are_typed():
    with pytest.raises(loom.TypeError, match=r"\[SGD\] dampening"):
        opt.SGD(0.1, 0.9, "0.5")
    with pytest.raises(loom.DTypeError, match=r"\[SGD\] dtype"):
        opt.SGD(0.1, dtype="int32")
    with pytest.raises(loom.ValueError, match=r"\[sgd\] weight decay"):
        opt.SGD(0.1, 0.9, 0.0, -1.0)


def test_step_and_states_round_trip(dev):
    sgd = opt.SGD(0.1, 0.9, 0.5)
    p = tensor.from_numpy(P0.copy(), dev)
    sgd.apply("w", p, tensor.from_numpy(GRADS[0], dev))
    sgd.step()
    states = sgd.get_states()  # SINGA's layout
    assert states["step_counter"] == 1 and states["lr"] == pytest.approx(0.1)
    assert set(states["moments"]) == {"w"}
    buf = states["moments"]["w"].to_numpy()
    np.testing.assert_allclose(buf, 0.5 * GRADS[0], rtol=1e-6)  # (1 - dampening) * g
    # a fresh optimizer continues exactly where the first one is
    fresh = opt.SGD(0.1, 0.9, 0.5)
    fresh.set_states(states)
    assert fresh.step_count == 1
    q = tensor.from_numpy(p.to_numpy(), dev)
    for o, t in ((sgd, p), (fresh, q)):
        o.apply("w", t, tensor.from_numpy(GRADS[1], dev))
    np.testing.assert_array_equal(p.to_numpy(), q.to_numpy())
    np.testing.assert_allclose(q.to_numpy(), sgd_reference(P0, GRADS[:2], 0.1, 0.9, 0.5), rtol=1e-5, atol=1e-6)
    # get_states copies: changing the optimizer later leaves the dict's tensors alone
    np.testing.assert_array_equal(states["moments"]["w"].to_numpy(), buf)


def test_update_is_apply_by_name(dev):
    a, b = opt.SGD(0.1, 0.9), opt.SGD(0.1, 0.9)
    p, q = tensor.from_numpy(P0.copy(), dev), tensor.from_numpy(P0.copy(), dev)
    p.name = "w"
    for g in GRADS:
        a.update(p, tensor.from_numpy(g, dev))
        b.apply("w", q, tensor.from_numpy(g, dev))
    np.testing.assert_array_equal(p.to_numpy(), q.to_numpy())
    assert set(a.get_states()["moments"]) == {"w"}
    with pytest.raises(loom.TypeError, match=r"\[optimizer.update\]"):
        a.update(P0, q)


def test_set_states_bad_input_is_typed(dev):
    sgd = opt.SGD(0.1, 0.9)
    with pytest.raises(loom.TypeError, match=r"\[optimizer\] set_states"):
        sgd.set_states([1, 2])
    with pytest.raises(loom.TypeError, match=r"\[optimizer\] set_states"):
        sgd.set_states({"lr": 0.1, "moments": {"w": "x"}})
    with pytest.raises(loom.TypeError, match=r"\[optimizer\] set_states"):
        sgd.set_states({"lr": 0.1, "w/momentum": tensor.ones((3, 4), dev)})
    with pytest.raises(loom.ValueError, match="no 'lr'"):
        sgd.set_states({})
    plain = opt.SGD(0.1)  # keeps no momentum: restoring one is refused, nothing changes
    with pytest.raises(loom.IOError):
        plain.set_states({"lr": 0.2, "moments": {"w": tensor.ones((3, 4), dev)}})
    assert plain.lr == pytest.approx(0.1)


def test_adam_states_round_trip(dev):
    adam = opt.Adam(0.01)
    p = tensor.from_numpy(P0.copy(), dev)
    adam.apply("w", p, tensor.from_numpy(GRADS[0], dev))
    states = adam.get_states()
    assert set(states["m"]) == {"w"} and set(states["v"]) == {"w"}
    np.testing.assert_allclose(states["m"]["w"].to_numpy(), 0.1 * GRADS[0], rtol=1e-5)
    np.testing.assert_allclose(states["v"]["w"].to_numpy(), 0.001 * GRADS[0] ** 2, rtol=1e-4)
    fresh = opt.Adam(0.01)
    fresh.set_states(states)
    q = tensor.from_numpy(p.to_numpy(), dev)
    for o, t in ((adam, p), (fresh, q)):
        o.apply("w", t, tensor.from_numpy(GRADS[1], dev))
    np.testing.assert_array_equal(p.to_numpy(), q.to_numpy())
