"""loom.model: training one batch at a time, eagerly or as a replayed graph (SINGA's Model).

Subclass Model and write forward and train_one_batch with autograd ops and an optimizer:

    class MLP(model.Model):
        def __init__(self):
            super().__init__()
            self.fc1, self.relu, self.fc2 = layer.Linear(784, 256), layer.ReLU(), layer.Linear(256, 10)
        def forward(self, x):
            return self.fc2(self.relu(self.fc1(x)))
        def train_one_batch(self, x, y):
            out = self.forward(x)
            loss = autograd.softmax_cross_entropy(out, y)
            self.optimizer(loss)                 # backward + update
            return out, loss

    m = MLP()
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    m.compile([x], is_train=True, use_graph=True, sequential=True)
    for xb, yb in batches:
        out, loss = m.train_one_batch(xb, yb)    # first call captures, later calls replay

With use_graph=True the first call of train_one_batch for an input signature (shapes, dtypes) runs
the Python method once while the device buffers: the C++ ops it issues become the graph. Every
later call copies the new inputs into the captured input tensors and replays the graph from C++:
no Python runs per op. The returned tensors are the captured ones, rewritten by every replay
(read them before the next call). A batch of another shape captures a graph of its own.
Arguments that are not tensors (or numpy arrays) are constants of the capture: a new value
captures a new graph.

NativeModel wraps the C++ nn::Model (network, loss and optimizer in C++) for the model zoo.
"""
import collections
import functools
import warnings
import itertools
import math
import numbers
import operator
import weakref

import numpy as np

from . import autograd, core, errors
from . import precision as _precision
from . import io as _io
from .layer import Layer, NativeLayer, Sequential, uninitialized
from .layer import _options
from .opt import _check as _check_optimizer
from .tensor import Tensor, from_numpy

_SLOT = object()  # marks where a tensor argument goes
_step_ids = itertools.count()


def _flatten(out):
    """Tensors of a (nested) tuple/list/dict result, and the structure to rebuild it."""
    tensors = []

    def spec(o):
        if isinstance(o, Tensor):
            tensors.append(o)
            return _SLOT
        if isinstance(o, (tuple, list)):
            return type(o), [spec(v) for v in o]
        if isinstance(o, dict):
            return dict, [(k, spec(v)) for k, v in o.items()]
        return ("const", o)

    return tensors, spec(out)


def _unflatten(spec, tensors):
    it = iter(tensors)

    def build(s):
        if s is _SLOT:
            return next(it)
        kind, body = s
        if kind == "const":
            return body
        if kind is dict:
            return {k: build(v) for k, v in body}
        return kind(build(v) for v in body)

    return build(spec)


def _rebuilder(spec):
    """rebuild(flat tensors) -> the result `spec` describes: _unflatten, or a builtin for the
    usual flat results (a tuple or list of tensors, one tensor), which a replay calls every step."""
    if spec is _SLOT:
        return operator.itemgetter(0)
    kind, body = spec
    if kind in (tuple, list) and all(s is _SLOT for s in body):
        return kind
    return functools.partial(_unflatten, spec)


def _only_tensors(args):
    for a in args:  # a loop, not all(genexpr): this runs every replay
        if type(a) is not Tensor:
            return False
    return True


def _graph_step(fn):
    """Wraps a subclass's train_one_batch: graph mode captures it once per input signature."""

    @functools.wraps(fn)
    def train_one_batch(self, *args, **kwargs):
        if self._in_step:  # a nested call while capturing: part of the same step
            return fn(self, *args, **kwargs)
        # Note [Precision policy]: eager steps in compile's precision; graphs are lowered by the
        # pass autocast_bf16 or autocast_fp16 (compile switches it on), which casts each weight
        # once per step.
        with _precision.autocast("fp32" if self._use_graph else getattr(self, "_precision", "fp32")):
            if not self._use_graph:
                return fn(self, *(self._as_tensor(a, self._device) if isinstance(a, np.ndarray) else a
                                  for a in args), **kwargs)
            return self._run_graph(fn, args, kwargs)

    train_one_batch._loom_graph_step = True
    return train_one_batch


