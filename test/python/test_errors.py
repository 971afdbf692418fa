"""Errors cross the boundary as Python exceptions: loom's own classes, each also a standard
exception (ValueError, TypeError, RuntimeError, OSError), raised from functions, methods and
constructors alike; no C++ exception ever ends the interpreter."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import loom
from loom import autograd, core, device, layer, model, opt, tensor

from conftest import python_env


def test_hierarchy():
    pairs = {loom.ShapeError: ValueError, loom.ValueError: ValueError, loom.DTypeError: TypeError,
             loom.DeviceError: RuntimeError, loom.GraphError: RuntimeError, loom.InternalError: RuntimeError,
             loom.IOError: OSError, loom.TypeError: TypeError}
    for cls, builtin in pairs.items():
        assert issubclass(cls, loom.Error) and issubclass(cls, builtin), cls
        assert cls.__module__ == "loom" and cls.__name__ in str(cls)
    assert loom.errors.Error is loom.Error and issubclass(loom.Error, Exception)
    assert loom.ValueError is not ValueError and loom.IOError is not OSError and loom.TypeError is not TypeError


@pytest.mark.parametrize("make,exc", [
    (lambda: layer.Dropout(1.5), loom.ValueError),
    (lambda: layer.Linear(0, 3), loom.ValueError),
    (lambda: opt.SGD(lr=-1.0), loom.ValueError),
    (lambda: opt.SGD(lr=0.1, momentum=-0.5), loom.ValueError),
    (lambda: opt.SGD(lr=0.1, nesterov=True), loom.ValueError),
    (lambda: opt.Adam(lr=-1.0), loom.ValueError),
    (lambda: tensor.Tensor((2,), dtype="complex64"), loom.DTypeError),
    (lambda: core.PyStep(device.create_cpu_device(), 42, "s", True, True), loom.ValueError),
    (lambda: layer.Conv2d(3, 4, 3, groups=2), loom.ValueError),
    (lambda: layer.BatchNorm2d(0), loom.ValueError),
])
def test_constructors_raise(make, exc):
    with pytest.raises(exc):
        make()


def test_each_kind_from_cpp(dev, tmp_path):
    a = tensor.zeros((2, 3), dev)
    with pytest.raises(loom.ShapeError):          # ValueError
        autograd.matmul(a, a)
    with pytest.raises(loom.ValueError):          # ValueError
        autograd.softmax(a, 5)
    with pytest.raises(loom.DTypeError):          # TypeError
        autograd.add(a, tensor.zeros((2, 3), dev, "int32"))
    if not device.cuda_available():
        with pytest.raises(loom.DeviceError):     # RuntimeError
            device.create_cuda_device(0)
    with pytest.raises(loom.GraphError):          # RuntimeError
        dev.ExecBuffOps()
    with dev.buffer():
        autograd.relu(a)
    with pytest.raises(loom.IOError):             # OSError
        dev.graph().write_dot(str(tmp_path / "missing" / "g.dot"))


def test_swig_argument_errors_are_type_errors(dev):
    with pytest.raises(TypeError):
        autograd.relu("x")
    with pytest.raises(TypeError):
        autograd.softmax(tensor.zeros((2,), dev), "last")
    with pytest.raises(TypeError):
        autograd.cat([tensor.zeros((2,), dev), 3])
    with pytest.raises(TypeError):
        core.call_op("relu", [tensor.zeros((2,), dev)], ["not", "a", "dict"])
    with pytest.raises(TypeError):
        dev.SetRandSeed("seed")


def test_step_function_result_must_be_tensors(dev):
    step = core.PyStep(dev, lambda xs: [1, 2], "bad", True, True)
    with pytest.raises(TypeError, match="Tensors"):
        step.run([tensor.zeros((2,), dev)])
    assert not dev.buffering()
    step2 = core.PyStep(dev, lambda xs: [xs[0] * 2.0], "good", True, True)
    (y,) = step2.run([tensor.ones((2,), dev)])
    assert y.to_numpy().tolist() == [2.0, 2.0]


def test_creating_layers_while_capturing_is_refused(dev):
    with pytest.raises(loom.GraphError, match="before the capture"):
        with dev.buffer():
            layer.Linear(2, 2, device=dev)
    assert not dev.buffering()


def test_cpp_model_errors_are_python_errors(dev):
    m = model.NativeModel(model.mlp([3, 2], device=dev), opt.SGD(0.1))
    m.compile([tensor.zeros((4, 3), dev)], use_graph=True)
    with pytest.raises(loom.ShapeError):
        m.train_one_batch(np.zeros((4, 3), np.float32), np.zeros((5,), np.int32))
    m.train_one_batch(np.zeros((4, 3), np.float32), np.zeros((4,), np.int32))
    m.train_one_batch(np.zeros((2, 3), np.float32), np.zeros((2,), np.int32))  # another shape: recaptured
    m.set_recapture(False)  # as asked, another batch shape is then an error naming both
    m.train_one_batch(np.zeros((4, 3), np.float32), np.zeros((4,), np.int32))
    with pytest.raises(loom.GraphError, match="captured for inputs"):
        m.train_one_batch(np.zeros((2, 3), np.float32), np.zeros((2,), np.int32))


def test_no_error_terminates_the_interpreter(root):
    """Many failing calls in a fresh interpreter; it must reach the end and exit normally."""
    script = textwrap.dedent("""
        import numpy as np, loom
        from loom import autograd, device, layer, model, opt, tensor
        dev = device.create_cpu_device()
        calls = [
            lambda: device.create_cuda_device(3),
            lambda: autograd.matmul(tensor.zeros((2, 3)), tensor.zeros((2, 3))),
            lambda: layer.Dropout(2.0),
            lambda: opt.SGD(-1),
            lambda: dev.ExecBuffOps(),
            lambda: dev.graph("nope"),  # (SetBufferFlag(False) with no capture is a no-op: SINGA)
            lambda: tensor.Tensor((2,)).item(),
            lambda: tensor.zeros((2,)).item(),
            lambda: np.asarray(tensor.Tensor((3,))),
            lambda: tensor.zeros((2,)).copy_from_numpy(np.zeros(3)),
            lambda: model.NativeModel(model.mlp([3, 2]), opt.SGD(0.1)).train_one_batch(np.zeros((1, 3), np.float32),
                                                                                       np.zeros(1, np.int32)),
            lambda: autograd.call("nope", []),
            lambda: autograd.reshape(tensor.zeros((2, 3)), (4, 4)),
        ]
        caught = 0
        for c in calls:
            try:
                c()
            except Exception as e:
                caught += 1
        print("caught", caught, "of", len(calls))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=python_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "caught 13 of 13"


