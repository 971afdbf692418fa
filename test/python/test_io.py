"""loom.io from Python: checkpoints (Model.save_states / load_states resume bitwise, corrupt and
truncated files are loom.IOError), MNIST idx files read back exactly, the DataLoader."""
import gzip
import os
import struct

import numpy as np
import pytest

import loom
from loom import io, model, opt, tensor

from test_model import MLP, batches


def _run(dev, m, data, x, y):
    losses = []
    for xb, yb in data:
        x.copy_from_numpy(xb)
        y.copy_from_numpy(yb)
        _, loss = m.train_one_batch(x, y)
        losses.append(loss.item())
    return losses


def _fresh(dev, use_graph, data, optimizer=None):
    dev.SetRandSeed(11)
    m = MLP((20, 32, 32, 4), dev)
    m.set_optimizer(optimizer or opt.SGD(0.1, momentum=0.9, weight_decay=1e-4))
    x = tensor.from_numpy(data[0][0], dev)
    y = tensor.from_numpy(data[0][1], dev)
    m.compile([x], is_train=True, use_graph=use_graph, sequential=True)
    return m, x, y


@pytest.mark.parametrize("use_graph", [False, True])
def test_save_load_states_resumes_bitwise(dev, tmp_path, use_graph):
    data = list(batches(5))
    m, x, y = _fresh(dev, use_graph, data)
    straight = _run(dev, m, data, x, y)

    m1, x1, y1 = _fresh(dev, use_graph, data)
    first = _run(dev, m1, data[:2], x1, y1)
    path = tmp_path / "m.ckpt"
    m1.save_states(path, meta={"step": 2})
    assert first == straight[:2]

    m2, x2, y2 = _fresh(dev, use_graph, data)
    with pytest.raises(AssertionError):  # a fresh model is not the trained one
        for (_, a), (_, b) in zip(m1.get_params().items(), m2.get_params().items()):
            assert a.to_numpy().tobytes() == b.to_numpy().tobytes()
    meta = m2.load_states(str(path))
    assert meta == {"step": 2.0}
    if not use_graph:  # graph replays run no Python: step_count counts captures there
        assert m2.optimizer.step_count == 2
    for (ka, a), (kb, b) in zip(m1.get_states().items(), m2.get_states().items()):
        assert ka == kb and a.to_numpy().tobytes() == b.to_numpy().tobytes()
    rest = _run(dev, m2, data[2:], x2, y2)
    assert first + rest == straight  # bitwise: momentum came back too

    ck = io.load_checkpoint(path)
    assert set(m1.get_states()) <= set(ck.tensors)
    assert any(k.startswith("optimizer/") and k.endswith("/momentum") for k in ck.tensors)
    assert ck.meta["optimizer/lr"] == pytest.approx(0.1)


def test_load_states_without_momentum_differs(dev, tmp_path):
    # The optimizer state matters: restoring only the parameters does not resume bitwise.
    data = list(batches(4))
    m, x, y = _fresh(dev, False, data)
    straight = _run(dev, m, data, x, y)
    m1, x1, y1 = _fresh(dev, False, data)
    _run(dev, m1, data[:2], x1, y1)
    io.save_checkpoint(tmp_path / "p.ckpt", m1.get_states())
    m2, x2, y2 = _fresh(dev, False, data)
    io.restore_into(io.load_checkpoint(tmp_path / "p.ckpt"), m2.get_states())
    assert _run(dev, m2, data[2:], x2, y2) != straight[2:]


def test_checkpoint_round_trip_and_restore_errors(dev, tmp_path):
    a = tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), dev)
    b = tensor.from_numpy(np.array([1, 2, 3], dtype=np.int32), dev)
    path = tmp_path / "t.ckpt"
    io.save_checkpoint(path, {"a": a, "b": b}, {"step": 7})
    ck = io.load_checkpoint(path)
    assert list(ck.tensors) == ["a", "b"] and ck.meta == {"step": 7.0} and "a" in ck
    assert ck["b"].to_numpy().tolist() == [1, 2, 3]
    with pytest.raises(loom.IOError):
        ck["missing"]
    ck2 = io.decode_checkpoint(path.read_bytes(), "mem")
    assert ck2["a"].to_numpy().tobytes() == a.to_numpy().tobytes()

    wrong = tensor.from_numpy(np.zeros((3, 2), np.float32), dev)
    with pytest.raises(loom.IOError, match="a"):
        io.restore_into(ck, {"a": wrong})
    target = tensor.from_numpy(np.zeros((2, 3), np.float32), dev)
    io.restore_into(ck, [("a", target)])
    assert target.to_numpy().tobytes() == a.to_numpy().tobytes()


