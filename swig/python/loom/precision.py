"""loom.precision: mixed precision, Note [Precision policy] (src/core/autocast.h).

    with loom.autocast("bf16"):          # matrix products from bfloat16 operands, float32 results
        out, loss = m.train_one_batch(x, y)
    m.compile([x], is_train=True, use_graph=True, precision="bf16")   # the same for every step
    m.compile([x], is_train=True, use_graph=True, precision="fp16")   # float16, with loss scaling

Inside the scope (per thread) every float32 matmul, forward and backward, runs on its operands
rounded to bfloat16 ("bf16") or float16 ("fp16"), with float32 products, sums and result (at
bf16 the convolutions and their gradients too, where the device has bf16 ones: the CPU's oneDNN,
cuDNN on CUDA; and attention over a packed qkv, forward and gradient, on the CPU);
everything else (element-wise ops, reductions, softmax, the loss, normalisation, the optimizer
and the float32 master weights) stays float32. A graph captured inside the scope replays exactly
what eager execution runs.

fp16 needs its loss scaled (Note [Loss scaling] in src/nn/loss_scale.h): compile(precision="fp16")
turns on the optimizer's dynamic loss scaling, torch.amp.GradScaler's on the device: the loss is
multiplied by a scale before backward, the gradients are unscaled and checked by one op, a step
with a NaN or an infinity is skipped by the updates themselves and the scale halved, and the
scale doubles after 2000 good steps. set_loss_scaling chooses other settings (before compile);
loss_scale reads the scale and the counts. The autocast scope itself scales nothing, as
torch.autocast does not: with loom.autocast("fp16") around a loop of your own, turn loss scaling
on with set_loss_scaling and call optimizer(loss) as usual.
"""
import contextlib
import numbers

from . import core, errors

__all__ = ["autocast", "PRECISIONS", "set_loss_scaling", "loss_scale"]

PRECISIONS = ("fp32", "bf16", "fp16")


def check(precision):
    """`precision` by its canonical name ("fp32", "bf16" or "fp16"); loom.ValueError for anything
    else."""
    if not isinstance(precision, str):
        raise errors.ValueError(f"[precision] expected 'fp32', 'bf16' or 'fp16', got {type(precision).__name__} "
                                f"{precision!r}")
    return core.precision_name(precision)


def _cpp_optimizer(optimizer):
    from . import opt  # opt imports nothing of precision at import time
    if not isinstance(optimizer, opt.Optimizer):
        raise errors.TypeError(f"[loss scaling] expected a loom.opt optimizer, got {type(optimizer).__name__}")
    if getattr(optimizer, "_impl", None) is None:
        raise errors.ValueError(f"[loss scaling] {type(optimizer).__name__} is written in Python: only the C++ "
                                f"optimizers (opt.SGD, opt.Adam, opt.AdamW, opt.DistOpt of them) scale losses")
    return optimizer._impl


def set_loss_scaling(optimizer, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                     enabled=True):
    """Dynamic loss scaling for `optimizer`'s later steps, torch.amp.GradScaler's arguments and
    defaults; enabled=False turns it off. A Model's graphs of this optimizer recapture at their
    next step. Bad values raise loom.ValueError naming the argument."""
    impl = _cpp_optimizer(optimizer)
    if not enabled:
        impl.clear_loss_scaling()
    else:
        s = core.LossScaling()
        for name, v in (("init_scale", init_scale), ("growth_factor", growth_factor),
                        ("backoff_factor", backoff_factor)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise errors.TypeError(f"[loss scaling] {name} must be a number, got {type(v).__name__}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, numbers.Integral):
            raise errors.TypeError(f"[loss scaling] growth_interval must be an int, got {type(growth_interval).__name__}")
        s.init_scale, s.growth, s.backoff = float(init_scale), float(growth_factor), float(backoff_factor)
        s.interval = int(growth_interval)
        impl.set_loss_scaling(s)
    optimizer._generation = getattr(optimizer, "_generation", 0) + 1  # Model graphs recapture


def scales_losses(optimizer):
    """Whether `optimizer` scales its losses (precision fp16, or set_loss_scaling)."""
    return _cpp_optimizer(optimizer).scales_losses()


def loss_scale(optimizer, device=None):
    """{"scale", "good_steps", "skipped_steps"} of `optimizer`'s loss scaling on `device` (the one
    device it has scaled on when None), read from the device. loom.ValueError when it does not
    scale losses."""
    impl = _cpp_optimizer(optimizer)
    r = impl.loss_scale() if device is None else impl.loss_scale(device)
    return {"scale": r.scale, "good_steps": int(r.good_steps), "skipped_steps": int(r.skipped_steps)}


@contextlib.contextmanager
def autocast(precision="bf16"):
    """Runs the block's ops in `precision` ("bf16", "fp16" or "fp32") on this thread, then
    restores the previous precision (scopes nest)."""
    check(precision)
    previous = core.set_autocast_precision(precision)
    try:
        yield
    finally:
        core.set_autocast_precision(previous)
