"""loom.creators: SINGA's y.creator on the results of loom.autograd's op functions.

Note [Creators of op results]
SINGA hangs on every op's output the operator that made it (y.creator), whose backward(dy) gives
the gradients of that one op's inputs, and which keeps those inputs alive. loom's autograd keeps
only what backward needs, in C++, and only when an input requires a gradient (docs/design.md
invariant 8). So autograd's op functions attach an OpCreator that holds *weak* references to the
op's tensor inputs (and, strongly, the creators of those inputs: small Python objects, no tensor
memory) and, when asked, runs the op again on detached handles of them and differentiates that:
it extends no tensor's lifetime and runs nothing until asked (under a microsecond per call to
make; none while autograd.training is False, and replays of a captured step run no Python). An
input freed since is a loom.GraphError.

The chain of creators is also what onnx_export walks to export outputs computed eagerly
(Note [Exporting eager outputs] in onnx_export.py): each creator can run its op again on other
inputs (`replay`).
"""
import weakref

from . import core, errors
from .tensor import Tensor

_FLOATING = ("float32", "float64", "float16", "bfloat16")


class Arg:
    """A tensor argument of a recorded op: the tensor (weakly), and the creator and output index
    that made it when the op was called (None for a leaf: an input, parameter or constant)."""

    __slots__ = ("ref", "creator", "index")

    def __init__(self, t):
        d = t.__dict__
        self.ref, self.creator, self.index = weakref.ref(t), d.get("creator"), d.get("_creator_output", 0)


def record(value):
    """value with its tensors (also inside lists and tuples) as Arg records."""
    if isinstance(value, Tensor):
        return Arg(value)
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
        return type(value)(record(v) for v in value)
    return value


def resolve(value, tensor_of):
    """value with each Arg replaced by tensor_of(arg)."""
    if isinstance(value, Arg):
        return tensor_of(value)
    if isinstance(value, (list, tuple)) and any(isinstance(v, Arg) for v in value):
        return type(value)(resolve(v, tensor_of) for v in value)
    return value


def _alive(name, arg):
    t = arg.ref()
    if t is None:
        raise errors.GraphError(f"[{name}] creator.backward: an input of the op has been freed (loom's "
                                "creators do not keep inputs alive; keep a reference to them)")
    return t


def _seed(y, dy):
    """dy as a tensor of y's dtype (ones when None): SINGA's scripts pass float64 numpy ones."""
    if dy is None:
        return core.ones_like(y)
    if not isinstance(dy, Tensor):
        raise errors.TypeError(f"[creator.backward] dy must be a loom Tensor, got {type(dy).__name__}")
    return dy if dy.dtype == y.dtype else dy.astype(y.dtype)


class OpCreator:
    """The creator of an op function's result (Note [Creators of op results])."""

    __slots__ = ("name", "_fn", "_args", "_kwargs", "__weakref__")

    def __init__(self, name, fn, args, kwargs):
        self.name, self._fn = name, fn
        self._args = tuple([Arg(a) if isinstance(a, Tensor) else record(a) for a in args])
        self._kwargs = {k: record(v) for k, v in kwargs.items()} if kwargs else kwargs

    @property
    def src(self):
        """The op's tensor inputs that are still alive."""
        out = []
        resolve(self._args, lambda a: out.append(a.ref()))
        return [t for t in out if t is not None]

    def arg_records(self):
        """The Arg records of the op's tensor arguments, positional then keyword."""
        out = []

        def collect(a):
            out.append(a)
        resolve(self._args, collect)
        for v in self._kwargs.values():
            resolve(v, collect)
        return out

    def replay(self, tensor_of):
        """The op run again, its tensor arguments given by tensor_of(Arg)."""
        return self._fn(*resolve(self._args, tensor_of), **{k: resolve(v, tensor_of) for k, v in self._kwargs.items()})

    def backward(self, *dys):
        """The gradients of the op's tensor inputs given dys (one per output; ones when omitted):
        one tensor for an op of one tensor input, else a tuple in input order (zeros for an input
        the output does not depend on through a gradient: an integer input, a step function's)."""
        if self.name in REPLAY_ONLY:
            raise errors.GraphError(f"[{self.name}] creator.backward: loom does not keep the random mask, and "
                                    "running the op again would draw another; differentiate the loss instead "
                                    "(autograd.backward)")
        leaves = []

        def leaf_of(arg):
            leaf = _alive(self.name, arg).detach()
            if leaf.dtype in _FLOATING:
                leaf.requires_grad = True
            leaves.append(leaf)
            return leaf

        ys = self.replay(leaf_of)
        ys = list(ys) if isinstance(ys, (list, tuple)) else [ys]
        dys = list(dys) + [None] * (len(ys) - len(dys))
        if len(ys) == 1:
            grads = _gradients(ys[0], _seed(ys[0], dys[0]))
        else:  # several outputs: differentiate sum_k <y_k, dy_k>, whose gradient is the chain rule's sum
            total = None
            for y, dy in zip(ys, dys):
                if y.dtype in _FLOATING:
                    term = core.sum(core.mul(y, _seed(y, dy)), (), False)
                    total = term if total is None else core.add(total, term)
            grads = _gradients(total, None)
        out = [grads.get(l) if l in grads else zero_gradient(l) for l in leaves]
        if self.name in FIRST_INPUT_ONLY:
            return out[0]
        return out[0] if len(out) == 1 else tuple(out)


# SINGA's operators whose backward gives the gradient of the first input only: the losses (not of
# the target) and scatter_elements (not of the indices and updates).
FIRST_INPUT_ONLY = frozenset({"mse_loss", "mse", "softmax_cross_entropy", "cross_entropy", "binary_cross_entropy",
                              "scatter_elements"})


# Ops whose creator runs them again for export only (in eval mode) and refuses backward.
REPLAY_ONLY = frozenset({"dropout"})


def zero_gradient(t):
    """The gradient of an input that does not reach the output (a step function's, an integer
    input's): zeros of its shape, float32 for an integer input, as SINGA's."""
    if t.dtype in _FLOATING:
        return core.zeros_like(t)
    return core.zeros(tuple(t.shape), core.dtype_from_name("float32"), t.device)


def _gradients(y, dy):
    """{leaf: gradient}; empty when y has no autograd history (sign, ceil, round: no gradient)."""
    from .autograd import gradients
    if not y._has_grad_fn() and not y.requires_grad:
        return {}
    return gradients(y, dy)


def attach(y, creator):
    """Hangs creator on y (a tensor, or each tensor of a list or tuple of outputs)."""
    if isinstance(y, Tensor):
        y.creator = creator
    elif isinstance(y, (list, tuple)):
        for k, t in enumerate(y):
            if isinstance(t, Tensor):
                t.creator = creator
                t._creator_output = k


def with_creator(name, fn, flags):
    """fn whose results carry an OpCreator while flags.training (the autograd module's flag)."""
    def op(*args, **kwargs):
        y = fn(*args, **kwargs)
        if flags.training:
            attach(y, OpCreator(name, fn, args, kwargs))
        return y
    op.__name__, op.__qualname__, op.__doc__, op.__wrapped__ = name, name, fn.__doc__, fn
    return op
