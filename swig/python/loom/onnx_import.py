"""loom.onnx_import: ONNX models in, as loom ops (C++: src/io/onnx/import.h).

    g = onnx_import.import_model("net.onnx", device)     # a path, bytes or an onnx.ModelProto
    y, = g.forward([x])                                   # loom Tensors in, loom Tensors out
    g.parameters()                                        # {name: Tensor}: the float initializers

Everything that can be checked without running is checked at import: an unsupported op, opset,
attribute or dtype, or a malformed file, is a loom.OnnxError naming the node ("[onnx] node
'conv1' (Conv): ..."). `supported_ops()` is the importer's registry (never a hand-typed list).
loom.sonnx builds ONNX's backend interface and SONNXModel on this module.
"""
import os
import stat

from . import core, errors
from .tensor import Tensor, _check_device

__all__ = ["import_model", "import_problem", "supported_ops", "supported_op_ranges", "OnnxGraph", "model_bytes",
           "host_value_limit", "set_host_value_limit"]


def model_bytes(model):
    """The serialized ModelProto of `model`: a path, bytes, or an object with SerializeToString
    (onnx.ModelProto)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        return _read_model_file(os.fspath(model))
    if hasattr(model, "SerializeToString"):
        return model.SerializeToString()
    raise errors.TypeError(f"[onnx] expected a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


# A serialized protobuf message is at most 2 GiB (C++'s ImportOnnx reads up to the same limit).
_MAX_MODEL_BYTES = (1 << 31) - 1


def _read_model_file(path):
    """The bytes of the regular file at `path`. A FIFO, a device or a directory is a loom.IOError
    before anything is read (reading a FIFO waits for a writer, for ever), and so is a file over
    protobuf's 2 GiB (a sparse file of many GiB would be read whole first); the open does not
    wait either, in case the path changes kind in between."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise errors.IOError(f"[onnx] cannot open '{path}': {e.strerror}") from None
    except ValueError:  # a NUL byte in the path
        raise errors.ValueError(f"[onnx] the path {path!r} contains a NUL byte") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = " (a FIFO)" if stat.S_ISFIFO(st.st_mode) else " (a directory)" if stat.S_ISDIR(st.st_mode) else ""
            raise errors.IOError(f"[onnx] cannot read '{path}': not a regular file{kind}")
        if st.st_size > _MAX_MODEL_BYTES:
            raise errors.IOError(f"[onnx] cannot read '{path}': it is {st.st_size} bytes, more than the "
                                 f"{_MAX_MODEL_BYTES} an ONNX model (a protobuf message) can hold")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            fd = -1  # closed by f
            return f.read()
    finally:
        if fd >= 0:
            os.close(fd)


def supported_op_ranges():
    """[(op_type, since_opset, until_opset)] from the importer's registry."""
    return [tuple(r) for r in core.supported_onnx_op_range_list()]


def supported_ops():
    """The ONNX op types the importer implements (sorted), from its registry."""
    return sorted({r[0] for r in supported_op_ranges()})


def host_value_limit():
    """The most values one node builds on the host (index patterns, Range, NonZero's indices):
    2**26 unless set_host_value_limit lowered it."""
    return core.onnx_host_value_limit()


def set_host_value_limit(n):
    """Lowers (or restores, up to 2**26) the host-value limit for every model this process runs:
    a node asking for more is a loom.OnnxError naming it (for models you do not trust). A value
    outside [1, 2**26] is a loom.ValueError."""
    core.set_onnx_host_value_limit(int(n))


def import_problem(model, device=None):
    """Why `model` cannot be imported (the loom.OnnxError's message), or "" when it can."""
    return core.onnx_import_problem_bytes(model_bytes(model), _check_device(device))


class OnnxGraph:
    """An imported ONNX graph: forward runs it with loom ops (eagerly, or captured in a graph)."""

    def __init__(self, model, device=None):
        self.device = _check_device(device)
        self._impl = core.import_onnx_bytes(model_bytes(model), self.device)
        # One Python handle per initializer, kept: optimizers key their state by the tensor.
        self._initializers = [(name, t) for name, t in self._impl.initializers()]
        self.input_infos = [tuple(i) for i in self._impl.input_infos()]
        self.output_infos = [tuple(o) for o in self._impl.output_infos()]

    @property
    def input_names(self):
        return [i[0] for i in self.input_infos]

    @property
    def output_names(self):
        return [o[0] for o in self.output_infos]

    @property
    def opset(self):
        return self._impl.opset()

    def initializers(self):
        """{name: Tensor}, every initializer in file order."""
        return dict(self._initializers)

    def parameters(self):
        """{name: Tensor}, the trainable (float) initializers; BatchNormalization's running
        statistics are state, not parameters."""
        return {n: t for n, t in self._initializers if t.requires_grad}

    def states(self):
        """{name: Tensor}, the float initializers that do not train (running statistics)."""
        return {n: t for n, t in self._initializers if not t.requires_grad and t.dtype in ("float32", "float64")}

    def forward(self, inputs):
        """Runs the graph on loom Tensors (in the order of input_names); a list of Tensors."""
        for i, x in enumerate(inputs):
            if not isinstance(x, Tensor):
                raise errors.TypeError(f"[onnx] forward: input {i} must be a loom Tensor, got {type(x).__name__}")
        return list(self._impl.forward(list(inputs)))


def import_model(model, device=None):
    """Imports `model` (a path, bytes or an onnx.ModelProto) onto `device` (default: the CPU)."""
    return OnnxGraph(model, device)
