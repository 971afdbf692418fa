"""loom.clip: gradient clipping folded into the optimizer's update ops (C++ nn/clip.h).

    clip.set_grad_clip(sgd, max_norm=1.0)     # by global 2-norm, as torch's clip_grad_norm_
    clip.set_grad_clip(sgd, clip_value=0.5)   # or each element into [-0.5, 0.5]
    sgd(loss)                                 # backward, then the clipped updates
    clip.last_grad_norm(sgd)                  # the norm of that step, a device scalar Tensor

By norm, the norm of all gradients together and the scale min(1, max_norm / (norm + eps)) are
computed by ops on the device, and each update multiplies its gradient by the scale as it reads
it: no branch, no host read, the same in a replayed graph. Clipping by norm needs every gradient
before the first update: `optimizer(loss)` and `clip.step(optimizer, params, grads)` collect
them; `optimizer.apply(...)` one parameter at a time raises loom.ValueError saying so.
"""
import numbers

from . import core, errors


def _cpp_optimizer(optimizer, wrapped=False):
    """The C++ optimizer; with `wrapped`, a DistOpt's inner one (which keeps the clipping: a
    DistOpt hands it on, and clips by the norm of the averaged gradient)."""
    from . import opt  # opt imports nothing of clip at import time
    if not isinstance(optimizer, opt.Optimizer):
        raise errors.TypeError(f"[clip] expected a loom.opt optimizer, got {type(optimizer).__name__}")
    if wrapped and isinstance(optimizer, opt.DistOpt):
        optimizer = optimizer.opt
    if getattr(optimizer, "_impl", None) is None:  # an optimizer written in loom ops (SINGA's AdaGrad, ...)
        raise errors.ValueError(f"[clip] {type(optimizer).__name__} is written in Python: only the C++ "
                                f"optimizers (opt.SGD, opt.Adam, opt.AdamW) take device schedules and clipping")
    return optimizer._impl


def _number(what, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise errors.TypeError(f"[clip] {what} must be a number, got {type(v).__name__}")
    return float(v)


def set_grad_clip(optimizer, max_norm=0.0, clip_value=0.0, eps=1e-6):
    """Clips every later update of `optimizer`: by global norm (max_norm > 0) or by value
    (clip_value > 0), not both; both 0 turns clipping off. Negative or non-finite values raise
    loom.ValueError naming the argument."""
    c = core.GradClip()
    c.max_norm, c.clip_value, c.eps = _number("max_norm", max_norm), _number("clip_value", clip_value), \
        _number("eps", eps)
    _cpp_optimizer(optimizer).set_grad_clip(c)
    _changed(optimizer)


def _changed(optimizer):
    """A setting a captured step bakes in changed: a Model's graphs of this optimizer recapture."""
    optimizer._generation = getattr(optimizer, "_generation", 0) + 1


def get_grad_clip(optimizer):
    """(max_norm, clip_value, eps) of the optimizer."""
    c = _cpp_optimizer(optimizer, wrapped=True).get_grad_clip()
    return c.max_norm, c.clip_value, c.eps


def last_grad_norm(optimizer):
    """The global norm the last step clipping by norm computed: a float64 scalar Tensor on the
    device, rewritten by every replay (float(t) or t.to_numpy() reads it)."""
    return _cpp_optimizer(optimizer).grad_norm()


def step(optimizer, params, grads):
    """One update of every parameter with its gradient (two lists), clipped as configured."""
    core.optimizer_step_pairs(_cpp_optimizer(optimizer), list(params), list(grads))


def global_grad_norm(grads):
    """The 2-norm of all elements of `grads` together: a float64 scalar Tensor (one device op)."""
    return core.global_grad_norm(errors._tensors("clip.global_grad_norm", "grads", grads))


def clip_scale(norm, max_norm, eps=1e-6):
    """min(1, max_norm / (norm + eps)) for a float64 scalar Tensor `norm` (device ops)."""
    return core.clip_scale(norm, _number("max_norm", max_norm), _number("eps", eps))
