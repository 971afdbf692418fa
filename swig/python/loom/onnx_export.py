"""loom.onnx_export: a model or a captured graph written as ONNX (SINGA's sonnx.to_onnx).

    from loom import onnx_export
    x = tensor.from_numpy(batch)                        # an input batch (values unused)
    proto = onnx_export.to_onnx([x], net, "resnet18", path="resnet18.onnx", dynamic_batch=True)

`outputs` is what to export, in either of two forms:

* a model, layer or function (anything callable): loom calls it on `inputs` once while the device
  captures, in eval mode (the training flag is restored afterwards) and without gradients, and
  exports what it returns. Parameters and states keep their names ("layer1.0.conv1.weight").
* output tensors computed from `inputs` inside a capture, SINGA's spelling:

      with dev.buffer():                                # or dev.EnableGraph(True) ... (False)
          y = net(x)
      onnx_export.to_onnx([x], [y], "net")

  The graph is the device's default one (or pass graph=, e.g. dev.graph(key) or model.graph()).
* output tensors computed eagerly from `inputs` (SINGA's other spelling: `y = net(x)` then
  to_onnx([x], [y])), with autograd.training set, as SINGA's tests do: loom walks the creators
  that autograd hung on them (y.creator) and runs their ops again while the device captures, so
  the model is the one the captured path exports (Note [Exporting eager outputs]).

The model is ONNX IR version 8 with opset 17 (src/io/onnx/export.h): inputs named `input_names`
(else each tensor's name, else input_0, ...), parameters as initializers, outputs output_0, ...;
dynamic_batch=True makes dimension 0 of every input and output the symbolic "batch". An op
without an ONNX counterpart is a loom.OnnxError naming the op and its node, raised before
anything is written; `path` is written atomically. Returns the onnx.ModelProto when the onnx
package is installed (python3-onnx), else the serialized model as bytes.
"""
from . import autograd, core, errors
from .layer import Layer, uninitialized
from .onnx_eager import recorded, replay_creators
from .tensor import Tensor, from_numpy

__all__ = ["to_onnx", "exportable_ops"]


def exportable_ops():
    """[(loom op, what it becomes in ONNX)] for every op the exporter maps."""
    return core.onnx_exportable_ops()


def _tensors(values, what):
    if isinstance(values, (Tensor, core.Tensor)) or not isinstance(values, (list, tuple)):
        values = [values]
    out = []
    for i, v in enumerate(values):
        if isinstance(v, core.Tensor):
            out.append(v)
        elif hasattr(v, "__array__"):
            out.append(from_numpy(v))
        else:
            raise errors.TypeError(f"[onnx] {what} {i} is a {type(v).__name__}, not a loom Tensor")
    return out


def _names(names, count, what):
    if names is None:
        return []
    names = [str(n) for n in names]
    if len(names) != count:
        raise errors.OnnxError(f"[onnx] {len(names)} {what} names for {count} {what}s")
    return names


def _net_of(model):
    """The layer to call for a NativeModel (its C++ Forward has graphs of its own); else model."""
    net = getattr(model, "net", None)
    if net is not None and isinstance(getattr(model, "_impl", None), core.Model):
        return net
    return model


def _named_states(model):
    named = {}
    for getter in ("get_states", "get_params"):
        fn = getattr(model, getter, None)
        if callable(fn):
            for name, t in fn().items():
                named.setdefault(name, t)
    return list(named.items())


def _capture(fn, inputs, model_name):
    """Calls fn(*inputs) in eval mode without gradients while the device captures; returns the
    graph and the output tensors."""
    was_training, global_training = getattr(fn, "training", None), autograd.training  # Model.train sets both
    if was_training is not None and callable(getattr(fn, "train", None)):
        fn.train(False)
    graph = core.new_graph(inputs[0].device, f"{model_name}.onnx_export", None)
    try:
        if isinstance(fn, Layer) and uninitialized(fn):
            # Layers sized by their first input (Linear(out)) make their parameters in one eager
            # pass first, as Model.compile does: a capture may not create parameters.
            with autograd.no_grad():
                fn(*inputs)
        with autograd.no_grad():
            graph.begin_capture()
            try:
                result = fn(*inputs)
            except BaseException:
                graph.abort_capture()
                raise
            graph.end_capture()
    finally:
        if was_training is not None and callable(getattr(fn, "train", None)):
            fn.train(was_training)
        autograd.training = global_training
    if isinstance(result, dict):
        result = list(result.values())
    return graph, _tensors(result, "output")


def to_onnx(inputs, outputs, model_name="loom", path=None, dynamic_batch=False, *, input_names=None,
            output_names=None, graph=None):
    """Exports `outputs` (a callable model, or tensors computed from `inputs` in a capture) as an
    ONNX model; see the module's doc. Returns an onnx.ModelProto, or bytes without onnx."""
    if isinstance(inputs, (list, tuple)):  # SINGA's scripts list attribute values (clip's bounds, a shape)
        inputs = [v for v in inputs if not isinstance(v, (int, float, tuple, list))]  # among the inputs
    inputs = _tensors(inputs, "input")
    if not inputs:
        raise errors.OnnxError("[onnx] to_onnx needs at least one input tensor")
    named, default_graph = [], False
    if callable(outputs) and not isinstance(outputs, (Tensor, core.Tensor, list, tuple)):
        model = _net_of(outputs)
        graph, outs = _capture(model, inputs, model_name)
        named = _named_states(model)
    else:
        outs = _tensors(outputs, "output")
        if graph is None:
            dev = inputs[0].device
            if dev.HasGraph("default"):
                graph, default_graph = dev.graph("default"), True
            elif recorded(outs):
                graph, outs = replay_creators(inputs, outs, model_name)  # Note [Exporting eager outputs]
            else:
                raise errors.OnnxError(
                    "[onnx] the outputs were neither computed in a captured graph nor recorded by autograd "
                    "(autograd.training was False): pass the model itself (to_onnx(inputs, model)), compute them "
                    "inside `with dev.buffer():` (or pass graph=), or compute them with autograd.training = True")
    def export(graph, outs):
        return core.onnx_export_graph(graph, inputs, outs, str(model_name), bool(dynamic_batch),
                                      _names(input_names, len(inputs), "input"),
                                      _names(output_names, len(outs), "output"), named,
                                      "" if path is None else str(path))

    try:
        data = export(graph, outs)
    except errors.OnnxError as e:
        # The device's default graph was taken, but these outputs were computed eagerly (after it).
        if not (default_graph and "is not computed by graph" in str(e) and recorded(outs)):
            raise
        data = export(*replay_creators(inputs, outs, model_name))
    try:
        import onnx
    except ImportError:
        return data
    return onnx.load_model_from_string(data)
