"""Attention, the transformer block and GPT against torch 1.13 written out from identical weights
(torch 1.13 has no fused attention: scores, mask, softmax, product, as the definition says):
forward and every parameter's gradient in float64 and float32, a graph step equal to the eager
step bitwise, and a short training run tracking torch's loss curve step by step."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import loom
from loom import autograd, layer, model, opt, tensor

RNG = np.random.default_rng(7)
TORCH_DT = {"float64": torch.float64, "float32": torch.float32}
TOL = {"float64": dict(rtol=1e-9, atol=1e-11), "float32": dict(rtol=2e-4, atol=2e-5)}


def torch_attention(q, k, v, causal, scale=None):
    s = (q @ k.transpose(-1, -2)) * (scale or 1 / math.sqrt(q.shape[-1]))
    if causal:
        tq, tk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(~torch.ones(tq, tk, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


def torch_gpt(p, tokens, layers, heads, dim):
    """GPT-2 from loom's parameters p {name: torch tensor} (Linear weights are (in, out))."""
    b, t = tokens.shape
    h = p["wte.weight"][tokens] + p["wpe"][:t]
    for i in range(layers):
        pre = f"h.{i}."
        a = F.layer_norm(h, (dim,), p[pre + "ln1.gamma"], p[pre + "ln1.beta"], 1e-5)
        qkv = (a @ p[pre + "attn.qkv.weight"] + p[pre + "attn.qkv.bias"]).view(b, t, 3, heads, dim // heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        y = torch_attention(q, k, v, True).transpose(1, 2).reshape(b, t, dim)
        h = h + y @ p[pre + "attn.proj.weight"] + p[pre + "attn.proj.bias"]
        m = F.layer_norm(h, (dim,), p[pre + "ln2.gamma"], p[pre + "ln2.beta"], 1e-5)
        m = F.gelu(m @ p[pre + "fc1.weight"] + p[pre + "fc1.bias"], approximate="tanh")
        h = h + m @ p[pre + "fc2.weight"] + p[pre + "fc2.bias"]
    h = F.layer_norm(h, (dim,), p["ln_f.gamma"], p["ln_f.beta"], 1e-5).reshape(b * t, dim)
    return h @ p["wte.weight"].T


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_op_against_torch(dev, dtype, causal):
    shapes = [(2, 3, 70, 8), (2, 3, 70, 8), (2, 3, 70, 5)]  # two blocks of the CPU kernel
    arrays = [RNG.normal(size=s).astype(dtype) for s in shapes]
    ts = [tensor.from_numpy(a, dev, requires_grad=True) for a in arrays]
    y = autograd.attention(*ts, causal=causal)
    r = RNG.normal(size=y.shape).astype(dtype)
    grads = autograd.gradients(y, tensor.from_numpy(r, dev))
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = torch_attention(*tt, causal)
    np.testing.assert_allclose(y.to_numpy(), ty.detach().numpy(), **TOL[dtype])
    (ty * torch.tensor(r)).sum().backward()
    for t, torch_t in zip(ts, tt):
        np.testing.assert_allclose(grads[t].to_numpy(), torch_t.grad.numpy(), **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("w_is_table", [True, False])
def test_linear_cross_entropy_against_torch(dev, dtype, w_is_table):
    """Note [Cross-entropy fused with the head's product]: the loss of h w^T (or h w) and its
    gradients, as torch's cross_entropy of the product computes them."""
    n, d, v = 23, 8, 70
    h = RNG.normal(size=(n, d)).astype(dtype)
    w = RNG.normal(size=(v, d) if w_is_table else (d, v)).astype(dtype)
    y = RNG.integers(0, v, size=n).astype(np.int32)
    th, tw = torch.tensor(h, requires_grad=True), torch.tensor(w, requires_grad=True)
    lh, lw = tensor.from_numpy(h, dev, requires_grad=True), tensor.from_numpy(w, dev, requires_grad=True)
    loss = autograd.linear_cross_entropy(lh, lw, tensor.from_numpy(y, dev), w_is_table)
    assert loss.shape == (1,)
    grads = autograd.gradients(loss)
    tl = F.cross_entropy(th @ (tw.T if w_is_table else tw), torch.tensor(y, dtype=torch.long))
    tl.backward()
    np.testing.assert_allclose(loss.to_numpy()[0], tl.item(), **TOL[dtype])
    np.testing.assert_allclose(grads[lh].to_numpy(), th.grad.numpy(), **TOL[dtype])
    np.testing.assert_allclose(grads[lw].to_numpy(), tw.grad.numpy(), **TOL[dtype])
    with pytest.raises(loom.ValueError, match=r"\[linear_cross_entropy\] label 70 in row 0 is outside \[0, 70\)"):
        autograd.linear_cross_entropy(lh, lw, tensor.from_numpy(np.full(n, 70, np.int32), dev), w_is_table)


def make_gpt(dev, dtype, vocab=50, context=12, layers=2, dim=16, heads=2):
    g = layer.GPT(vocab, context=context, num_layers=layers, dim=dim, num_heads=heads, device=dev, dtype=dtype)
    return g, dict(g._impl.params())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gpt_forward_and_every_gradient_match_torch(dev, dtype):
    g, params = make_gpt(dev, dtype)
    # random LayerNorm gains and biases too, so that every parameter's gradient is distinctive
    for name, p in params.items():
        p.copy_from_numpy(RNG.normal(scale=0.3 if "weight" in name or name == "wpe" else 0.5,
                                     size=p.shape).astype(dtype) + (1.0 if name.endswith("gamma") else 0.0))
    tokens = RNG.integers(0, 50, size=(3, 12)).astype(np.int32)
    targets = RNG.integers(0, 50, size=(3 * 12,)).astype(np.int32)
    logits = g(tensor.from_numpy(tokens, dev))
    loss = autograd.softmax_cross_entropy(logits, tensor.from_numpy(targets, dev))
    grads = autograd.gradients(loss)
    tp = {n: torch.tensor(p.to_numpy(), requires_grad=True) for n, p in params.items()}
    tlogits = torch_gpt(tp, torch.tensor(tokens, dtype=torch.long), 2, 2, 16)
    tloss = F.cross_entropy(tlogits, torch.tensor(targets, dtype=torch.long))
    np.testing.assert_allclose(logits.to_numpy(), tlogits.detach().numpy(), **TOL[dtype])
    np.testing.assert_allclose(loss.to_numpy()[0], tloss.item(), **TOL[dtype])
    tloss.backward()
    assert len(params) == 4 + 12 * 2
    for name, p in params.items():
        np.testing.assert_allclose(grads[p].to_numpy(), tp[name].grad.numpy(), err_msg=name, **TOL[dtype])


class _Lm(model.Model):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, autograd.reshape(y, (-1,)))
        self.optimizer(loss)
        return out, loss


def _train(dev, use_graph, steps, batches, lr=3e-3):
    dev.SetRandSeed(99)
    g, params = make_gpt(dev, "float32")
    m = _Lm(g)
    m.set_optimizer(opt.Adam(lr=lr))
    x0 = tensor.from_numpy(batches[0][0], dev)
    y0 = tensor.from_numpy(batches[0][1], dev)
    m.compile([x0], is_train=True, use_graph=use_graph, sequential=True)
    losses = []
    for i in range(steps):
        x, y = batches[i % len(batches)]
        _, loss = m.train_one_batch(tensor.from_numpy(x, dev), tensor.from_numpy(y, dev))
        losses.append(float(loss.to_numpy()[0]))
    return losses, {n: p.to_numpy() for n, p in params.items()}


def _batches(n=4):
    text = RNG.integers(0, 50, size=2000)
    out = []
    for _ in range(n):
        starts = RNG.integers(0, len(text) - 13, size=4)
        out.append((np.stack([text[s:s + 12] for s in starts]).astype(np.int32),
                    np.stack([text[s + 1:s + 13] for s in starts]).astype(np.int32)))
    return out


def test_gpt_graph_step_equals_eager_bitwise(dev):
    batches = _batches()
    eager_losses, eager_w = _train(dev, False, 6, batches)
    dev.ResetGraph()
    graph_losses, graph_w = _train(dev, True, 6, batches)
    assert eager_losses == graph_losses
    for n in eager_w:
        assert np.array_equal(eager_w[n], graph_w[n]), n


def test_gpt_training_tracks_torch(dev):
    """200 Adam steps from identical weights on identical batches: the loss curves agree step by
    step (float32 on both sides: differences in summation order compound slowly)."""
    batches = _batches(6)
    dev.SetRandSeed(5)
    g, params = make_gpt(dev, "float32")
    m = _Lm(g)
    m.set_optimizer(opt.Adam(lr=3e-3))
    m.compile([tensor.from_numpy(batches[0][0], dev)], is_train=True, use_graph=True, sequential=True)
    tp = {n: torch.tensor(p.to_numpy(), requires_grad=True) for n, p in params.items()}
    topt = torch.optim.Adam(tp.values(), lr=3e-3, eps=1e-8)
    ours, theirs = [], []
    for i in range(200):
        x, y = batches[i % len(batches)]
        _, loss = m.train_one_batch(tensor.from_numpy(x, dev), tensor.from_numpy(y, dev))
        ours.append(float(loss.to_numpy()[0]))
        topt.zero_grad()
        tl = F.cross_entropy(torch_gpt(tp, torch.tensor(x, dtype=torch.long), 2, 2, 16),
                             torch.tensor(y.reshape(-1), dtype=torch.long))
        tl.backward()
        topt.step()
        theirs.append(tl.item())
    np.testing.assert_allclose(ours[:30], theirs[:30], rtol=2e-3)
    np.testing.assert_allclose(ours, theirs, rtol=2e-2)
    assert ours[-1] < ours[0] - 1.0, ours  # it learns the batches


def test_native_gpt_that_keeps_no_output_fuses_its_head_with_the_loss(dev):
    """Note [Cross-entropy fused with the head's product]: NativeModel.compile(keep_output=False)
    on the C++ GPT runs its head and loss as one linear_cross_entropy, which trains as the plain
    product and loss do."""
    batches = _batches(2)
    losses, ops = {}, {}
    for keep in (True, False):
        dev.SetRandSeed(7)
        g, _ = make_gpt(dev, "float32")
        m = model.NativeModel(g, opt.Adam(lr=3e-3))
        m.compile([tensor.from_numpy(batches[0][0], dev)], is_train=True, use_graph=True, keep_output=keep)
        losses[keep] = [m.train_one_batch(tensor.from_numpy(x, dev), tensor.from_numpy(y.reshape(-1), dev))[1].item()
                        for x, y in batches * 2]
        ops[keep] = list(m.graph().op_names())
    assert "linear_cross_entropy" in ops[False] and "softmax_cross_entropy" not in ops[False]
    assert "softmax_cross_entropy" in ops[True] and "linear_cross_entropy" not in ops[True]
    np.testing.assert_allclose(losses[False], losses[True], rtol=1e-5)


def test_gpt_rejects_a_sequence_longer_than_its_context(dev):
    g, _ = make_gpt(dev, "float32", context=8)
    with pytest.raises(loom.ShapeError, match=r"\[Gpt\] sequence length 9 must be in \[1, 8\]"):
        g(tensor.from_numpy(np.zeros((2, 9), np.int32), dev))


def test_attention_rejects_mismatched_heads(dev):
    q = tensor.from_numpy(np.zeros((2, 3, 4, 8), np.float32), dev)
    k = tensor.from_numpy(np.zeros((2, 2, 4, 8), np.float32), dev)
    with pytest.raises(loom.ShapeError, match=r"\[attention\] q \(2, 3, 4, 8\), k \(2, 2, 4, 8\)"):
        autograd.attention(q, k, k)


@pytest.mark.parametrize("decay_on,bias_decays", [("all", True), ("matrices", False)])
def test_adamw_decays_the_chosen_parameters(dev, decay_on, bias_decays):
    """With zero gradients Adam's step is zero, so what moves is the decoupled decay alone:
    p -> p (1 - lr wd), on every parameter or only on those of two or more dimensions."""
    w = tensor.from_numpy(np.full((3, 2), 2.0, np.float32), dev)
    b = tensor.from_numpy(np.full((2,), 2.0, np.float32), dev)
    o = opt.AdamW(lr=0.1, weight_decay=0.5, decay_on=decay_on)
    for p in (w, b):
        o.apply("p%d" % len(p.shape), p, tensor.from_numpy(np.zeros(p.shape, np.float32), dev))
    np.testing.assert_allclose(w.to_numpy(), 2.0 * (1 - 0.05), rtol=1e-6)
    np.testing.assert_allclose(b.to_numpy(), 2.0 * (1 - 0.05) if bias_decays else 2.0, rtol=1e-6)


def test_adam_rejects_an_unknown_decay_rule():
    with pytest.raises(loom.ValueError, match=r"\[Adam\] decay_on must be 'all' or 'matrices', got 'biases'"):
        opt.AdamW(decay_on="biases")
