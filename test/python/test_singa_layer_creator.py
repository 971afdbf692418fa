"""SINGA's y.creator on the results of loom's C++ layers (Note [Creators of layer results]):
creator.backward(dy) gives (dx, dW, db), checked against torch."""
import gc

import numpy as np
import pytest
import torch

import loom
from loom import autograd, layer, tensor

RNG = np.random.default_rng(5)


def _t(a):
    return tensor.Tensor(data=np.ascontiguousarray(a, np.float32))


def _params(lyr):
    return [tensor.to_numpy(p).astype(np.float64) for p in lyr.get_params().values()]


def test_conv2d_creator_matches_torch():
    conv = layer.Conv2d(3, 2, 2, stride=1, padding=1)
    x = RNG.standard_normal((2, 3, 4, 4))
    xt = _t(x)
    y = conv(xt)
    dy = RNG.standard_normal(y.shape)
    dx, dw, db = y.creator.backward(_t(dy))

    w, b = _params(conv)
    tx = torch.tensor(x, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, tb, padding=1)
    np.testing.assert_allclose(tensor.to_numpy(y), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    ty.backward(torch.tensor(dy))
    for got, ref in ((dx, tx), (dw, tw), (db, tb)):
        np.testing.assert_allclose(tensor.to_numpy(got), ref.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_singa_form_conv2d_and_linear_creators():
    conv = layer.Conv2d(4, 3)  # SINGA's form: sized at the first call, a Python layer
    x = RNG.standard_normal((2, 2, 5, 5))
    xt = _t(x)
    y = conv(xt)
    dx, dw, db = y.creator.backward()  # dy = ones
    w, b = _params(conv)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    torch.nn.functional.conv2d(tx, tw, tb).sum().backward()
    for got, ref in ((dx, tx), (dw, tw), (db, tb)):
        np.testing.assert_allclose(tensor.to_numpy(got), ref.grad.numpy(), rtol=1e-4, atol=1e-5)

    relu_conv = layer.Conv2d(4, 3, activation="RELU")  # the whole layer: (dx, dW, db)
    r = relu_conv(xt)
    dr = RNG.standard_normal(r.shape)
    dx, dw, db = r.creator.backward(_t(dr))
    w, b = _params(relu_conv)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    torch.relu(torch.nn.functional.conv2d(tx, tw, tb)).backward(torch.tensor(dr))
    for got, ref in ((dx, tx), (dw, tw), (db, tb)):
        np.testing.assert_allclose(tensor.to_numpy(got), ref.grad.numpy(), rtol=1e-4, atol=1e-5)

    lin = layer.Linear(3, 2)
    a = RNG.standard_normal((4, 3))
    at = _t(a)
    z = lin(at)
    dz = RNG.standard_normal((4, 2))
    da, dW, dB = z.creator.backward(_t(dz))
    W, B = _params(lin)  # W: (in, out), SINGA's layout
    ta, tW, tB = (torch.tensor(v, requires_grad=True) for v in (a, W, B))
    (ta @ tW + tB).backward(torch.tensor(dz))
    for got, ref in ((da, ta), (dW, tW), (dB, tB)):
        np.testing.assert_allclose(tensor.to_numpy(got), ref.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_pooling_creator_has_only_dx():
    pool = layer.MaxPool2d(2, 2)
    x = RNG.standard_normal((1, 1, 4, 4))
    xt = _t(x)
    y = pool(xt)
    dx = y.creator.backward()  # SINGA: a tensor, not a 1-tuple
    tx = torch.tensor(x, requires_grad=True)
    torch.nn.functional.max_pool2d(tx, 2, 2).sum().backward()
    np.testing.assert_allclose(tensor.to_numpy(dx), tx.grad.numpy())


def test_batch_norm_creator_matches_torch_and_moves_the_running_stats_once():
    bn = layer.BatchNorm2d(3)
    x = RNG.standard_normal((2, 3, 4, 4))
    y = bn(_t(x))
    xt = _t(x)
    y = bn(xt)
    states = {k: tensor.to_numpy(v).copy() for k, v in bn.get_states().items()}
    dy = RNG.standard_normal(y.shape)
    dx, dscale, dbias = y.creator.backward(_t(dy))
    for k, v in bn.get_states().items():  # the second forward's move is undone
        np.testing.assert_array_equal(tensor.to_numpy(v), states[k], err_msg=k)
    tx = torch.tensor(x, requires_grad=True)
    tw, tb = torch.ones(3, dtype=torch.float64, requires_grad=True), torch.zeros(3, dtype=torch.float64, requires_grad=True)
    torch.nn.functional.batch_norm(tx, None, None, tw, tb, training=True, eps=1e-5).backward(torch.tensor(dy))
    np.testing.assert_allclose(tensor.to_numpy(dx), tx.grad.numpy(), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(tensor.to_numpy(dscale), tw.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tensor.to_numpy(dbias), tb.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_no_creator_for_random_layers_or_outside_training():
    x = _t(RNG.standard_normal((2, 3, 4, 4)))
    assert layer.Dropout(0.5)(x).creator is None  # the mask would differ
    saved = autograd.training
    try:
        autograd.training = False
        assert layer.Conv2d(3, 1, 2)(x).creator is None
    finally:
        autograd.training = saved


def test_creator_of_a_freed_input_is_a_graph_error():
    conv = layer.Conv2d(3, 1, 2)
    xt = _t(RNG.standard_normal((1, 3, 3, 3)))
    y = conv(xt)
    del xt
    gc.collect()
    with pytest.raises(loom.GraphError):
        y.creator.backward()


def test_autograd_conv2d_and_pooling_creators():
    x = RNG.standard_normal((1, 2, 4, 4))
    w = RNG.standard_normal((3, 2, 3, 3))
    xt, wt = _t(x), _t(w)
    y = autograd.conv2d(xt, wt, None, stride=1, padding=1)
    dx, dw = y.creator.backward()
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    torch.nn.functional.conv2d(tx, tw, padding=1).sum().backward()
    np.testing.assert_allclose(tensor.to_numpy(dx), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tensor.to_numpy(dw), tw.grad.numpy(), rtol=1e-4, atol=1e-5)

    p = autograd.avg_pool_2d(xt, 2, 2)
    tx = torch.tensor(x, requires_grad=True)
    torch.nn.functional.avg_pool2d(tx, 2, 2).sum().backward()
    np.testing.assert_allclose(tensor.to_numpy(p.creator.backward()), tx.grad.numpy(), rtol=1e-6)
