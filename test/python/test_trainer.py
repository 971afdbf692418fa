"""loom.trainer: a training script killed with SIGKILL at a random step and resumed ends with
bitwise the parameters, states and optimizer state of an uninterrupted run (eager and graph,
dropout, BatchNorm and augmentation in the step); a NaN at step k raises NonFiniteError naming k
and the last good checkpoint loads; evaluation's loss, top-1 and top-5 against numpy; the CSV
log and its plot.

Run as a script (`test_trainer.py child MODE DATA DIR DELAY_MS`), this file is the training
script that the resume test starts, kills and starts again.
"""
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

EPOCHS, BATCH, SAMPLES, CLASSES = 3, 8, 64, 4  # 8 steps an epoch, 24 in all


def write_digits_like(directory, n, seed, prefix="train", classes=CLASSES, side=8):
    """MNIST idx files of n random side x side images whose class is a bright quadrant."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n).astype(np.uint8)
    images = rng.integers(0, 100, (n, side, side)).astype(np.uint8)
    half = side // 2
    for i, c in enumerate(labels):
        r0 = 0 if c % 2 == 0 else half
        c0 = 0 if (c // 2) % 2 == 0 else half
        images[i, r0:r0 + half, c0:c0 + half] += 150
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{prefix}-images-idx3-ubyte"), "wb") as f:
        f.write(bytes([0, 0, 8, 3]) + np.array([n, side, side], ">u4").tobytes() + images.tobytes())
    with open(os.path.join(directory, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + np.array([n], ">u4").tobytes() + labels.tobytes())


def make_net(dev, use_graph):
    from loom import autograd, layer, model, opt, tensor

    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.conv = layer.Conv2d(1, 4, 3, padding=1, device=dev)
            self.bn = layer.BatchNorm2d(4, device=dev)
            self.relu = layer.ReLU()
            self.flat = layer.Flatten()
            self.drop = layer.Dropout(0.25)  # the device's Philox counter is part of the run
            self.fc = layer.Linear(256, CLASSES, device=dev)

        def forward(self, x):
            return self.fc(self.drop(self.flat(self.relu(self.bn(self.conv(x))))))

        def train_one_batch(self, x, y):
            out = self.forward(x)
            loss = autograd.softmax_cross_entropy(out, y)
            self.optimizer(loss)
            return out, loss

    dev.SetRandSeed(3)
    m = Net()
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4))
    m.compile([tensor.from_numpy(np.zeros((BATCH, 1, 8, 8), np.float32), dev)], is_train=True, use_graph=use_graph,
              sequential=True)
    return m


def loaders(data_dir, dev, delay_s=0.0):
    from loom import io
    train = io.DataLoader(io.load_mnist_dir(data_dir, True), batch_size=BATCH, seed=11, drop_last=True,
                          mean=[0.5], std=[0.25], crop_padding=2, hflip=True, augment_seed=5, device=dev)
    held_out = io.DataLoader(io.load_mnist_dir(data_dir, False), batch_size=10, shuffle=False, mean=[0.5],
                             std=[0.25], device=dev)
    return train, held_out


def child(mode, data_dir, run_dir, delay_ms):
    from loom import device, trainer
    dev = device.create_cpu_device()
    m = make_net(dev, mode == "graph")
    train, held_out = loaders(data_dir, dev)
    t = trainer.Trainer(m, train, held_out, epochs=EPOCHS, log_every=3, eval_every=5, checkpoint_every=2,
                        keep_last=2, checkpoint_dir=run_dir, resume=True, csv=os.path.join(run_dir, "log.csv"),
                        progress=False, on_batch=lambda step, x, y: time.sleep(delay_ms / 1e3))
    t.fit()


def bar_child(data_dir, plain):
    """A short run with the progress bar on; `plain`: without tqdm."""
    from loom import device, trainer
    if plain:
        trainer._tqdm = None
    dev = device.create_cpu_device()
    m = make_net(dev, True)
    train, held_out = loaders(data_dir, dev)
    trainer.Trainer(m, train, held_out, epochs=2, log_every=2, on_batch=lambda *a: time.sleep(0.12)).fit()
    print("done")


# ---- the tests ----

@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("digits_like"))
    write_digits_like(d, SAMPLES, 1)
    write_digits_like(d, 30, 2, prefix="t10k")
    return d


def spawn(mode, data_dir, run_dir, delay_ms):
    log = open(run_dir + ".log", "ab")
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "child", mode, data_dir, run_dir,
                             str(delay_ms)], stdout=log, stderr=subprocess.STDOUT)


def final_name():
    return f"step-{EPOCHS * SAMPLES // BATCH:012d}.ckpt"


def steps_in(run_dir):
    if not os.path.isdir(run_dir):
        return []
    return sorted(int(f[5:17]) for f in os.listdir(run_dir) if f.startswith("step-") and f.endswith(".ckpt"))


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_killed_at_a_random_step_and_resumed_equals_an_uninterrupted_run_bitwise(mode, data_dir, tmp_path):
    from loom import io
    ref, run = str(tmp_path / "ref"), str(tmp_path / "run")
    assert spawn(mode, data_dir, ref, 0).wait() == 0, open(ref + ".log").read()

    kill_after = random.randint(4, 18)
    jitter = random.uniform(0, 0.05)
    p = spawn(mode, data_dir, run, 40)
    while p.poll() is None:
        s = steps_in(run)
        if s and s[-1] >= kill_after:
            break
        time.sleep(0.002)
    assert p.poll() is None, f"the run ended before it could be killed:\n{open(run + '.log').read()}"
    time.sleep(jitter)
    p.send_signal(signal.SIGKILL)
    assert p.wait() == -signal.SIGKILL
    assert not os.path.exists(os.path.join(run, final_name())), "killed after its last step"
    resumed_at = steps_in(run)[-1]

    assert spawn(mode, data_dir, run, 0).wait() == 0, open(run + ".log").read()
    assert f"resumed at step {resumed_at}" in open(run + ".log").read(), (kill_after, open(run + ".log").read())

    a, b = io.load_checkpoint(os.path.join(ref, final_name())), io.load_checkpoint(os.path.join(run, final_name()))
    assert a.keys() == b.keys()
    assert any(k.startswith("optimizer/") for k in a.keys())
    for k in a.keys():
        assert a[k].to_numpy().tobytes() == b[k].to_numpy().tobytes(), f"{k} differs (killed after {kill_after})"
    for k in ("run/rng_counter_lo", "run/epoch", "run/index", "optimizer/lr", "run/best_top1"):
        assert a.meta[k] == b.meta[k], k
    assert a.meta["run/rng_counter_lo"] > 0  # dropout drew numbers

    def logged(d):  # every row once, the same values as an uninterrupted run's but for the timings
        with open(os.path.join(d, "log.csv")) as f:
            return [[c for i, c in enumerate(line.split(",")) if i not in (2, 5, 6)] for line in f.read().splitlines()]

    assert logged(ref) == logged(run)


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("k", [7, 10])
def test_a_nan_at_step_k_raises_naming_k_and_the_last_good_checkpoint_loads(mode, k, data_dir, tmp_path):
    from loom import device, trainer
    dev = device.create_cpu_device()
    m = make_net(dev, mode == "graph")
    train, _ = loaders(data_dir, dev)

    def poison(step, x, y):
        if step == k:
            a = x.to_numpy()
            a[0, 0, 3, 3] = np.nan
            x.copy_from_numpy(a)

    t = trainer.Trainer(m, train, epochs=EPOCHS, log_every=5, checkpoint_every=3, keep_last=10,
                        checkpoint_dir=str(tmp_path), progress=False, verbose=False, on_batch=poison)
    with pytest.raises(trainer.NonFiniteError) as e:
        t.fit()
    good = (k - 1) // 3 * 3
    assert e.value.step == k and f"at step {k}" in str(e.value)
    assert isinstance(e.value, ValueError)
    assert e.value.last_good_checkpoint == os.path.join(str(tmp_path), f"step-{good:012d}.ckpt")
    assert steps_in(str(tmp_path))[-1] == good  # nothing saved at or after k

    with pytest.raises(trainer.NonFiniteError):  # nor can the bad state be saved by hand
        t.save(str(tmp_path / "by_hand.ckpt"))
    assert not os.path.exists(tmp_path / "by_hand.ckpt")

    m2 = make_net(dev, mode == "graph")
    train2, _ = loaders(data_dir, dev)
    t2 = trainer.Trainer(m2, train2, epochs=EPOCHS, checkpoint_dir=str(tmp_path), progress=False)
    t2.restore(e.value.last_good_checkpoint)
    assert t2.step == good and train2.position() == divmod(good, SAMPLES // BATCH)
    for name, p in m2.get_params().items():
        assert np.isfinite(p.to_numpy()).all(), name


@pytest.mark.parametrize("use_graph", [False, True])
def test_a_native_model_stopped_by_max_steps_resumes_bitwise(use_graph, data_dir, tmp_path):
    """NativeModel (C++ step), stopped after 10 steps and resumed in a new trainer and model, ends
    as one uninterrupted run does."""
    from loom import device, layer, model, opt, tensor, trainer

    def run(d, **kwargs):
        dev = device.create_cpu_device()
        dev.SetRandSeed(5)
        net = layer.Sequential(layer.Conv2d(1, 4, 3, padding=1, device=dev), layer.BatchNorm2d(4, device=dev),
                               layer.ReLU(), layer.Flatten(), layer.Dropout(0.2),
                               layer.Linear(256, CLASSES, device=dev))
        m = model.NativeModel(net, opt.SGD(lr=0.05, momentum=0.9))
        m.compile([tensor.from_numpy(np.zeros((BATCH, 1, 8, 8), np.float32), dev)], is_train=True,
                  use_graph=use_graph)
        train, held_out = loaders(data_dir, dev)
        r = trainer.Trainer(m, train, held_out, epochs=EPOCHS, log_every=3, checkpoint_every=4, checkpoint_dir=d,
                            progress=False, verbose=False, **kwargs).fit()
        return r, {k: v.to_numpy() for k, v in m.get_states().items()}

    r_ref, ref = run(str(tmp_path / "ref"))
    r1, _ = run(str(tmp_path / "run"), max_steps=10)
    assert r1["steps"] == 10 and steps_in(str(tmp_path / "run"))[-1] == 10
    r2, resumed = run(str(tmp_path / "run"), resume=True)
    assert r2["resumed_from"] == 10 and r2["steps"] == r_ref["steps"] == EPOCHS * SAMPLES // BATCH
    assert r2["eval"] == r_ref["eval"] and r2["train_loss"] == r_ref["train_loss"]
    for k in ref:
        assert ref[k].tobytes() == resumed[k].tobytes(), k


def numpy_metrics(logits, labels):
    shifted = logits - logits.max(1, keepdims=True)
    loss = np.mean(np.log(np.exp(shifted).sum(1)) - shifted[np.arange(len(labels)), labels])
    label_logit = logits[np.arange(len(labels)), labels][:, None]
    rivals = (logits >= label_logit).sum(1) - 1  # other classes at or above the label's logit
    return loss, np.mean(rivals < 1), np.mean(rivals < 5)


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("use_graph", [False, True])
def test_evaluate_matches_numpy_top1_top5_and_loss(native, use_graph, tmp_path):
    from loom import autograd, device, io, layer, model, opt, tensor, trainer
    classes = 10  # MNIST files hold digits 0-9
    d = str(tmp_path)
    write_digits_like(d, 50, 4, prefix="t10k", classes=classes)
    dev = device.create_cpu_device()
    dev.SetRandSeed(9)
    if native:
        net = layer.Sequential(layer.Conv2d(1, 3, 3, padding=1, device=dev), layer.BatchNorm2d(3, device=dev),
                               layer.ReLU(), layer.Flatten(), layer.Linear(192, classes, device=dev))
        m = model.NativeModel(net, opt.SGD(lr=0.1))
    else:
        class Net(model.Model):
            def __init__(self):
                super().__init__()
                self.conv = layer.Conv2d(1, 3, 3, padding=1, device=dev)
                self.bn = layer.BatchNorm2d(3, device=dev)
                self.fc = layer.Linear(192, classes, device=dev)

            def forward(self, x):
                return self.fc(autograd.flatten(autograd.relu(self.bn(self.conv(x)))))

            def train_one_batch(self, x, y):
                out = self.forward(x)
                loss = autograd.softmax_cross_entropy(out, y)
                self.optimizer(loss)
                return out, loss

        m = Net()
        m.set_optimizer(opt.SGD(lr=0.1))
    held_out = io.DataLoader(io.load_mnist_dir(d, False), batch_size=16, shuffle=False, mean=[0.5], std=[0.25],
                             device=dev)  # 16 + 16 + 16 + 2: a smaller last batch
    x0, y0 = held_out.next()[:2]
    m.compile([x0], is_train=True, use_graph=use_graph)
    for _ in range(2):
        m.train_one_batch(x0, y0)  # running statistics move off 0 and 1
    r = trainer.evaluate(m, held_out)
    r2 = trainer.Evaluator(m).run(held_out)
    assert r == r2
    assert m.training if not native else True  # left in training mode

    whole = io.DataLoader(io.load_mnist_dir(d, False), batch_size=50, shuffle=False, mean=[0.5], std=[0.25],
                          device=dev)
    xs, ys = whole.next()[:2]
    m.eval()
    with autograd.no_grad():
        logits = m.forward(xs).to_numpy().astype(np.float64)
    m.train()
    loss, top1, top5 = numpy_metrics(logits, ys.to_numpy())
    assert r["samples"] == 50
    assert abs(r["loss"] - loss) < 1e-5
    assert r["top1"] == top1 and r["top5"] == top5
    assert 0 < top1 < top5 < 1, "the check is not vacuous"


def test_top_k_correct_against_numpy():
    from loom import core, device, tensor
    dev = device.create_cpu_device()
    rng = np.random.default_rng(3)
    logits = rng.integers(0, 4, (200, 9)).astype(np.float32)  # many ties
    labels = rng.integers(0, 9, 200).astype(np.int32)
    lt, yt = tensor.from_numpy(logits, dev), tensor.from_numpy(labels, dev)
    label_logit = logits[np.arange(200), labels][:, None]
    rivals = (logits >= label_logit).sum(1) - 1
    for k in (1, 2, 5, 9):
        assert core.top_k_correct(lt, yt, k).item() == float((rivals < k).sum()), k


def test_the_log_and_its_plot(data_dir, tmp_path):
    pytest.importorskip("matplotlib")
    from loom import device, trainer
    dev = device.create_cpu_device()
    m = make_net(dev, True)
    train, held_out = loaders(data_dir, dev)
    csv, png = str(tmp_path / "log.csv"), str(tmp_path / "curves.png")
    evals = []
    r = trainer.Trainer(m, train, held_out, epochs=2, log_every=4, eval_at_start=True, csv=csv, plot=png,
                        progress=False, verbose=False, on_eval=lambda s, l, e: evals.append(s)).fit()
    assert r["steps"] == 16 and r["resumed_from"] == -1
    assert evals == [0, 8, 16]
    with open(csv) as f:
        lines = f.read().splitlines()
    assert lines[0] == "step,epoch,seconds,lr,train_loss,ms_per_step,items_per_s,eval_loss,eval_top1,eval_top5"
    rows = [line.split(",") for line in lines[1:]]
    assert [int(row[0]) for row in rows if row[4]] == [4, 8, 12, 16]  # training rows
    assert [int(row[0]) for row in rows if row[8]] == [0, 8, 16]     # evaluation rows
    assert float(rows[-1][8]) == r["eval"]["top1"]
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_bad_options_are_loom_value_errors(data_dir):
    from loom import device, errors, trainer
    dev = device.create_cpu_device()
    m = make_net(dev, False)
    train, _ = loaders(data_dir, dev)
    for kwargs in ({"log_every": 0}, {"resume": True}, {"plot": "x.png"}, {"epochs": 0}):
        with pytest.raises(errors.ValueError):
            trainer.Trainer(m, train, **kwargs)
    with pytest.raises(errors.TypeError, match="loom.io.DataLoader"):
        trainer.Trainer(m, [(1, 2)])


def test_checkpoints_of_a_data_parallel_model_are_refused_not_mixed(data_dir, tmp_path):
    # Note [Checkpoints across ranks]: the Python loop does not split checkpoints by rank, so a
    # DistOpt over several ranks with a checkpoint_dir is refused before anything is written (a
    # stand-in for a DistOpt of 2 ranks: this test runs as one process).
    from loom import device, errors, trainer
    dev = device.create_cpu_device()
    m = make_net(dev, False)
    train, _ = loaders(data_dir, dev)

    class TwoRanks:
        world_size = 2

    real, m.optimizer = m.optimizer, TwoRanks()
    try:
        with pytest.raises(errors.ValueError, match="DistOpt over 2 ranks: loom.trainer does not split"):
            trainer.Trainer(m, train, checkpoint_dir=str(tmp_path / "run"), progress=False)
        assert not (tmp_path / "run").exists()
        trainer.Trainer(m, train, progress=False)  # without checkpoints: fine
    finally:
        m.optimizer = real


def test_a_folder_of_another_run_is_refused_unless_resuming(data_dir, tmp_path):
    from loom import device, errors, trainer
    dev = device.create_cpu_device()
    m = make_net(dev, False)
    train, _ = loaders(data_dir, dev)
    kw = dict(checkpoint_dir=str(tmp_path), progress=False, verbose=False)
    trainer.Trainer(m, train, max_steps=2, **kw).fit()
    with pytest.raises(errors.ValueError, match="holds checkpoints of another run"):
        trainer.Trainer(m, train, max_steps=2, **kw).fit()
    assert trainer.Trainer(m, train, max_steps=3, resume=True, **kw).fit()["resumed_from"] == 2


def test_another_runs_best_checkpoint_is_never_overwritten(data_dir, tmp_path):
    # Only best.ckpt left by another run: a new run (or a resume with no step checkpoint) wrote
    # its own first evaluation over it.
    from loom import device, errors, trainer
    dev = device.create_cpu_device()
    m = make_net(dev, False)
    train, _ = loaders(data_dir, dev)
    best = tmp_path / "best.ckpt"
    best.write_bytes(b"another run's best")
    kw = dict(checkpoint_dir=str(tmp_path), progress=False, verbose=False, max_steps=2)
    with pytest.raises(errors.ValueError, match="best.ckpt"):
        trainer.Trainer(m, train, **kw).fit()
    with pytest.raises(errors.ValueError, match="but no step checkpoint to resume from"):
        trainer.Trainer(m, train, resume=True, **kw).fit()
    assert best.read_bytes() == b"another run's best"


@pytest.mark.parametrize("plain", [False, True])
def test_the_progress_bar_shows_on_a_terminal_only(plain, data_dir):
    import pty
    if not plain:
        pytest.importorskip("tqdm")
    args = [sys.executable, os.path.abspath(__file__), "bar", data_dir, "plain" if plain else "tqdm"]
    primary, secondary = pty.openpty()
    p = subprocess.Popen(args, stdout=secondary, stderr=subprocess.STDOUT)
    os.close(secondary)
    out = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(primary)
    assert p.wait() == 0, out.decode(errors="replace")
    text = out.decode(errors="replace")
    assert "\r" in text and "16/16" in text and "items/s" in text and "ms/step" in text and "lr 0.05" in text, text
    assert "loss " in text and "held-out loss" in text and "top-5" in text and "done" in text, text
    # The same run into a pipe: the evaluation lines, no bar.
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stdout and "items/s" not in r.stdout and "held-out loss" in r.stdout, r.stdout


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "child":
    child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
elif __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "bar":
    bar_child(sys.argv[2], sys.argv[3] == "plain")


@pytest.mark.parametrize("kwargs, error, needle", [
    ({"epochs": "x"}, "TypeError", "epochs must be an int, got str"),
    ({"epochs": float("nan")}, "TypeError", "epochs must be an int, got float nan"),
    ({"max_steps": -3}, "ValueError", "max_steps -3 must be at least 0"),
    ({"max_steps": "5"}, "TypeError", "max_steps must be an int"),
    ({"log_every": float("inf")}, "TypeError", "log_every must be an int"),
    ({"keep_last": -2}, "ValueError", "keep_last -2 must be at least 1"),
    ({"keep_last": "x"}, "TypeError", "keep_last must be an int"),
    ({"checkpoint_dir": 3}, "TypeError", "checkpoint_dir must be a path, got int 3"),
])
def test_options_of_the_wrong_type_or_range_are_loom_errors(kwargs, error, needle, data_dir, tmp_path, monkeypatch):
    # Found by tools/probe.py: Python's TypeError, ValueError or OverflowError, or taken as they
    # came (max_steps -3, keep_last -2; checkpoint_dir 3 made a folder named '3').
    from loom import device, errors, trainer
    monkeypatch.chdir(tmp_path)
    dev = device.create_cpu_device()
    train, _ = loaders(data_dir, dev)
    with pytest.raises(getattr(errors, error), match=needle):
        trainer.Trainer(make_net(dev, False), train, **dict(dict(max_steps=2, progress=False), **kwargs))
    assert os.listdir(tmp_path) == []
