"""loom.opt: optimizers. Each parameter update is one fused C++ op (sgd_update, adam_update), so
it is buffered and replayed like any other op; the learning rate is a device scalar, so changing
it between replays takes effect without a new capture.

    sgd = opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4)
    for p, g in autograd.backward(loss):
        sgd.apply(p.name, p, g)          # SINGA 3+: (param_name, param_value, param_grad)
        # or the seed's form, sgd.apply(0, g, p, ""): (epoch, grad, value, name)
    sgd.step()                           # SINGA's end of an iteration: counts it
    # or, equivalently and with less memory (each gradient dies after its update):
    sgd(loss)

SGD's positional order is SINGA's: SGD(lr, momentum, dampening, weight_decay, nesterov).
"""
import contextlib
import numbers

from . import core, errors
from .schedule import *  # noqa: F401,F403  SINGA's opt.DecayScheduler, opt.Constant, opt.ExponentialDecay, ...
from .schedule import set_schedule as _set_schedule


class Optimizer:
    """Base of the optimizers. The built-in ones wrap a C++ nn::Optimizer (one fused update op
    per parameter). Optimizer(lr, dtype) is SINGA's base for optimizers written in Python
    (opt.AdaGrad, opt.RMSProp, or a user's subclass): their update is made of loom ops in
    update(param, grad, state), recorded like any other while a device captures, with the
    learning rate a device scalar (so lr changes reach replays)."""

    def __init__(self, lr=0.1, dtype="float32"):
        self.step_count = 0
        if isinstance(lr, core.Optimizer):  # a built-in optimizer's C++ object
            self._impl = lr
            self._apply = lr.apply  # the bound C++ method
            return
        _check_float_dtype(type(self).__name__, dtype)
        self._impl = None
        self._lr = _positive(type(self).__name__, "lr", lr)
        self._lr_tensors = {}   # (device name, dtype) -> the learning rate as a device scalar
        self._slots = {}        # slot name -> {key: state tensor}
        self._apply = self._apply_ops

    def apply(self, *args, **kwargs):
        """Updates a parameter in place with its gradient. Two forms, told apart by the type of
        the first argument:

            apply(param_name, param_value, param_grad)   SINGA 3+: a str first
            apply(epoch, grad, value, name="")           the seed's: an int first (unused: the
                                                         step count lives on the device)

        The name keys the optimizer state (momentum...); empty: keyed by the parameter's storage.
        Anything else (a float or a Tensor first, a fourth argument after a name) is a
        loom.TypeError naming both forms."""
        grad, param, name = _apply_args(args, kwargs)
        self._apply(grad, param, name)

    @property
    def step_counter(self):
        """SINGA's step counter as a tensor: a new float32 (1,) tensor holding step_count."""
        return core.full((1,), float(self.step_count), core.dtype_from_name("float32"), core.cpu_device())

    @property
    def lr_value(self):
        """SINGA's lr_value: the rate of the current step (step_count; the schedule's, when one is
        set) as a new float32 (1,) tensor."""
        scheduler = getattr(self, "_scheduler", None)
        rate = scheduler.value_at(self.step_count) if scheduler is not None else self.lr
        return core.full((1,), float(rate), core.dtype_from_name("float32"), core.cpu_device())

    @property
    def state_bytes(self):
        """Bytes of optimizer state this optimizer keeps (momentum, Adam's moments)."""
        if self._impl is None:
            return sum(int(t.memsize()) for slot in self._slots.values() for t in slot.values())
        return int(self._impl.state_bytes())

    def backward_and_update(self, loss):
        """SINGA 3.0's name for optimizer(loss): backward from loss, each parameter updated as
        its gradient is ready, then step()."""
        return self(loss)

    def step(self):
        """SINGA's end of an iteration: counts it (step_count). The updates themselves happened
        in apply; a device-side count (Adam's bias correction) advances with them, also in
        replays."""
        self.step_count += 1

    # SINGA's state names: a dict per slot, keyed by parameter name ('moments' for SGD's momentum)
    _SLOT_GROUPS = {"momentum": "moments", "m": "m", "v": "v"}

    def get_states(self):
        """The optimizer's state in SINGA's layout: {"step_counter": steps, "lr": the learning
        rate, "moments": {key: momentum tensor} (SGD with momentum; Adam has "m" and "v"), ...}.
        The tensors are copies; a key is the name given to apply (the parameter's storage when
        none was). Adam also keeps "adam_steps", its device-side step count."""
        if self._impl is None:
            states = {"step_counter": self.step_count, "lr": self._lr}
            for slot in self._SLOTS:
                states[slot] = {k: t.clone() for k, t in self._slots.get(slot, {}).items()}
            return states
        tensors, meta = core.optimizer_state(self._impl, "")
        states = {"step_counter": self.step_count}
        states.update(meta)
        for key, t in tensors:
            owner, _, slot = key.rpartition("/")
            states.setdefault(self._SLOT_GROUPS.get(slot, slot), {})[owner] = t.clone()
        return states

    def set_states(self, states):
        """Restores what get_states returned (into this optimizer or a fresh one of the same
        kind and hyper-parameters). Everything is checked before anything changes: a slot this
        optimizer cannot keep, or a tensor of another shape, is a loom.IOError."""
        if not isinstance(states, dict):
            raise errors.TypeError(f"[optimizer] set_states expects the dict get_states returns, "
                                   f"got {type(states).__name__}")
        if self._impl is None:
            return self._set_python_states(states)
        slots = {group: slot for slot, group in self._SLOT_GROUPS.items()}
        tensors, meta, step_count = [], {}, None
        for k, v in states.items():
            if isinstance(v, dict) and k in slots:
                for owner, t in v.items():
                    if not isinstance(t, core.Tensor):
                        raise errors.TypeError(f"[optimizer] set_states: states['{k}']['{owner}'] is a "
                                               f"{type(t).__name__}, not a Tensor")
                    tensors.append((f"{owner}/{slots[k]}", t))
            elif k == "step_counter":
                step_count = v
            elif isinstance(v, numbers.Real) and not isinstance(v, bool):
                meta[str(k)] = float(v)
            else:
                raise errors.TypeError(f"[optimizer] set_states: state '{k}' is a {type(v).__name__}; expected "
                                       f"a number or a dict ({', '.join(slots)}) of tensors")
        if not tensors and not meta and step_count is not None:  # SINGA's set_states({'step_counter': 5})
            self.step_count = int(step_count)
            return
        if "lr" not in meta:
            raise errors.ValueError("[optimizer] set_states: no 'lr' in the states (pass what get_states returned)")
        device = tensors[0][1].device if tensors else core.cpu_device()
        core.check_optimizer_state_from(self._impl, tensors, meta, "", "<set_states>")
        core.restore_optimizer_state_from(self._impl, tensors, meta, device, "", "<set_states>")
        if step_count is not None:
            self.step_count = int(step_count)

    def _set_python_states(self, states):
        name = type(self).__name__
        for k, v in states.items():
            if k in ("step_counter", "lr"):
                if isinstance(v, bool) or not isinstance(v, numbers.Real):
                    raise errors.TypeError(f"[{name}] set_states: '{k}' is a {type(v).__name__}, not a number")
            elif k in self._SLOTS:
                if not isinstance(v, dict) or not all(isinstance(t, core.Tensor) for t in v.values()):
                    raise errors.TypeError(f"[{name}] set_states: '{k}' must be a dict of Tensors")
                for key, t in v.items():
                    old = self._slots.get(k, {}).get(key)
                    if old is not None and old.shape != t.shape:
                        raise errors.IOError(f"[{name}] set_states: {k} '{key}' is {t.describe()}, this optimizer "
                                             f"keeps {old.describe()}")
            else:
                raise errors.IOError(f"[{name}] set_states: unknown state '{k}'; {name} keeps step_counter, lr"
                                     + "".join(f", {s}" for s in self._SLOTS))
        for slot in self._SLOTS:
            for key, t in states.get(slot, {}).items():
                old = self._slots.setdefault(slot, {}).get(key)
                if old is None:
                    old = self._slots[slot][key] = t.clone()
                    old._set_persistent(True)
                else:
                    core.copy_into(old, t)
        if "lr" in states:  # SINGA's set_states restores what it is given
            self.set_learning_rate(states["lr"])
        self.step_count = int(states.get("step_counter", self.step_count))

    def update(self, param, grad):
        """SINGA's older spelling: apply(param.name, param, grad) (the storage keys the state
        when the parameter has no name)."""
        if not isinstance(param, core.Tensor) or not isinstance(grad, core.Tensor):
            raise errors.TypeError(f"[optimizer.update] expected (param: Tensor, grad: Tensor), got "
                                   f"({type(param).__name__}, {type(grad).__name__})")
        self._apply(grad, param, param.name)

    def __call__(self, loss):
        """Backward from `loss`, updating every parameter as soon as its gradient is final."""
        if self._impl is None:  # a Python optimizer, once every gradient is known
            custom = type(self).apply is not Optimizer.apply  # a SINGA-style subclass's own apply
            for p, g in core.backward(loss, core.Tensor()):
                # keyed by storage, as the C++ optimizers are: two layers' "bias" never share state
                self.apply(p.name or "", p, g) if custom else self._apply(g, p, "")
        else:
            core.optimizer_step(self._impl, loss)
        self.step_count += 1

    backward_and_update = __call__

    @property
    def lr(self):
        return self._impl.learning_rate() if self._impl is not None else self._lr

    @lr.setter
    def lr(self, value):
        self.set_learning_rate(value)

    def set_learning_rate(self, lr):
        """Takes effect at the next update, also in replays of an already captured graph."""
        if self._impl is not None:
            self._impl.set_learning_rate(float(lr))
            return
        self._lr = _positive(type(self).__name__, "lr", lr)
        for t in self._lr_tensors.values():
            core.fill(t, self._lr)

    # ---- optimizers written in Python (Optimizer(lr, dtype)) ----

    _SLOTS = ()  # the state a Python optimizer keeps per parameter, zeros at first

    def new_value(self, param, grad, state):
        """One step of a Python optimizer: returns the new value of `param` from its gradient
        and `state` ({slot: tensor}, updated in place with copy_state), with loom ops and
        self.lr_tensor(param) as the learning rate. Runs without autograd. (A SINGA-style
        subclass may instead override apply(param_name, param_value, param_grad).)"""
        raise NotImplementedError(f"{type(self).__name__}.new_value is not defined")

    def lr_tensor(self, param):
        """The learning rate as a scalar tensor on param's device, of its dtype (persistent: a
        graph reads it when it runs)."""
        key = (param.device.name(), param.dtype)
        t = self._lr_tensors.get(key)
        if t is None:
            setup = core.SetupGuard(param.device)  # created once, also during a capture
            t = self._lr_tensors[key] = core.full((), self._lr, core._core.Tensor_dtype(param), param.device)
            t._set_persistent(True)
            del setup
        return t

    @staticmethod
    def copy_state(dst, value):
        """Writes `value` into the state tensor `dst` (an op: recorded during a capture)."""
        core.copy_into(dst, value)

    def _state_of(self, key, param):
        state = {}
        for slot in self._SLOTS:
            slots = self._slots.setdefault(slot, {})
            t = slots.get(key)
            if t is None:
                setup = core.SetupGuard(param.device)  # zeros once, not on every replay
                t = core.zeros(param.shape, core._core.Tensor_dtype(param), param.device)
                t._set_persistent(True)
                del setup
                slots[key] = t
            elif t.shape != param.shape:
                raise errors.ShapeError(f"[{type(self).__name__}] state '{key}' is {t.describe()}, parameter is "
                                        f"{param.describe()}")
            state[slot] = t
        return state

    def _apply_ops(self, grad, param, name):
        if grad.shape != param.shape or grad.dtype != param.dtype:
            raise errors.ShapeError(f"[{type(self).__name__}] parameter {param.describe()} and gradient "
                                    f"{grad.describe()} differ")
        key = name or f"block{param._block_id()}"  # the C++ optimizers' key (io._slot_key)
        with _no_grad():
            core.copy_into(param, self.new_value(param, grad, self._state_of(key, param)))

    def __repr__(self):
        return f"{type(self).__name__}(lr={self.lr:g})"


