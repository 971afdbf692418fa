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
import numbers

from . import core, errors
from .schedule import *  # noqa: F401,F403  SINGA's opt.DecayScheduler, opt.Constant, opt.ExponentialDecay, ...


class Optimizer:
    """Base of the optimizers: wraps a C++ nn::Optimizer."""

    def __init__(self, impl):
        self._impl = impl
        self.step_count = 0
        self._apply = impl.apply  # the bound C++ method

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
        if "lr" not in meta:
            raise errors.ValueError("[optimizer] set_states: no 'lr' in the states (pass what get_states returned)")
        device = tensors[0][1].device if tensors else core.cpu_device()
        core.check_optimizer_state_from(self._impl, tensors, meta, "", "<set_states>")
        core.restore_optimizer_state_from(self._impl, tensors, meta, device, "", "<set_states>")
        if step_count is not None:
            self.step_count = int(step_count)

    def update(self, param, grad):
        """SINGA's older spelling: apply(param.name, param, grad) (the storage keys the state
        when the parameter has no name)."""
        if not isinstance(param, core.Tensor) or not isinstance(grad, core.Tensor):
            raise errors.TypeError(f"[optimizer.update] expected (param: Tensor, grad: Tensor), got "
                                   f"({type(param).__name__}, {type(grad).__name__})")
        self._apply(grad, param, param.name)

    def __call__(self, loss):
        """Backward from `loss`, updating every parameter as soon as its gradient is final."""
        core.optimizer_step(self._impl, loss)
        self.step_count += 1

    backward_and_update = __call__

    @property
    def lr(self):
        return self._impl.learning_rate()

    @lr.setter
    def lr(self, value):
        self.set_learning_rate(value)

    def set_learning_rate(self, lr):
        """Takes effect at the next update, also in replays of an already captured graph."""
        self._impl.set_learning_rate(float(lr))

    def __repr__(self):
        return f"{type(self).__name__}(lr={self.lr:g})"


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
        super().__init__(core.SGD(_number("SGD", "lr", lr), _number("SGD", "momentum", momentum),
                                  _number("SGD", "weight_decay", weight_decay), bool(nesterov),
                                  _number("SGD", "dampening", dampening)))


class Adam(Optimizer):
    def __init__(self, lr=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=0.0, decoupled=False):
        super().__init__(core.Adam(float(lr), float(beta_1), float(beta_2), float(epsilon), float(weight_decay),
                                   bool(decoupled)))

    def steps_taken(self, device):
        """Completed steps on `device`, replays included (a host read)."""
        return self._impl.steps_taken(device)


class AdamW(Adam):
    """Adam with decoupled weight decay."""

    def __init__(self, lr=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=1e-2):
        super().__init__(lr, beta_1, beta_2, epsilon, weight_decay, decoupled=True)


class DistOpt(Optimizer):
    """Data-parallel training, SINGA's opt.DistOpt (issue 15): wraps an optimizer so that every
    gradient is summed over the ranks and scaled by 1/world_size before the update (each rank's
    loss is the mean over its shard of the global batch).

        sgd = opt.DistOpt(opt.SGD(lr=0.05, momentum=0.9))
        loader = io.DataLoader(data, batch_size=32, shard=(sgd.global_rank, sgd.world_size))

    Eagerly every all-reduce blocks; in a captured step the graph regroups them into buckets
    all-reduced while the backward still runs (Note [Gradient buckets]), with the same numbers.
    `communicator`: none gives loom.comm.communicator() (MPI's world, a 1-rank world when the
    script is started alone; loom.DeviceError saying what to install when loom was built without
    MPI).
    `compression`: "none", "fp16" or "bf16" on the wire. `bucket_bytes`: the eager bucket size
    (graphs take GraphOptions.bucket_bytes)."""

    def __init__(self, opt, communicator=None, compression="none", bucket_bytes=25 << 20):
        self.opt = _check(opt)
        if communicator is None:
            from . import comm  # the default: loom.comm's, which also takes the job down on an uncaught error
            communicator = comm.communicator()
        self.communicator = communicator
        super().__init__(core.make_dist_opt(opt._impl, self.communicator, str(compression), int(bucket_bytes)))

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
        core.broadcast_parameters(self._impl, list(params), int(root))

    def __repr__(self):
        return f"DistOpt({self.opt!r}, world_size={self.world_size}, global_rank={self.global_rank})"


def _number(op, what, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise errors.TypeError(f"[{op}] {what} must be a number, got {type(v).__name__}")
    return float(v)


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

