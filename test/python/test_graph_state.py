"""Graph-mode state is the model's state (issue 36): after a capture, the optimizer's step count
follows the replays, and changing the optimizer, its clipping or its schedule reaches the next
steps as in eager mode (the graph is captured again). Each test runs the same sequence eager and
in graph mode from the same weights and compares them bitwise."""
import numpy as np
import pytest

from loom import autograd, clip, device, layer, model, opt, schedule, tensor


class Mlp(model.Model):
    def __init__(self, dev):
        super().__init__()
        self.l1 = layer.Linear(12, 16, device=dev)
        self.l2 = layer.Linear(16, 3, device=dev)

    def forward(self, x):
        return self.l2(autograd.relu(self.l1(x)))

    def train_one_batch(self, x, y):
        loss = autograd.softmax_cross_entropy(self.forward(x), y)
        self.optimizer(loss)
        return loss


def run(use_graph, change, before=4, after=4):
    dev = device.create_cpu_device()
    dev.SetRandSeed(9)
    m = Mlp(dev)
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    m.set_optimizer(sgd)
    rng = np.random.default_rng(2)
    x = tensor.from_numpy(rng.uniform(-3, 3, (6, 12)).astype(np.float32), dev)
    y = tensor.from_numpy(np.array([0, 1, 2, 0, 1, 2], np.int32), dev)
    m.compile([x], is_train=True, use_graph=use_graph)
    for _ in range(before):
        m.train_one_batch(x, y)
    change(m, sgd)
    for _ in range(after):
        m.train_one_batch(x, y)
    return [tensor.to_numpy(p) for p in m.get_params().values()], m.optimizer.step_count


def nothing(m, sgd):
    pass


def clip_hard(m, sgd):
    clip.set_grad_clip(sgd, max_norm=0.01)


def new_optimizer(m, sgd):
    m.set_optimizer(opt.SGD(lr=0.02, momentum=0.5))


def a_schedule(m, sgd):
    schedule.set_schedule(sgd, schedule.ExponentialDecay(0.1, 1, 0.5))


@pytest.mark.parametrize("change", [nothing, clip_hard, new_optimizer, a_schedule])
def test_a_change_after_the_capture_reaches_the_replays_as_in_eager_mode(change):
    eager, eager_steps = run(False, change)
    graph, graph_steps = run(True, change)
    for a, b in zip(eager, graph):
        assert np.array_equal(a, b), change.__name__
    assert graph_steps == eager_steps
    if change is not nothing:  # and the change did change the run
        unchanged, _ = run(False, nothing)
        assert any(not np.array_equal(a, b) for a, b in zip(eager, unchanged)), change.__name__


def test_step_count_follows_the_replays():
    _, steps = run(True, nothing, before=10, after=0)
    assert steps == 10


def test_a_new_python_number_per_call_keeps_a_bounded_number_of_graphs():
    # Note [Bounded recapture]: each new constant is a new step; at most max_step_graphs are kept.
    class Scaled(Mlp):
        def train_one_batch(self, x, y, scale):
            loss = autograd.softmax_cross_entropy(self.forward(x), y) * scale
            self.optimizer(loss)
            return loss

    dev = device.create_cpu_device()
    m = Scaled(dev)
    m.set_optimizer(opt.SGD(lr=0.01))
    x = tensor.from_numpy(np.ones((4, 12), np.float32), dev)
    y = tensor.from_numpy(np.array([0, 1, 2, 0], np.int32), dev)
    m.compile([x], is_train=True, use_graph=True, graph_options={"max_step_graphs": 4})
    with pytest.warns(RuntimeWarning, match="keeps 4 captured steps"):
        for i in range(12):
            m.train_one_batch(x, y, 1.0 + i / 100)
    assert len(m._steps) == 4
    m.train_one_batch(x, y, 1.11)  # the most recent: replayed, nothing dropped
    assert len(m._steps) == 4