def _rate_and_scheduler(lr):
    """SINGA's opt.SGD(lr=opt.ExponentialDecay(...)): a scheduler for the rate gives its step-0
    value as the constant rate and is set as the optimizer's schedule (loom.schedule: evaluated
    on the device from its step counter, so graph replays follow it)."""
    if isinstance(lr, DecayScheduler):
        return lr.init_value, lr
    return lr, None


class SGD(Optimizer):
    """SGD with momentum, dampening, L2 weight decay and Nesterov momentum, in SINGA's positional
    order. Per parameter p with gradient g (v starts at zero):

        d = g + weight_decay * p
        v = momentum * v + (1 - dampening) * d          (only when momentum > 0; else v = d)
        p -= lr * (d + momentum * v if nesterov else v)

    `dtype` is SINGA's: the state takes each parameter's own dtype, so only float dtypes are
    accepted here and the value is otherwise unused."""

    def __init__(self, lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, dtype="float32"):
        _check_float_dtype("SGD", dtype)
        lr, scheduler = _rate_and_scheduler(lr)
        super().__init__(core.SGD(_number("SGD", "lr", lr), _number("SGD", "momentum", momentum),
                                  _number("SGD", "weight_decay", weight_decay), bool(nesterov),
                                  _number("SGD", "dampening", dampening, finite=True)))
        if scheduler is not None:
            _set_schedule(self, scheduler)


