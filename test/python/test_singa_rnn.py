"""SINGA's RNN and LSTM layers (issue 17 item 4): forward against a numpy reference, backward
through time against central differences, typed errors."""
import numpy as np
import pytest

import loom
from loom import autograd, layer, tensor

RNG = np.random.default_rng(4)
T, N, IN, H = 3, 2, 3, 4


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def lstm_ref(xs, h, c, p):
    ys = []
    for x in xs:
        gate = {g: x @ p[f"Wx{g}"] + h @ p[f"Wh{g}"] + p[f"Bx{g}"] + p[f"Bh{g}"] for g in ("_i", "_f", "_o", "_g")}
        c = sigmoid(gate["_f"]) * c + sigmoid(gate["_i"]) * np.tanh(gate["_g"])
        h = sigmoid(gate["_o"]) * np.tanh(c)
        ys.append(h)
    return ys, h, c


def rnn_ref(xs, h, p, act):
    ys = []
    for x in xs:
        h = act(x @ p["Wx"] + h @ p["Wh"] + p["b"])
        ys.append(h)
    return ys, h


def inputs(dev, dtype=np.float64):
    xs = RNG.normal(size=(T, N, IN)).astype(dtype)
    h0 = RNG.normal(size=(N, H)).astype(dtype)
    c0 = RNG.normal(size=(N, H)).astype(dtype)
    return xs, h0, c0, [tensor.from_numpy(x, dev) for x in xs], tensor.from_numpy(h0, dev), tensor.from_numpy(c0, dev)


def randomise(lay):
    """Non-zero biases too, so that every parameter matters in the reference."""
    for name, p in lay.get_params().items():
        p.copy_from_numpy(RNG.normal(scale=0.5, size=p.shape))
    return {k: v.to_numpy() for k, v in lay.get_params().items()}


def test_lstm_forward_against_numpy(dev):
    xs, h0, c0, txs, th0, tc0 = inputs(dev)
    lstm = layer.LSTM(IN, H)
    assert not lstm.initialized
    lstm(txs, (th0, tc0))
    assert sorted(lstm.get_params()) == sorted(f"{w}{g}" for w in ("Wx", "Wh", "Bx", "Bh")
                                               for g in ("_i", "_f", "_o", "_g"))
    p = randomise(lstm)
    ys, h, c = lstm(txs, (th0, tc0))
    rys, rh, rc = lstm_ref(xs, h0, c0, p)
    assert len(ys) == T
    for y, ry in zip(ys, rys):
        np.testing.assert_allclose(y.to_numpy(), ry, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(c.to_numpy(), rc, rtol=1e-10, atol=1e-12)
    # one (T, N, IN) tensor is the same as the list of its steps
    ys3, h3, _ = lstm(tensor.from_numpy(xs, dev), (th0, tc0))
    np.testing.assert_array_equal(h3.to_numpy(), h.to_numpy())


@pytest.mark.parametrize("nonlinearity, act", [("tanh", np.tanh), ("relu", lambda v: np.maximum(v, 0))])
def test_rnn_forward_against_numpy(dev, nonlinearity, act):
    xs, h0, _, txs, th0, _ = inputs(dev)
    rnn = layer.RNN(IN, H, nonlinearity=nonlinearity)
    rnn(txs, th0)
    p = randomise(rnn)
    ys, h = rnn(txs, th0)
    rys, rh = rnn_ref(xs, h0, p, act)
    for y, ry in zip(ys, rys):
        np.testing.assert_allclose(y.to_numpy(), ry, rtol=1e-10, atol=1e-12)


def test_lstm_backward_through_time(dev):
    """Gradients of sum(r_t * y_t) over all steps for every parameter, x_0 and h0, against
    central differences of the reference (float64)."""
    xs, h0, c0, _, _, _ = inputs(dev)
    lstm = layer.LSTM(IN, H)
    lstm([tensor.from_numpy(x, dev) for x in xs], (tensor.from_numpy(h0, dev), tensor.from_numpy(c0, dev)))
    p = randomise(lstm)
    r = RNG.normal(size=(T, N, H))
    txs = [tensor.from_numpy(x, dev, requires_grad=True) for x in xs]
    th0 = tensor.from_numpy(h0, dev, requires_grad=True)
    ys, _, _ = lstm(txs, (th0, tensor.from_numpy(c0, dev)))
    loss = autograd.sum(*[autograd.sum(autograd.mul(y, tensor.from_numpy(rt, dev))) for y, rt in zip(ys, r)])
    grads = {q._block_id(): g.to_numpy() for q, g in autograd.backward(loss)}

    def objective(pp, xx, hh):
        return sum((y * rt).sum() for y, rt in zip(lstm_ref(xx, hh, c0, pp)[0], r))

    eps = 1e-6
    for name, value in p.items():
        got = grads[lstm.get_params()[name]._block_id()]
        for k in [(0,) * value.ndim, tuple(d - 1 for d in value.shape)]:
            hi = {**p, name: value.copy()}
            lo = {**p, name: value.copy()}
            hi[name][k] += eps
            lo[name][k] -= eps
            num = (objective(hi, xs, h0) - objective(lo, xs, h0)) / (2 * eps)
            assert got[k] == pytest.approx(num, rel=1e-5, abs=1e-7), (name, k)
    for what, base, t in (("x0", xs, txs[0]), ("h0", h0, th0)):
        got = grads[t._block_id()]
        for k in [(0, 0), (N - 1, 1)]:
            if what == "x0":
                hi, lo = xs.copy(), xs.copy()
                hi[(0,) + k] += eps
                lo[(0,) + k] -= eps
                num = (objective(p, hi, h0) - objective(p, lo, h0)) / (2 * eps)
            else:
                hi, lo = h0.copy(), h0.copy()
                hi[k] += eps
                lo[k] -= eps
                num = (objective(p, xs, hi) - objective(p, xs, lo)) / (2 * eps)
            assert got[k] == pytest.approx(num, rel=1e-5, abs=1e-7), (what, k)


def test_recurrent_errors_are_typed(dev):
    _, _, _, txs, th0, tc0 = inputs(dev)
    with pytest.raises(loom.ValueError, match=r"\[LSTM\] loom's LSTM takes steps first"):
        layer.LSTM(IN, H, batch_first=True)
    with pytest.raises(loom.ValueError, match=r"\[RNN\] dropout must be a number in \[0, 1\)"):
        layer.RNN(IN, H, num_layers=2, dropout=1.5)
    with pytest.raises(loom.ValueError, match=r"\[RNN\] nonlinearity must be 'tanh' or 'relu'"):
        layer.RNN(IN, H, nonlinearity="gelu")
    with pytest.raises(loom.ShapeError, match=r"\[RNN\] step 1 is .*every step must be \(N, 3\)"):
        layer.RNN(IN, H)([txs[0], tensor.from_numpy(np.zeros((N, 5)), dev)], th0)
    with pytest.raises(loom.ShapeError, match=r"\[LSTM\] c0 is .*expected \(2 or 1, 4\)"):
        layer.LSTM(IN, H)(txs, (th0, tensor.from_numpy(np.zeros((N, 3)), dev)))
    with pytest.raises(loom.TypeError, match=r"\[LSTM\] the initial state is a pair"):
        layer.LSTM(IN, H)(txs, th0)
