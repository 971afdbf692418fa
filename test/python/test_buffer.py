"""Buffer (graph) mode from Python: SINGA's SetBufferFlag/ExecBuffOps, EnableGraph/RunGraph/
ResetGraph with keys, the `with dev.buffer()` context, capture runs nothing, host reads refused
while capturing, memory statistics and graph dumps."""
import json
import os

import numpy as np
import pytest

import loom
from loom import autograd, opt, tensor


def mlp_step(dev, seed=3):
    """Parameters and one buffered-able training step of a 2-8-2 MLP; returns (params, run)."""
    rng = np.random.default_rng(seed)
    x = tensor.from_numpy(rng.normal(size=(16, 2)).astype(np.float32), dev)
    t = tensor.from_numpy(rng.integers(0, 2, 16).astype(np.int32), dev)
    params = [tensor.from_numpy(rng.normal(0, 0.5, s).astype(np.float32), dev, requires_grad=True)
              for s in [(2, 8), (8,), (8, 2), (2,)]]
    sgd = opt.SGD(0.1, momentum=0.9)

    def run():
        w0, b0, w1, b1 = params
        h = autograd.relu(autograd.add_bias(autograd.matmul(x, w0), b0))
        loss = autograd.softmax_cross_entropy(autograd.add_bias(autograd.matmul(h, w1), b1), t)
        for p, g in autograd.backward(loss):
            sgd.apply(0, g, p, "")
        return loss

    return params, run


def test_capture_runs_nothing_and_replay_trains(dev):
    params, run = mlp_step(dev)
    before = [p.to_numpy() for p in params]
    ops = dev.ops_run()
    dev.SetBufferFlag(True)
    assert dev.buffering()
    loss = run()
    dev.SetBufferFlag(False)
    assert not dev.buffering()
    # Only setup ran during the capture: momentum buffers (one per parameter) and the lr scalar.
    assert dev.ops_run() - ops == len(params) + 1
    assert all(np.array_equal(b, p.to_numpy()) for b, p in zip(before, params))
    losses = []
    for _ in range(30):
        dev.ExecBuffOps()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
    assert not all(np.array_equal(b, p.to_numpy()) for b, p in zip(before, params))


def test_replay_is_bitwise_equal_to_eager(dev):
    params_e, run_e = mlp_step(dev)
    eager = [run_e().item() for _ in range(5)]
    params_g, run_g = mlp_step(dev)
    with dev.buffer():
        loss = run_g()
    graph = []
    for _ in range(5):
        dev.RunGraph(True)
        graph.append(loss.item())
    assert eager == graph
    for a, b in zip(params_e, params_g):
        assert np.array_equal(a.to_numpy(), b.to_numpy())


def test_parallel_replay_agrees_with_serial(dev):
    params_s, run_s = mlp_step(dev)
    with dev.buffer("serial"):
        loss_s = run_s()
    params_p, run_p = mlp_step(dev)
    with dev.buffer("parallel"):
        loss_p = run_p()
    for _ in range(5):
        dev.RunGraph(True, "serial")
        dev.RunGraph(False, "parallel")
        assert loss_p.item() == pytest.approx(loss_s.item(), rel=1e-5)
    assert dev.HasGraph("serial") and dev.HasGraph("parallel")
    dev.ResetGraph("serial")
    assert not dev.HasGraph("serial") and dev.HasGraph("parallel")
    dev.ResetGraph()
    assert not dev.HasGraph("parallel")


def test_enable_graph_spelling_and_dynamic_memory(dev):
    dev.set_graph_options(memory="dynamic")
    assert dev.graph_options()["memory"] == "dynamic"
    params, run = mlp_step(dev)
    dev.EnableGraph(True)
    loss = run()
    dev.EnableGraph(False)
    dev.RunGraph(True)
    first = loss.item()
    dev.RunGraph(True)
    assert loss.item() != first
    assert dev.graph().stats()["memory"] == "dynamic"
    with pytest.raises(loom.ValueError):
        dev.set_graph_options(memory="magic")
    with pytest.raises(loom.ValueError, match="num_workers' must be an int, got str"):
        dev.set_graph_options(num_workers="two")
    with pytest.raises(loom.ValueError, match="unknown option 'memroy'"):
        dev.set_graph_options(memroy="dynamic")
    assert dev.graph_options()["memory"] == "dynamic"  # a refused change changes nothing


def test_buffer_context_drops_the_graph_when_the_body_raises(dev):
    x = tensor.ones((2, 3), dev)
    with pytest.raises(KeyError):
        with dev.buffer("broken"):
            autograd.relu(x)
            raise KeyError("user error")
    assert not dev.buffering()
    assert not dev.HasGraph("broken")
    with pytest.raises(loom.ShapeError):
        with dev.buffer("shapes"):
            autograd.matmul(x, x)
    assert not dev.buffering() and not dev.HasGraph("shapes")


