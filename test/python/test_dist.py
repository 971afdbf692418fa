"""Data parallelism from Python (issue 15): opt.DistOpt with SINGA's names, the default
communicator (MPI's world, or a typed error when MPI is not built), and the data loader's
shard=(rank, world).
Multi-rank numbers are tested in C++ (test/dist) and under mpirun; here the Python examples'
--dist start as 2 ranks through `python3 -m loom.launch -n 2`, as users start them."""
import json
import subprocess
import sys

import numpy as np
import pytest

import loom
from loom import autograd, core, io, opt, tensor
from conftest import python_env
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


needs_mpi = pytest.mark.skipif(not core.mpi_built(), reason="loom built without MPI (LOOM_USE_MPI=OFF, or MPI not "
                               "installed: tools/setup.sh installs it)")


def _example(root, script, *args, ranks=1):
    """Runs examples/python/script (as `ranks` ranks of the launcher when ranks > 1, one thread
    each); returns its last JSON line and the output."""
    path = f"{root}/examples/python/{script}"
    cmd = [sys.executable, path] if ranks == 1 else [sys.executable, "-m", "loom.launch", "-n", str(ranks),
                                                   "--threads", "1", path]
    env = python_env()
    env["LOOM_NUM_THREADS"] = "1"
    r = subprocess.run(cmd + [*args, "--json"], capture_output=True, text=True, env=env, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    return json.loads(r.stdout.strip().splitlines()[-1]), out


@needs_mpi
@pytest.mark.parametrize("mode", ["--graph", "--eager"])
def test_mlp_example_on_two_ranks_trains_like_one_rank(root, mode):
    """Global batch 32 on 2 ranks = batch 32 on 1 rank: the same first loss (the shards are the
    batch's rows) and the same training (gradients averaged over ranks), to float32 rounding."""
    args = ["--steps", "8", "--batch", "32", "--lr", "0.05", mode]
    one, _ = _example(root, "mlp.py", *args)
    two, out = _example(root, "mlp.py", *args, "--dist", ranks=2)
    assert (one["ranks"], two["ranks"]) == (1, 2)
    assert "parameters: bitwise the same on all 2 ranks" in out
    for key in ("first_loss", "last_loss"):
        assert two[key] == pytest.approx(one[key], rel=1e-5), key
    assert one["last_loss"] < one["first_loss"] - 0.1  # it trained


@needs_mpi
@pytest.mark.parametrize("mode", ["--graph", "--eager"])
def test_mlp_example_with_sharded_state_on_two_ranks_trains_like_one_rank(root, mode):
    """opt.DistOpt(shard=True) (Note [Sharded optimizer state]): each rank keeps half the
    momentum, and training is that of one rank on the global batch, to float32 rounding."""
    args = ["--steps", "8", "--batch", "32", "--lr", "0.05", mode]
    one, _ = _example(root, "mlp.py", *args)
    two, out = _example(root, "mlp.py", *args, "--dist", "--shard", ranks=2)
    assert "parameters: bitwise the same on all 2 ranks" in out
    for key in ("first_loss", "last_loss"):
        assert two[key] == pytest.approx(one[key], rel=1e-5), key
    assert one["last_loss"] < one["first_loss"] - 0.1  # it trained
    assert 0.45 < two["optimizer_state_bytes"] / one["optimizer_state_bytes"] <= 0.55


def test_sharded_dist_opt_refuses_update_one_parameter_at_a_time(dev):
    d = opt.DistOpt(opt.SGD(0.1, momentum=0.9), communicator=core.inproc_communicator_of_one(), shard=True)
    assert d.sharded and d.state_bytes == 0
    with pytest.raises(loom.ValueError, match="BackwardAndUpdate or Step"):
        mlp_run(dev, d, buffered=False)
    with pytest.raises(loom.TypeError, match="shard must be True or False"):
        opt.DistOpt(opt.SGD(0.1), communicator=core.inproc_communicator_of_one(), shard="yes")


@needs_mpi
def test_cnn_example_on_two_ranks_eager_equals_graph(root):
    args = ["--steps", "4", "--batch", "16", "--dist"]
    eager, out_e = _example(root, "cnn.py", *args, "--eager", ranks=2)
    graph, out_g = _example(root, "cnn.py", *args, "--graph", ranks=2)
    for out in (out_e, out_g):
        assert "parameters: bitwise the same on all 2 ranks" in out
    assert graph["last_loss"] == pytest.approx(eager["last_loss"], rel=1e-4)
    assert graph["first_loss"] == pytest.approx(eager["first_loss"], rel=1e-6)


@needs_mpi
def test_seed_example_on_two_ranks_is_the_full_batch_training(root):
    """SINGA's seed program with --dist: 200 of the 400 points per rank, gradients averaged, is
    the full-batch training of one rank (1001 replays), to float32 rounding."""
    def run(*cmd):
        env = python_env()
        env["LOOM_NUM_THREADS"] = "1"
        r = subprocess.run([*cmd, f"{root}/examples/python/seed_mlp.py"] + (["--dist"] if len(cmd) > 1 else []),
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith("loss after"))
        return float(line.split(":")[1].split()[0]), r.stdout
    one, _ = run(sys.executable)
    two, out = run(sys.executable, "-m", "loom.launch", "-n", "2", "--threads", "1")
    assert "parameters: bitwise the same on all 2 ranks" in out
    assert two == pytest.approx(one, rel=1e-5)
    assert one < 0.3


def test_dist_opt_puts_gradients_on_the_wire_in_the_models_precision(dev):
    """Note [Gradients on the wire]: "auto" follows Model.compile's precision; "fp32" keeps
    float32; fp16 also turns on the wrapped optimizer's loss scaling."""
    from loom import autograd, layer, model, tensor

    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(8, 3, device=dev)

        def forward(self, x):
            return self.fc(x)

        def train_one_batch(self, x, y):
            loss = autograd.softmax_cross_entropy(self.forward(x), y)
            self.optimizer(loss)
            return loss

    x = tensor.from_numpy(np.zeros((4, 8), np.float32), dev)
    for precision, wire in (("fp32", "none"), ("bf16", "bf16"), ("fp16", "fp16")):
        dist = opt.DistOpt(opt.SGD(0.1), communicator=core.inproc_communicator_of_one())
        m = Net()
        m.set_optimizer(dist)
        m.compile([x], precision=precision)
        assert dist.compression == wire
        assert loom.precision.scales_losses(dist) == (precision == "fp16")
        assert loom.precision.scales_losses(dist.opt) == (precision == "fp16")  # the wrapped one keeps it
    fixed = opt.DistOpt(opt.SGD(0.1), communicator=core.inproc_communicator_of_one(), compression="fp32")
    m = Net()
    m.set_optimizer(fixed)
    m.compile([x], precision="bf16")
    assert fixed.compression == "none"
    y = tensor.from_numpy(np.arange(4, dtype=np.int32) % 3, dev)
    m.train_one_batch(x, y)  # trains on one rank in bf16 with a float32 wire