def test_corrupt_and_truncated_checkpoints_raise_ioerror(dev, tmp_path):
    data = list(batches(1))
    m, x, y = _fresh(dev, False, data)
    _run(dev, m, data, x, y)
    path = tmp_path / "m.ckpt"
    m.save_states(path)
    raw = path.read_bytes()

    bad = bytearray(raw)
    bad[len(bad) // 2] ^= 0xFF
    (tmp_path / "flipped.ckpt").write_bytes(bytes(bad))
    (tmp_path / "short.ckpt").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint at all")
    for name in ("flipped.ckpt", "short.ckpt", "junk.ckpt", "absent.ckpt"):
        m2, _, _ = _fresh(dev, False, data)
        before = {k: v.to_numpy().tobytes() for k, v in m2.get_states().items()}
        with pytest.raises(loom.IOError) as e:
            m2.load_states(tmp_path / name)
        assert isinstance(e.value, OSError) and isinstance(e.value, loom.Error)
        assert name in str(e.value)
        assert before == {k: v.to_numpy().tobytes() for k, v in m2.get_states().items()}  # untouched
    with pytest.raises(OSError):
        io.decode_checkpoint(raw[:-3])


def test_save_is_atomic_on_failure(dev, tmp_path):
    path = tmp_path / "keep.ckpt"
    a = tensor.from_numpy(np.ones(4, np.float32), dev)
    io.save_checkpoint(path, {"a": a})
    before = path.read_bytes()
    with pytest.raises(loom.Error):
        io.save_checkpoint(path, [("a", a), ("a", a)])  # duplicate names: refused
    assert path.read_bytes() == before


def _idx_images(images):
    n, h, w = images.shape
    return struct.pack(">IIII", 0x803, n, h, w) + images.astype(np.uint8).tobytes()


def _idx_labels(labels):
    return struct.pack(">II", 0x801, len(labels)) + labels.astype(np.uint8).tobytes()


def _write_mnist(tmp_path, n=10, h=4, w=3, gz=False, prefix="train"):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (n, h, w)).astype(np.uint8)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    ib, lb = _idx_images(images), _idx_labels(labels)
    suffix = ".gz" if gz else ""
    ipath = tmp_path / f"{prefix}-images-idx3-ubyte{suffix}"
    lpath = tmp_path / f"{prefix}-labels-idx1-ubyte{suffix}"
    ipath.write_bytes(gzip.compress(ib) if gz else ib)
    lpath.write_bytes(gzip.compress(lb) if gz else lb)
    return images, labels, ipath, lpath


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_read_back_exactly(tmp_path, gz):
    images, labels, ipath, lpath = _write_mnist(tmp_path, gz=gz)
    d = io.load_mnist(ipath, lpath)
    assert (d.n, d.channels, d.height, d.width) == (10, 1, 4, 3) and len(d) == 10
    assert np.array_equal(d.images(), images[:, None])
    assert np.array_equal(d.labels(), labels.astype(np.int32))
    d2 = io.load_mnist_dir(tmp_path)
    assert np.array_equal(d2.images(), d.images())