def _with_budget(graph_options, memory_budget):
    """graph_options with memory_budget set when one is given (Note [Recomputing for a memory
    budget] in graph/recompute.h: planned arena plus persistent bytes, met by recomputation)."""
    if memory_budget is None:
        return graph_options
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, numbers.Real):
        raise errors.TypeError(f"[model] memory_budget must be a number of bytes, got {type(memory_budget).__name__} "
                               f"{memory_budget!r}")
    if not math.isfinite(memory_budget) or memory_budget < 0 or memory_budget != math.floor(memory_budget):
        raise errors.ValueError(f"[model] memory_budget must be a whole, non-negative number of bytes, got "
                                f"{memory_budget!r}")
    return dict(graph_options or {}, memory_budget=int(memory_budget))


def _hand_precision(optimizer, precision):
    """What a precision asks of the optimizer (None: set_optimizer does it later). fp16 turns on
    its loss scaling with GradScaler's defaults (Note [Loss scaling]), unless it scales losses
    already (loom.precision.set_loss_scaling before compile); a DistOpt learns the precision its
    gradients go on the wire in (Note [Gradients on the wire])."""
    if optimizer is None:
        return
    if precision == "fp16" and not _precision.scales_losses(optimizer):
        _precision.set_loss_scaling(optimizer)
    from . import opt  # model imports opt's _check only
    if isinstance(optimizer, opt.DistOpt):
        optimizer._impl.set_model_precision_name(precision)


class _NoOptimizer:
    """Model.optimizer until set_optimizer: calling it (self.optimizer(loss) in train_one_batch)
    is a loom.ValueError that says what to do, not "'NoneType' object is not callable"."""

    __slots__ = ()
    _MESSAGE = ("[Model] no optimizer: call model.set_optimizer(opt.SGD(...)) before training "
                "(train_one_batch calls self.optimizer(loss))")

    def __call__(self, *args, **kwargs):
        raise errors.ValueError(self._MESSAGE)

    def __getattr__(self, name):
        raise AttributeError(f"{self._MESSAGE}; no attribute '{name}'")

    def __bool__(self):
        return False

    def __repr__(self):
        return "<no optimizer: call set_optimizer>"


_NO_OPTIMIZER = _NoOptimizer()


def _optimizer_of(model):
    """The model's optimizer, or None before set_optimizer."""
    o = getattr(model, "optimizer", None)
    return None if o is None or o is _NO_OPTIMIZER else o


class _Checkpoints:
    """save_states / load_states, for Model and NativeModel: whatever has get_states(),
    get_params(), `optimizer` and `device`."""

    def save_states(self, path, aux_states=None, meta=None):
        """Writes every parameter and state (get_states(), by name) and, when the model has an
        optimizer, its state (momentum, moments, learning rate, step count) to `path`, atomically
        (a failure never leaves half a file). `aux_states` (SINGA's name; `meta` is loom's older
        one): extra dict name -> number or Tensor, which load_states returns."""
        tensors = list(self.get_states().items())
        all_meta = {}
        for k, v in {**(meta or {}), **(aux_states or {})}.items():
            if isinstance(v, Tensor):
                tensors.append((_AUX_PREFIX + str(k), v))
            elif isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
                all_meta[str(k)] = float(v)
            else:
                raise errors.TypeError(f"[Model] save_states: aux state '{k}' is a {type(v).__name__}; it must be "
                                       "a number or a Tensor")
        optimizer = _optimizer_of(self)
        if optimizer is not None:
            if getattr(optimizer, "_impl", True) is None:  # written in loom ops (opt.Optimizer(lr))
                opt_tensors, opt_meta = _python_optimizer_state(optimizer, self.get_params())
            else:
                opt_tensors, opt_meta = _io.optimizer_state_by_name(optimizer, self.get_params())
            tensors += opt_tensors
            all_meta.update(opt_meta)
        _io.save_checkpoint(path, tensors, all_meta)

    def load_states(self, path):
        """Restores what save_states wrote into this model (same architecture: every state must
        be in the file with the same shape and dtype) and into its optimizer when both have
        optimizer state (every slot the optimizer keeps must be in the file). Everything is
        checked before anything is copied: on a mismatch one loom.IOError lists it and neither
        the model nor the optimizer has changed (Note [Check everything, then copy] in
        src/io/checkpoint.h). Returns the aux_states (numbers, and Tensors on the CPU) saved with it."""
        ck = _io.load_checkpoint(path)
        states = list(self.get_states().items())
        core.check_restore_into(ck._impl, states)
        optimizer_restore = None
        optimizer = _optimizer_of(self)
        python_states = None
        if optimizer is not None and _io.OPTIMIZER_PREFIX + "lr" in ck.meta:
            params = self.get_params()
            device = self.device or (next(iter(params.values())).device if params else None)
            if getattr(optimizer, "_impl", True) is None:
                python_states = _python_optimizer_states_from(ck, optimizer, params, device)
            else:
                optimizer_restore = _io._OptimizerRestore(ck, optimizer, params, device)
        core.restore_into(ck._impl, states)  # checked above: copies
        if optimizer_restore is not None:
            optimizer_restore.apply()
        if python_states is not None:
            optimizer.set_states(python_states)
        aux = {k: v for k, v in ck.meta.items() if not k.startswith(_io.OPTIMIZER_PREFIX)}
        aux.update({k[len(_AUX_PREFIX):]: ck[k] for k in ck.keys() if k.startswith(_AUX_PREFIX)})
        return aux


