"""RNN and LSTM with num_layers and bidirectional (issue 17): outputs, final states and every
gradient against torch 1.13's nn.RNN / nn.LSTM with the same weights, in eager and graph mode."""
import numpy as np
import pytest

import loom
from loom import autograd, layer, tensor

torch = pytest.importorskip("torch")

T, N, IN, H = 4, 3, 5, 6
GATES = ("_i", "_f", "_g", "_o")  # torch's row blocks, in its order


def copy_weights(lay, ref, kind):
    """torch's weight_ih_l{k}{_reverse} (gates*H, in) -> loom's Wx... (in, H) per gate."""
    p = lay.get_params()
    for k in range(ref.num_layers):
        for d in range(2 if ref.bidirectional else 1):
            sfx = (f"_l{k}" if k else "") + ("_reverse" if d else "")
            wih = getattr(ref, f"weight_ih_l{k}{'_reverse' if d else ''}").detach().numpy()
            whh = getattr(ref, f"weight_hh_l{k}{'_reverse' if d else ''}").detach().numpy()
            bih = getattr(ref, f"bias_ih_l{k}{'_reverse' if d else ''}").detach().numpy()
            bhh = getattr(ref, f"bias_hh_l{k}{'_reverse' if d else ''}").detach().numpy()
            if kind == "rnn":
                p[f"Wx{sfx}"].copy_from_numpy(wih.T.copy())
                p[f"Wh{sfx}"].copy_from_numpy(whh.T.copy())
                p[f"b{sfx}"].copy_from_numpy(bih + bhh)
                continue
            for j, g in enumerate(GATES):
                rows = slice(j * H, (j + 1) * H)
                p[f"Wx{g}{sfx}"].copy_from_numpy(wih[rows].T.copy())
                p[f"Wh{g}{sfx}"].copy_from_numpy(whh[rows].T.copy())
                p[f"Bx{g}{sfx}"].copy_from_numpy(bih[rows].copy())
                p[f"Bh{g}{sfx}"].copy_from_numpy(bhh[rows].copy())


def grads_by_torch_name(lay, grads, ref, kind):
    """loom's parameter gradients rearranged into torch's parameter layout."""
    out = {}
    for name, _ in ref.named_parameters():
        kind_, _, rest = name.partition("_l")
        k, _, rev = rest.partition("_")
        sfx = (f"_l{k}" if int(k) else "") + ("_reverse" if rev else "")
        gates = ("",) if kind == "rnn" else GATES
        if kind_.startswith("bias") and kind == "rnn":
            out[name] = grads[f"b{sfx}"]
            continue
        blocks = []
        for g in gates:
            key = {"weight_ih": f"Wx{g}", "weight_hh": f"Wh{g}", "bias_ih": f"Bx{g}", "bias_hh": f"Bh{g}"}[kind_]
            v = grads[key + sfx]
            blocks.append(v.T if v.ndim == 2 else v)
        out[name] = np.concatenate(blocks, 0)
    return out


