"""loom.sonnx: ONNX models in and out of loom, with SINGA's sonnx names (C++ in src/io/onnx).

    model_proto = sonnx.to_onnx([x], net, "net", path="net.onnx")   # export (loom.onnx_export)
    y = net(x); model_proto = sonnx.to_onnx([x], [y])   # SINGA's: outputs of an eager forward

    rep = sonnx.prepare("net.onnx", device="CPU")      # onnx.backend.base.BackendRep (SINGA's SingaRep)
    outputs = rep.run([x_numpy])                        # numpy in, numpy out
    ys = rep.run([x])                                   # loom tensors in, loom tensors out (trainable)

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
           "SingaBackend", "SingaRep", "SONNXModel", "supported_ops", "supported_op_ranges"]


def _loom_device(device):
    """A loom Device from the backend's device string ("CPU", "CUDA", "CUDA:1") or a Device."""
    if device is None:
        return _device.get_default_device()
    if not isinstance(device, str):
        return device
    kind, _, index = device.upper().partition(":")
    if kind == "CPU" and index in ("", "0"):
        return _device.create_cpu_device()
    if kind == "CUDA" and (not index or index.isdigit()):
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


def _node_index(last_layers):
    if isinstance(last_layers, bool) or not isinstance(last_layers, (int, np.integer)):
        raise errors.TypeError(f"[sonnx] last_layers must be a node index (an int), got "
                               f"{type(last_layers).__name__} {last_layers!r}")
    return int(last_layers)


def _array(x, i, infos):
    """Input i as a numpy array; something numpy cannot make one array of is a loom.TypeError
    naming the input."""
    try:
        return np.asarray(x)
    except (ValueError, TypeError) as e:
        name = f" '{infos[i][0]}'" if i < len(infos) else ""
        raise errors.TypeError(f"[onnx] run: input {i}{name} is not an array ({type(x).__name__}: {e})") from None


class LoomBackendRep(_BackendRepBase):
    """A prepared model: run(inputs) takes numpy arrays or loom Tensors in the order of the
    graph's inputs and returns, in the order of its outputs, numpy arrays (ONNX's backend
    interface), or loom Tensors when every input is one (SINGA's SingaRep.run)."""

    def __init__(self, graph, model=None):
        self.graph, self._model, self._truncated = graph, model, {}

    def run(self, inputs, last_layers=None, **kwargs):
        """last_layers (SINGA's): run the nodes up to this index only (negative k: (k + 1) mod the
        node count, as SINGA counts) and return that node's outputs. With loom tensors in, the
        run records autograd history, so the initializers (parameters) train (SINGA's retraining)."""
        graph = self.graph if last_layers is None else self._graph_until(_node_index(last_layers))
        if isinstance(inputs, dict):
            inputs = self._inputs_from_dict(inputs)
        elif not isinstance(inputs, (list, tuple)):
            inputs = [inputs]
        infos = graph.input_infos
        xs = [x if isinstance(x, Tensor) else _from_numpy(_array(x, i, infos), infos[i][1] if i < len(infos) else None,
                                                          graph.device)
              for i, x in enumerate(inputs)]
        if inputs and all(isinstance(x, Tensor) for x in inputs):
            return list(graph.forward(xs))
        with autograd.no_grad():
            ys = graph.forward(xs)
        return [_to_numpy(y) for y in ys]

    def _graph_until(self, last):
        """The graph of the nodes up to index `last` (SINGA's count), its outputs that node's."""
        import onnx
        from onnx import shape_inference
        if self._model is None:
            raise errors.OnnxError("[sonnx] run(last_layers=...) needs the model the backend was prepared from")
        model = onnx.load_model_from_string(model_bytes(self._model))
        nodes = list(model.graph.node)
        k = last if last >= 0 else (last + 1) % len(nodes)
        if not 0 <= k < len(nodes):
            raise errors.OnnxError(f"[sonnx] last_layers {last} is outside the graph's {len(nodes)} nodes")
        if k == len(nodes) - 1:
            return self.graph
        if k not in self._truncated:
            inferred = shape_inference.infer_shapes(model)
            infos = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
            missing = [o for o in nodes[k].output if o not in infos]
            if missing:
                raise errors.OnnxError(f"[sonnx] last_layers {last}: the type of {missing[0]} is not known")
            del model.graph.node[k + 1:]
            del model.graph.output[:]
            model.graph.output.extend(infos[o] for o in nodes[k].output)
            self._truncated[k] = OnnxGraph(model, self.graph.device)
        return self._truncated[k]

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


SingaRep = LoomBackendRep  # SINGA's name for a prepared model


class LoomBackend(_BackendBase):
    """ONNX's backend interface over loom's importer."""

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        return LoomBackendRep(OnnxGraph(model, _loom_device(device)), model)

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


SingaBackend = LoomBackend  # SINGA's name for the backend
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