def test_mnist_loader_serves_exact_batches(dev, tmp_path):
    images, labels, ipath, lpath = _write_mnist(tmp_path)
    d = io.load_mnist(ipath, lpath)
    loader = io.DataLoader(d, batch_size=4, shuffle=False, flat=True, device=dev)
    assert len(loader) == 3 and loader.size == 10 and loader.x_shape(4) == (4, 12)
    xs, ys = [], []
    for x, y in loader:
        xs.append(x.to_numpy())
        ys.append(y.to_numpy())
    assert [len(v) for v in ys] == [4, 4, 2]
    x = np.concatenate(xs)
    assert np.allclose(x, images.reshape(10, 12).astype(np.float32) / 255, rtol=0, atol=1e-6)  # pixel * scale
    assert np.array_equal(np.concatenate(ys), labels.astype(np.int32))
    # the next iteration is the next epoch, same order without shuffle
    b = loader.next()
    assert b is not None and b[2] == 1 and b[3] == 0
    assert np.array_equal(b[1].to_numpy(), labels[:4].astype(np.int32))

    # normalised, shuffled, drop_last, into existing tensors
    loader = io.DataLoader(d, batch_size=4, shuffle=True, seed=5, drop_last=True, mean=[0.5], std=[0.25],
                           prefetch=0, device=dev)
    xt = tensor.from_numpy(np.zeros((4, 1, 4, 3), np.float32), dev)
    yt = tensor.from_numpy(np.zeros(4, np.int32), dev)
    seen = []
    while loader.next_into(xt, yt):
        xb, yb = xt.to_numpy(), yt.to_numpy()
        for xi, yi in zip(xb, yb):
            i = int(np.flatnonzero(np.all(np.isclose((images / 255 - 0.5) / 0.25, xi[0], atol=1e-6), axis=(1, 2)))[0])
            assert labels[i] == yi
            seen.append(i)
    assert len(seen) == 8 and len(set(seen)) == 8


def test_truncated_and_bad_mnist_raise_ioerror(tmp_path):
    images, labels, ipath, lpath = _write_mnist(tmp_path)
    raw = ipath.read_bytes()
    short = tmp_path / "short-images"
    short.write_bytes(raw[:-5])
    with pytest.raises(loom.IOError, match="short-images"):
        io.load_mnist(short, lpath)
    badmagic = tmp_path / "bad-images"
    badmagic.write_bytes(struct.pack(">I", 0x804) + raw[4:])
    with pytest.raises(OSError):
        io.load_mnist(badmagic, lpath)
    gzshort = tmp_path / "short.gz"
    gzshort.write_bytes(gzip.compress(raw)[:-10])
    with pytest.raises(loom.IOError):
        io.load_mnist(gzshort, lpath)
    few = tmp_path / "few-labels"
    few.write_bytes(_idx_labels(labels[:7]))
    with pytest.raises(loom.IOError):
        io.load_mnist(ipath, few)
    with pytest.raises(loom.IOError):
        io.load_mnist_dir(tmp_path / "nowhere")
    with pytest.raises(loom.IOError):
        io.load_cifar10([short])


def test_native_model_save_load_states(dev, tmp_path):
    data = list(batches(4))

    def make():
        dev.SetRandSeed(3)
        m = model.NativeModel(model.mlp([20, 16, 4], device=dev), opt.SGD(0.1, momentum=0.9))
        x = tensor.from_numpy(data[0][0], dev)
        m.compile([x], is_train=True, use_graph=False)
        return m

    def run(m, part):
        return [m.train_one_batch(xb, yb)[1].item() for xb, yb in part]

    straight = run(make(), data)
    m1 = make()
    first = run(m1, data[:2])
    m1.save_states(tmp_path / "n.ckpt")
    m2 = make()
    m2.load_states(tmp_path / "n.ckpt")
    assert first + run(m2, data[2:]) == straight


def _snapshot(m):
    """The bytes of every state of `m` and of its optimizer, and the learning rate."""
    states = {k: v.to_numpy().tobytes() for k, v in m.get_states().items()}
    slots, meta = loom.core.optimizer_state(m.optimizer._impl, "")
    return states, {k: t.to_numpy().tobytes() for k, t in slots}, meta


def _native(dev, data):
    dev.SetRandSeed(3)
    m = model.NativeModel(model.mlp([20, 16, 4], device=dev), opt.SGD(0.1, momentum=0.9))
    m.compile([tensor.from_numpy(data[0][0], dev)], is_train=True, use_graph=False)
    return m


