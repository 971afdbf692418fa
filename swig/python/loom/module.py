"""loom.module: SINGA 3.0's Module (SINGA 3.1 renamed it model.Model, which loom.model
provides). A Module's forward, loss and optim are written by the user; with the graph on (the
default) the first call of each is captured into a graph of its own on the module's device and
run once, and every later model(x) replays the three graphs in that order and returns the
outputs of the first calls (their tensors now hold the new step's values); loss() and optim()
then return those without doing anything. With the graph off every call runs eagerly.

    class MLP(module.Module):
        def forward(self, x): ...
        def loss(self, out, target): return autograd.softmax_cross_entropy(out, target)
        def optim(self, loss): self.optimizer.backward_and_update(loss)

Inputs are fed by writing into the tensors given to the first call (x.copy_from_numpy(...)),
as for any loom graph (docs/design.md invariant 6).
"""
import functools
import itertools

from . import errors
from .device import get_default_device
from .layer import Layer

_STEPS = ("forward", "loss", "optim")
_ids = itertools.count(1)


def _captured(name, fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        if not self._graph_on:
            return fn(self, *args, **kwargs)
        if name in self._results:  # a later iteration: model(x) has replayed the step already
            return self._results[name]
        key = f"{self._key}/{name}"
        with self._device.buffer(key):
            out = fn(self, *args, **kwargs)
        self._device.RunGraph(self._sequential, key)
        self._results[name] = out
        self._captured.append(key)
        return out
    return wrapper


class Module(Layer):
    """SINGA 3.0's Module: see the module's docstring."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in _STEPS:
            if name in cls.__dict__:
                setattr(cls, name, _captured(name, cls.__dict__[name]))

    def __init__(self):
        super().__init__()
        self._graph_on, self._sequential = True, True
        self._device = get_default_device()
        self._key = f"loom.module.{next(_ids)}"
        self._results, self._captured = {}, []

    def forward(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not defined")

    def loss(self, *args, **kwargs):
        """The loss of the outputs (override it)."""

    def optim(self, *args, **kwargs):
        """The update from the loss (override it)."""

    def graph(self, mode=True, sequential=False):
        """Turns the graph on or off (before the first call: the captured graphs stay as made)."""
        if self._captured:
            raise errors.GraphError(f"[{type(self).__name__}] graph(): the step is captured already; set the "
                                    "mode before the first call")
        self._graph_on, self._sequential = bool(mode), bool(sequential)
        return self

    def on_device(self, device):
        """The device the graphs are captured on."""
        self._device = device
        return self

    def __call__(self, *inputs, **kwargs):
        if self._graph_on and "forward" in self._results:
            for key in self._captured:
                self._device.RunGraph(self._sequential, key)
        return self.forward(*inputs, **kwargs)

    def __del__(self):
        dev = self.__dict__.get("_device")
        for key in self.__dict__.get("_captured", ()):
            try:
                if dev.HasGraph(key):
                    dev.ResetGraph(key)
            except Exception:  # interpreter shutdown
                pass
