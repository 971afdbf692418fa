"""The Python API against the C++ declarations it comes from (Note [Bindings come from the
headers] in swig/loom.i): every registered op that users call is a loom.autograd function of the
same name, and every value of a bound enum, as its header defines it, has its Python counterpart.
"""
import glob
import os
import re

import loom
from loom import autograd, core, device, layer, model, tensor


def test_every_user_facing_op_is_in_autograd():
    ops = core.list_ops()
    assert "matmul" in ops and "relu_grad" in ops
    missing = [op for op in ops if not core.op_internal(op) and not callable(getattr(autograd, op, None))]
    assert not missing, (f"registered ops with no loom.autograd function of the same name: {missing}. Declare "
                         "the op function in core/ops.h under the op's name (Where for 'where'), or, when users "
                         "never call the op itself, say why in its OpDef (def.internal = \"backward of ...\")")


def test_op_functions_are_the_bound_cpp_functions():
    # Not overridden by a SINGA spelling: the C++ function itself, one C call per op, behind the
    # thin wrapper that hangs SINGA's y.creator on the result (Note [Creators of op results]).
    # (transpose is SINGA's transpose(x, perm) in loom.autograd, over core.permute and core.transpose.)
    # (the losses are (1,) views of the C++ losses: Note [Loss shape] in loom/autograd.py.)
    for op in ("matmul", "relu", "add_bias", "tanh", "sin"):
        assert getattr(autograd, op).__wrapped__ is getattr(core, op)


def test_internal_ops_say_why():
    assert core.op_internal("matmul") == ""
    assert core.op_internal("relu_grad") == "backward of relu"
    assert "graph pass" in core.op_internal("matmul_sgd_update")


def _header_enum(name):
    """{item: value} of `enum class name` as a header in src/ defines it (values counted as C++
    does), or None."""
    pattern = r"enum\s+class\s+" + name + r"\s*(?::\s*\w+\s*)?\{([^}]*)\}"
    for path in glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "src", "**", "*.h"), recursive=True):
        m = re.search(pattern, re.sub(r"//[^\n]*", "", open(path).read()))
        if m:
            items, value = {}, -1
            for item in filter(None, (i.strip() for i in m.group(1).split(","))):
                key, _, init = (s.strip() for s in item.partition("="))
                value = int(init, 0) if init else value + 1
                items[key] = value
            return items
    return None


def _bound_enums():
    """{name: {item: value}} for every enum loom.core binds (SWIG's Name_kItem constants)."""
    enums = {}
    for key, value in vars(core).items():
        m = re.fullmatch(r"([A-Z]\w*?)_(k[A-Z0-9]\w*)", key)
        if m and isinstance(value, int):
            enums.setdefault(m.group(1), {})[m.group(2)] = value
    return enums


def _undercase(name):
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _dtype_counterpart(item, value):
    name = core.dtype_name(value)
    return (name in tensor._ENUM and tensor.dtype_name(name) == name
            and name in (getattr(loom, name, None), getattr(loom, name + "_", None)))


# What stands for each enum value in the Python API.
COUNTERPARTS = {
    "DType": _dtype_counterpart,  # a dtype name: loom.float32 == "float32", tensor.dtype_name accepts it
    "DeviceType": lambda item, value: callable(getattr(device, f"create_{item[1:].lower()}_device", None)),
    "Act": lambda item, value: isinstance(getattr(layer, item[1:], None), type)
    and issubclass(getattr(layer, item[1:]), layer.NativeLayer),  # kReLU: layer.ReLU
    "LossKind": lambda item, value: model.NativeModel._LOSSES.get(_undercase(item[1:])) == value,
    "TextSplit": lambda item, value: loom.io._SPLITS.get(item[1:].lower()) == value,  # kTrain: "train"
}


def test_bound_enums_match_their_headers():
    bound = _bound_enums()
    assert {"DType", "DeviceType", "Act", "LossKind"} <= set(bound)
    for name, items in bound.items():
        header = _header_enum(name)
        assert header is not None, f"loom.core binds enum {name}, but no header in src/ defines `enum class {name}`"
        assert items == header, f"enum {name}: loom.core has {items}, its header {header}"


def test_every_enum_value_has_a_python_counterpart():
    for name, items in _bound_enums().items():
        assert name in COUNTERPARTS, (f"loom.core binds enum {name}: say in test_bindings.py what its values "
                                      "are in the Python API")
        missing = [item for item, value in items.items() if not COUNTERPARTS[name](item, value)]
        assert not missing, f"{name} values with no Python counterpart: {missing}"