class Adam(Optimizer):
    """Adam in SINGA's positional order, Adam(lr, beta_1, beta_2, epsilon, weight_decay, dtype):

        m = beta_1 m + (1 - beta_1) g,   v = beta_2 v + (1 - beta_2) g^2     (g with weight decay)
        p -= lr * (m / (1 - beta_1^t)) / (sqrt(v / (1 - beta_2^t)) + epsilon)

    `decoupled` (keyword): AdamW's weight decay instead. `dtype` as SGD's. `decay_on` (keyword):
    "all" parameters (PyTorch's default) or "matrices" only, those of two or more dimensions
    (GPT-2's rule: no decay on biases and normalisation parameters)."""

    _DECAY_ON = {"all": "DecayOn_kAll", "matrices": "DecayOn_kMatrices"}

    def __init__(self, lr=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=0.0, dtype="float32",
                 decoupled=False, decay_on="all"):
        _check_float_dtype("Adam", dtype)
        if not isinstance(decay_on, str) or decay_on not in self._DECAY_ON:
            raise errors.ValueError(f"[Adam] decay_on must be 'all' or 'matrices', got {decay_on!r}")
        lr, scheduler = _rate_and_scheduler(lr)
        n = _number
        super().__init__(core.Adam(n("Adam", "lr", lr), n("Adam", "beta_1", beta_1), n("Adam", "beta_2", beta_2),
                                   n("Adam", "epsilon", epsilon), n("Adam", "weight_decay", weight_decay, finite=True),
                                   bool(decoupled)))
        self._impl.set_decay_on(getattr(core.Adam, self._DECAY_ON[decay_on]))
        if scheduler is not None:
            _set_schedule(self, scheduler)

    def steps_taken(self, device):
        """Completed steps on `device`, replays included (a host read)."""
        return self._impl.steps_taken(device)


