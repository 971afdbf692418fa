"""loom.data.Batches (any iterable of (x, y) batches: a generator function, a re-iterable, a one-shot
iterator) through DataLoader and Trainer: the batches as given, checked batch by batch with errors
naming the epoch, the batch and the shapes; a run stopped and resumed from a generator function
ends bitwise equal to an uninterrupted one, and a one-shot iterator refuses to be positioned.
The reading thread (prefetch): batches come in the order of prefetch=0, are read ahead while the
caller holds one, errors arrive at their batch; and a step lets other Python threads run (Note
[Steps run without the interpreter lock])."""
import gc
import sys
import threading
import time

import numpy as np
import pytest

import loom
from loom import data

from test_data import BATCH, N, circle, make_model


def slices(x, y, size):
    return [(x[i:i + size], y[i:i + size]) for i in range(0, len(x), size)]


def as_numpy(loader):
    return [(bx.to_numpy(), by.to_numpy()) for bx, by in loader]


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(p[0], q[0]) and np.array_equal(p[1], q[1]) for p, q in zip(a, b))


# ---- the three kinds of source ----

def test_a_generator_function_gives_its_batches_per_epoch_counted_once():
    x, y = circle(23, 1)
    calls = []

    def batches(epoch):
        calls.append(epoch)
        order = np.random.default_rng(epoch).permutation(len(x))
        for b in slices(x[order], y[order], 5):
            yield b

    loader = data.DataLoader(batches, prefetch=0)
    assert isinstance(loader.dataset, data.Batches) and loader.dataset.name == "batches"
    assert loader.batches_per_epoch == len(loader) == 5 and calls == [0]  # counted by reading epoch 0 once
    for epoch in range(2):
        order = np.random.default_rng(epoch).permutation(len(x))
        got = as_numpy(loader)
        want = slices(x[order].astype(np.float32), y[order].astype(np.int32), 5)
        assert same(got, want) and [len(b[0]) for b in got] == [5, 5, 5, 5, 3]
        assert got[0][0].dtype == np.float32 and got[0][1].dtype == np.int32
    assert calls == [0, 0, 1] and loader.position() == (2, 0) and loader.x_shape(4) == (4, 2)
    # Given the count, nothing is read to count it; a function of no argument is called so.
    calls.clear()
    assert data.DataLoader(data.Batches(batches, batches_per_epoch=5)).batches_per_epoch == 5 and calls == []
    fixed = data.DataLoader(lambda: iter(slices(x, y, 10)), prefetch=0)
    assert fixed.batches_per_epoch == 3 and same(as_numpy(fixed), as_numpy(fixed))


def test_a_reiterable_is_iterated_each_epoch_and_a_one_shot_iterator_once():
    x, y = circle(20, 2)
    listed = data.DataLoader(data.Batches(slices(x, y, 8), name="listed"))
    assert listed.batches_per_epoch == 3 and same(as_numpy(listed), as_numpy(listed))

    class Reiterable:  # __iter__ is a generator: a fresh iterator each time, no len()
        def __iter__(self):
            yield from slices(x, y, 4)

    r = data.DataLoader(Reiterable(), prefetch=1)
    assert r.batches_per_epoch == 5 and same(as_numpy(r), slices(x.astype(np.float32), y.astype(np.int32), 4))

    one_shot = data.DataLoader(iter(slices(x, y, 8)))
    assert one_shot.dataset.one_shot and one_shot.batches_per_epoch is None  # not counted: that would use it up
    with pytest.raises(loom.TypeError, match="one-shot iterator has no length"):
        len(one_shot)
    assert len(as_numpy(one_shot)) == 3 and one_shot.batches_per_epoch == 3 and one_shot.position() == (1, 0)
    with pytest.raises(loom.ValueError, match="one-shot iterator .* gives one epoch, read once, and stands at "
                                              "epoch 1, batch 0; epoch 1, batch 0 was asked for"):
        one_shot.next()
    with pytest.raises(loom.ValueError, match="cannot be positioned at epoch 0, batch 0.*generator function"):
        one_shot.seek(0, 0)


# ---- bad batches ----

