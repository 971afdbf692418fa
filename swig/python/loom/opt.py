"""loom.opt: optimizers. Each parameter update is one fused C++ op (sgd_update, adam_update), so
it is buffered and replayed like any other op; the learning rate is a device scalar, so changing
it between replays takes effect without a new capture.

    sgd = opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4)
    for p, g in autograd.backward(loss):
        sgd.apply(0, g, p, "")           # SINGA's spelling: (step, grad, param, name)
    # or, equivalently and with less memory (each gradient dies after its update):
    sgd(loss)
"""
from . import core, errors


class Optimizer:
    """Base of the optimizers: wraps a C++ nn::Optimizer."""

    def __init__(self, impl):
        self._impl = impl
        self.step_count = 0
        self._apply = impl.apply  # the bound C++ method

    def apply(self, step, grad, param, name=""):
        """Updates `param` in place with `grad`. `step` is SINGA's and unused: the step count
        lives on the device (replays advance it). `name` keys the optimizer state (momentum...);
        empty: keyed by the parameter's storage."""
        self._apply(grad, param, name)

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
    def __init__(self, lr=0.1, momentum=0.0, weight_decay=0.0, nesterov=False, dampening=0.0):
        super().__init__(core.SGD(float(lr), float(momentum), float(weight_decay), bool(nesterov),
                                  float(dampening)))


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


def _check(opt):
    if not isinstance(opt, Optimizer):
        raise errors.TypeError(f"[optimizer] expected a loom.opt optimizer (opt.SGD, opt.Adam), "
                               f"got {type(opt).__name__}")
    return opt