def test_new_inputs_are_fed_not_baked(dev):
    x = tensor.from_numpy(np.ones((2, 2), np.float32), dev)
    with dev.buffer():
        y = autograd.sum(x * 2.0)
    dev.ExecBuffOps()
    assert y.item() == 8.0
    x.copy_from_numpy(np.full((2, 2), 3.0, np.float32))
    dev.ExecBuffOps()
    assert y.item() == 24.0


def test_host_reads_are_refused_while_capturing(dev):
    x = tensor.ones((2, 2), dev)
    with dev.buffer():
        y = autograd.relu(x)
        with pytest.raises(loom.GraphError) as e:
            y.item()
        assert isinstance(e.value, RuntimeError) and "capturing" in str(e.value)
        with pytest.raises(loom.GraphError):
            y.to_numpy()
        with pytest.raises(loom.GraphError):
            np.asarray(x)  # even values that exist: a view taken now would show stale data
        assert not x.is_host_viewable()
        assert "no value on the host" in repr(y)  # repr never raises
        x.copy_from_numpy(np.full((2, 2), 5, np.float32))  # feeds are allowed
    dev.ExecBuffOps()
    assert y.to_numpy().tolist() == [[5, 5], [5, 5]]


def test_graph_misuse_errors(dev):
    with pytest.raises(loom.GraphError):
        dev.ExecBuffOps()  # no graph
    dev.SetBufferFlag(False)  # no capture: a no-op, as in SINGA (test_singa_model.py)
    assert not dev.buffering()
    dev.SetBufferFlag(True)
    with pytest.raises(loom.GraphError):
        dev.SetBufferFlag(True)  # already capturing
    with pytest.raises(loom.GraphError):
        dev.RunGraph(True)  # replay while capturing
    with pytest.raises(loom.GraphError):
        dev.ResetGraph()
    dev.SetBufferFlag(False)
    with pytest.raises(loom.GraphError):
        dev.graph("nope")


def test_graph_stats_and_dumps(dev, tmp_path):
    params, run = mlp_step(dev)
    with dev.buffer("train"):
        run()
    g = dev.graph("train")
    assert isinstance(g, loom.Graph) and g.name() == "train" and g.finalized()
    s = g.stats()
    assert s["num_ops"] == len(g.op_names()) > 10
    assert s["arena_bytes"] >= s["lower_bound_bytes"] > 0
    assert "matmul" in g.op_names()
    assert "graph 'train'" in g.summary()
    dot = g.dot()
    assert dot.startswith("digraph") and "matmul" in dot
    assert g.memory_csv().startswith("op,")
    path = tmp_path / "g.dot"
    g.write_dot(str(path))
    assert path.read_text() == dot
    with pytest.raises(loom.GraphError):
        g.write_trace(str(tmp_path / "t.json"))  # nothing profiled yet
    g.set_profile(True)
    dev.RunGraph(True, "train")
    trace = json.loads(g.trace_json())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert any(e.get("name") == "matmul" for e in events)
    g.write_trace(str(tmp_path / "t.json"))
    assert json.loads((tmp_path / "t.json").read_text())
    assert g.stats()["replays"] == 1
    dev.ResetGraph("train")
    assert g.stats()["replays"] == 1 and "matmul" in g.dot()  # a handle outlives the registry's


def test_the_dense_layer_fusion_is_an_option_and_replay_stays_bitwise_equal_to_eager(dev):
    # Note [Fusing bias and activation] (src/graph/fuse_bias_act.cc)
    params, run = mlp_step(dev)
    for _ in range(3):
        run()
    eager = [p.to_numpy() for p in params]
    for fuse in (True, False):
        dev.set_graph_options(fuse_bias_act=fuse)
        assert dev.graph_options()["fuse_bias_act"] == fuse
        params, run = mlp_step(dev)
        with dev.buffer("fused"):
            run()
        g = dev.graph("fused")
        assert ("dense_bias_act" in g.op_names()) == fuse
        assert ("bias_act_grad" in g.op_names()) == fuse
        assert g.stats()["fused_bias_act"] == (3 if fuse else 0)  # two layers, one relu backward
        for _ in range(3):
            dev.RunGraph(True, "fused")
        for got, want in zip(params, eager):
            assert np.array_equal(got.to_numpy(), want)
        dev.ResetGraph("fused")


def test_dump_to_a_bad_path_is_an_os_error(dev, tmp_path):
    with dev.buffer():
        autograd.relu(tensor.ones((2,), dev))
    with pytest.raises(loom.IOError) as e:
        dev.graph().write_dot(os.path.join(str(tmp_path), "no", "such", "dir", "g.dot"))
    assert isinstance(e.value, OSError)


def test_memory_statistics_of_a_replay(dev):
    params, run = mlp_step(dev)
    with dev.buffer():
        run()
    dev.ExecBuffOps()
    live = dev.memory_stats()["live_bytes"]
    allocs = dev.memory_stats()["num_allocs"]
    for _ in range(3):
        dev.ExecBuffOps()
    s = dev.memory_stats()
    assert s["live_bytes"] == live          # planned replay: nothing grows
    assert s["num_allocs"] == allocs        # and nothing is allocated
