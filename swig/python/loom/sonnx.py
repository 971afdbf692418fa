"""loom.sonnx: ONNX models in and out of loom, with SINGA's sonnx names (C++ in src/io/onnx).

    model_proto = sonnx.to_onnx([x], net, "net", path="net.onnx")   # export (loom.onnx_export)

    rep = sonnx.prepare("net.onnx", device="CPU")      # onnx.backend.base.BackendRep
    outputs = rep.run([x_numpy])                        # numpy in, numpy out

    class Net(sonnx.SONNXModel):                        # a loom model.Model
        def train_one_batch(self, x, y):
            out = self.forward(x)
            loss = autograd.softmax_cross_entropy(out, y)
            self.optimizer(loss)
            return out, loss
    net = Net(onnx.load("net.onnx"))                    # initializers become trainable parameters
    net.set_optimizer(opt.SGD(lr=0.01)); net.compile([x], is_train=True, use_graph=True)

`LoomBackend` implements onnx.backend.base.Backend, so ONNX's backend test runner
(onnx.backend.test.BackendTest) drives it; `is_compatible` says whether loom's importer takes a
model (loom.onnx_import.import_problem gives the reason when it does not). Errors are
loom.OnnxError, naming the node.
"""
from collections import OrderedDict

import numpy as np

from . import autograd, device as _device, errors
from .model import Model
from .onnx_export import to_onnx  # noqa: F401  (re-exported: SINGA's sonnx.to_onnx)
from .onnx_import import OnnxGraph, import_problem, model_bytes, supported_op_ranges, supported_ops
from .tensor import Tensor, from_numpy

try:  # the onnx package is optional: without it the classes below still work (no runner)
    from onnx.backend.base import Backend as _BackendBase
    from onnx.backend.base import BackendRep as _BackendRepBase
except ImportError:  # pragma: no cover - depends on the machine
    _BackendBase, _BackendRepBase = object, object

__all__ = ["to_onnx", "prepare", "run_model", "supports_device", "is_compatible", "LoomBackend", "LoomBackendRep",
           "SONNXModel", "supported_ops", "supported_op_ranges"]


def _loom_device(device):
    """A loom Device from the backend's device string ("CPU", "CUDA", "CUDA:1") or a Device."""
    if device is None:
        return _device.get_default_device()
    if not isinstance(device, str):
        return device
    kind, _, index = device.upper().partition(":")
    if kind == "CPU":
        return _device.create_cpu_device()
    if kind == "CUDA":
        return _device.create_cuda_device(int(index or 0))
    raise errors.ValueError(f"[sonnx] unknown device '{device}' (CPU or CUDA[:i])")


# Note [bfloat16 through numpy]
# numpy has no bfloat16, so ONNX (and its test data) carries
# bfloat16 values as their uint16 bit patterns. Such an array for a bfloat16 input becomes a loom
# bfloat16 tensor (the bits are the top half of a float32), and a bfloat16 output returns as bits.
def _from_numpy(arr, dtype, device):
    if dtype == "bfloat16" and arr.dtype == np.uint16:
        wide = (arr.astype(np.uint32) << 16).view(np.float32)
        return from_numpy(wide, device).astype("bfloat16")
    return from_numpy(arr, device)


def _to_numpy(t):
    if t.dtype == "bfloat16":
        return (t.astype("float32").to_numpy().view(np.uint32) >> 16).astype(np.uint16)
    return t.to_numpy()


class LoomBackendRep(_BackendRepBase):
    """A prepared model: run(inputs) takes numpy arrays (or loom Tensors) in the order of the
    graph's inputs and returns numpy arrays in the order of its outputs."""

    def __init__(self, graph):
        self.graph = graph

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            inputs = self._inputs_from_dict(inputs)
        elif not isinstance(inputs, (list, tuple)):
            inputs = [inputs]
        infos = self.graph.input_infos
        xs = [x if isinstance(x, Tensor) else _from_numpy(np.asarray(x), infos[i][1] if i < len(infos) else None,
                                                          self.graph.device)
              for i, x in enumerate(inputs)]
        with autograd.no_grad():
            ys = self.graph.forward(xs)
        return [_to_numpy(y) for y in ys]


    def _inputs_from_dict(self, given):
        """The graph's inputs in order from {name: array}. Forward binds by position, so a missing
        name before a given one is an error naming it (it used to shift the next input into its
        place); missing trailing inputs are left out, as with a list. An unknown name is an error."""
        names = self.graph.input_names
        unknown = [k for k in given if k not in names]
        if unknown:
            raise errors.ValueError(f"[onnx] run: {unknown[0]!r} is not an input of the graph (inputs: "
                                    f"{', '.join(names)})")
        n = max((names.index(k) + 1 for k in given), default=0)
        missing = [name for name in names[:n] if name not in given]
        if missing:
            raise errors.ValueError(f"[onnx] run: input '{missing[0]}' is missing from the dict, which gives "
                                    f"{', '.join(repr(k) for k in given)} (inputs: {', '.join(names)})")
        return [given[name] for name in names[:n]]


class LoomBackend(_BackendBase):
    """ONNX's backend interface over loom's importer."""

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        return LoomBackendRep(OnnxGraph(model, _loom_device(device)))

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        return import_problem(model, _device.create_cpu_device()) == ""

    @classmethod
    def supports_device(cls, device):
        kind = device.upper().partition(":")[0] if isinstance(device, str) else ""
        return kind == "CPU" or (kind == "CUDA" and _device.cuda_available())


prepare = LoomBackend.prepare
run_model = LoomBackend.run_model
is_compatible = LoomBackend.is_compatible
supports_device = LoomBackend.supports_device


class SONNXModel(Model):
    """An imported ONNX network as a loom model.Model: the float initializers are its trainable
    parameters (by their ONNX names), forward runs the graph with loom ops, so the network
    fine-tunes eagerly or as a captured graph (compile(..., use_graph=True)). Subclass it and
    write train_one_batch, as for any Model. BatchNormalization keeps using its running
    statistics and Dropout is the identity (an ONNX file describes inference)."""

    def __init__(self, onnx_model, device=None):
        super().__init__()
        self.onnx_graph = OnnxGraph(onnx_model, _loom_device(device))

    def forward(self, *xs):
        ys = self.onnx_graph.forward(list(xs))
        return ys[0] if len(ys) == 1 else tuple(ys)

    def get_params(self):
        return OrderedDict(self.onnx_graph.parameters())

    def get_states(self):
        out = OrderedDict(self.onnx_graph.parameters())
        out.update(self.onnx_graph.states())
        return out
