"""loom.device: devices, buffering (graph capture) and replay, memory statistics, graph dumps.

    dev = create_cpu_device()          # or create_cuda_device(0): loom.DeviceError without CUDA
    dev.SetBufferFlag(True)            # SINGA: start buffering (= dev.EnableGraph(True))
    ...ops...                          # recorded, not run: no kernel, no intermediate memory
    dev.SetBufferFlag(False)           # analyse and plan the graph
    dev.ExecBuffOps()                  # SINGA: replay it (= dev.RunGraph(sequential=True))

    with dev.buffer():                 # the same capture as a context manager
        ...ops...

These keyed graphs live in a registry beside the device, so a training step and an evaluation
step can each have one: dev.EnableGraph(True, "eval"), dev.RunGraph(False, "eval") (parallel
replay), dev.ResetGraph("eval"). dev.set_graph_options(memory="dynamic", ...) sets the options of
the graphs created after it (loom.graph_option_fields() lists them). A Model owns its graphs
instead (model.graph()).

A graph, dev.graph(key) or model.graph(), is a loom.Graph: g.summary(), g.stats() (a dict of
loom.graph_stats_fields()), g.options(), g.op_names(), g.dot(), g.write_dot(path),
g.set_profile(True) then after a replay g.trace_json() or g.write_trace(path) (Chrome trace-event
JSON, viewable in Perfetto), g.memory_csv(). dev.memory_stats() gives the allocator's figures.
"""
import contextlib

from . import core, errors
from .core import Device, Graph


def create_cpu_device():
    """The process-wide CPU device."""
    return core.cpu_device()


def create_cuda_device(id=0):
    """CUDA device `id`. Raises loom.DeviceError (a RuntimeError) when loom was built without
    CUDA or no GPU is visible."""
    if isinstance(id, bool) or not isinstance(id, int):
        raise errors.TypeError(f"[cuda] device id must be an int, got {type(id).__name__}")
    if id < 0:
        raise errors.DeviceError(f"[cuda] device id must not be negative, got {id}")
    return core.cuda_device(id)


def create_cuda_gpu():
    """SINGA's name for CUDA device 0 (create_cuda_device(0)): loom.DeviceError without CUDA."""
    return create_cuda_device(0)


def create_cuda_gpu_on(device_id):
    """SINGA's name for CUDA device `device_id` (create_cuda_device(device_id))."""
    return create_cuda_device(device_id)


def get_default_device():
    return core.cpu_device()


def cuda_available():
    """Built with CUDA and at least one GPU visible."""
    return core.cuda_available()


def cuda_setup_error():
    """What the CUDA runtime answered when a driver is installed but no GPU can be used (a setup
    error, not an absent GPU); "" when there is none."""
    return core.cuda_setup_error()


def set_cuda_float32_math(mode):
    """How CUDA computes float32 matrix products and convolutions, process-wide: "tf32" (the
    default: TF32 tensor cores, about 1e-3 relative error on long reductions, as PyTorch's
    convolutions and JAX on GPUs) or "full" (IEEE float32). The first mode comes from the
    LOOM_CUDA_FLOAT32_MATH environment variable when set. A step already recorded as a device
    graph refuses to replay after the mode changed (capture it again). Anything else raises
    loom.ValueError. Harmless without a GPU."""
    if not isinstance(mode, str):
        raise errors.ValueError(f"[cuda_float32_math] expected 'tf32' or 'full', got {type(mode).__name__} {mode!r}")
    core.set_cuda_float32_math(mode)


def cuda_float32_math():
    """The float32 math CUDA kernels use now: "tf32" or "full" (set_cuda_float32_math)."""
    return core.cuda_float32_math()


def num_threads():
    return core.num_threads()


def max_threads():
    """The most CPU threads set_num_threads accepts: 4 x the machine's cores."""
    return core.max_threads()


def set_num_threads(n):
    """CPU kernel threads: an integer from 1 to max_threads(), else loom.ValueError. The
    LOOM_NUM_THREADS environment variable sets the first count (checked the same way)."""
    core.set_num_threads(errors._whole("set_num_threads", "n", n))


# ---- methods added to core.Device ----

_swig_enable_graph = Device.EnableGraph


def EnableGraph(self, on, key="default"):
    """SINGA's: True starts buffering into graph `key` (replacing one of that key); False ends the
    capture in progress, and is a no-op when the device is not buffering at all (SINGA's
    semantics). False while something else captures (a Model's step, a Graph's own capture) is
    a loom.GraphError: that capture is not this call's to end."""
    if not on and not self.buffering():
        return
    _swig_enable_graph(self, bool(on), key)


def SetBufferFlag(self, flag):
    """SINGA's name: True starts buffering into the default graph, False ends the capture."""
    self.EnableGraph(bool(flag))


def ExecBuffOps(self):
    """SINGA's name: replays the default graph in issue order."""
    self.RunGraph(True)


@contextlib.contextmanager
def buffer(self, key="default"):
    """Captures the ops of the block into graph `key`. If the block raises, the capture ends and
    the half-built graph is dropped before the exception propagates."""
    self.EnableGraph(True, key)
    try:
        yield self
    except BaseException:
        try:
            self.EnableGraph(False)
        finally:
            if self.HasGraph(key):
                self.ResetGraph(key)
        raise
    self.EnableGraph(False)


def set_graph_options(self, **options):
    """Options of the graphs EnableGraph creates from now on (the fields it names change)."""
    self._set_graph_options(options)


# SINGA's graph verbosity per device (by address): 0 prints nothing, more prints the plan.
_verbosity = {}


def SetVerbosity(self, verbosity):
    """SINGA's: how much PrintTimeProfiling prints, an int >= 0 (0: nothing). loom's per-op
    timings are LOOM_DEBUG=2 or a graph's set_profile(True) and trace_json()."""
    if isinstance(verbosity, bool) or not isinstance(verbosity, int):
        raise errors.TypeError(f"[SetVerbosity] verbosity must be an int, got {type(verbosity).__name__}")
    if verbosity < 0:
        raise errors.ValueError(f"[SetVerbosity] verbosity must not be negative, got {verbosity}")
    _verbosity[self._address()] = verbosity


def PrintTimeProfiling(self):
    """SINGA's: with verbosity > 0, prints the summary of this device's default graph (when it
    has one); with verbosity 0 (SINGA's default) prints nothing."""
    if _verbosity.get(self._address(), 0) > 0 and self.HasGraph():
        print(self.graph().summary())


def _repr(self):
    return f"Device({self.name()})"


def _eq(self, other):
    return isinstance(other, Device) and self._address() == other._address()


_METHODS = {
    "EnableGraph": EnableGraph,
    "SetBufferFlag": SetBufferFlag,
    "ExecBuffOps": ExecBuffOps,
    "buffer": buffer,
    "set_graph_options": set_graph_options,
    "Sync": lambda self: self.Synchronize(),
    "SetVerbosity": SetVerbosity,
    "PrintTimeProfiling": PrintTimeProfiling,
    "__repr__": _repr,
    "__str__": lambda self: self.name(),
    "__eq__": _eq,
    "__hash__": lambda self: hash(self._address()),
}
for _k, _v in _METHODS.items():
    setattr(Device, _k, _v)
del _k, _v

Graph.__repr__ = lambda self: f"Graph({self.name()!r} on {self.device_name()})"
