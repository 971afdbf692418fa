"""Data parallelism from Python (issue 15): opt.DistOpt with SINGA's names, the default
communicator (MPI's world, or a typed error when MPI is not built), and the data loader's
shard=(rank, world).
Multi-rank numbers are tested in C++ (test/dist) and under mpirun."""
import numpy as np
import pytest

import loom
from loom import autograd, core, io, opt, tensor
from test_io import _write_mnist


def mlp_run(dev, optimizer, buffered):
    rng = np.random.default_rng(3)
    x = tensor.from_numpy(rng.normal(size=(16, 2)).astype(np.float32), dev)
    t = tensor.from_numpy(rng.integers(0, 2, 16).astype(np.int32), dev)
    params = [tensor.from_numpy(rng.normal(0, 0.5, s).astype(np.float32), dev, requires_grad=True)
              for s in [(2, 8), (8,), (8, 2), (2,)]]

    def step():
        w0, b0, w1, b1 = params
        h = autograd.relu(autograd.add_bias(autograd.matmul(x, w0), b0))
        loss = autograd.softmax_cross_entropy(autograd.add_bias(autograd.matmul(h, w1), b1), t)
        for p, g in autograd.backward(loss):
            optimizer.apply(0, g, p, "")

    if buffered:
        dev.SetBufferFlag(True)
        step()
        dev.SetBufferFlag(False)
        for _ in range(5):
            dev.ExecBuffOps()
    else:
        for _ in range(5):
            step()
    return [p.to_numpy() for p in params]


@pytest.mark.parametrize("buffered", [False, True])
def test_dist_opt_on_one_rank_trains_like_its_optimizer(dev, buffered):
    plain = mlp_run(dev, opt.SGD(0.1, momentum=0.9), buffered)
    dist = opt.DistOpt(opt.SGD(0.1, momentum=0.9), communicator=core.inproc_communicator_of_one())
    assert (dist.world_size, dist.global_rank, dist.local_rank) == (1, 0, 0)
    got = mlp_run(dev, dist, buffered)
    for a, b in zip(got, plain):
        np.testing.assert_array_equal(a, b)
    dist.lr = 0.05
    assert dist.lr == 0.05 and dist.opt.lr == 0.05


def test_default_communicator_is_the_mpi_world_or_says_what_to_install():
    if core.mpi_built():
        d = opt.DistOpt(opt.SGD(0.1))
        assert d.communicator.backend() == "mpi"
        assert 0 <= d.global_rank < d.world_size
    else:
        with pytest.raises(loom.DeviceError, match="MPI communicator is not built"):
            opt.DistOpt(opt.SGD(0.1))
    with pytest.raises(loom.ValueError, match="compression"):
        opt.DistOpt(opt.SGD(0.1), communicator=core.inproc_communicator_of_one(), compression="fp8")
    with pytest.raises(loom.TypeError):
        opt.DistOpt("sgd", communicator=core.inproc_communicator_of_one())


def test_data_loader_shards_split_every_epoch(dev, tmp_path):
    images, _, ipath, lpath = _write_mnist(tmp_path, n=20)
    data = io.load_mnist(ipath, lpath)
    seen = []
    for rank in range(2):
        loader = io.DataLoader(data, batch_size=5, seed=1, shard=(rank, 2), flat=True, prefetch=0, device=dev)
        assert len(loader) == 2
        for x, _ in loader:
            seen += [tuple(np.round(row * 255).astype(int)) for row in x.to_numpy()]
    assert sorted(seen) == sorted(tuple(im.reshape(-1).astype(int)) for im in images)
    with pytest.raises(loom.ValueError, match="shard"):
        io.DataLoader(data, shard=(2, 2))
    with pytest.raises(loom.ValueError, match="shard"):
        io.DataLoader(data, shard=3)


def test_sync_batch_norm_on_one_rank_is_batch_norm(dev):
    from loom import layer
    rng = np.random.default_rng(5)
    x = rng.normal(1.0, 2.0, (6, 3, 4, 4))
    sync = layer.SyncBatchNorm2d(3, communicator=core.inproc_communicator_of_one(), device=dev, dtype="float64")
    plain = layer.BatchNorm2d(3, device=dev, dtype="float64")
    for bn in (sync, plain):
        bn.train()
    ys = [bn(tensor.from_numpy(x, dev)).to_numpy() for bn in (sync, plain)]
    np.testing.assert_allclose(ys[0], ys[1], rtol=0, atol=1e-10)
    if not core.mpi_built():
        with pytest.raises(loom.DeviceError, match="MPI communicator is not built"):
            layer.SyncBatchNorm2d(3)