_AUX_PREFIX = "aux/"  # save_states' tensors among its aux_states


def _python_optimizer_state(optimizer, params):
    """(tensors, meta) of a Python optimizer's state (opt.AdaGrad, opt.RMSProp, ...) named as
    io.optimizer_state_by_name names a C++ optimizer's: "optimizer/<param name>/<slot>"."""
    prefix = _io.OPTIMIZER_PREFIX
    by_block = {f"block{p._block_id()}": name for name, p in params.items()}
    tensors = []
    for slot, by_key in optimizer._slots.items():
        for key, t in by_key.items():
            if key in by_block:
                owner = by_block[key]
            elif key.startswith("block"):
                raise errors.IOError(f"[checkpoint] optimizer state '{key}/{slot}' belongs to no parameter of the model")
            else:
                owner = "@" + key  # keyed by the name the caller gave the optimizer
            tensors.append((f"{prefix}{owner}/{slot}", t))
    return tensors, {prefix + "lr": float(optimizer.lr), prefix + "step_count": float(optimizer.step_count)}


def _python_optimizer_states_from(ck, optimizer, params, device):
    """What _python_optimizer_state saved in `ck`, as the states dict optimizer.set_states takes
    (keyed by this process's parameters), checked against the parameters' shapes. Reads only."""
    prefix, name = _io.OPTIMIZER_PREFIX, type(optimizer).__name__
    states = {"lr": ck.meta[prefix + "lr"], "step_counter": int(ck.meta.get(prefix + "step_count", 0))}
    for entry in ck.keys():
        if not entry.startswith(prefix):
            continue
        owner, _, slot = entry[len(prefix):].rpartition("/")
        if slot not in optimizer._SLOTS:
            raise errors.IOError(f"[checkpoint] {ck.path}: optimizer state '{entry}' is not {name}'s (it keeps "
                                 f"{', '.join(optimizer._SLOTS) or 'none'})")
        t = ck[entry]
        if owner.startswith("@"):
            key = owner[1:]
        elif owner in params:
            key = f"block{params[owner]._block_id()}"
            if t.shape != params[owner].shape:
                raise errors.IOError(f"[checkpoint] {ck.path}: '{entry}' is {t.describe()}, parameter '{owner}' is "
                                     f"{params[owner].describe()}")
        else:
            raise errors.IOError(f"[checkpoint] {ck.path}: '{entry}' belongs to no parameter of the model")
        states.setdefault(slot, {})[key] = t.to_device(device) if device is not None else t
    return states