def test_dropping_graph_models_while_capturing_does_not_end_the_process(root):
    """Note [Dropping a captured step during a capture] in swig/nn.i."""
    script = textwrap.dedent("""
        import numpy as np
        from loom import autograd, device, layer, model, opt, tensor
        dev = device.create_cpu_device()
        native = model.NativeModel(model.mlp([3, 2], device=dev), opt.SGD(0.1))
        native.compile([tensor.zeros((4, 3), dev)], use_graph=True)
        native.train_one_batch(np.zeros((4, 3), np.float32), np.zeros(4, np.int32))

        class M(model.Model):
            def __init__(self):
                super().__init__()
                self.fc = layer.Linear(3, 2, device=dev)
            def forward(self, x):
                return self.fc(x)
            def train_one_batch(self, x, y):
                loss = autograd.softmax_cross_entropy(self.forward(x), y)
                self.optimizer(loss)
                return loss

        py = M()
        py.set_optimizer(opt.SGD(0.1))
        py.compile([tensor.zeros((4, 3), dev)], use_graph=True)
        py.train_one_batch(np.zeros((4, 3), np.float32), np.zeros(4, np.int32))
        with dev.buffer():
            del native, py
            autograd.relu(tensor.zeros((2,), dev))
        dev.ExecBuffOps()
        print("survived")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=python_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "survived"


# ---- every user mistake is a loom.Error, with loom's message alone (issue 16, class 8) ----

def _no_optimizer_model(use_graph):
    dev = device.create_cpu_device()

    class M(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(3, 2, device=dev)

        def forward(self, x):
            return self.fc(x)

        def train_one_batch(self, x, y):
            loss = autograd.softmax_cross_entropy(self.forward(x), y)
            self.optimizer(loss)
            return loss

    m = M()
    m.compile([tensor.zeros((4, 3), dev)], use_graph=use_graph)
    return lambda: m.train_one_batch(np.zeros((4, 3), np.float32), np.zeros(4, np.int32))


def _f32():
    return tensor.ones((2, 3))


def _i32():
    return tensor.ones((2, 3), dtype="int32")


NAN = float("nan")
# (id, call, loom class, text the message must contain). Overloaded wrappers (functions with
# default arguments) used to append SWIG's "Wrong number or type of arguments" to loom's message.
USER_MISTAKES = [
    ("sum dtype", lambda: autograd.sum(tensor.ones((2,), dtype="bool")), loom.DTypeError, "[sum] input must be float"),
    ("mean dtype", lambda: autograd.mean(_i32()), loom.DTypeError, "[mean] input must be float32 or float64, got int32"),
    ("max dtype", lambda: autograd.max(_i32(), axis=0), loom.DTypeError, "[max] input must be float"),
    ("softmax dtype", lambda: autograd.softmax(_i32()), loom.DTypeError, "[softmax] input must be float"),
    ("log_softmax dtype", lambda: autograd.log_softmax(_i32(), 0), loom.DTypeError, "[log_softmax] input must be"),
    ("leaky_relu dtype", lambda: autograd.leaky_relu(_i32()), loom.DTypeError, "[leaky_relu] input must be float"),
    ("dropout dtype", lambda: autograd.dropout(_i32(), 0.5), loom.DTypeError, "[dropout] input must be float"),
    ("apply dtype", lambda: opt.SGD(0.1).apply(0, tensor.ones((2, 3), dtype="float64"), _f32()), loom.DTypeError,
     "[sgd_update] dtypes differ"),
    ("apply shape", lambda: opt.Adam().apply(0, tensor.ones((3,)), _f32()), loom.ShapeError, "[adam] parameter"),
    # attributes of the wrong type or missing (call_op passes any value)
    ("attribute type", lambda: core.call_op("softmax", [_f32()], {"axis": "x"}), loom.ValueError,
     "[softmax] attribute 'axis' must be an int, got a str"),
    ("attribute type kw", lambda: autograd.call("add_scalar", [_f32()], s="x"), loom.ValueError,
     "[add_scalar] attribute 's' must be a number, got a str"),
    ("attribute list", lambda: autograd.call("reshape", [_f32()], shape=1.5), loom.ValueError,
     "[reshape] attribute 'shape' must be a list of ints, got a float"),
    ("attribute missing", lambda: core.call_op("reshape", [_f32()], {}), loom.ValueError,
     "[reshape] needs attribute 'shape' (a list of ints)"),
    # an attribute the op does not declare (Note [Declared attributes]): a misspelt keyword
    ("attribute misspelt", lambda: core.call_op("softmax", [_f32()], {"axsi": 0}), loom.ValueError,
     "[softmax] has no attribute 'axsi'; its attributes: axis (an int)"),
    ("attribute misspelt kw", lambda: autograd.call("leaky_relu", [_f32()], slop=0.5), loom.ValueError,
     "[leaky_relu] has no attribute 'slop'; its attributes: slope (a number)"),
    ("attribute of none", lambda: autograd.call("exp", [_f32()], slope=0.5), loom.ValueError,
     "[exp] has no attribute 'slope'; it takes none"),
    # NaN and infinities are not "negative"
    ("std nan", lambda: tensor.gaussian((2,), 0.0, NAN), loom.ValueError, "standard deviation nan: must be a finite"),
    ("std inf", lambda: tensor.gaussian((2,), 0.0, float("inf")), loom.ValueError, "must be a finite number"),
    ("mean nan", lambda: tensor.gaussian((2,), NAN, 1.0), loom.ValueError, "[normal] mean nan: must be a finite"),
    ("uniform nan", lambda: tensor.uniform((2,), NAN, 1.0), loom.ValueError, "must be finite numbers"),
    ("lr nan", lambda: opt.SGD(NAN), loom.ValueError, "learning rate nan: must be a finite number"),
    ("adam lr nan", lambda: opt.Adam(NAN), loom.ValueError, "learning rate nan: must be a finite number"),
    ("set lr nan", lambda: opt.SGD(0.1).set_learning_rate(NAN), loom.ValueError, "must be a finite number"),
    ("momentum nan", lambda: opt.SGD(0.1, momentum=NAN), loom.ValueError, "momentum nan: must be a finite"),
    ("eps nan", lambda: opt.Adam(epsilon=NAN), loom.ValueError, "eps nan: must be a finite number"),
    # None or another type where a tensor goes
    ("None tensor", lambda: autograd.relu(None), loom.ValueError, "[relu] argument 1 is None, not a Tensor"),
    ("None rhs", lambda: autograd.matmul(_f32(), None), loom.ValueError, "[matmul] argument 2 is None, not a Tensor"),
    ("None layer input", lambda: layer.Linear(3, 2)(None), loom.ValueError, "is None, not a Tensor"),
    ("None number", lambda: autograd.add(_f32(), None), loom.TypeError, "[add] expects a Tensor or a number"),
    ("str tensor", lambda: autograd.relu("x"), loom.TypeError, "[relu] argument 1 must be of type Tensor"),
    ("list item", lambda: autograd.cat([_f32(), 3]), loom.TypeError, "[cat] xs[1] must be a loom Tensor, got int 3"),
    ("axes type", lambda: autograd.sum(_f32(), axis="x"), loom.TypeError, "[sum] axis must be an int or a sequence of ints"),
    ("int range", lambda: autograd.sum(_f32(), axis=2 ** 70), loom.ValueError, "out of the range of int64"),
    ("int arg range", lambda: autograd.softmax(_f32(), 2 ** 70), loom.ValueError,
     "[softmax] argument 2 is out of the range of int64_t"),
    ("not an optimizer", lambda: model.NativeModel(model.mlp([3, 2]), "sgd"), loom.TypeError, "[optimizer]"),
    # a Model trained without an optimizer
    ("no optimizer", lambda: _no_optimizer_model(False)(), loom.ValueError, "call model.set_optimizer"),
    ("no optimizer graph", lambda: _no_optimizer_model(True)(), loom.ValueError, "call model.set_optimizer"),
    # Sizes that overflow (Note [Checked sizes]): SIGFPE, segfaults and 0-byte weights before.
    ("zeros 2^61+1", lambda: tensor.zeros((2**61 + 1,)), loom.ShapeError, "[tensor] shape (2305843009213693953,) is too large"),
    ("zeros 2^31 x 2^31", lambda: tensor.zeros((2**31, 2**31)), loom.ShapeError, "too large"),
    ("ones 2^32 x 2^32", lambda: tensor.ones((2**32, 2**32)), loom.ShapeError, "too large"),
    ("Linear 2^32", lambda: layer.Linear(2**32, 2**32), loom.ShapeError, "too large"),
    ("Embedding 2^33", lambda: layer.Embedding(2**33, 2**31), loom.ShapeError, "too large"),
    ("leaky_relu nan slope", lambda: autograd.leaky_relu(_f32(), NAN), loom.ValueError, "slope must be a finite number"),
    ("cross-entropy zero rows", lambda: autograd.softmax_cross_entropy(tensor.zeros((0, 3)), tensor.zeros((0,), dtype="int32")),
     loom.ShapeError, "have no rows"),
    # Found by tools/probe.py: Python's ValueError from int() and float(), numpy's MemoryError.
    ("set_num_threads str", lambda: device.set_num_threads("x"), loom.TypeError, "[set_num_threads] n must be an int"),
    ("Adam epsilon str", lambda: opt.Adam(epsilon="x"), loom.TypeError, "[Adam] epsilon must be a number, got str"),
    # Note [None is not self]: SIGSEGV before (found by a sweep of the public API for issue 36).
    ("method on None", lambda: tensor.copy_from_numpy(None, np.ones(2)), loom.TypeError,
     "[Tensor__copy_from_exact] called on None, not on a loom::Tensor"),
    ("Device method on None", lambda: core.Device.name(None), loom.TypeError, "[Device_name] called on None"),
    ("to_numpy 256 TiB", lambda: tensor.Tensor((2 ** 26, 2 ** 20)).to_numpy(), loom.DeviceError,
     "[to_numpy] out of memory allocating the numpy copy of float32 (67108864, 1048576)"),
]


def test_a_misspelt_attribute_is_an_error_naming_the_op_not_a_silent_default():
    # leaky_relu's slope used to default to 0 when misspelt, giving relu's results.
    x = tensor.from_numpy(np.array([[-2.0, 1.0]], dtype=np.float32))
    (y,) = core.call_op("leaky_relu", [x], {"slope": 0.5})
    assert y.to_numpy().tolist() == [[-1.0, 1.0]]
    for attrs in ({"Slope": 0.5}, {"slope": 0.5, "alpha": 0.5}):
        with pytest.raises(loom.ValueError) as e:
            core.call_op("leaky_relu", [x], attrs)
        assert str(e.value).startswith("[leaky_relu] has no attribute"), str(e.value)
        assert "its attributes: slope (a number)" in str(e.value)
        assert not isinstance(e.value, loom.InternalError)
    # CallInto's form checks the same way.
    out = tensor.zeros((1, 2))
    with pytest.raises(loom.ValueError, match=r"^\[mul_scalar\] has no attribute 'scale'"):
        core.call_op_into("mul_scalar", [x], [out], {"scale": 2.0})


@pytest.mark.parametrize("call,cls,text", [c[1:] for c in USER_MISTAKES], ids=[c[0] for c in USER_MISTAKES])
def test_every_user_mistake_is_a_loom_error_with_its_own_message(call, cls, text):
    with pytest.raises(loom.Error) as e:
        call()
    assert type(e.value) is cls, f"{type(e.value).__name__}: {e.value}"
    msg = str(e.value)
    assert text in msg, msg
    assert "Wrong number or type" not in msg and "Additional information" not in msg, msg
    assert "negative" not in msg or "nan" not in msg, msg
    assert not isinstance(e.value, loom.InternalError)  # reserved for loom's own bugs