def test_bad_batches_are_typed_errors_naming_the_epoch_the_batch_and_the_shapes():
    good = (np.zeros((4, 3)), np.zeros(4, np.int64))

    def loader_of(*later, count=None):
        return data.DataLoader(data.Batches(lambda epoch: iter([good, *later]), batches_per_epoch=count,
                                            name="mine"), prefetch=0)

    cases = [
        ((np.zeros((4, 2)), np.zeros(4, np.int64)), loom.ShapeError,
         r"batches 'mine': epoch 0, batch 1 has samples of x shape \(2,\) .* x of shape \(4, 2\); the first batch had "
         r"samples of x shape \(3,\)"),
        ((np.zeros((4, 3)), np.zeros(4)), loom.DTypeError, r"epoch 0, batch 1 .*\(targets\).*\(labels\)"),
        ((np.zeros((4, 3)), np.zeros(3, np.int64)), loom.ShapeError,
         r"epoch 0, batch 1: x of shape \(4, 3\) and y of shape \(3,\): both need a first axis of the same number"),
        ((np.zeros((4, 3)),), loom.TypeError, r"epoch 0, batch 1 is a tuple, not an \(x, y\) pair"),
        ((np.zeros((4, 3), complex), np.zeros(4, np.int64)), loom.DTypeError, "epoch 0, batch 1: x has dtype complex"),
        ((np.zeros((2, 3)), np.zeros((2, 2), np.int64)), loom.ShapeError, r"integer y of shape \(2, 2\)"),
        ((np.array([[0, 0, 0], [0, np.nan, 0]]), np.zeros(2, np.int64)), loom.ValueError,
         "epoch 0, batch 1, row 1: x holds a value that is not finite"),
        ((np.zeros((2, 3)), np.array([0, -3])), loom.ValueError, "epoch 0, batch 1, row 1: label -3 is outside"),
    ]
    for bad, error, needle in cases:
        loader = loader_of(bad, count=2)
        loader.next()
        with pytest.raises(error, match=needle):
            loader.next()
    # Epochs that give another number of batches than the first: positions would not mean the same.
    with pytest.raises(loom.ValueError, match="epoch 0 ended after 2 batches; batches_per_epoch is 3"):
        as_numpy(loader_of(good, count=3))
    with pytest.raises(loom.ValueError, match="epoch 0 gives more than batches_per_epoch 1 batches"):
        as_numpy(loader_of(good, count=1))
    with pytest.raises(loom.ValueError, match="epoch 0 gave no batch"):
        data.DataLoader(lambda epoch: iter([])).batches_per_epoch
    # Options of a dataset, and sources that are not one.
    with pytest.raises(loom.ValueError, match="come batched and in their order: batch_size, shuffle apply to a "
                                              "dataset"):
        data.DataLoader(data.Batches([good]), batch_size=4, shuffle=True)
    with pytest.raises(loom.TypeError, match="must be a function returning an iterable"):
        data.Batches(3)
    with pytest.raises(loom.TypeError, match="must take the epoch or nothing"):
        data.Batches(lambda a, b: None)
    with pytest.raises(loom.ValueError, match="batches_per_epoch is 0"):
        data.Batches([good], batches_per_epoch=0)


# ---- training, checkpoints, resume ----

@pytest.mark.parametrize("use_graph", [False, True])
def test_a_run_on_a_generator_function_stopped_and_resumed_ends_bitwise_equal(use_graph, tmp_path):
    from loom import trainer
    x, y = circle(N, 1)

    def batches(epoch):  # a function of the epoch: the same batches each time it is asked
        order = np.random.default_rng([7, epoch]).permutation(N)
        for i in range(0, N, BATCH):
            yield x[order[i:i + BATCH]], y[order[i:i + BATCH]]

    def run(d, seen, **kwargs):
        m = make_model(False, use_graph)
        trainer.Trainer(m, batches, epochs=3, checkpoint_dir=str(d), checkpoint_every=5, log_every=4, progress=False,
                        verbose=False, on_batch=lambda step, bx, by: seen.append(bx.to_numpy().tobytes()),
                        **kwargs).fit()
        return {k: v.to_numpy() for k, v in m.get_states().items()}

    whole, first, second = [], [], []
    ref = run(tmp_path / "whole", whole)
    run(tmp_path / "split", first, max_steps=17)  # stops at epoch 1, batch 5
    resumed = run(tmp_path / "split", second, resume=True)
    assert len(whole) == 36 and len(first) == 17 and first + second == whole
    for k in ref:
        assert ref[k].tobytes() == resumed[k].tobytes(), k
    # Learning, from batches on held-out data given as a re-iterable.
    held_out = data.DataLoader(data.Batches(slices(*circle(N, 2), 40)))
    m = make_model(False, use_graph)
    r = trainer.Trainer(m, batches, held_out, epochs=10, progress=False, verbose=False).fit()
    assert r["eval"]["top1"] > 0.9 and r["eval"]["samples"] == N