class AdamW(Adam):
    """Adam with decoupled weight decay."""

    def __init__(self, lr=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=1e-2, decay_on="all"):
        super().__init__(lr, beta_1, beta_2, epsilon, weight_decay, decoupled=True, decay_on=decay_on)


class AdaGrad(Optimizer):
    """SINGA's AdaGrad(lr, epsilon, weight_decay, dtype). Per parameter p with gradient g
    (history h starts at zero):

        g = g + weight_decay * p
        h = h + g^2
        p -= lr * g / sqrt(h + epsilon)

    State (get_states): "history". Written in loom ops (Optimizer(lr, dtype))."""

    _SLOTS = ("history",)

    def __init__(self, lr=0.1, epsilon=1e-8, weight_decay=0.0, dtype="float32"):
        super().__init__(lr, dtype)
        self.epsilon = _positive("AdaGrad", "epsilon", epsilon)
        self.weight_decay = _non_negative("AdaGrad", "weight_decay", weight_decay)

    def new_value(self, param, grad, state):
        if self.weight_decay:
            grad = core.add(grad, core.mul_scalar(param, self.weight_decay))
        h = core.add(state["history"], core.mul(grad, grad))
        self.copy_state(state["history"], h)
        step = core.div(grad, core.sqrt(core.add_scalar(h, self.epsilon)))
        return core.sub(param, core.mul(self.lr_tensor(param), step))


