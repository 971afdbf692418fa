"""loom.data: your own data. ArrayDataset and datasets of the protocol (__len__, __getitem__) refuse
bad input with loom errors naming the dataset, the index and the shapes; the DataLoader reads in
C++'s epoch order, batches, drops the last batch when asked and seeks; Trainer learns from numpy
arrays (loss falls, held-out accuracy rises), and a run stopped mid-epoch and resumed reads the
same batches as an uninterrupted run and ends with bitwise its parameters."""
import sys

import numpy as np
import pytest

import loom
from loom import core, data

N, BATCH = 120, 10  # 12 steps an epoch


def circle(n, seed):
    """Points in the plane, class 1 inside the unit circle, 0 outside (up to radius 2)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, (4 * n, 2))
    r = np.hypot(x[:, 0], x[:, 1])
    keep = (r < 2) & (np.abs(r - 1) > 0.15)
    x, r = x[keep][:n], r[keep][:n]
    return x, (r < 1).astype(np.int64)


class Items(data.Dataset):
    """The protocol by hand: item i is computed from i (float64 x, int label), as a user's dataset
    reading files would return it."""

    name = "items"

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i].tolist(), int(self.y[i])


# ---- bad input ----

@pytest.mark.parametrize("x, y, error, needle", [
    (np.zeros((4, 3)), np.zeros(5, np.int64), loom.ShapeError, "x of shape (4, 3) holds 4 samples but y of shape (5,)"),
    (np.zeros((0, 3)), np.zeros(0, np.int64), loom.ValueError, "dataset 'mine' is empty"),
    (np.zeros((2, 3), object), np.zeros(2, np.int64), loom.DTypeError, "x has dtype object"),
    (np.zeros((2, 3), complex), np.zeros(2, np.int64), loom.DTypeError, "x has dtype complex128"),
    (np.zeros((2, 3)), np.array(["a", "b"]), loom.DTypeError, "y has dtype <U1"),
    (np.zeros((2, 3)), np.zeros((2, 2), np.int64), loom.ShapeError, "integer y of shape (2, 2)"),
    (np.array([[0, 1.0], [np.nan, 2]]), np.zeros(2, np.int64), loom.ValueError, "sample 1: x holds a value that is not"),
    (np.array([[0, 1.0], [1e39, 2]]), np.zeros(2, np.int64), loom.ValueError, "sample 1: x holds a value that is not"),
    (np.zeros((3, 2)), np.array([0, 4, -1]), loom.ValueError, "sample 2: label -1 is outside"),
    ([[1.0, 2.0], [3.0]], [0, 1], loom.ShapeError, "x is not an array of one shape"),
    (np.float32(3), np.int64(1), loom.ShapeError, "both need a first axis of samples"),
])
def test_array_dataset_refuses_bad_input_naming_the_dataset(x, y, error, needle):
    with pytest.raises(error, match="dataset 'mine'") as e:
        data.ArrayDataset(x, y, name="mine")
    assert needle in str(e.value)


def test_a_dataset_of_the_protocol_is_checked_item_by_item_naming_the_index():
    class Bad(data.Dataset):
        def __init__(self, items):
            self.items = items

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            return self.items[i]

    good = (np.zeros(3), 1)
    with pytest.raises(loom.TypeError, match=r"dataset 'Bad': item 0 is a ndarray, not an \(x, y\) pair"):
        data.DataLoader(Bad([np.zeros(3)]))
    with pytest.raises(loom.ValueError, match="dataset 'Bad' is empty"):
        data.DataLoader(Bad([]))
    with pytest.raises(loom.TypeError, match="needs __len__ and __getitem__.*ArrayDataset"):
        data.DataLoader(np.int64(3))
    loader = data.DataLoader(Bad([good, good, (np.zeros(4), 1)]), batch_size=3, shuffle=False)
    with pytest.raises(loom.ShapeError, match=r"item 2 has x of shape \(4,\).*item 0 has x of shape \(3,\)"):
        loader.next()
    loader = data.DataLoader(Bad([good, (np.zeros(3), 0.5)]), batch_size=2, shuffle=False)
    with pytest.raises(loom.DTypeError, match="item 1 has x .* and y of shape \\(\\) \\(targets\\); item 0 .*labels"):
        loader.next()
    loader = data.DataLoader(Bad([good, (np.array([1.0, np.inf, 0]), 2)]), batch_size=2, shuffle=False)
    with pytest.raises(loom.ValueError, match="dataset 'Bad': sample 1: x holds a value that is not finite"):
        loader.next()
    loader = data.DataLoader(Bad([good, (["a", "b", "c"], 1)]), batch_size=2, shuffle=False)
    with pytest.raises(loom.DTypeError, match="item 1: x has dtype <U1"):
        loader.next()

    class Failing(Bad):
        def __getitem__(self, i):
            if i == 1:
                raise KeyError("no such file")
            return good

    loader = data.DataLoader(Failing([good] * 2), batch_size=2, shuffle=False)
    with pytest.raises(KeyError) as e:  # the dataset's own error, unchanged
        loader.next()
    if sys.version_info >= (3, 11):
        assert "reading item 1 of dataset 'Failing'" in e.value.__notes__[0]


def test_bad_loader_options_are_loom_value_errors():
    ds = data.ArrayDataset(np.zeros((4, 2)), np.zeros(4, np.int64))
    for kwargs, needle in [({"batch_size": 0}, "batch_size 0"), ({"batch_size": 5, "drop_last": True}, "no batch"),
                           ({"shard": (2, 2)}, "shard (2, 2)"), ({"shard": 3}, "shard must be"),
                           ({"seed": -1}, "seed -1")]:
        with pytest.raises(loom.ValueError, match=None) as e:
            data.DataLoader(ds, **kwargs)
        assert needle in str(e.value)
    with pytest.raises(loom.ValueError, match="cannot seek to batch 3 of epoch 0"):
        data.DataLoader(ds, batch_size=2).seek(0, 3)


# ---- batches ----

def test_batches_follow_cpps_epoch_order_and_drop_last():
    x = np.arange(23, dtype=np.float64)[:, None] * [1, 10]
    y = np.arange(23) % 3
    loader = data.DataLoader(data.ArrayDataset(x, y), batch_size=5, seed=7)
    assert loader.batches_per_epoch == len(loader) == 5 and loader.x_shape(5) == (5, 2)
    for epoch in range(3):
        order = np.frombuffer(core.epoch_order(23, True, 7, epoch, 0, 1), np.int64)
        assert sorted(order) == list(range(23))
        got = [(bx.to_numpy(), by.to_numpy()) for bx, by in loader]
        assert [len(b[0]) for b in got] == [5, 5, 5, 5, 3]
        assert np.array_equal(np.concatenate([b[0][:, 0] for b in got]), order)
        bx, by = got[0]
        assert bx.dtype == np.float32 and by.dtype == np.int32 and np.array_equal(by, order[:5] % 3)
    assert loader.position() == (3, 0)
    other = np.frombuffer(core.epoch_order(23, True, 8, 0, 0, 1), np.int64)
    assert not np.array_equal(other, np.frombuffer(core.epoch_order(23, True, 7, 0, 0, 1), np.int64))

    # The same samples through the protocol: the same batches; drop_last leaves out the 3.
    a = data.DataLoader(Items(x, y), batch_size=5, seed=7, drop_last=True)
    b = data.DataLoader(data.ArrayDataset(x, y), batch_size=5, seed=7, drop_last=True)
    assert a.batches_per_epoch == 4 and a.x_shape(2) == (2, 2)
    for (ax, ay), (bx, by) in zip(a, b):
        assert np.array_equal(ax.to_numpy(), bx.to_numpy()) and np.array_equal(ay.to_numpy(), by.to_numpy())


def test_float_targets_seek_and_shards():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    t = np.stack([x[:, 0] * 0.5, -x[:, 1]], 1)
    loader = data.DataLoader(data.ArrayDataset(x, t), batch_size=4, shuffle=False)
    bx, by, epoch, index = loader.next()
    assert (epoch, index) == (0, 0) and by.to_numpy().dtype == np.float32 and np.array_equal(by.to_numpy(), t[:4])
    loader.seek(2, 1)
    bx, by, epoch, index = loader.next()
    assert (epoch, index) == (2, 1) and np.array_equal(bx.to_numpy(), x[4:])
    assert loader.next() is None and loader.position() == (3, 0)
    # Two ranks read disjoint halves of each epoch.
    ranks = [data.DataLoader(data.ArrayDataset(x, t), batch_size=3, seed=1, shard=(r, 2)) for r in (0, 1)]
    seen = [np.concatenate([b[0].to_numpy()[:, 0] for b in r]) for r in ranks]
    assert len(seen[0]) == len(seen[1]) == 3 and sorted(np.concatenate(seen)) == list(x[:, 0])


# ---- training ----

def make_model(native, use_graph, seed=3):
    from loom import autograd, device, layer, model, opt, tensor
    dev = device.create_cpu_device()
    dev.SetRandSeed(seed)
    if native:
        m = model.NativeModel(layer.Sequential(layer.Linear(2, 32, device=dev), layer.ReLU(),
                                               layer.Linear(32, 2, device=dev)), opt.SGD(lr=0.1, momentum=0.9))
    else:
        class Mlp(model.Model):
            def __init__(self):
                super().__init__()
                self.fc1, self.relu, self.fc2 = layer.Linear(2, 32, device=dev), layer.ReLU(), layer.Linear(32, 2,
                                                                                                           device=dev)

            def forward(self, x):
                return self.fc2(self.relu(self.fc1(x)))

            def train_one_batch(self, x, y):
                out = self.forward(x)
                loss = autograd.softmax_cross_entropy(out, y)
                self.optimizer(loss)
                return out, loss

        m = Mlp()
        m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    m.compile([tensor.from_numpy(np.zeros((BATCH, 2), np.float32), dev)], is_train=True, use_graph=use_graph)
    return m


@pytest.mark.parametrize("native", [False, True])
def test_a_model_learns_from_numpy_arrays(native):
    from loom import trainer
    m = make_model(native, use_graph=True)
    train = data.DataLoader(data.ArrayDataset(*circle(N, 1), name="circle"), batch_size=BATCH, seed=5,
                            drop_last=True)
    held_out = data.DataLoader(data.ArrayDataset(*circle(N, 2)), batch_size=40, shuffle=False)
    before = trainer.evaluate(m, held_out)
    losses = []
    r = trainer.Trainer(m, train, held_out, epochs=15, log_every=12, progress=False, verbose=False,
                        on_eval=lambda step, loss, ev: losses.append(loss)).fit()
    assert train.device is not None and held_out.device is not None  # the model's, given by the trainer
    assert r["steps"] == 15 * N // BATCH
    assert losses[-1] < 0.5 * losses[0], losses
    assert r["eval"]["loss"] < 0.5 * before["loss"] and r["eval"]["top1"] > 0.9, (before, r["eval"])


def test_evaluation_needs_labels():
    from loom import trainer
    x = np.zeros((20, 2), np.float32)
    loader = data.DataLoader(data.ArrayDataset(x, np.zeros((20, 2), np.float32), name="reg"), batch_size=10)
    with pytest.raises(loom.DTypeError, match="need int32 class labels"):
        trainer.evaluate(make_model(False, False), loader)


@pytest.mark.parametrize("use_graph", [False, True])
@pytest.mark.parametrize("kind", ["arrays", "protocol"])
def test_a_run_stopped_mid_epoch_and_resumed_reads_the_same_batches_and_ends_bitwise_equal(kind, use_graph, tmp_path):
    from loom import trainer
    x, y = circle(N, 1)

    def run(d, seen, **kwargs):
        m = make_model(False, use_graph)
        ds = data.ArrayDataset(x, y) if kind == "arrays" else Items(x, y)
        train = data.DataLoader(ds, batch_size=BATCH, seed=5, drop_last=True)
        trainer.Trainer(m, train, epochs=3, checkpoint_dir=str(d), checkpoint_every=5, log_every=4, progress=False,
                        verbose=False, on_batch=lambda step, bx, by: seen.append(bx.to_numpy().tobytes()),
                        **kwargs).fit()
        return {k: v.to_numpy() for k, v in m.get_states().items()}

    whole, first, second = [], [], []
    ref = run(tmp_path / "whole", whole)
    run(tmp_path / "split", first, max_steps=17)
    resumed = run(tmp_path / "split", second, resume=True)
    assert len(whole) == 36 and len(first) == 17 and first + second == whole
    assert ref.keys() == resumed.keys()
    for k in ref:
        assert ref[k].tobytes() == resumed[k].tobytes(), k


@pytest.mark.parametrize("kwargs, needle", [
    ({"batch_size": "8"}, "batch_size must be an int, got str"),
    ({"batch_size": 2.5}, "batch_size must be an int, got float 2.5"),
    ({"batch_size": float("nan")}, "batch_size must be an int, got float nan"),
    ({"seed": float("nan")}, "seed must be an int"),
    ({"shard": (0.5, 2)}, "shard must be (rank, world)"),
])
def test_loader_options_of_the_wrong_type_are_loom_errors(kwargs, needle):
    # Found by tools/probe.py: int() took "8" and 2.5 as 8 and 2, and raised Python's ValueError
    # for NaN.
    ds = data.ArrayDataset(np.zeros((4, 2)), np.zeros(4, np.int64))
    with pytest.raises(loom.Error) as e:
        data.DataLoader(ds, **kwargs)
    assert needle in str(e.value)