@pytest.mark.parametrize("kind", ["eager", "graph", "native"])
def test_load_states_that_does_not_fit_the_optimizer_changes_nothing(dev, tmp_path, kind):
    """Issue 16, class 3. Saved before the first step (no optimizer slots yet), loaded after
    training (momentum exists): refused, and neither the weights nor the optimizer changed."""
    data = list(batches(3))
    if kind == "native":
        m = _native(dev, data)
        m.save_states(tmp_path / "early.ckpt")
        for xb, yb in data:
            m.train_one_batch(xb, yb)
    else:
        m, x, y = _fresh(dev, kind == "graph", data)
        m.save_states(tmp_path / "early.ckpt")
        _run(dev, m, data, x, y)
    before = _snapshot(m)
    assert before[1], "training created momentum"
    with pytest.raises(loom.IOError, match="nothing was restored") as e:
        m.load_states(tmp_path / "early.ckpt")
    assert "momentum" in str(e.value) and "not in the file" in str(e.value)
    assert _snapshot(m) == before  # the weights too: nothing was restored, as the message says


def test_load_states_with_a_bad_parameter_leaves_the_optimizer_alone(dev, tmp_path):
    data = list(batches(2))
    m, x, y = _fresh(dev, False, data)
    _run(dev, m, data, x, y)
    m.save_states(tmp_path / "m.ckpt")
    ck = io.load_checkpoint(tmp_path / "m.ckpt")
    tensors = dict(ck.tensors)
    first = next(iter(m.get_states()))
    tensors[first] = tensor.zeros((1,), dev)  # a parameter of the wrong shape
    io.save_checkpoint(tmp_path / "bad.ckpt", tensors, ck.meta)
    _run(dev, m, data, x, y)
    before = _snapshot(m)
    with pytest.raises(loom.IOError, match=first):
        m.load_states(tmp_path / "bad.ckpt")
    assert _snapshot(m) == before


# ---- files (issue 16, class 6) ----

def test_a_nul_byte_in_a_path_or_a_name_is_a_value_error(dev, tmp_path):
    a = tensor.ones((2,), dev)
    with pytest.raises(loom.ValueError, match="NUL byte"):
        io.save_checkpoint(str(tmp_path / "a\0b.ckpt"), {"a": a})
    assert list(tmp_path.iterdir()) == []  # used to write 'a'
    with pytest.raises(loom.ValueError, match=r"tensor name 'w\\0x'"):
        io.save_checkpoint(tmp_path / "n.ckpt", {"w\0x": a})
    with pytest.raises(loom.ValueError, match="metadata name"):
        io.save_checkpoint(tmp_path / "n.ckpt", {"w": a}, {"s\0t": 1.0})
    io.save_checkpoint(tmp_path / "a", {"a": a})
    with pytest.raises(loom.ValueError, match="NUL byte"):
        io.load_checkpoint(str(tmp_path / "a\0b.ckpt"))
    with pytest.raises(loom.ValueError, match="NUL byte"):
        io.load_mnist(str(tmp_path / "a\0i"), str(tmp_path / "a"))
    assert [p.name for p in tmp_path.iterdir()] == ["a"]


def test_resaving_keeps_a_private_checkpoint_private(dev, tmp_path):
    data = list(batches(1))
    m, x, y = _fresh(dev, False, data)
    path = tmp_path / "m.ckpt"
    m.save_states(path)
    os.chmod(path, 0o600)
    m.save_states(path)
    assert os.stat(path).st_mode & 0o777 == 0o600


def _in_child(script, timeout=60):
    """Runs `script` in a fresh interpreter: a call that blocks while holding the interpreter
    lock then fails the test by the timeout instead of hanging the suite. Its stdout, split."""
    import subprocess
    import sys
    import textwrap

    from conftest import python_env
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                       env=python_env(), timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")[0].split()


def test_load_checkpoint_refuses_a_fifo_without_blocking(tmp_path):
    """A FIFO with no writer used to block load_checkpoint forever, with the lock held."""
    fifo = tmp_path / "pipe.ckpt"
    os.mkfifo(fifo)
    out = _in_child(f"""
        import loom
        from loom import io
        try:
            io.load_checkpoint({str(fifo)!r})
        except loom.IOError as e:
            print("IOError", "(a FIFO)" in str(e))
    """)
    assert out == ["IOError", "True"]