def test_a_one_shot_iterator_trains_once_and_refuses_to_resume(tmp_path):
    from loom import trainer
    x, y = circle(N, 1)
    with pytest.raises(loom.ValueError, match="one-shot iterator of unknown length: give "
                                              r"loom.data.Batches\(it, batches_per_epoch=N\)"):
        trainer.Trainer(make_model(False, False), iter(slices(x, y, BATCH)), progress=False).fit()
    one_shot = data.Batches(iter(slices(x, y, BATCH)), batches_per_epoch=N // BATCH)
    r = trainer.Trainer(make_model(False, False), one_shot, max_steps=5, checkpoint_dir=str(tmp_path),
                        checkpoint_every=5, progress=False, verbose=False).fit()
    assert r["steps"] == 5
    again = data.Batches(iter(slices(x, y, BATCH)), batches_per_epoch=N // BATCH)
    with pytest.raises(loom.ValueError, match="one-shot iterator .* cannot be positioned at epoch 0, batch 5"):
        trainer.Trainer(make_model(False, False), again, checkpoint_dir=str(tmp_path), resume=True,
                        progress=False, verbose=False).fit()
    with pytest.raises(loom.TypeError, match="batches you make .* got int"):
        trainer.Trainer(make_model(False, False), 3)


# ---- reading ahead on a thread ----

class Recorded(data.Dataset):
    """Items that say when they are read; reading item `block_at` waits for `release`."""

    def __init__(self, x, y, block_at=-1, fail_at=-1):
        self.x, self.y, self.read = x, y, []
        self.block_at, self.fail_at = block_at, fail_at
        self.release, self.reached = threading.Event(), threading.Event()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if i == self.block_at:
            self.reached.set()
            assert self.release.wait(60), "never released"
        if i == self.fail_at:
            raise KeyError(f"item {i} is missing")
        self.read.append(i)
        return self.x[i], int(self.y[i])


def test_prefetch_reads_ahead_in_order_and_gives_the_batches_of_prefetch_0():
    x, y = circle(40, 3)
    a = data.DataLoader(Recorded(x, y), batch_size=4, seed=3, prefetch=0)
    ds = Recorded(x, y, block_at=int(np.frombuffer(loom.core.epoch_order(40, True, 3, 0, 0, 1), np.int64)[9]))
    b = data.DataLoader(ds, batch_size=4, seed=3, prefetch=2)
    first = b.next()  # batch 0; the thread goes on with batches 1 and 2, and blocks in batch 2
    assert ds.reached.wait(60), "the reading thread did not read ahead into batch 2"
    assert len(ds.read) == 1 + 9  # item 0 (checked when made), batches 0 and 1, 1 item of batch 2
    ds.release.set()
    got = [(first[0].to_numpy(), first[1].to_numpy())] + as_numpy(b)
    assert same(got, as_numpy(a)) and b.position() == (1, 0)
    # Seeking mid-epoch drops what was read ahead and reads from there, as prefetch=0 does.
    a.seek(3, 4)
    b.seek(3, 1)
    b.next()
    b.seek(3, 4)
    assert same(as_numpy(b), as_numpy(a))


def test_a_loader_dropped_while_its_thread_reads_stops_the_thread_cleanly():
    """The reading thread holds the loader while it reads a batch: dropped meanwhile, the loader's
    __del__ runs on that thread when the batch is read, and stops it there without joining itself."""
    x, y = circle(12, 3)
    ds = Recorded(x, y, block_at=4)
    loader = data.DataLoader(ds, batch_size=3, shuffle=False, prefetch=1)
    loader.next()  # batch 0; the thread reads batch 1 and blocks in item 4
    assert ds.reached.wait(60)
    thread = loader._reader._thread
    unraisable, hook = [], sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        del loader
        gc.collect()
        ds.release.set()
        thread.join(60)  # a hang guard: the thread ends after the batch
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert not thread.is_alive() and [u.exc_value for u in unraisable] == []


def test_an_error_on_the_reading_thread_arrives_at_its_batch():
    x, y = circle(12, 3)
    ds = Recorded(x, y, fail_at=9)
    loader = data.DataLoader(ds, batch_size=3, shuffle=False, prefetch=3)
    for _ in range(3):
        loader.next()  # batches 0 to 2 come; the thread has already met item 9
    with pytest.raises(KeyError, match="item 9 is missing") as e:
        loader.next()
    if sys.version_info >= (3, 11):
        assert "reading item 9 of dataset 'Recorded'" in e.value.__notes__[0]
    assert loader.position() == (0, 3)  # the batch is read again by the next call
    ds.fail_at = -1
    bx, _, epoch, index = loader.next()
    assert (epoch, index) == (0, 3) and np.array_equal(bx.to_numpy(), x[9:12].astype(np.float32))


def wide_model(native, use_graph, width=1024, batch=256):
    """A step of a few milliseconds: long enough for a waiting thread to wake up inside it."""
    from loom import autograd, device, layer, model, opt, tensor
    dev = device.create_cpu_device()
    layers = [layer.Linear(256, width, device=dev), layer.ReLU(), layer.Linear(width, 10, device=dev)]
    if native:
        m = model.NativeModel(layer.Sequential(*layers), opt.SGD(lr=0.01))
    else:
        class Mlp(model.Model):
            def __init__(self):
                super().__init__()
                self.fc1, self.relu, self.fc2 = layers

            def forward(self, x):
                return self.fc2(self.relu(self.fc1(x)))

            def train_one_batch(self, x, y):
                loss = autograd.softmax_cross_entropy(self.forward(x), y)
                self.optimizer(loss)
                return loss

        m = Mlp()
        m.set_optimizer(opt.SGD(lr=0.01))
    rng = np.random.default_rng(0)
    x = tensor.from_numpy(rng.standard_normal((batch, 256)).astype(np.float32), dev)
    y = tensor.from_numpy(rng.integers(0, 10, batch).astype(np.int32), dev)
    m.compile([x], is_train=True, use_graph=use_graph)
    return m, x, y


def test_a_step_lets_other_python_threads_run():
    """Without the interpreter lock released inside the step, the counting thread cannot run at
    all while the main thread trains (no forced switches: the switch interval is 1000 s)."""
    for native, use_graph in ((True, True), (False, True), (True, False)):
        m, bx, by = wide_model(native, use_graph)
        m.train_one_batch(bx, by)  # the capture, before the count
        count, stop, started = [0], threading.Event(), threading.Event()

        def spin():
            started.set()
            while not stop.is_set():
                count[0] += 1
                time.sleep(1e-4)  # gives the lock back

        old = sys.getswitchinterval()
        t = threading.Thread(target=spin)
        t.start()
        started.wait()
        sys.setswitchinterval(1000)
        try:
            time.sleep(0.05)  # the thread's waits for the lock begin under the new interval (a hang guard, not a timing)
            before, steps = count[0], 0
            while count[0] == before and steps < 200:
                m.train_one_batch(bx, by)
                steps += 1
            ran = count[0] > before
        finally:
            sys.setswitchinterval(old)
            stop.set()
            t.join()
        assert ran, f"native={native} use_graph={use_graph}: no other thread ran during {steps} steps"


def test_two_threads_capturing_and_replaying_two_models_on_one_device_take_turns():
    """Note [Steps run without the interpreter lock]: replays run without it, captures keep it,
    and steps on one device take turns, so a thread's capture never meets another thread's replay
    (whose input copies would land in it: Note [Capture sink])."""
    from loom import device, layer, model, opt
    dev = device.create_cpu_device()
    models = [model.NativeModel(layer.Sequential(layer.Linear(8, 16, device=dev), layer.ReLU(),
                                                 layer.Linear(16, 2, device=dev)), opt.SGD(lr=0.01))
              for _ in range(2)]
    rng = np.random.default_rng(0)
    for m in models:
        m.compile([rng.standard_normal((4, 8)).astype(np.float32)], is_train=True, use_graph=True)
    failures = []

    def train(m, sizes):
        try:
            for n in sizes:  # a new batch size captures, a seen one replays
                m.train_one_batch(rng.standard_normal((n, 8)).astype(np.float32), np.zeros(n, np.int32))
        except Exception as e:  # noqa: BLE001 (reported below)
            failures.append(e)

    ts = [threading.Thread(target=train, args=(models[0], [4] * 60)),
          threading.Thread(target=train, args=(models[1], [2, 3, 5, 6, 7, 2, 3, 5, 6, 7] * 6))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert failures == [] and [m._impl.steps() for m in models] == [60, 60]
