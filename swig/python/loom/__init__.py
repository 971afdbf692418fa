"""loom: a deep-learning training runtime whose define-by-run steps can be captured once as a
graph and replayed from C++ (SINGA's API, graph mode included).

    from loom import device, tensor, autograd, opt, layer, model

    dev = device.create_cpu_device()
    x = tensor.from_numpy(batch, dev)
    with dev.buffer():              # or dev.SetBufferFlag(True) ... dev.SetBufferFlag(False)
        loss = ...                  # ops are recorded, nothing runs
    for _ in range(n):
        dev.ExecBuffOps()           # replays the whole step from C++

Modules: device (devices, buffering, memory statistics, graph dumps), tensor (Tensor, numpy
round trips and zero-copy views), autograd (ops and backward), opt (SGD, Adam), layer (Linear,
Conv2d, BatchNorm2d, ...), model (Model with compile/train_one_batch, save_states/load_states, the model
zoo), module (SINGA 3.0's Module), io (checkpoints, MNIST / CIFAR-10, DataLoader), comm
(communicators for data-parallel jobs; `python3 -m loom.launch -n N script.py` starts the
ranks), errors; and, imported on first use (`loom.clip` after `import loom`), clip,
initializer, data (your own datasets and their loader), trainer, curves, onnx_export,
onnx_import, sonnx and launch.
"""
import importlib as _importlib
import os as _os

from . import _extension
_extension.check(__path__[0])  # Note [One extension per Python]
from . import core
from . import errors
from .errors import CommError, DeviceError, DTypeError, Error, GraphError, InternalError, OnnxError, ShapeError
from . import device, tensor, autograd, opt, layer, model, module, io, comm, precision
from . import singa_wrap  # SINGA's C++ API names; adds the C++ tensor's methods to Tensor
from .precision import autocast
from .tensor import Tensor, bfloat16, bool_, float16, float32, float64, int32, int64, uint8
from .core import Graph, graph_option_fields, graph_stats_fields

# loom.ValueError, loom.IOError and loom.TypeError subclass the built-ins of the same names;
# bound last so that nothing above reads the built-ins through them.
ValueError = errors.ValueError
IOError = errors.IOError
TypeError = errors.TypeError

__version__ = "0.1.0"


# Note [Submodules on demand]
# The modules not imported above (launch must not be: `python -m loom.launch` runs it as
# __main__, and runpy warns when the package imported it first) are imported the first time they
# are named as attributes, so `import loom; loom.clip.global_grad_norm(...)` works as it does for
# the modules above.
def __getattr__(name):
    if not name.startswith("_") and _os.path.isfile(_os.path.join(__path__[0], name + ".py")):
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    modules = [f[:-3] for f in _os.listdir(__path__[0]) if f.endswith(".py") and not f.startswith("_")]
    return sorted(set(globals()) | set(modules))
