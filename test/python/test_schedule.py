"""loom.schedule and loom.clip (issue 19 items 1 and 2): every schedule against its closed form
at each of 50 steps, eagerly and as a replayed step (one capture, 50 replays, no host write and,
with the device's trap on, no host transfer inside a replay); clipping by norm and by value
against a float64 numpy reference, eagerly and in a graph; bad arguments."""
import math

import numpy as np
import pytest

import loom
from loom import clip, core, opt, schedule, tensor

STEPS = 50


def cosine(base, lo, t, total):
    return lo + (base - lo) * (1 + math.cos(math.pi * min(t, total) / total)) / 2


CASES = {
    "constant": (lambda: opt.Constant(0.25), lambda k: 0.25),
    "exponential_singa": (lambda: opt.ExponentialDecay(0.3, 5, 0.9), lambda k: 0.3 * 0.9 ** (k / 5)),
    "exponential_staircase": (lambda: opt.ExponentialDecay(0.3, 4, 0.8, staircase=True),
                              lambda k: 0.3 * 0.8 ** (k // 4)),
    "step": (lambda: schedule.StepDecay(0.1, 7, 0.5), lambda k: 0.1 * 0.5 ** (k // 7)),
    "multistep": (lambda: schedule.MultiStepDecay(0.2, [5, 12, 30], 0.1),
                  lambda k: 0.2 * 0.1 ** sum(k >= m for m in (5, 12, 30))),
    "cosine": (lambda: schedule.CosineDecay(0.1, 40, 0.001), lambda k: cosine(0.1, 0.001, k, 40)),
    "warmup": (lambda: schedule.LinearWarmup(0.4, 10, 0.04), lambda k: 0.04 + 0.36 * min(k, 10) / 10),
    "linear_decay": (lambda: schedule.LinearDecay(0.5, 0.05, 20), lambda k: 0.5 + (0.05 - 0.5) * min(k, 20) / 20),
    "warmup_then_cosine": (lambda: schedule.LinearWarmup(0.1, 5).then(schedule.CosineDecay(0.1, 30), 5),
                           lambda k: 0.1 * k / 5 if k < 5 else cosine(0.1, 0, k - 5, 30)),
    "sequential_three": (
        lambda: schedule.Sequential([schedule.LinearWarmup(0.2, 4), schedule.StepDecay(0.2, 6, 0.5),
                                     schedule.MultiStepDecay(0.05, [3, 8], 0.5)], [4, 20]),
        lambda k: 0.2 * k / 4 if k < 4 else 0.2 * 0.5 ** ((k - 4) // 6) if k < 20
        else 0.05 * 0.5 ** ((k - 20 >= 3) + (k - 20 >= 8))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_host_value_matches_closed_form(name):
    make, closed = CASES[name]
    s = make()
    assert isinstance(s, opt.DecayScheduler)
    for k in range(STEPS):
        assert s.value_at(k) == pytest.approx(closed(k), rel=1e-12, abs=1e-15), k
        assert s(k) == s.value_at(k)  # SINGA's call form


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_steps_follow_closed_form(dev, name, graph):
    """SGD on a float64 parameter with gradient 1 moves by exactly the rate of each step."""
    make, closed = CASES[name]
    w = tensor.from_numpy(np.ones(3), dev)
    g = tensor.from_numpy(np.ones(3), dev)
    sgd = opt.SGD(lr=123.0)  # never used: the schedule sets every rate
    schedule.set_schedule(sgd, make())

    def fn(xs):
        sgd.apply("w", w, xs[0])
        return []

    step = core.PyStep(dev, fn, "sched", True, True)
    writes = dev.host_writes()
    dev.set_trap_host_transfers(True)
    try:
        before = 1.0
        for k in range(STEPS):
            if graph:
                step.run([g])
            else:
                sgd.apply("w", w, g)
            now = w.to_numpy()[0]
            assert before - now == pytest.approx(closed(k), rel=1e-9, abs=1e-14), f"{name} step {k}"
            assert schedule.current_lr(sgd, dev) == pytest.approx(closed(k), rel=1e-12, abs=1e-15)
            before = now
    finally:
        dev.set_trap_host_transfers(False)
    assert dev.host_writes() == writes, "a host write fed the schedule"
    assert schedule.schedule_step(sgd, dev) == STEPS
    if graph:
        assert step.num_graphs() == 1
        assert step.last_graph().stats()["replays"] == STEPS


def test_schedule_step_resumes_and_none_clears(dev):
    w = tensor.from_numpy(np.zeros(2), dev)
    g = tensor.from_numpy(np.ones(2), dev)
    sgd = opt.SGD(lr=0.1)
    s = opt.ExponentialDecay(0.5, 1, 0.5)
    schedule.set_schedule(sgd, s)
    schedule.set_schedule_step(sgd, dev, 7)
    sgd.apply("w", w, g)
    assert schedule.current_lr(sgd, dev) == s.value_at(7)
    schedule.set_schedule(sgd, None)
    sgd.apply("w", w, g)
    assert schedule.current_lr(sgd, dev) == 0.1


def test_device_step_counter_call(dev):
    """SINGA's DecayScheduler(step_tensor): the op on a device counter."""
    s = schedule.CosineDecay(0.1, 10)
    t = tensor.from_numpy(np.array(4.0), dev)
    assert s(t).to_numpy() == pytest.approx(s.value_at(4), rel=1e-15)


@pytest.mark.parametrize("make, message", [
    (lambda: schedule.LinearWarmup(0.1, -1), "[schedule linear warm-up] warmup_steps -1"),
    (lambda: schedule.MultiStepDecay(0.1, [10, 5]), "[schedule multistep] milestones must increase: 5 after 10"),
    (lambda: schedule.StepDecay(0.1, 0), "[schedule step] step_size 0"),
    (lambda: schedule.CosineDecay(-0.1, 10), "[schedule cosine] base -0.1"),
    (lambda: opt.ExponentialDecay(0.1, 0, 0.5), "[schedule exponential] decay_steps 0"),
    (lambda: schedule.Sequential([opt.Constant(1), opt.Constant(2)], [0]), "[schedule sequential] milestone 0"),
    (lambda: schedule.Sequential([opt.Constant(1)], [3]), "[schedule sequential] 1 schedules need 0 milestones"),
    (lambda: clip.set_grad_clip(opt.SGD(0.1), max_norm=-1.0), "[clip] max_norm -1"),
    (lambda: clip.set_grad_clip(opt.SGD(0.1), clip_value=-0.5), "[clip] clip_value -0.5"),
    (lambda: clip.set_grad_clip(opt.SGD(0.1), max_norm=1.0, clip_value=0.5), "choose one kind of clipping"),
])
def test_bad_arguments_raise_value_errors_naming_them(make, message):
    with pytest.raises(loom.ValueError) as e:
        make()
    assert message in str(e.value)


def test_bad_types_raise_type_errors():
    with pytest.raises(loom.TypeError):
        schedule.CosineDecay("0.1", 10)
    with pytest.raises(loom.TypeError):
        schedule.set_schedule(opt.SGD(0.1), 0.5)


# ---- clipping ----

RNG = np.random.default_rng(11)
SHAPES = [(7,), (3, 5), (2, 2, 4)]


def grads_of(scale):
    return [RNG.normal(scale=scale, size=s).astype(np.float32) for s in SHAPES]


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("kind, momentum", [("norm", 0.0), ("norm", 0.9), ("value", 0.0), ("value", 0.9)])
def test_clipping_matches_float64_reference(dev, kind, momentum, graph):
    lr, max_norm, clip_value, eps = 0.05, 1.0, 0.3, 1e-6
    p0 = grads_of(1.0)
    params = [tensor.from_numpy(p.copy(), dev) for p in p0]
    ref = [p.astype(np.float64) for p in p0]
    buf = [np.zeros(p.shape) for p in p0]
    sgd = opt.SGD(lr=lr, momentum=momentum)
    if kind == "norm":
        clip.set_grad_clip(sgd, max_norm=max_norm, eps=eps)
    else:
        clip.set_grad_clip(sgd, clip_value=clip_value)

    def fn(gs):
        clip.step(sgd, params, gs)
        return []

    step = core.PyStep(dev, fn, "clip", True, True)
    for k in range(6):
        gs = grads_of(0.05 if k % 2 else 4.0)  # clipped, then below max_norm (scale 1)
        gts = [tensor.from_numpy(g, dev) for g in gs]
        dev.set_trap_host_transfers(True)
        try:
            step.run(gts) if graph else clip.step(sgd, params, gts)
        finally:
            dev.set_trap_host_transfers(False)
        norm = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in gs))
        for i, g in enumerate(gs):
            g = g.astype(np.float64)
            g = g * min(1.0, max_norm / (norm + eps)) if kind == "norm" else np.clip(g, -clip_value, clip_value)
            buf[i] = momentum * buf[i] + g if momentum > 0 else g
            ref[i] = ref[i] - lr * buf[i]
            np.testing.assert_allclose(params[i].to_numpy(), ref[i], rtol=1e-5, atol=1e-6, err_msg=f"step {k}")
        if kind == "norm":
            assert float(clip.last_grad_norm(sgd).to_numpy()) == pytest.approx(norm, rel=1e-9)
    if graph:
        assert step.num_graphs() == 1 and step.last_graph().stats()["replays"] == 6


def test_optimizer_call_clips_by_norm(dev):
    """sgd(loss): backward, then the updates clipped by the global norm of all gradients."""
    w = tensor.from_numpy(np.array([3.0, -4.0], dtype=np.float32), dev, requires_grad=True)
    loss = loom.autograd.sum(w * w)
    sgd = opt.SGD(lr=0.5)
    clip.set_grad_clip(sgd, max_norm=1.0)
    sgd(loss)  # grad = 2w = (6, -8), norm 10: scaled to (0.6, -0.8) (less eps)
    np.testing.assert_allclose(w.to_numpy(), [3.0 - 0.5 * 0.6, -4.0 + 0.5 * 0.8], rtol=1e-5)
    assert float(clip.last_grad_norm(sgd).to_numpy()) == pytest.approx(10.0, rel=1e-7)


def test_apply_one_parameter_with_norm_clipping_is_refused(dev):
    sgd = opt.SGD(lr=0.1)
    clip.set_grad_clip(sgd, max_norm=1.0)
    w = tensor.from_numpy(np.zeros(2, dtype=np.float32), dev)
    with pytest.raises(loom.ValueError, match="needs every gradient"):
        sgd.apply("w", w, w)


def test_global_grad_norm_and_scale(dev):
    gs = grads_of(2.0)
    ref = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in gs))
    n = clip.global_grad_norm([tensor.from_numpy(g, dev) for g in gs])
    assert float(n.to_numpy()) == pytest.approx(ref, rel=1e-12)
    assert float(clip.clip_scale(n, 1.0).to_numpy()) == pytest.approx(min(1.0, 1.0 / (ref + 1e-6)), rel=1e-12)


def test_get_and_set_states_carry_the_schedule_step(dev):
    w = tensor.from_numpy(np.zeros(2, dtype=np.float32), dev)
    g = tensor.from_numpy(np.ones(2, dtype=np.float32), dev)
    s = schedule.StepDecay(0.1, 2, 0.5)
    a, b = opt.SGD(lr=0.1), opt.SGD(lr=0.1)
    schedule.set_schedule(a, s)
    schedule.set_schedule(b, s)
    for _ in range(5):
        a.apply("w", w, g)
    states = a.get_states()
    assert states["schedule_step"] == 5
    b.set_states(states)
    assert schedule.schedule_step(b, dev) == 5
    b.apply("w", w, g)
    assert schedule.current_lr(b, dev) == s.value_at(5)


def test_dist_opt_hands_schedule_and_value_clipping_to_its_optimizer(dev):
    inner = opt.SGD(lr=0.1)
    dist = opt.DistOpt(inner, communicator=core.inproc_communicator_of_one())
    schedule.set_schedule(dist, schedule.StepDecay(0.2, 1, 0.5))
    # Clipping by global norm reaches the wrapped optimizer too (it measures the averaged gradient).
    clip.set_grad_clip(dist, max_norm=1.0)
    assert clip.get_grad_clip(dist)[0] == 1.0
    clip.set_grad_clip(dist, clip_value=0.25)
    assert clip.get_grad_clip(dist)[1] == 0.25
    w = tensor.from_numpy(np.zeros(2, dtype=np.float32), dev)
    g = tensor.from_numpy(np.array([1.0, -0.1], dtype=np.float32), dev)
    for _ in range(2):
        dist.apply("w", w, g)
    # rates 0.2, 0.1; gradient clamped to (0.25, -0.1)
    np.testing.assert_allclose(w.to_numpy(), [-(0.2 + 0.1) * 0.25, (0.2 + 0.1) * 0.1], rtol=1e-6)


@pytest.mark.parametrize("cls", ["SGD", "Adam"])
def test_singa_form_scheduler_as_the_rate(dev, cls):
    """SINGA's opt.SGD(lr=opt.ExponentialDecay(...)): the scheduler is the optimizer's schedule."""
    s = opt.ExponentialDecay(0.5, 2, 0.5, staircase=True)
    o = getattr(opt, cls)(lr=s)
    w = tensor.from_numpy(np.ones(2), dev)
    g = tensor.from_numpy(np.ones(2), dev)
    for k in range(5):
        o.apply("w", w, g)
        assert schedule.current_lr(o, dev) == s.value_at(k) == 0.5 * 0.5 ** (k // 2)
    assert schedule.schedule_step(o, dev) == 5
