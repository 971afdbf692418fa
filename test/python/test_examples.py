"""The Python examples run in both modes and train."""
import json
import subprocess
import sys

import pytest

from conftest import python_env


def run(root, script, *args):
    r = subprocess.run([sys.executable, f"{root}/examples/python/{script}", *args, "--json"], capture_output=True,
                       text=True, env=python_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


@pytest.mark.parametrize("mode", ["--graph", "--eager"])
def test_mlp_example(root, mode):
    res, progress = run(root, "mlp.py", mode, "--steps", "12", "--batch", "32")
    assert res["mode"] == mode[2:]
    assert res["last_loss"] < res["first_loss"]
    assert "step 12/12" in progress or "12/12" in progress


@pytest.mark.parametrize("mode", ["--graph", "--eager"])
def test_cnn_example(root, mode):
    res, _ = run(root, "cnn.py", mode, "--steps", "8", "--batch", "16")
    assert res["mode"] == mode[2:]
    assert res["last_loss"] < res["first_loss"]


def test_bench_script(root):
    r = subprocess.run([sys.executable, f"{root}/tools/bench_python.py", "--batches", "2", "--steps", "3",
                        "--no-cpp"], capture_output=True, text=True, env=python_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert {row["mode"] for row in rows} == {"eager", "graph"}
    assert all(row["trained"] and row["ms_per_step_median"] > 0 for row in rows)


def test_quickstart(root):
    # The script the package stage runs in a fresh virtualenv (tools/test.sh package); it exits
    # non-zero unless the loss fell by half.
    r = subprocess.run([sys.executable, f"{root}/examples/python/quickstart.py", "--steps", "40"],
                       capture_output=True, text=True, env=python_env(), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "over 40 steps (mean of 3, graph replay)" in r.stdout
    assert "memory planned" in r.stdout  # the graph's summary: it was captured and replayed


@pytest.mark.parametrize("mode", ["--graph", "--eager"])
def test_gpt_example(root, mode):
    import os
    from loom import io
    if not os.path.exists(os.path.join(io.default_text_dir(), "SOURCE")):
        pytest.skip("no text corpus in data/text: run tools/setup.sh")
    res, _ = run(root, "gpt.py", mode, "--layers", "1", "--dim", "32", "--heads", "2", "--context", "32",
                 "--batch", "8", "--steps", "30", "--warmup", "3", "--eval-windows", "32", "--sample", "10")
    assert res["mode"] == mode[2:]
    assert res["valid_bits_per_byte"] < res["valid_bits_per_byte_start"] - 0.3
    assert len(res["sample"]) > 0


def test_own_data_example(root, tmp_path):
    # docs/guide.md's "Your own data": numpy arrays through loom.data and the Trainer; killed
    # after 3 epochs and resumed, it ends as the uninterrupted run does.
    def run(*args):
        r = subprocess.run([sys.executable, f"{root}/examples/python/own_data.py", *args], capture_output=True,
                           text=True, env=python_env(), timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout.strip().splitlines()[-1]

    whole = run("--epochs", "6")
    assert whole.startswith("own_data: 186 steps")
    run("--epochs", "3", "--checkpoint-dir", str(tmp_path / "run"))
    assert run("--epochs", "6", "--checkpoint-dir", str(tmp_path / "run"), "--resume") == whole