@pytest.mark.parametrize("kind", ["rnn", "lstm"])
@pytest.mark.parametrize("num_layers,bidirectional", [(1, True), (2, False), (2, True)])
@pytest.mark.parametrize("graph", [False, True])
def test_stacked_recurrent_against_torch(dev, kind, num_layers, bidirectional, graph):
    rng = np.random.default_rng(num_layers * 10 + bidirectional)
    D = 2 if bidirectional else 1
    x = rng.normal(size=(T, N, IN)).astype(np.float32)
    h0 = rng.normal(size=(num_layers * D, N, H)).astype(np.float32)
    c0 = rng.normal(size=(num_layers * D, N, H)).astype(np.float32)
    w = rng.normal(size=(T, N, D * H)).astype(np.float32)  # loss = sum(w * ys) + sum(h_T) (+ sum(c_T))

    torch.manual_seed(0)
    ref = (torch.nn.RNN if kind == "rnn" else torch.nn.LSTM)(IN, H, num_layers=num_layers,
                                                             bidirectional=bidirectional)
    tx = torch.tensor(x, requires_grad=True)
    if kind == "rnn":
        ty, th = ref(tx, torch.tensor(h0))
        tloss = (ty * torch.tensor(w)).sum() + th.sum()
    else:
        ty, (th, tc) = ref(tx, (torch.tensor(h0), torch.tensor(c0)))
        tloss = (ty * torch.tensor(w)).sum() + th.sum() + tc.sum()
    tloss.backward()

    lay = (layer.RNN if kind == "rnn" else layer.LSTM)(IN, H, num_layers=num_layers, bidirectional=bidirectional)
    xt = tensor.from_numpy(x, dev)
    xt.requires_grad = True
    xt.name = "input"
    h0t, c0t, wt = (tensor.from_numpy(a, dev) for a in (h0, c0, w))

    def step():
        if kind == "rnn":
            ys, h = lay(xt, h0t)
            finals = [h]
        else:
            ys, h, c = lay(xt, (h0t, c0t))
            finals = [h, c]
        y = autograd.cat([autograd.reshape(v, (1, N, D * H)) for v in ys], 0)
        loss = autograd.sum(autograd.mul(y, wt))
        for f in finals:
            loss = autograd.add(loss, autograd.sum(f))
        grads = {p.name: g for p, g in autograd.backward(loss)}
        return [y] + finals + [loss], grads

    lay(xt, h0t if kind == "rnn" else (h0t, c0t))  # creates the parameters
    copy_weights(lay, ref, kind)
    outs, grads = step()
    if graph:  # the captured step replayed gives the eager numbers
        eager = [o.to_numpy() for o in outs]
        with dev.buffer():
            outs, grads = step()
        dev.ExecBuffOps()
        for o, e in zip(outs, eager):
            np.testing.assert_allclose(o.to_numpy(), e, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outs[0].to_numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs[1].to_numpy(), th.detach().numpy(), rtol=1e-4, atol=1e-5)
    if kind == "lstm":
        np.testing.assert_allclose(outs[2].to_numpy(), tc.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads["input"].to_numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    named = {n: grads[n].to_numpy() for n in lay.get_params()}
    mine = grads_by_torch_name(lay, named, ref, kind)
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(mine[name], p.grad.numpy(), rtol=1e-4, atol=1e-4, err_msg=name)


def test_stacked_state_shape_errors_are_typed(dev):
    lay = layer.LSTM(IN, H, num_layers=2, bidirectional=True)
    xs = tensor.from_numpy(np.zeros((T, N, IN), np.float32), dev)
    bad = tensor.zeros((2, N, H), dev)
    with pytest.raises(loom.ShapeError, match=r"\[LSTM\] h0 is .*expected \(4, 3 or 1, 6\)"):
        lay(xs, (bad, bad))


def test_dropout_between_layers_only_in_training(dev):
    lay = layer.RNN(IN, H, num_layers=2, dropout=0.5)
    xs = tensor.from_numpy(np.ones((T, N, IN), np.float32), dev)
    h0 = tensor.zeros((2, N, H), dev)
    lay.eval()
    a = lay(xs, h0)[0][-1].to_numpy()
    b = lay(xs, h0)[0][-1].to_numpy()
    np.testing.assert_array_equal(a, b)  # eval: no dropout, deterministic
    lay.train()
    c = lay(xs, h0)[0][-1].to_numpy()
    assert not np.allclose(a, c)


def test_positional_order_is_singas(dev):
    """SINGA's RNN takes num_layers third, its LSTM nonlinearity third."""
    rnn = layer.RNN(IN, H, 2, "relu")
    assert rnn.num_layers == 2 and rnn.nonlinearity == "relu"
    lstm = layer.LSTM(IN, H, "tanh", 3)
    assert lstm.num_layers == 3
    with pytest.raises(loom.ValueError, match=r"\[LSTM\] the LSTM's activations are fixed"):
        layer.LSTM(IN, H, "relu")
