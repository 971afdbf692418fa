"""The peers tools/compare.sh measures loom against: tools/bench_torch.py (PyTorch 1.13 or 2.x, eager
and torch.compile) and tools/bench_jax.py (JAX jit), and the flags of compare.sh itself.

A peer is found, never installed: the Python running the tests, else the environment that
`tools/compare.sh --install-only` left in $LOOM_CACHE_DIR (default ~/.cache/loom). Without one the
test skips and says which. CI installs no peer, so there these tests check the flags and skip
the rest.
"""
import json
import os
import subprocess
import types
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools")
CACHE = os.environ.get("LOOM_CACHE_DIR") or os.path.expanduser("~/.cache/loom")
sys.path.insert(0, TOOLS)
import bench_common as bc  # noqa: E402

_found = {}


def peer_python(module, venv, at_least=None):
    """A Python that imports `module` (version >= at_least when given), or skip."""
    key = (module, venv, at_least)
    if key not in _found:
        _found[key] = None
        check = f"import {module}, sys; v = {module}.__version__; print(v)"
        for py in (sys.executable, os.path.join(CACHE, f"venv-{venv}", "bin", "python")):
            if not os.path.exists(py):
                continue
            r = subprocess.run([py, "-c", check], capture_output=True, text=True)
            if r.returncode == 0:
                version = tuple(int(p) for p in r.stdout.strip().split(".")[:2] if p.isdigit())
                if at_least is None or version >= at_least:
                    _found[key] = py
                    break
    if _found[key] is None:
        need = f"{module}" + (f" >= {'.'.join(map(str, at_least))}" if at_least else "")
        pytest.skip(f"{need} is importable neither by {sys.executable} nor in {CACHE}/venv-{venv} "
                    "(tools/compare.sh --install-only installs the peers; CI has none)")
    return _found[key]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900, **kw)


def one_json_line(r):
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    assert len(lines) == 1, r.stdout
    return json.loads(lines[0])


# The fields tools/compare.sh reads from every framework's JSON line.
FIELDS = {"tool", "model", "batch", "mode", "device", "threads", "ms_per_step_median", "ms_per_step_p10",
          "ms_per_step_p90", "rss_peak_delta_bytes", "first_loss", "last_loss", "optimizer_steps", "data_checksum"}


def check_trained(out, model, batch, mode, steps, tokens=None):
    """tokens: (context, vocab) of a GPT run."""
    assert FIELDS <= set(out), FIELDS - set(out)
    assert (out["model"], out["batch"], out["mode"]) == (model, batch, mode)
    assert out["optimizer_steps"] == steps
    assert out["ms_per_step_p10"] <= out["ms_per_step_median"] <= out["ms_per_step_p90"]
    assert out["first_loss"] != out["last_loss"] and np.isfinite(out["last_loss"])
    if tokens:
        assert out["data_checksum"] == bc.data_checksum(*bc.make_tokens(*tokens, batch))
        return
    _, sample, classes, _ = bc.ZOO[model]
    assert out["data_checksum"] == bc.data_checksum(*bc.make_data(sample, classes, batch))


# ---------------------------------------------------------------- compare.sh's flags