class Model(Layer, _Checkpoints):
    """SINGA-style model: subclass it, define forward and train_one_batch."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        fn = cls.__dict__.get("train_one_batch")
        if fn is not None and not getattr(fn, "_loom_graph_step", False):
            cls.train_one_batch = _graph_step(fn)

    def __init__(self):
        super().__init__()
        self.optimizer = _NO_OPTIMIZER  # falsy; calling it says to call set_optimizer
        self._compiled = False
        self._use_graph = False
        self._sequential = True
        self._recapture = True
        self._device = None
        self._graph_options = None
        self._in_step = False
        self._steps = collections.OrderedDict()  # least recently used first (Note [Bounded recapture])
        self._opt_key = None  # the optimizer (and its settings' generation) the steps were captured with
        self._last_step = None
        self._in_call = False

    def __call__(self, *args, **kwargs):
        """SINGA's Model.__call__: train_one_batch in training mode, forward in eval mode. A call
        made while that train_one_batch runs (self(x) inside it) is forward, as is any call on a
        model that defines no train_one_batch."""
        if not self.training or self._in_call or type(self).train_one_batch is Model.train_one_batch:
            return self.forward(*args, **kwargs)
        self._in_call = True
        try:
            return self.train_one_batch(*args, **kwargs)
        finally:
            self._in_call = False

    # ---- setup ----
    def set_optimizer(self, optimizer):
        """The optimizer of later steps; graphs captured with the previous one are dropped, so
        the next graph-mode step captures with this one (as eager mode would use it)."""
        self.optimizer = _check_optimizer(optimizer)
        if getattr(self, "_steps", None):
            self._steps.clear()
        _hand_precision(self.optimizer, getattr(self, "_precision", "fp32"))

    def compile(self, inputs, is_train=True, use_graph=False, sequential=False, graph_options=None,
                memory_budget=None, precision="fp32"):
        """Chooses the execution mode. `inputs`: example input tensors (their device is the
        model's; placeholders, tensors never written, are fine). With use_graph the forward pass is
        checked against them by a capture that runs
        nothing, so shape errors surface here, naming the op. `graph_options`: a dict of
        loom.graph_option_fields() for this model's graphs, e.g. {"memory": "dynamic"}.
        `memory_budget`: bytes (graph option memory_budget) the graphs meet by recomputing.
        `precision`: "fp32", "bf16" (matrix products from bfloat16 operands, float32
        elsewhere: loom.autocast, Note [Precision policy]) or "fp16" (from float16 operands, and
        the optimizer's dynamic loss scaling on: loom.precision)."""
        self._precision = _precision.check(precision)
        _hand_precision(_optimizer_of(self), self._precision)
        graph_options = _with_budget(graph_options, memory_budget)
        inputs = [self._as_tensor(x, None) for x in inputs]
        if not inputs:
            raise errors.ValueError("[Model] compile needs example inputs")
        self._device = inputs[0].device
        for name, p in self.get_params().items():
            if p.device != self._device:
                raise errors.DeviceError(f"[Model] parameter '{name}' is on {p.device.name()} but the inputs are "
                                         f"on {self._device.name()}")
        self._steps.clear()  # old graphs go with their steps
        self._last_step = None
        self._use_graph, self._sequential = bool(use_graph), bool(sequential)
        self._graph_options = None if graph_options is None else dict(graph_options)
        if self._precision != "fp32" and use_graph:
            self._graph_options = dict(self._graph_options or {}, **{f"autocast_{self._precision}": True})
        self.train(is_train)
        if use_graph or uninitialized(self):
            # Placeholders (SINGA's Tensor(shape, dev), never written) stand for their shape: the
            # check reads zeros of that shape instead, and the placeholder stays unwritten.
            inputs = [x if x._allocated() else core.zeros(x.shape, core._core.Tensor_dtype(x), x.device)
                      for x in inputs]
        if uninitialized(self):
            # Layers that size themselves at their first input (SINGA's Linear(out)): one eager
            # forward pass creates their parameters now, before any capture (setup, not a step).
            with autograd.no_grad():
                self.forward(*inputs)
        if use_graph:
            check = core.new_graph(self._device, f"{type(self).__name__}.compile_check", self._graph_options)
            with autograd.no_grad():
                check.begin_capture()
                try:
                    self.forward(*inputs)
                finally:
                    check.abort_capture()  # the capture was the check: nothing to replay
        self._compiled = True

    def set_recapture(self, on):
        """True (default): a batch of a new shape captures another graph. False: it is a
        loom.GraphError that shows what differs."""
        self._recapture = bool(on)
        self._steps.clear()

    def train(self, mode=True):
        autograd.training = bool(mode)
        return super().train(mode)

    def train_one_batch(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}.train_one_batch is not defined: subclass loom.model.Model "
                                  "and write it with autograd ops and self.optimizer(loss)")

    # ---- graph mode ----
    def _as_tensor(self, x, device):
        if isinstance(x, Tensor):
            return x
        if isinstance(x, np.ndarray):
            return from_numpy(x, device)
        raise errors.TypeError(f"[Model] expected a loom Tensor or a numpy array, got {type(x).__name__}")

    def _run_graph(self, fn, args, kwargs):
        # Graph-mode state is the model's state (issue 36): settings a captured step baked in
        # (clipping, the schedule: their setters bump the optimizer's _generation) or another
        # optimizer mean new captures, as eager mode would follow them at once.
        opt = getattr(self, "optimizer", None)
        opt_key = (id(opt), getattr(opt, "_generation", 0))
        if opt_key != self._opt_key:
            self._steps.clear()
            self._opt_key = opt_key
        # Fast path, a training loop's call: loom Tensors only, no keywords, a step already made.
        # Its key is (fn, number of arguments); the C++ step still checks the inputs' shapes,
        # dtypes and devices, so a batch of a new shape recaptures or is refused as below.
        if not kwargs:
            entry = self._steps.get((fn, len(args)))
            if entry is not None and _only_tensors(args):
                self._steps.move_to_end((fn, len(args)))
                step, rebuild, info = entry
                flat = step.run(args)
                self._after_run(step, info)
                return rebuild[0](flat)
        if not self._compiled:
            raise errors.GraphError("[Model] train_one_batch called before compile(inputs, is_train, use_graph, "
                                    "sequential)")
        tensors, layout = [], []
        for a in args:
            if isinstance(a, (Tensor, np.ndarray)):
                tensors.append(self._as_tensor(a, self._device))
                layout.append(_SLOT)
            else:
                layout.append(a)
        # The constants of the capture, by position: f(x, 1) and f(1, x) are different steps.
        if not kwargs and all(a is _SLOT for a in layout):
            static_key = (fn, len(args))  # the fast path's key
        else:
            static_key = (fn, tuple(a if a is _SLOT else repr(a) for a in layout),
                          tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
        entry = self._steps.get(static_key)
        if entry is None:
            self._bound_steps()
            entry = self._steps[static_key] = self._make_step(fn, layout, kwargs)
        else:
            self._steps.move_to_end(static_key)
        step, rebuild, info = entry
        flat = step.run(tensors)
        self._after_run(step, info)
        return rebuild[0](flat)

    def _bound_steps(self):
        """Note [Bounded recapture] for the steps a Model makes per set of constants (a new
        Python number among the arguments is a new step): at most max_step_graphs (graph option,
        8 by default; 0: no bound), the least recently used dropped, with a warning once."""
        bound = int((self._graph_options or {}).get("max_step_graphs", 8))
        if bound <= 0 or len(self._steps) < bound:
            return
        key, _ = self._steps.popitem(last=False)
        if not getattr(self, "_warned_bound", False):
            self._warned_bound = True
            warnings.warn(f"[Model] {type(self).__name__} keeps {bound} captured steps (one per set of non-tensor "
                          f"arguments and input shapes): capturing another drops the least recently used; pass "
                          f"numbers that change as tensors, or raise graph option max_step_graphs", RuntimeWarning,
                          stacklevel=4)

    def _after_run(self, step, info):
        """A replay ran what the capture counted: the optimizer's step_count moves by as much as
        the captured Python code moved it (a capture counted itself)."""
        self._last_step = step
        if info.pop("captured", False):
            return
        opt = getattr(self, "optimizer", None)
        if info.get("steps") and hasattr(opt, "step_count"):
            opt.step_count += info["steps"]

    def _make_step(self, fn, layout, kwargs):
        rebuild = [None]  # set by the capture: it sees the result's structure
        info = {}  # the optimizer steps one run counts, and whether the last run was a capture
        me = weakref.ref(self)  # the C++ step holds this closure: no cycle through the model

        def captured(placeholders):
            model = me()
            it = iter(placeholders)
            call_args = [next(it) if a is _SLOT else a for a in layout]
            opt = getattr(model, "optimizer", None)
            before = getattr(opt, "step_count", None)
            model._in_step = True
            try:
                out = fn(model, *call_args, **kwargs)
            finally:
                model._in_step = False
            after = getattr(opt, "step_count", None)
            info["steps"] = after - before if isinstance(before, int) and isinstance(after, int) else 0
            info["captured"] = True
            flat, spec = _flatten(out)
            rebuild[0] = _rebuilder(spec)
            return flat

        # One name per step, so graph keys never collide: steps of one fn with other constants, or
        # a step made after set_recapture while the old one still lives, capture the same shapes.
        name = f"{type(self).__name__}@{id(self):x}.{fn.__name__}#{next(_step_ids)}"
        return core.PyStep(self._device, captured, name, self._recapture, self._sequential,
                           self._graph_options), rebuild, info

    def graph(self):
        """The graph the last graph-mode step ran (loom.Graph: summary(), stats(), dot(), ...)."""
        if self._last_step is None:
            raise errors.GraphError("[Model] no graph yet: compile with use_graph=True and train a batch")
        return self._last_step.last_graph()

    @property
    def device(self):
        return self._device


class NativeModel(_Checkpoints):
    """The C++ nn::Model: a built-in network (NativeLayer or Sequential of them), a loss
    ('softmax_cross_entropy' or 'mse') and an optimizer; its step is entirely C++."""

    _LOSSES = {"softmax_cross_entropy": core.LossKind_kSoftmaxCrossEntropy, "mse": core.LossKind_kMse}

    def __init__(self, net, optimizer, loss="softmax_cross_entropy"):
        impl = getattr(net, "_impl", None)
        if not isinstance(net, (NativeLayer, Sequential)) or impl is None:
            raise errors.TypeError("[NativeModel] net must be a built-in layer or a Sequential of built-in layers "
                            f"(got {type(net).__name__}); subclass loom.model.Model for Python networks")
        if loss not in self._LOSSES:
            raise errors.ValueError(f"[NativeModel] loss must be one of {', '.join(self._LOSSES)}, got {loss!r}")
        self.net = net
        self.optimizer = _check_optimizer(optimizer)
        self._impl = core.Model(impl, self.optimizer._impl, self._LOSSES[loss])
        self._device = None

    def compile(self, inputs, is_train=True, use_graph=False, sequential=True, graph_options=None,
                memory_budget=None, precision="fp32", keep_output=True):
        """As Model.compile; C++'s nn::Model runs each step in `precision` (Note [Precision policy];
        fp16 turns on the optimizer's loss scaling, Note [Loss scaling]). keep_output=False:
        train_one_batch returns (None, loss), and a graph does not keep the output for the caller
        (a language model's logits return to the memory plan: Note [A step that keeps no output]),
        and a network that can (the GPT) fuses its head's product with the loss, making no logits."""
        self._impl.set_precision_name(_precision.check(precision))
        self._impl.set_keep_output(bool(keep_output))
        graph_options = _with_budget(graph_options, memory_budget)
        inputs = [x if isinstance(x, Tensor) else from_numpy(x) for x in inputs]
        self._impl.Compile(inputs, bool(is_train), bool(use_graph), bool(sequential), graph_options)
        self._device = inputs[0].device

    def train_one_batch(self, x, y):
        """(output, loss) of one training step."""
        if not isinstance(x, Tensor):
            x = from_numpy(x, self._device)
        if not isinstance(y, Tensor):
            y = from_numpy(y, self._device)
        return self._impl.TrainOneBatch(x, y)

    def forward(self, x):
        """Inference in eval mode, without gradients."""
        if not isinstance(x, Tensor):
            x = from_numpy(x, self._device)
        return self._impl.Forward(x)

    __call__ = forward

    def get_params(self):
        return dict(self._impl.Params())

    def get_states(self):
        out = dict(self._impl.Params())
        out.update(self._impl.States())
        return out

    def train(self, mode=True):
        self._impl.Train(bool(mode))
        return self

    def eval(self):
        return self.train(False)

    def set_recapture(self, on):
        self._impl.set_recapture(bool(on))

    @property
    def steps(self):
        return self._impl.steps()

    def graph(self):
        """The graph of the last graph-mode training step."""
        return self._impl.train_graph()

    @property
    def device(self):
        return self._device


# ---- the model zoo (C++ networks) ----

def mlp(dims, device=None, dtype=None):
    """Linear -> ReLU -> ... -> Linear over `dims` (e.g. [784, 1024, 1024, 10])."""
    return NativeLayer(core.make_mlp([int(d) for d in dims], _options(device, dtype)))


def small_cnn(in_channels=3, num_classes=10, device=None, dtype=None):
    """Two conv-BN-ReLU-maxpool blocks and a linear classifier, for (N, C, 32, 32) inputs."""
    return NativeLayer(core.make_small_cnn(in_channels, num_classes, _options(device, dtype)))


def resnet18(num_classes=10, device=None, dtype=None):
    """ResNet-18 with the CIFAR stem, for (N, 3, 32, 32) inputs."""
    return NativeLayer(core.make_resnet18(num_classes, _options(device, dtype)))


def resnet50(num_classes=1000, device=None, dtype=None):
    """ResNet-50, for (N, 3, 224, 224) inputs."""
    return NativeLayer(core.make_resnet50(num_classes, _options(device, dtype)))
