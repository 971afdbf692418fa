"""loom.precision: mixed precision, Note [Precision policy] (src/core/autocast.h).

    with loom.autocast("bf16"):          # matrix products from bfloat16 operands, float32 results
        out, loss = m.train_one_batch(x, y)
    m.compile([x], is_train=True, use_graph=True, precision="bf16")   # the same for every step

Inside the scope (per thread) every float32 matmul, forward and backward, runs on its operands
rounded to bfloat16, with float32 products, sums and result; everything else (element-wise ops,
reductions, softmax, the loss, normalisation, the optimizer and the float32 master weights)
stays float32. A graph captured inside the scope replays exactly what eager execution runs.
"""
import contextlib

from . import core, errors

__all__ = ["autocast", "PRECISIONS"]

PRECISIONS = ("fp32", "bf16")


def check(precision):
    """`precision` by its canonical name ("fp32" or "bf16"); loom.ValueError for anything else."""
    if not isinstance(precision, str):
        raise errors.ValueError(f"[precision] expected 'fp32' or 'bf16', got {type(precision).__name__} "
                                f"{precision!r}")
    return core.precision_name(precision)


@contextlib.contextmanager
def autocast(precision="bf16"):
    """Runs the block's ops in `precision` ("bf16" or "fp32") on this thread, then restores the
    previous precision (scopes nest)."""
    check(precision)
    previous = core.set_autocast_precision(precision)
    try:
        yield
    finally:
        core.set_autocast_precision(previous)