class RMSProp(Optimizer):
    """SINGA's RMSProp(lr, rho, epsilon, weight_decay, dtype). Per parameter p with gradient g
    (running average r starts at zero):

        g = g + weight_decay * p
        r = rho * r + (1 - rho) * g^2
        p -= lr * g / sqrt(r + epsilon)

    State (get_states): "running_average". Written in loom ops (Optimizer(lr, dtype))."""

    _SLOTS = ("running_average",)

    def __init__(self, lr=0.1, rho=0.9, epsilon=1e-8, weight_decay=0.0, dtype="float32"):
        super().__init__(lr, dtype)
        self.rho = _fraction("RMSProp", "rho", rho)
        self.epsilon = _positive("RMSProp", "epsilon", epsilon)
        self.weight_decay = _non_negative("RMSProp", "weight_decay", weight_decay)

    def new_value(self, param, grad, state):
        if self.weight_decay:
            grad = core.add(grad, core.mul_scalar(param, self.weight_decay))
        r = core.add(core.mul_scalar(state["running_average"], self.rho),
                     core.mul_scalar(core.mul(grad, grad), 1.0 - self.rho))
        self.copy_state(state["running_average"], r)
        step = core.div(grad, core.sqrt(core.add_scalar(r, self.epsilon)))
        return core.sub(param, core.mul(self.lr_tensor(param), step))


class DistOpt(Optimizer):
    """Data-parallel training, SINGA's opt.DistOpt: wraps an optimizer so that every
    gradient is summed over the ranks and scaled by 1/world_size before the update (each rank's
    loss is the mean over its shard of the global batch).

        sgd = opt.DistOpt(opt.SGD(lr=0.05, momentum=0.9))
        loader = io.DataLoader(data, batch_size=32, shard=(sgd.global_rank, sgd.world_size))

    Eagerly every all-reduce blocks; in a captured step the graph regroups them into buckets
    all-reduced while the backward still runs (Note [Gradient buckets]), with the same numbers.
    `communicator`: none gives loom.comm.communicator() (MPI's world, a 1-rank world when the
    script is started alone; loom.DeviceError saying what to install when loom was built without
    MPI).
    `compression`: what the gradients are all-reduced in. "auto" (the default) follows the
    model's precision (Model.compile(precision=...)): bfloat16 for "bf16", float16 for "fp16",
    float32 for "fp32" (Note [Gradients on the wire] in src/nn/dist_opt.h); "none" (or "fp32"),
    "fp16" or "bf16" fix it. `bucket_bytes`: the eager bucket size (graphs take
    GraphOptions.bucket_bytes; with `shard`, the size of the sharded buckets in both modes).
    `shard=True` (ZeRO stage 1): each rank keeps the optimizer state of 1/world_size of the
    parameters; gradients are reduce-scattered by bucket, each rank updates its slot and the
    parameters are all-gathered, overlapped with backward in a captured step (Note [Sharded
    optimizer state] in src/nn/dist_opt.h). Updates then go through backward_and_update or
    step, not update() one parameter at a time."""

    def __init__(self, opt, communicator=None, compression="auto", bucket_bytes=25 << 20, shard=False):
        self.opt = _check(opt)
        if communicator is None:
            from . import comm  # the default: loom.comm's, which also takes the job down on an uncaught error
            communicator = comm.communicator()
        self.communicator = communicator
        if not isinstance(shard, bool):
            raise errors.TypeError(f"[DistOpt] shard must be True or False, got {shard!r}")
        super().__init__(core.make_dist_opt(opt._impl, self.communicator, str(compression),
                                            errors._whole("DistOpt", "bucket_bytes", bucket_bytes), shard))

    @property
    def sharded(self):
        """Whether each rank keeps 1/world_size of the optimizer state (shard=True)."""
        return self._impl.sharded()


    @property
    def compression(self):
        """What the next all-reduces use: "none" (float32), "bf16" or "fp16"."""
        return self._impl.compression_name()

    @property
    def world_size(self):
        return self._impl.world_size()

    @property
    def global_rank(self):
        return self._impl.global_rank()

    @property
    def local_rank(self):
        """The rank among this host's ranks (from the launcher's environment; else global_rank)."""
        return self._impl.local_rank()

    @property
    def lr(self):
        return self.opt.lr

    @lr.setter
    def lr(self, value):
        self.opt.set_learning_rate(value)

    def set_learning_rate(self, lr):
        self.opt.set_learning_rate(lr)

    def broadcast_parameters(self, params, root=0):
        """Every rank ends with rank `root`'s values of `params`."""
        core.broadcast_parameters(self._impl, list(params), errors._whole("DistOpt", "root", root))

    def __repr__(self):
        return f"DistOpt({self.opt!r}, world_size={self.world_size}, global_rank={self.global_rank})"


def _positive(op, what, v):
    v = _number(op, what, v)
    if not v > 0 or v == float("inf"):
        raise errors.ValueError(f"[{op}] {what} {v} must be a positive finite number")
    return v


