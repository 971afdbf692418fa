"""loom.schedule: learning-rate schedules evaluated on the device (C++ nn::Schedule).

A schedule gives the learning rate of every step. Set on an optimizer, it is computed at each
step by one op from a step counter that lives on the device, inside the step: a captured graph
follows the schedule on every replay with no recapture and no host write.

    sched = schedule.Sequential([schedule.LinearWarmup(0.1, 500),
                                 schedule.CosineDecay(0.1, 9500)], milestones=[500])
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    schedule.set_schedule(sgd, sched)        # from the next step on
    sched.value_at(1000)                     # the rate of step 1000, computed on the host

SINGA's names (opt.DecayScheduler, opt.Constant, opt.ExponentialDecay) are kept, with SINGA's
arguments; the others follow torch.optim.lr_scheduler. Every schedule gives absolute rates.
Bad arguments raise loom.ValueError naming the schedule and the value.
"""
import numbers

from . import core, errors

# What loom.opt re-exports (SINGA has the schedulers in opt).
__all__ = ["DecayScheduler", "Constant", "ExponentialDecay", "StepDecay", "MultiStepDecay", "CosineDecay",
           "LinearWarmup", "LinearDecay", "Sequential"]


def _number(name, what, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise errors.TypeError(f"[schedule {name}] {what} must be a number, got {type(v).__name__}")
    return float(v)


def _int(name, what, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise errors.TypeError(f"[schedule {name}] {what} must be an int, got {type(v).__name__}")
    return int(v)


def _ints(name, what, vs):
    try:
        items = list(vs)
    except TypeError:
        raise errors.TypeError(f"[schedule {name}] {what} must be a list of ints, got {type(vs).__name__}") from None
    return [_int(name, what, v) for v in items]


class DecayScheduler:
    """Base of the schedules (SINGA's name). `init_value` is the rate of step 0."""

    def __init__(self, impl):
        self._impl = impl
        self.init_value = impl.value_at(0)

    def __call__(self, step):
        """SINGA's call: the rate for `step`. An int gives a float (computed on the host); a
        float64 scalar Tensor (a device step counter) gives a float64 scalar Tensor, made by the
        schedule's op on that tensor's device."""
        if isinstance(step, core.Tensor):
            if step.dtype != "float64" or step.shape != ():  # SINGA's counter: a float32 (1,) tensor
                if step.size() != 1:
                    raise errors.ShapeError(f"[{type(self).__name__}] the step counter must hold one value, "
                                            f"got {step.describe()}")
                step = core.reshape(core.cast(step, core.dtype_from_name("float64")), ())
            return self._impl.eval(step)
        return self.value_at(step)

    def value_at(self, step):
        """The rate of step `step` (>= 0), with the device's formula."""
        return self._impl.value_at(_int(type(self).__name__, "step", step))

    def then(self, other, at):
        """This schedule until step `at`, then `other` counting its steps from `at`."""
        return Sequential([self, other], [at])

    def __repr__(self):
        return f"{type(self).__name__}({self._impl.to_string()})"


class Constant(DecayScheduler):
    """init_value at every step (SINGA's Constant)."""

    def __init__(self, init_value):
        super().__init__(core.Schedule.constant(_number("constant", "init_value", init_value)))


class ExponentialDecay(DecayScheduler):
    """SINGA's ExponentialDecay: init_value * decay_rate ** (step / decay_steps), or
    ** (step // decay_steps) with staircase."""

    def __init__(self, init_value, decay_steps, decay_rate, staircase=False):
        super().__init__(core.Schedule.exponential(_number("exponential", "init_value", init_value),
                                                   _number("exponential", "decay_rate", decay_rate),
                                                   _int("exponential", "decay_steps", decay_steps), bool(staircase)))


class StepDecay(DecayScheduler):
    """init_value * gamma ** (step // step_size) (torch's StepLR)."""

    def __init__(self, init_value, step_size, gamma=0.1):
        super().__init__(core.Schedule.step(_number("step", "init_value", init_value),
                                            _int("step", "step_size", step_size), _number("step", "gamma", gamma)))


class MultiStepDecay(DecayScheduler):
    """init_value * gamma ** (number of milestones <= step) (torch's MultiStepLR); milestones
    strictly increasing, >= 1."""

    def __init__(self, init_value, milestones, gamma=0.1):
        super().__init__(core.Schedule.multi_step(_number("multistep", "init_value", init_value),
                                                  _ints("multistep", "milestones", milestones),
                                                  _number("multistep", "gamma", gamma)))


class CosineDecay(DecayScheduler):
    """From init_value down to min_value over total_steps along a half cosine, then min_value
    (torch's CosineAnnealingLR without restarts)."""

    def __init__(self, init_value, total_steps, min_value=0.0):
        super().__init__(core.Schedule.cosine(_number("cosine", "init_value", init_value),
                                              _int("cosine", "total_steps", total_steps),
                                              _number("cosine", "min_value", min_value)))


class LinearWarmup(DecayScheduler):
    """From start_value up to target over warmup_steps in a straight line, then target."""

    def __init__(self, target, warmup_steps, start_value=0.0):
        super().__init__(core.Schedule.linear_warmup(_number("linear warm-up", "target", target),
                                                     _int("linear warm-up", "warmup_steps", warmup_steps),
                                                     _number("linear warm-up", "start_value", start_value)))


class LinearDecay(DecayScheduler):
    """From start to end over `steps` in a straight line, then end (torch's LinearLR, in rates)."""

    def __init__(self, start, end, steps):
        super().__init__(core.Schedule.linear(_number("linear", "start", start), _number("linear", "end", end),
                                              _int("linear", "steps", steps)))


class Sequential(DecayScheduler):
    """schedulers[0] until milestones[0], then schedulers[1] counting its steps from
    milestones[0], and so on (torch's SequentialLR). One milestone fewer than schedulers."""

    def __init__(self, schedulers, milestones):
        parts = list(schedulers)
        ms = _ints("sequential", "milestones", milestones)
        for s in parts:
            if not isinstance(s, DecayScheduler):
                raise errors.TypeError(f"[schedule sequential] expected loom.schedule schedulers, got "
                                       f"{type(s).__name__}")
        if not parts:
            raise errors.ValueError("[schedule sequential] needs at least one schedule")
        if len(ms) + 1 != len(parts):
            raise errors.ValueError(f"[schedule sequential] {len(parts)} schedules need {len(parts) - 1} "
                                    f"milestones, got {len(ms)}")
        impl = parts[0]._impl
        for s, at in zip(parts[1:], ms):  # flattened in C++: the same as all at once
            impl = core.schedule_then(impl, s._impl, at)
        super().__init__(impl)


def _cpp_optimizer(optimizer):
    from . import opt  # opt imports schedule for its re-export: no cycle at use time
    if isinstance(optimizer, opt.DistOpt):
        optimizer = optimizer.opt  # the wrapped optimizer computes the rate
    if not isinstance(optimizer, opt.Optimizer):
        raise errors.TypeError(f"[schedule] expected a loom.opt optimizer, got {type(optimizer).__name__}")
    if getattr(optimizer, "_impl", None) is None:  # an optimizer written in loom ops (SINGA's AdaGrad, ...)
        raise errors.ValueError(f"[schedule] {type(optimizer).__name__} is written in Python: only the C++ "
                                f"optimizers (opt.SGD, opt.Adam, opt.AdamW) take device schedules and clipping")
    return optimizer._impl


def set_schedule(optimizer, scheduler):
    """The optimizer takes its rate from `scheduler` from the next step on (a loom.model.Model's
    graphs recapture at their next step). None: back to the constant rate (optimizer.lr)."""
    impl = _cpp_optimizer(optimizer)
    if scheduler is None:
        impl.clear_schedule()
    elif isinstance(scheduler, DecayScheduler):
        impl.set_schedule(scheduler._impl)
    else:
        raise errors.TypeError(f"[schedule] expected a loom.schedule scheduler or None, got "
                               f"{type(scheduler).__name__}")
    optimizer._scheduler = scheduler  # for SINGA's optimizer.lr_value
    optimizer._generation = getattr(optimizer, "_generation", 0) + 1  # Model graphs recapture


def schedule_step(optimizer, device):
    """Steps the optimizer's schedule has counted on `device` (a host read)."""
    return _cpp_optimizer(optimizer).schedule_step(device)


def set_schedule_step(optimizer, device, step):
    """Sets that count (resuming): the next step uses the rate of step `step`."""
    _cpp_optimizer(optimizer).set_schedule_step(device, _int("step", "step", step))


def current_lr(optimizer, device):
    """The rate the last update on `device` used (a host read), for logs and progress bars."""
    return _cpp_optimizer(optimizer).current_learning_rate(device)