def test_saving_releases_the_interpreter_lock_during_the_write(tmp_path):
    """Note [The interpreter lock and file I/O] in swig/io.i. With a switch interval of 100 s no
    thread gives the lock up by itself: the main thread runs while the saver is inside
    save_checkpoint only if the save released it. The main thread gives the lock away at every
    turn (sleep(0)), so the saver never waits for it. It counts the turns it got while the save
    was under way: one or two when the save holds the lock, thousands when it does not (a 64 MiB
    write and fsync). The temporary file has an unguessable name (O_EXCL), so nothing can be
    planted there to block the write."""
    out = _in_child(f"""
        import sys, threading, time
        from loom import io, tensor
        path = {str(tmp_path / "m.ckpt")!r}
        t = tensor.ones((16 << 20,))
        inside = threading.Event()
        def save():
            inside.set()
            io.save_checkpoint(path, {{"t": t}})
        sys.setswitchinterval(100)
        saver = threading.Thread(target=save)
        saver.start()
        turns = 0
        while saver.is_alive():
            if inside.is_set():
                turns += 1
            time.sleep(0)
        saver.join()
        print(turns > 50, turns)
    """)
    assert out[0] == "True", out


def test_load_optimizer_refuses_a_model_checkpoint_naming_what_is_missing(dev, tmp_path):
    data = list(batches(2))
    m, x, y = _fresh(dev, False, data)
    _run(dev, m, data, x, y)
    m.save_states(tmp_path / "model.ckpt")
    io.save_checkpoint(tmp_path / "params.ckpt", m.get_states())
    fresh = opt.SGD(0.3, momentum=0.9)
    with pytest.raises(loom.IOError, match="not an optimizer file: it holds .* outside 'optimizer/'"):
        io.load_optimizer(tmp_path / "model.ckpt", fresh, dev)
    with pytest.raises(loom.IOError, match="no metadata 'optimizer/lr'"):
        io.load_optimizer(tmp_path / "params.ckpt", fresh, dev)
    assert fresh.lr == pytest.approx(0.3) and not loom.core.optimizer_state(fresh._impl, "")[0]
    io.save_optimizer(tmp_path / "opt.ckpt", m.optimizer)  # what load_optimizer reads
    io.load_optimizer(tmp_path / "opt.ckpt", fresh, dev)
    assert fresh.lr == pytest.approx(0.1)


@pytest.mark.parametrize("kwargs, needle", [
    ({"batch_size": "8"}, "batch_size must be an int, got str"),
    ({"batch_size": 2.5}, "batch_size must be an int, got float 2.5"),
    ({"batch_size": float("nan")}, "batch_size must be an int, got float nan"),
    ({"batch_size": True}, "batch_size must be an int, got bool"),
    ({"seed": "x"}, "seed must be an int, got str"),
    ({"mean": ["a"], "std": [1.0]}, "mean must be a number, got str 'a'"),
    ({"prefetch": 1.5}, "prefetch must be an int"),
])
def test_loader_options_of_the_wrong_type_are_loom_type_errors(tmp_path, kwargs, needle):
    # Found by tools/probe.py: int() took "8" and 2.5 as 8 and 2, and raised Python's ValueError
    # for NaN and "x"; a string mean was Python's TypeError from the binding.
    _, _, ipath, lpath = _write_mnist(tmp_path)
    with pytest.raises(loom.TypeError, match=needle):
        io.DataLoader(io.load_mnist(ipath, lpath), **kwargs)


@pytest.mark.parametrize("call, needle", [
    (lambda: io.load_checkpoint(3), "[io] path must be a str or an os.PathLike, got int 3"),
    (lambda: io.save_checkpoint(None, {}), "[io] path must be a str or an os.PathLike, got NoneType"),
    (lambda: io.load_mnist_dir(["a"]), "got list"),
    (lambda: io.load_cifar10(3), "[io] load_cifar10 takes a path or a list of them, got int"),
    (lambda: io.load_cifar10([1.5]), "[io] a batch file must be a str or an os.PathLike, got float 1.5"),
])
def test_paths_of_the_wrong_type_are_loom_type_errors(call, needle):
    # Found by a sweep of the public API (issue 36): os.fspath's own TypeError.
    with pytest.raises(loom.TypeError) as e:
        call()
    assert needle in str(e.value)