@pytest.mark.parametrize("args,message", [
    (["--peers", "torch3"], "unknown peer 'torch3'"),
    (["--only", "vgg"], "unknown model 'vgg'"),
    (["--reps", "0"], "--reps must be a positive integer"),
    (["--threads", "x"], "--threads must be a positive integer"),
    (["--bogus"], "unknown argument '--bogus'"),
    (["--precision", "fp8"], "--precision must be fp32 or bf16, got 'fp8'"),
])
def test_compare_rejects_bad_flags_before_installing_anything(args, message, tmp_path):
    r = run(["bash", "tools/compare.sh", *args], env={**os.environ, "LOOM_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert os.listdir(tmp_path) == []  # nothing downloaded, no environment made


def test_compare_takes_a_given_torch_python_instead_of_installing(tmp_path):
    # --torch-python (a GPU machine's own PyTorch, offline): checked, never installed into.
    env = {**os.environ, "LOOM_CACHE_DIR": str(tmp_path)}
    r = run(["bash", "tools/compare.sh", "--install-only", "--peers", "compile-ro",
             "--torch-python", "/nonexistent/python3"], env=env)
    assert r.returncode == 1 and "--torch-python /nonexistent/python3 cannot import torch" in r.stderr, r.stderr
    assert os.listdir(tmp_path) == []


def test_gpu_check_refuses_what_is_not_a_bundle(tmp_path):
    r = run(["bash", "tools/gpu_check.sh", "--bundle", str(tmp_path / "missing.tar.xz")])
    assert r.returncode == 2 and "no file" in r.stderr, r.stderr
    not_bundle = tmp_path / "other.tar.xz"
    (tmp_path / "x").mkdir()
    subprocess.run(["tar", "-C", str(tmp_path), "-cJf", str(not_bundle), "x"], check=True)
    r = run(["bash", "tools/gpu_check.sh", "--bundle", str(not_bundle)],
            env={**os.environ, "LOOM_GPU_WORK": str(tmp_path / "work")})
    assert r.returncode == 2 and "is not a tools/gpu_bundle.sh archive" in r.stderr, r.stderr
    r = run(["bash", "tools/gpu_check.sh", "--frobnicate"])
    assert r.returncode == 2 and "unknown argument" in r.stderr, r.stderr


def test_trace_ops_sums_a_profiled_replay_by_op_kind(tmp_path):
    """tools/trace_ops.py (the GPU check's profile part): every op of loom-bench's trace counted once."""
    bench = os.path.join(ROOT, os.environ.get("LOOM_BUILD_DIR", "build"), "loom-bench")
    if not os.path.exists(bench):
        pytest.fail(f"{bench} is not built")
    r = run([bench, "--model", "cnn", "--batch", "4", "--steps", "2", "--warmup", "1", "--rounds", "1",
             "--mode", "graph-planned", "--threads", "1", "--peak-gflops", "1", "--timeline", str(tmp_path / "tl")])
    assert r.returncode == 0, r.stderr[-3000:]
    trace = json.load(open(tmp_path / "tl" / "trace.json"))
    ops = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    r = run([sys.executable, "tools/trace_ops.py", str(tmp_path / "tl" / "trace.json"), "--top", "3",
             "--json", str(tmp_path / "ops.json")])
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 4 and f"{len(ops)} ops" in r.stdout, r.stdout
    rows = json.load(open(tmp_path / "ops.json"))["ops"]
    assert sum(row["count"] for row in rows) == len(ops)
    assert abs(sum(row["us"] for row in rows) - sum(e["dur"] for e in ops)) < 1e-6 * len(ops)
    assert [row["us"] for row in rows] == sorted((row["us"] for row in rows), reverse=True)
    # An op whose record keeps an operand blocked (Note [Activation layouts]) is its own kind.
    blocked = sum(1 for e in ops if "_blocked=1" in (e.get("args") or {}).get("attrs", ""))
    assert sum(row["count"] for row in rows if row["op"].endswith(" [blocked]")) == blocked
    (tmp_path / "bad.json").write_text("[1, 2")
    r = run([sys.executable, "tools/trace_ops.py", str(tmp_path / "bad.json")])
    assert r.returncode == 2 and "not a loom-bench trace" in r.stderr, r.stderr


def test_compare_needs_a_new_enough_python_for_the_peer_environments(tmp_path):
    # No Python >= 3.12 to be found: a clear error, nothing created. (PATH keeps only the shell's tools.)
    env = {**os.environ, "LOOM_CACHE_DIR": str(tmp_path), "HOME": str(tmp_path), "LOOM_PEER_PYTHON": "",
           "PATH": "/usr/bin:/bin"}
    if any(os.path.exists(f"/usr/bin/python3.{v}") for v in range(12, 20)):
        pytest.skip("this machine's /usr/bin has a Python >= 3.12")
    r = run(["bash", "tools/compare.sh", "--install-only", "--peers", "jax"], env=env)
    assert r.returncode == 1 and "needs Python >= 3.12" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "venv-jax")


# ---------------------------------------------------------------- compare.sh's report


def test_compare_report_gives_each_repetitions_ratio_and_the_replay_speed_up(tmp_path):
    """tools/compare_report.py: the ratio of medians, each repetition's own ratio, and eager / graph."""
    bench = os.path.join(ROOT, os.environ.get("LOOM_BUILD_DIR", "build"), "loom-bench")
    if not os.path.exists(bench):
        pytest.fail(f"{bench} is not built")
    r = run([bench, "--model", "mlp", "--batch", "1", "--steps", "2", "--warmup", "1", "--mode", "eager",
             "--threads", "1", "--peak-gflops", "1", "--json"])
    template = one_json_line(r)
    # Two repetitions; ms chosen so that every figure is known: the best graph's medians 1.0 and
    # 1.5 (graph-dynamic is slower), the best peer's 2.0 and 2.5 (torch.compile is slower),
    # eager's 3.0 and 3.3.
    lines = []
    for graph, peer, eager in ((1.0, 2.0, 3.0), (1.5, 2.5, 3.3)):
        for extra, ms in (({"mode": "eager"}, eager), ({"mode": "graph-planned"}, graph),
                          ({"mode": "graph-dynamic"}, graph + 0.5),
                          ({"tool": "bench_torch", "mode": "torch-eager", "torch": "2.15.0"}, peer),
                          ({"tool": "bench_torch", "mode": "torch-compile", "torch": "2.15.0"}, peer + 1)):
            lines.append(json.dumps({**template, **extra, "ms_per_step_median": ms}))
    f = tmp_path / "rows.jsonl"
    f.write_text("\n".join(lines) + "\n")
    out = run([sys.executable, os.path.join(TOOLS, "compare_report.py"), str(f), "2"])
    assert out.returncode == 0, out.stderr
    row = next(l for l in out.stdout.splitlines() if l.startswith("| mlp | 1 |"))
    assert "**0.56** (graph-planned vs torch 2.15.0 eager); reps 0.50 0.60" in row, row
    assert row.endswith("| 2.52x |"), row  # median eager 3.15 / median graph 1.25


# ---------------------------------------------------------------- the shared data


def test_bench_data_is_loom_benchs():
    """bench_common's data, which every peer trains on, is loom-bench's to the byte."""
    bench = os.path.join(ROOT, os.environ.get("LOOM_BUILD_DIR", "build"), "loom-bench")
    if not os.path.exists(bench):
        pytest.fail(f"{bench} is not built")
    # resnet50: 1000 classes, a pool of two batches (the rule in make_data)
    for model, batch in (("mlp", 3), ("cnn", 2), ("resnet50", 1)):
        r = run([bench, "--model", model, "--batch", str(batch), "--steps", "2", "--warmup", "1", "--mode", "eager",
                 "--threads", "1", "--peak-gflops", "1", "--json"])
        out = one_json_line(r)
        _, sample, classes, _ = bc.ZOO[model]
        assert out["data_checksum"] == bc.data_checksum(*bc.make_data(sample, classes, batch))
        assert out["arch"] == bc.ZOO[model][0]
    # the GPT's tokens, and its arch named from the same flags
    r = run([bench, "--model", "gpt", "--batch", "2", "--gpt-layers", "1", "--gpt-dim", "32", "--context", "16",
             "--vocab", "64", "--steps", "2", "--warmup", "1", "--mode", "eager", "--threads", "1",
             "--peak-gflops", "1", "--json"])
    out = one_json_line(r)
    assert out["data_checksum"] == bc.data_checksum(*bc.make_tokens(16, 64, 2))
    flags = types.SimpleNamespace(model="gpt", gpt_layers=1, gpt_dim=32, gpt_heads=4, context=16, vocab=64)
    assert out["arch"] == bc.model_spec(flags)[0] == "gpt-L1-d32-h4-T16-V64"


# The small GPT of the comparison, smaller: 2 layers, width 64, 4 heads, context 32, vocabulary 96.
GPT_FLAGS = dict(gpt_layers=2, gpt_dim=64, gpt_heads=4, context=32, vocab=96, model="gpt")


def loom_sizes(model):
    """(parameter elements, BatchNorm running-statistic elements) of loom's zoo model."""
    from loom import device, layer
    from loom import model as lm
    dev = device.create_cpu_device()
    if model == "gpt":
        g = GPT_FLAGS
        net = layer.GPT(g["vocab"], context=g["context"], num_layers=g["gpt_layers"], dim=g["gpt_dim"],
                        num_heads=g["gpt_heads"], device=dev)
        return sum(int(np.prod(t.shape)) for t in net.get_params().values()), 0
    net = {"mlp": lambda: lm.mlp([784, 1024, 1024, 10], device=dev), "cnn": lambda: lm.small_cnn(3, 10, device=dev),
           "resnet18": lambda: lm.resnet18(10, device=dev), "resnet50": lambda: lm.resnet50(1000, device=dev)}[model]()
    params = sum(int(np.prod(t.shape)) for t in net.get_params().values())
    stats = sum(int(np.prod(t.shape)) for k, t in net.get_states().items() if "running" in k)
    return params, stats


# ---------------------------------------------------------------- JAX


def test_bench_jax_flags_without_jax():
    for args, message in ((["--device", "cuda"], "CPU build of jaxlib"), (["--steps", "1"], "--steps must be")):
        r = run([sys.executable, "tools/bench_jax.py", *args])
        assert r.returncode == 2 and message in r.stderr, r.stderr


def test_bench_jax_says_where_jax_comes_from():
    r = run([sys.executable, "-c", "import jax"])
    if r.returncode == 0:
        pytest.skip(f"{sys.executable} imports jax")
    r = run([sys.executable, "tools/bench_jax.py", "--steps", "2"])
    assert r.returncode == 1 and "cannot import jax" in r.stderr and "compare.sh" in r.stderr, r.stderr


@pytest.mark.parametrize("model", ["mlp", "cnn", "resnet18", "resnet50", "gpt"])
def test_jax_models_are_loom_zoos(model):
    py = peer_python("jax", "jax")
    g = GPT_FLAGS
    make = (f"a = types.SimpleNamespace(**{g!r}); s = (a.context,); "
            f"p, st = bj.init_model(bj.gpt(a.gpt_layers, a.gpt_dim, a.gpt_heads), s, 2, a); " if model == "gpt" else
            f"_, s, c, b = bc.ZOO['{model}']; p, st = bj.init_model(bj.MODELS['{model}'], bj.nhwc(s), 2); ")
    code = ("import json, sys, types; sys.path.insert(0, 'tools'); import bench_jax as bj, bench_common as bc; " + make +
            "print(json.dumps([int(sum(v.size for v in p.values())), int(sum(v.size for v in st.values()))]))")
    r = run([py, "-c", code], env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert tuple(json.loads(r.stdout)) == loom_sizes(model)


@pytest.mark.parametrize("model,batch", [("mlp", 4), ("cnn", 4), ("gpt", 2)])
def test_bench_jax_trains_the_whole_step(model, batch):
    py = peer_python("jax", "jax")
    small = ["--gpt-layers", "1", "--gpt-dim", "32", "--context", "16", "--vocab", "64", "--optimizer", "adam"]
    out = one_json_line(run([py, "tools/bench_jax.py", "--model", model, "--batch", str(batch), "--steps", "3",
                             "--warmup", "1", "--threads", "1", "--json"] + (small if model == "gpt" else [])))
    check_trained(out, model, batch, "jax-jit", 4, (16, 64) if model == "gpt" else None)
    assert out["threads"] == 1 and out["framework"] == "jax" and len(out["compile_warmup_ms"]) == 1


def test_bench_jax_bf16_lowers_the_products():
    # Note [bf16 in the JAX models]: the same model and data from the same weights, products from
    # bfloat16 operands: the losses move off float32's, a little.
    py = peer_python("jax", "jax")
    runs = {}
    for prec in ("fp32", "bf16"):
        out = one_json_line(run([py, "tools/bench_jax.py", "--model", "cnn", "--batch", "4", "--steps", "3",
                                 "--warmup", "1", "--threads", "1", "--precision", prec, "--json"]))
        check_trained(out, "cnn", 4, "jax-jit", 4)
        assert out["precision"] == prec
        runs[prec] = out
    a, b = runs["fp32"]["last_loss"], runs["bf16"]["last_loss"]
    assert a != b and abs(a - b) < 0.05 * abs(a), (a, b)


# ---------------------------------------------------------------- PyTorch


@pytest.mark.parametrize("model", ["mlp", "cnn", "resnet18", "resnet50", "gpt"])
def test_torch_models_are_loom_zoos(model):
    py = peer_python("torch", "torch2")
    make = (f"bt.CONSTRUCTORS['gpt'](types.SimpleNamespace(**{GPT_FLAGS!r}))" if model == "gpt" else
            f"bt.CONSTRUCTORS['{model}']()")
    code = ("import json, sys, types; sys.path.insert(0, 'tools'); import bench_torch as bt; "
            f"m = {make}; "
            "print(json.dumps([sum(p.numel() for p in m.parameters()), "
            "sum(b.numel() for n, b in m.named_buffers() if 'running' in n)]))")
    r = run([py, "-c", code])
    assert r.returncode == 0, r.stderr[-3000:]
    assert tuple(json.loads(r.stdout)) == loom_sizes(model)


def test_bench_torch_eager_trains():
    py = peer_python("torch", "torch2")
    out = one_json_line(run([py, "tools/bench_torch.py", "--model", "cnn", "--batch", "4", "--steps", "3",
                             "--warmup", "1", "--threads", "1", "--json"]))
    check_trained(out, "cnn", 4, "torch-eager", 4)
    assert out["framework"] == "torch" and out["compile_warmup_ms"] is None


def test_bench_torch_amp_in_channels_last_trains():
    # PyTorch AMP as compare.sh --precision bf16 runs it: autocast to bfloat16, NHWC weights and
    # batches for the convolutional models (the MLP stays as it is).
    py = peer_python("torch", "torch2")
    for model, fmt in (("cnn", "channels_last"), ("mlp", "contiguous")):
        out = one_json_line(run([py, "tools/bench_torch.py", "--model", model, "--batch", "4", "--steps", "3",
                                 "--warmup", "1", "--threads", "1", "--autocast", "bf16", "--channels-last", "--json"]))
        check_trained(out, model, 4, "torch-eager", 4)
        assert out["precision"] == "bf16" and out["memory_format"] == fmt, out


def test_bench_torch_gpt_trains_with_adam():
    py = peer_python("torch", "torch2")
    out = one_json_line(run([py, "tools/bench_torch.py", "--model", "gpt", "--batch", "2", "--gpt-layers", "1",
                             "--gpt-dim", "32", "--context", "16", "--vocab", "64", "--optimizer", "adam",
                             "--steps", "3", "--warmup", "1", "--threads", "1", "--json"]))
    check_trained(out, "gpt", 2, "torch-eager", 4, (16, 64))
    assert out["optimizer"].startswith("adam lr 0.001")


def test_bench_torch_compile_needs_torch_2():
    py = peer_python("torch", "torch2")
    r = run([py, "-c", "import torch; print(hasattr(torch, 'compile'))"])
    if r.stdout.strip() == "True":
        pytest.skip(f"{py}'s PyTorch has torch.compile")
    r = run([py, "tools/bench_torch.py", "--compile", "--steps", "2"])
    assert r.returncode == 2 and "--compile needs PyTorch 2.x" in r.stderr, r.stderr


def test_bench_torch_compiles_the_whole_step():
    py = peer_python("torch", "torch2", at_least=(2, 0))
    out = one_json_line(run([py, "tools/bench_torch.py", "--compile", "--model", "mlp", "--batch", "4", "--steps", "2",
                             "--warmup", "1", "--threads", "1", "--json"]))
    check_trained(out, "mlp", 4, "torch-compile", 5)  # the warm-up is raised to 3 steps
    assert out["compile_includes_optimizer"] and out["compile_mode"] == "default" and out["compile_backward"]
    assert out["compile_graphs"] >= 1 and len(out["compile_warmup_ms"]) == 3
