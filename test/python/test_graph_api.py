"""The Graph handle, its options and statistics from Python, and the thread contract.

Every GraphOptions and GraphStats field of C++ reaches Python (Note [One list of fields] in
graph/options.h; test/graph/options_test.cc checks that C++ has no field outside those lists)."""
import threading

import numpy as np
import pytest

import loom
from loom import autograd, core, layer, model, opt, tensor



def _mlp_step(dev):
    w = tensor.from_numpy(np.full((4, 3), 0.1, np.float32), dev)
    w.requires_grad = True
    x = tensor.from_numpy(np.ones((2, 4), np.float32), dev)
    sgd = opt.SGD(0.1)

    def run():
        loss = autograd.sum(autograd.relu(autograd.matmul(x, w)))
        for p, g in autograd.backward(loss):
            sgd.apply(0, g, p, "w")
        return loss

    return run


def test_every_stats_field_reaches_python(dev):
    run = _mlp_step(dev)
    with dev.buffer("s"):
        run()
    dev.RunGraph(True, "s")
    stats = dev.graph("s").stats()
    names = [n for n, _ in loom.graph_stats_fields()]
    assert names and set(stats) == set(names)
    assert stats["replays"] == 1 and stats["memory"] == "planned" and stats["num_ops"] > 0
    for name, doc in loom.graph_stats_fields():
        assert isinstance(stats[name], (int, float, str)), name
        assert len(doc) > 10, name


@pytest.mark.parametrize("name", [n for n, _ in core.graph_option_fields()])
def test_every_option_can_be_set_from_python_and_reaches_the_graph(dev, name):
    defaults = dev.graph_options()
    assert set(defaults) == {n for n, _ in loom.graph_option_fields()}
    value = defaults[name]
    if isinstance(value, bool):
        changed = not value
    elif isinstance(value, int):
        changed = value + 1
    elif value == "planned":
        changed = "dynamic"
    else:
        pytest.fail(f"option {name} has a type this test does not know: {type(value).__name__}")
    if name == "memory_budget":
        changed = 1 << 40  # a budget every graph meets (a smaller one raises: test_model.py)
    if name == "device_graph" and not dev.name().startswith("cuda"):
        changed = True  # accepted as an option; only its replay needs a device with device graphs
    # Through the registry's options...
    dev.set_graph_options(**{name: changed})
    assert dev.graph_options()[name] == changed
    with dev.buffer("o"):
        _mlp_step(dev)()
    assert dev.graph("o").options()[name] == changed
    dev.set_graph_options(**{name: value})
    # ...and through a model's own graphs.
    net = model.mlp([4, 8, 2], device=dev)
    m = model.NativeModel(net, opt.SGD(0.1))
    x = np.ones((2, 4), np.float32)
    m.compile([tensor.from_numpy(x, dev)], is_train=True, use_graph=True, graph_options={name: changed})
    if name != "device_graph":
        m.train_one_batch(x, np.zeros(2, np.int32))
        assert m.graph().options()[name] == changed


@pytest.mark.parametrize("name, value, message", [
    ("num_workers", 100000, "num_workers is 100000, expected 0"),  # hung creating the threads
    ("num_workers", -1, "num_workers is -1, expected 0"),
    ("bucket_bytes", -1, "bucket_bytes is -1, expected a positive"),
    ("first_bucket_bytes", -5, "first_bucket_bytes is -5"),
])
def test_out_of_range_options_are_refused_where_they_are_set(dev, name, value, message):
    before = dev.graph_options()
    with pytest.raises(loom.ValueError, match=message):
        dev.set_graph_options(**{name: value})
    assert dev.graph_options() == before
    with pytest.raises(loom.ValueError, match=message):
        core.new_graph(dev, "bad", {name: value})
    net = model.mlp([4, 8, 2], device=dev)
    m = model.NativeModel(net, opt.SGD(0.1))
    with pytest.raises(loom.ValueError, match=message):
        m.compile([tensor.from_numpy(np.ones((2, 4), np.float32), dev)], is_train=True, use_graph=True,
                  graph_options={name: value})


def test_a_graph_of_ones_own(dev):
    x = tensor.from_numpy(np.arange(4, dtype=np.float32), dev)
    g = core.new_graph(dev, "mine", {"memory": "dynamic"})
    g.begin_capture()
    y = autograd.relu(x * 2.0)
    g.end_capture()
    assert not dev.HasGraph("mine")  # not in the keyed registry: it is ours
    g.run()
    assert y.to_numpy().tolist() == [0, 2, 4, 6]
    assert g.options()["memory"] == "dynamic" and g.stats()["replays"] == 1
    assert repr(g) == "Graph('mine' on cpu:0)"
    with pytest.raises(loom.GraphError, match="captured once"):
        g.begin_capture()
    with pytest.raises(loom.ValueError, match="unknown option"):
        core.new_graph(dev, "bad", {"speed": 11})


def test_an_op_from_another_thread_during_a_capture_raises(dev):
    x = tensor.ones((3,), dev)
    errors = []

    def other():
        try:
            autograd.exp(x)
        except loom.GraphError as e:
            errors.append(str(e))

    with dev.buffer("mine"):
        autograd.relu(x)
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert len(errors) == 1 and "by another thread while graph 'mine' is being captured" in errors[0]
    assert dev.graph("mine").stats()["num_ops"] == 1
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1  # after the capture the other thread's op runs


def test_two_threads_training_one_graph_model_take_turns(dev):
    # Two threads calling train_one_batch on one graph-mode model: each call captures or replays
    # the whole step; no thread's ops land in the other's graph.
    dev.SetRandSeed(5)
    net = model.mlp([8, 16, 2], device=dev)
    m = model.NativeModel(net, opt.SGD(0.05))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    y = np.array([0, 1, 0, 1], np.int32)
    m.compile([tensor.from_numpy(x, dev)], is_train=True, use_graph=True)
    failures = []

    def train():
        try:
            for _ in range(20):
                m.train_one_batch(x, y)
        except Exception as e:  # noqa: BLE001 (reported below)
            failures.append(e)

    ts = [threading.Thread(target=train) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not failures
    assert m.steps == 40 and m.graph().stats()["replays"] == 40
    assert m.graph().stats()["num_ops"] == len(m.graph().op_names())
    assert all(np.isfinite(p.to_numpy()).all() for p in m.get_params().values())