def _fraction(op, what, v):
    v = _number(op, what, v)
    if not 0.0 <= v < 1.0:
        raise errors.ValueError(f"[{op}] {what} {v} must lie in [0, 1)")
    return v


def _non_negative(op, what, v):
    v = _number(op, what, v)
    if not 0.0 <= v < float("inf"):
        raise errors.ValueError(f"[{op}] {what} {v} must be a non-negative finite number")
    return v


@contextlib.contextmanager
def _no_grad():
    guard = core.NoGradGuard()
    try:
        yield
    finally:
        del guard


def _number(op, what, v, finite=False):
    return errors._real(op, what, v, finite=finite)  # C++ checks lr, momentum and eps; the others here


def _check_float_dtype(op, dtype):
    from . import tensor  # tensor imports nothing of opt: no cycle at use time
    name = tensor.dtype_name(dtype)
    if name not in (tensor.float32, tensor.float64, tensor.float16, tensor.bfloat16):
        raise errors.DTypeError(f"[{op}] dtype must be a float dtype, got {name}")


_APPLY_FORMS = ("apply(param_name: str, param_value: Tensor, param_grad: Tensor) (SINGA 3+) or "
                "apply(epoch: int, grad: Tensor, value: Tensor, name: str = '')")


def _apply_args(args, kwargs):
    """(grad, param, name) of either form of Optimizer.apply (see its docstring)."""
    singa3 = {"param_name", "param_value", "param_grad"}
    seed = {"epoch", "step", "grad", "value", "param", "name"}
    if kwargs and set(kwargs) <= singa3 and len(args) + len(kwargs) == 3:
        names = ("param_name", "param_value", "param_grad")
        merged = dict(zip(names, args))
        if set(merged) & set(kwargs):
            raise errors.TypeError(f"[optimizer.apply] an argument is given twice; use {_APPLY_FORMS}")
        merged.update(kwargs)
        args, kwargs = tuple(merged[n] for n in names), {}
    if kwargs:
        if not set(kwargs) <= seed:
            raise errors.TypeError(f"[optimizer.apply] unexpected keyword(s) {sorted(set(kwargs) - seed)}; "
                                   f"use {_APPLY_FORMS}")
        names = ("epoch", "grad", "value", "name")
        kw = {("epoch" if k == "step" else "value" if k == "param" else k): v for k, v in kwargs.items()}
        merged = dict(zip(names, args))
        if set(merged) & set(kw):
            raise errors.TypeError(f"[optimizer.apply] an argument is given twice; use {_APPLY_FORMS}")
        merged.update(kw)
        merged.setdefault("epoch", 0)
        merged.setdefault("name", "")
        if "grad" not in merged or "value" not in merged:
            raise errors.TypeError(f"[optimizer.apply] missing the gradient or the value; use {_APPLY_FORMS}")
        args = tuple(merged[n] for n in names)
    first = args[0] if args else None
    if isinstance(first, str) and len(args) == 3:
        name, param, grad = args
    elif isinstance(first, core.Tensor) and len(args) == 3 and all(isinstance(a, core.Tensor) for a in args):
        # SINGA 3+ with a non-str key (SINGA keys its state dict by whatever param_name is,
        # scripts pass the parameter itself): the parameter's storage keys the state
        name, param, grad = "", args[1], args[2]
    elif isinstance(first, numbers.Integral) and not isinstance(first, bool) and len(args) in (3, 4):
        grad, param = args[1], args[2]
        name = args[3] if len(args) == 4 else ""
        if not isinstance(name, str):
            raise errors.TypeError(f"[optimizer.apply] name must be a str, got {type(name).__name__}; "
                                   f"use {_APPLY_FORMS}")
    else:
        got = ", ".join(type(a).__name__ for a in args)
        raise errors.TypeError(f"[optimizer.apply] cannot tell the form from the arguments ({got}): use "
                               f"{_APPLY_FORMS}")
    for what, t in (("parameter", param), ("gradient", grad)):
        if not isinstance(t, core.Tensor):
            raise errors.TypeError(f"[optimizer.apply] the {what} must be a loom Tensor, got {type(t).__name__}; "
                                   f"use {_APPLY_FORMS}")
    return grad, param, name


def _check(opt):
    if not isinstance(opt, Optimizer):
        raise errors.TypeError(f"[optimizer] expected a loom.opt optimizer (opt.SGD, opt.Adam), "
                               f"got {type(opt).__name__}")
    return opt

