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
ranks), errors.
"""
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
