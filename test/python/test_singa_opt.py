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


# ---- AdaGrad and RMSProp (loom ops, Optimizer(lr, dtype)) and Adam's SINGA order ----

def adagrad_reference(p, grads, lr, epsilon=1e-8, weight_decay=0.0):
    p, h = p.astype(np.float64), np.zeros(p.shape)
    for g in grads:
        g = g + weight_decay * p
        h = h + g * g
        p = p - lr * g / np.sqrt(h + epsilon)
    return p


def rmsprop_reference(p, grads, lr, rho=0.9, epsilon=1e-8, weight_decay=0.0):
    p, r = p.astype(np.float64), np.zeros(p.shape)
    for g in grads:
        g = g + weight_decay * p
        r = rho * r + (1 - rho) * g * g
        p = p - lr * g / np.sqrt(r + epsilon)
    return p


@pytest.mark.parametrize("make, ref", [
    (lambda: opt.AdaGrad(0.1), lambda p, gs: adagrad_reference(p, gs, 0.1)),
    (lambda: opt.AdaGrad(0.05, 1e-6, 0.01), lambda p, gs: adagrad_reference(p, gs, 0.05, 1e-6, 0.01)),
    (lambda: opt.RMSProp(0.01), lambda p, gs: rmsprop_reference(p, gs, 0.01)),
    (lambda: opt.RMSProp(0.02, 0.8, 1e-6, 0.01), lambda p, gs: rmsprop_reference(p, gs, 0.02, 0.8, 1e-6, 0.01)),
])
@pytest.mark.parametrize("form", ["singa3", "seed"])
def test_adagrad_rmsprop_against_numpy(dev, make, ref, form):
    o = make()
    p = run(o, dev, form)
    np.testing.assert_allclose(p, ref(P0, GRADS), rtol=1e-5, atol=1e-6)


def test_python_optimizer_states_round_trip(dev):
    a = opt.RMSProp(0.01, 0.8)
    p = tensor.from_numpy(P0.copy(), dev)
    for g in GRADS[:2]:
        a.apply("w", p, tensor.from_numpy(g, dev))
        a.step()
    states = a.get_states()
    assert sorted(states) == ["lr", "running_average", "step_counter"] and states["step_counter"] == 2
    b = opt.RMSProp(0.5, 0.8)
    b.set_states(states)
    assert b.lr == 0.01 and b.step_count == 2
    q = tensor.from_numpy(p.to_numpy(), dev)
    a.apply("w", p, tensor.from_numpy(GRADS[2], dev))
    b.apply("w", q, tensor.from_numpy(GRADS[2], dev))
    np.testing.assert_array_equal(p.to_numpy(), q.to_numpy())
    np.testing.assert_allclose(p.to_numpy(), rmsprop_reference(P0, GRADS, 0.01, 0.8), rtol=1e-5, atol=1e-6)
    with pytest.raises(loom.IOError, match=r"\[RMSProp\] set_states: unknown state 'history'"):
        b.set_states({"lr": 0.1, "history": {}})
    with pytest.raises(loom.IOError, match=r"\[RMSProp\] set_states: running_average 'w' is"):
        b.set_states({"lr": 0.1, "running_average": {"w": tensor.from_numpy(np.zeros(3, np.float32), dev)}})


def test_python_optimizer_bad_arguments_are_typed(dev):
    with pytest.raises(loom.ValueError, match=r"\[AdaGrad\] lr -1.0 must be a positive"):
        opt.AdaGrad(-1.0)
    with pytest.raises(loom.ValueError, match=r"\[RMSProp\] rho 1.0 must lie in \[0, 1\)"):
        opt.RMSProp(0.1, 1.0)
    with pytest.raises(loom.DTypeError, match=r"\[AdaGrad\] dtype must be a float dtype"):
        opt.AdaGrad(0.1, dtype="int32")
    with pytest.raises(loom.TypeError, match=r"\[RMSProp\] epsilon must be a number"):
        opt.RMSProp(0.1, 0.9, "tiny")
    with pytest.raises(loom.ShapeError, match=r"\[AdaGrad\] parameter .* and gradient .* differ"):
        opt.AdaGrad().apply("w", tensor.from_numpy(P0, dev), tensor.from_numpy(P0[:2].copy(), dev))
    with pytest.raises(loom.DTypeError, match=r"\[Adam\] dtype must be a float dtype"):
        opt.Adam(0.1, 0.9, 0.999, 1e-8, 0.0, "int32")


def test_optimizer_base_subclass_the_singa_way(dev):
    """A user's optimizer from Optimizer(lr): new_value in loom ops (plain SGD here)."""
    class PlainSGD(opt.Optimizer):
        def new_value(self, param, grad, state):
            return loom.core.sub(param, loom.core.mul(self.lr_tensor(param), grad))

    p = run(PlainSGD(0.1), dev)
    np.testing.assert_allclose(p, sgd_reference(P0, GRADS, 0.1), rtol=1e-5, atol=1e-6)


def train_with(make_opt, dev, use_graph, steps=6):
    from loom import autograd, layer, model

    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.fc1, self.relu, self.fc2 = layer.Linear(8), layer.ReLU(), layer.Linear(3)

        def forward(self, x):
            return self.fc2(self.relu(self.fc1(x)))

        def train_one_batch(self, x, y):
            out = self.forward(x)
            loss = autograd.softmax_cross_entropy(out, y)
            self.optimizer(loss)
            return out, loss

    dev.SetRandSeed(5)
    rng = np.random.default_rng(3)
    m = Net()
    m.set_optimizer(make_opt())
    tx, ty = tensor.Tensor((16, 4), dev), tensor.Tensor((16,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=use_graph, sequential=True)
    losses = []
    for i in range(steps):
        if i == 3:
            m.optimizer.set_learning_rate(m.optimizer.lr / 4)  # reaches the replays
        tx.copy_from_numpy(rng.normal(size=(16, 4)).astype(np.float32))
        ty.copy_from_numpy(rng.integers(0, 3, 16).astype(np.int32))
        _, loss = m(tx, ty)
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("make_opt", [lambda: opt.AdaGrad(0.1), lambda: opt.RMSProp(0.01, 0.9, 1e-8, 1e-4)])
def test_python_optimizers_in_a_captured_step(dev, make_opt):
    eager = train_with(make_opt, dev, False)
    graph = train_with(make_opt, dev, True)
    assert graph == pytest.approx(eager, rel=1e-5)
    assert eager[-1] < eager[0]
