#!/usr/bin/env python3
"""Reliability probe (issue 36): loom's newer features under bad input, as a careless or hostile
user would drive them, one subprocess per case so that a signal or a hang is caught and named.

    tools/probe.py                     the default subset (CI: test/python/test_probe.py)
    tools/probe.py --all               every case (the slow ones too: mpirun, 100,000-op histories)
    tools/probe.py --only onnx,files   groups or case-name prefixes
    tools/probe.py --list              the cases, without running them
    tools/probe.py --json out.json     every case's outcome and detail as JSON
    tools/probe.py -j 2 --timeout 20   parallel children; seconds before a case counts as a hang

Each case is a few lines of Python run in a fresh interpreter (with loom imported) and an
expectation, either `error` (the input is bad: a typed loom.Error must come out) or `ok` (the
input is healthy: the case checks the answer against a reference computed another way, with
numpy or by hand). Outcomes:

    typed     a loom.Error for bad input                                    good
    ok        a healthy run whose answer matches the reference              good
    crash     the child died of a signal, or exited without reporting       bad
    hang      the child ran past --timeout                                  bad
    silent    no error where one was required, or a wrong answer            bad
    untyped   a Python built-in or C++ std exception instead of loom.Error  bad
    failed    a healthy run raised (a loom.Error where none is due)         bad
    lost      a file the run did not write was changed or removed           bad

The exit status is 0 when no case is bad, 1 otherwise. The tables of cases are below, one per
class of issue 36's probe: each row is an op or call crossed with its bad values. Group `api`,
the sweep of the public Python API (every public function x argument x bad value of its kind),
is generated from the table in tools/probe_api.py.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOOD = ("typed", "ok")
OUTCOMES = ("typed", "ok", "crash", "hang", "silent", "untyped", "failed", "lost")


class Case:
    """`slow`: only with --all (mpirun, long histories, further values of a table). `planted`: a
    self-test case (--selftest) whose outcome is the bad one it is named for."""

    def __init__(self, group, name, code, expect, slow=False, timeout=None, mpi=0, planted=None):
        assert expect in ("error", "ok"), expect
        self.group, self.name, self.code, self.expect = group, f"{group}/{name}", textwrap.dedent(code), expect
        self.slow, self.timeout, self.mpi, self.planted = slow, timeout, mpi, planted


CASES = []


def add(group, name, code, expect, **kw):
    CASES.append(Case(group, name, code, expect, **kw))


def table(group, name, code, values, expect, **kw):
    """One case per value: `name` and `code` are formatted with v (the value's repr in code). The
    first two values are in the default subset, the others only in --all."""
    for i, v in enumerate(values):
        add(group, name.format(v=v), code.replace("{v}", repr(v) if not isinstance(v, Raw) else v.text), expect,
            **dict(kw, slow=kw.get("slow", False) or i >= 2))


class Raw:
    """A value spliced into the code as written (inf, nan, an expression)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text

    def __format__(self, spec):
        return self.text


INF, NAN, NINF = Raw("math.inf"), Raw("math.nan"), Raw("-math.inf")
HUGE_INTS = [2 ** 31, 2 ** 32, 2 ** 62, 2 ** 63 - 1]


# ---------------------------------------------------------------------------------------------
# The child's helpers: every case's code runs with these names defined.
PRELUDE = r'''
import math, os, stat, sys
import numpy as np
import loom
from loom import autograd, clip, device, initializer, io, layer, model, opt, schedule, tensor

class Wrong(Exception):
    """The answer differs from the reference (or no error came where one was due)."""

class Lost(Exception):
    """A file the run did not write was changed or removed."""

class Refused(loom.Error):
    """A call that answers instead of raising (is_compatible, import_problem, a tool's exit
    status) refused the input, saying why: counted as a typed error."""

def check(cond, what):
    if not cond:
        raise Wrong(what)

def close(got, want, tol=1e-5, what="value"):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    check(got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}")
    check(np.allclose(got, want, rtol=tol, atol=tol, equal_nan=True),
          f"{what}: {got.ravel()[:6]} differs from {want.ravel()[:6]}")

dev = device.create_cpu_device()
TMP = os.environ["LOOM_PROBE_TMP"]

def T(a, dtype=np.float32):
    return tensor.from_numpy(np.asarray(a, dtype), dev)

# ---- the API sweep's healthy arguments (tools/probe_api.py) ----
def X(*shape):
    return T(np.full(shape or (2, 3), 0.5))

def P(*shape):
    p = X(*(shape or (3, 4)))
    p.requires_grad = p.stores_grad = True
    return p

def SAVED(path=False):
    p = os.path.join(TMP, "saved.ckpt")
    io.save_checkpoint(p, {"w": X()})
    if path:
        return p
    with open(p, "rb") as f:
        return f.read()

# ---- ONNX models built with the onnx package ----
def onnx_model(nodes, inputs, outputs, inits=(), opset=13):
    """nodes: (op, ins, outs, attrs); inputs: (name, np dtype, shape); outputs: (name, np dtype);
    inits: onnx TensorProtos or (name, array)."""
    from onnx import helper, numpy_helper
    from onnx.mapping import NP_TYPE_TO_TENSOR_TYPE as NP
    ns = [helper.make_node(op, ins, outs, name=f"n{i}", **attrs) for i, (op, ins, outs, attrs) in enumerate(nodes)]
    vi = [helper.make_tensor_value_info(n, NP[np.dtype(d)], s) for n, d, s in inputs]
    vo = [helper.make_tensor_value_info(n, NP[np.dtype(d)], None) for n, d in outputs]
    init = [t if not isinstance(t, tuple) else numpy_helper.from_array(np.asarray(t[1]), t[0]) for t in inits]
    g = helper.make_graph(ns, "probe", vi, vo, init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()

def one_op(op, x, attrs=None, inits=(), extra=(), out_dtype=np.float32, opset=13):
    """y = op(x, *extra) with x a float input of x's shape; returns the model's bytes."""
    x = np.asarray(x)
    return onnx_model([(op, ["x"] + list(extra), ["y"], attrs or {})], [("x", x.dtype, list(x.shape))],
                      [("y", out_dtype)], inits, opset)

def run_onnx(model_bytes, inputs):
    from loom import sonnx
    return sonnx.prepare(model_bytes, "CPU").run(inputs)

# ---- small models for graph mode ----
class Mlp(model.Model):
    def __init__(self, seed=9):
        super().__init__()
        dev.SetRandSeed(seed)
        self.l1 = layer.Linear(12, 16, device=dev)
        self.l2 = layer.Linear(16, 3, device=dev)

    def forward(self, x):
        return self.l2(autograd.relu(self.l1(x)))

    def train_one_batch(self, x, y):
        loss = autograd.softmax_cross_entropy(self.forward(x), y)
        self.optimizer(loss)
        return loss

def mlp_data(n=6):
    rng = np.random.default_rng(2)
    return T(rng.uniform(-3, 3, (n, 12))), T(np.arange(n) % 3, np.int32)

def params(m):
    return [tensor.to_numpy(p) for p in m.get_params().values()]

def train_mlp(use_graph, change=None, before=4, after=4, graph_options=None, optimizer=None):
    m = Mlp()
    sgd = optimizer or opt.SGD(lr=0.1, momentum=0.9)
    m.set_optimizer(sgd)
    x, y = mlp_data()
    m.compile([x], is_train=True, use_graph=use_graph, graph_options=graph_options)
    for _ in range(before):
        m.train_one_batch(x, y)
    if change:
        change(m, sgd)
    for _ in range(after):
        m.train_one_batch(x, y)
    return m

def same_params(a, b, what):
    for i, (p, q) in enumerate(zip(params(a), params(b))):
        check(np.array_equal(p, q), f"{what}: parameter {i} differs (max |diff| {np.abs(p - q).max()})")

# ---- data sets on disk ----
def write_idx(directory, n, side=8, classes=4, prefix="train", seed=1):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n).astype(np.uint8)
    images = rng.integers(0, 255, (n, side, side)).astype(np.uint8)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{prefix}-images-idx3-ubyte"), "wb") as f:
        f.write(bytes([0, 0, 8, 3]) + np.array([n, side, side], ">u4").tobytes() + images.tobytes())
    with open(os.path.join(directory, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + np.array([n], ">u4").tobytes() + labels.tobytes())
    return images, labels

def image_loader(n=20, **kw):
    from loom import io
    d = os.path.join(TMP, "idx")
    images, labels = write_idx(d, n)
    return io.DataLoader(io.load_mnist_dir(d, True), **kw), images, labels

def array_loader(n=40, **kw):
    from loom import data
    rng = np.random.default_rng(4)
    x = rng.normal(size=(n, 12)).astype(np.float32)
    y = (np.arange(n) % 3).astype(np.int64)
    return data.DataLoader(data.ArrayDataset(x, y), device=dev, **kw), x, y

def snapshot(folder):
    """{name: bytes} of every file in folder."""
    out = {}
    for f in sorted(os.listdir(folder)):
        p = os.path.join(folder, f)
        if os.path.isfile(p):
            with open(p, "rb") as fh:
                out[f] = fh.read()
    return out

def kept(before, folder):
    """Every file of `before` is still in `folder`, byte for byte."""
    now = snapshot(folder)
    for f, b in before.items():
        if f not in now:
            raise Lost(f"{f} was removed")
        if now[f] != b:
            raise Lost(f"{f} was overwritten")

def trainer_run(folder, batch=8, max_steps=3, resume=False, checkpoint_every=1, n=40, **kw):
    from loom import trainer
    m = Mlp()
    m.set_optimizer(opt.SGD(lr=0.05))
    loader, _, _ = array_loader(n=n, batch_size=batch, seed=3)
    x, _ = mlp_data(batch)
    m.compile([x], is_train=True, use_graph=False)
    return trainer.Trainer(m, loader, checkpoint_dir=folder, checkpoint_every=checkpoint_every, max_steps=max_steps,
                           resume=resume, progress=False, verbose=False, **kw).fit()
'''


# ---------------------------------------------------------------------------------------------
# ONNX import: hostile attributes and shapes per op, values out of range, files, the backend.

def onnx_cases():
    g = "onnx"
    x4 = "np.arange(16, dtype=np.float32).reshape(1, 4, 2, 2)"
    for op in ("DepthToSpace", "SpaceToDepth"):
        table(g, op + "-blocksize-{v}", f"run_onnx(one_op('{op}', {x4}, {{'blocksize': {{v}}}}), [{x4}])",
              [0, -1, -(2 ** 63)] + HUGE_INTS, "error")
        # (1, 0, 2, 2): no channels, C % b^2 == 0 for any b; H * b overflowed.
        table(g, op + "-empty-blocksize-{v}",
              f"run_onnx(one_op('{op}', np.zeros((1, 0, 2, 2), np.float32), {{'blocksize': {{v}}}}), "
              f"[np.zeros((1, 0, 2, 2), np.float32)])", [2 ** 32, 2 ** 62], "error")
    add(g, "DepthToSpace-2", f"""
        y = run_onnx(one_op('DepthToSpace', {x4}, {{'blocksize': 2}}), [{x4}])[0]
        x = {x4}  # DCR: (1, 4, 2, 2) -> (1, 1, 4, 4)
        want = x.reshape(1, 2, 2, 1, 2, 2).transpose(0, 3, 4, 1, 5, 2).reshape(1, 1, 4, 4)
        close(y, want)""", "ok")
    cumsum = ("x = np.zeros({shape}, np.float32); "
              "run_onnx(one_op('CumSum', x, extra=['axis'], inits=[('axis', np.array({{v}}, np.int64))]), [x])")
    table(g, "CumSum-rows0-axis-{v}", cumsum.format(shape="(0, 3)"), [2, -3, 2 ** 40, -(2 ** 40), 2 ** 63 - 1], "error")
    table(g, "CumSum-axis-{v}", cumsum.format(shape="(2, 3)"), [2, -3, 2 ** 33], "error")
    for ex in (0, 1):
        for rev in (0, 1):
            add(g, f"CumSum-exclusive{ex}-reverse{rev}", f"""
                x = np.arange(-7, 8, dtype=np.float32).reshape(3, 5)
                y = run_onnx(one_op('CumSum', x, {{'exclusive': {ex}, 'reverse': {rev}}}, extra=['axis'],
                                    inits=[('axis', np.array(1, np.int64))]), [x])[0]
                z = x[:, ::-1] if {rev} else x
                c = np.cumsum(z, axis=1) - (z if {ex} else 0)
                close(y, c[:, ::-1] if {rev} else c)""", "ok")
    for shape in ("(2 ** 50, 0)", "(0, 2 ** 50)", "(3, 4)"):
        for k in (0, 1, -2, 2 ** 62, -(2 ** 63)):
            add(g, f"EyeLike-{shape}-k{k}", f"""
                x = np.zeros({shape}, np.float32)
                y = run_onnx(one_op('EyeLike', x, {{'k': {k}}}), [x])[0]
                check(y.shape == x.shape, f'shape {{y.shape}}')
                if x.size: close(y, np.eye(x.shape[0], x.shape[1], k=max(min({k}, 99), -99)))""", "ok")
    rng = ("run_onnx(onnx_model([('Range', ['s', 'l', 'd'], ['y'], {})], [], [('y', np.float64)], "
           "[('s', np.array({v[0]})), ('l', np.array({v[1]})), ('d', np.array({v[2]}))]), [])")
    for v, name in [(("0.0", "1e30", "1.0"), "1e30"), (("0.0", "math.inf", "1.0"), "inf"),
                    (("0.0", "10.0", "math.nan"), "nan-delta"), (("0.0", "10.0", "0.0"), "zero-delta"),
                    (("math.nan", "10.0", "1.0"), "nan-start"), (("0.0", "-math.inf", "-1.0"), "-inf"),
                    (("-1e308", "1e308", "1e-308"), "1e616-count")]:
        add(g, "Range-" + name, rng.replace("{v[0]}", v[0]).replace("{v[1]}", v[1]).replace("{v[2]}", v[2]), "error")
    add(g, "Range-healthy", "y = " + rng.replace("{v[0]}", "1.0").replace("{v[1]}", "2.0").replace("{v[2]}", "0.25")
        + "[0]\nclose(y, np.arange(1, 2, 0.25))", "ok")
    add(g, "Range-empty", "y = " + rng.replace("{v[0]}", "0.0").replace("{v[1]}", "10.0").replace("{v[2]}", "-1.0")
        + "[0]\ncheck(y.shape == (0,), f'shape {y.shape}')", "ok")
    for op in ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"):
        loss = (f"s = np.array([[-1.0, -2.0, -0.5], [-1.5, -0.2, -3.0]], np.float32)\n"
                f"t = np.array([1, {{v}}], np.int64)\n"
                f"m = onnx_model([('{op}', ['s', 't'], ['loss'], {{}})], [('s', np.float32, [2, 3]), "
                f"('t', np.int64, [2])], [('loss', np.float32)])\n"
                f"y = run_onnx(m, [s, t])[0]\n")
        table(g, op + "-target-{v}", loss, [3, 7, -1, -5, 2 ** 31, -(2 ** 62)], "error")
        ref = "-(s[0, 1] + s[1, 2]) / 2" if op.startswith("Neg") else \
            "np.mean([-(s[i] - np.log(np.exp(s[i]).sum()))[c] for i, c in enumerate([1, 2])])"
        add(g, op + "-healthy", loss.replace("{v}", "2") + f"close(y, {ref})", "ok")
    narrow = [("UINT8", "uint8", 300), ("UINT8", "uint8", -1), ("INT8", "int8", 128), ("INT8", "int8", -200),
              ("INT16", "int16", 40000), ("UINT16", "uint16", 70000), ("BOOL", "bool_", 2)]
    for onnx_t, np_t, v in narrow:
        add(g, f"initializer-{np_t}-{v}", f"""
            from onnx import helper, TensorProto
            w = helper.make_tensor('w', TensorProto.{onnx_t}, [2], [{v}, 1])
            m = onnx_model([('Identity', ['w'], ['y'], {{}})], [], [('y', np.{np_t})], [w])
            y = run_onnx(m, [])[0]""", "error")
    add(g, "initializer-uint8-healthy", """
        from onnx import helper, TensorProto
        w = helper.make_tensor('w', TensorProto.UINT8, [3], [255, 0, 7])
        y = run_onnx(onnx_model([('Identity', ['w'], ['y'], {})], [], [('y', np.uint8)], [w]), [])[0]
        check(y.dtype == np.uint8 and list(y) == [255, 0, 7], f'{y!r}')""", "ok")
    # Ops whose attributes or index inputs are out of range.
    x23 = "np.arange(6, dtype=np.float32).reshape(2, 3)"
    bad_attr = [
        ("Softmax", "axis", [2, -3, 2 ** 40]), ("Flatten", "axis", [3, -4, 2 ** 62]), ("Concat", "axis", [2, -3, 2 ** 40]),
        ("ArgMax", "axis", [2, -3, 2 ** 40]), ("Transpose", "perm", [[0, 0], [0, 2], [1], [2 ** 40, 0]]),
        ("Gather", "axis", [2, -3, 2 ** 40]), ("Hardmax", "axis", [2, -3]), ("LogSoftmax", "axis", [2, 2 ** 40]),
    ]
    for op, attr, values in bad_attr:
        extra = "extra=['i'], inits=[('i', np.array([0], np.int64))], " if op == "Gather" else ""
        table(g, f"{op}-{attr}-{{v}}", f"run_onnx(one_op('{op}', {x23}, {{'{attr}': {{v}}}}, {extra}), [{x23}])",
              values, "error")
    ops_with_index = [  # (op, index input values, extra attrs)
        ("Gather", "np.array([3], np.int64)", {}), ("Gather", "np.array([-4], np.int64)", {}),
        ("Gather", "np.array([2 ** 62], np.int64)", {}), ("Reshape", "np.array([4, 4], np.int64)", {}),
        ("Reshape", "np.array([-1, -1], np.int64)", {}), ("Reshape", "np.array([2 ** 62, 0], np.int64)", {}),
        ("Reshape", "np.array([-2, 3], np.int64)", {}), ("Tile", "np.array([-1, 1], np.int64)", {}),
        ("Tile", "np.array([2 ** 40, 2 ** 40], np.int64)", {}), ("Tile", "np.array([1], np.int64)", {}),
        ("Expand", "np.array([2 ** 40, 3], np.int64)", {}), ("Expand", "np.array([4, 3], np.int64)", {}),
        ("Unsqueeze", "np.array([5], np.int64)", {}), ("Unsqueeze", "np.array([0, 0], np.int64)", {}),
        ("Squeeze", "np.array([0], np.int64)", {}), ("Squeeze", "np.array([7], np.int64)", {}),
        ("ReduceSum", "np.array([2], np.int64)", {}), ("ReduceSum", "np.array([2 ** 40], np.int64)", {}),
        ("Split", "np.array([1, 1], np.int64)", {"axis": 1}), ("Split", "np.array([-1, 4], np.int64)", {"axis": 1}),
        ("TopK", "np.array([4], np.int64)", {}), ("TopK", "np.array([-1], np.int64)", {}),
        ("TopK", "np.array([2 ** 62], np.int64)", {}), ("OneHot", "np.array(2 ** 40, np.int64)", {}),
        ("Pad", "np.array([0, 2 ** 40, 0, 0], np.int64)", {}), ("Pad", "np.array([0, -5, 0, 0], np.int64)", {}),
        ("ConstantOfShape", "np.array([2 ** 40, 2 ** 40], np.int64)", {}),
        ("ConstantOfShape", "np.array([-3], np.int64)", {}),
    ]
    for i, (op, idx, attrs) in enumerate(ops_with_index):
        outs = "['y', 'k']" if op == "TopK" else "['y', 'z']" if op == "Split" else "['y']"
        ins = "['x', 'i', 'v']" if op == "OneHot" else "['i']" if op == "ConstantOfShape" else "['x', 'i']"
        inits = "[('i', idx), ('v', np.array([0.0, 1.0], np.float32))]" if op == "OneHot" else "[('i', idx)]"
        add(g, f"{op}-index-{i}", f"""
            idx = {idx}
            x = {x23} if '{op}' != 'OneHot' else np.array([0, 1], np.int64)
            m = onnx_model([('{op}', {ins}, {outs}, {attrs!r})], [('x', x.dtype, list(x.shape))] if {ins} != ['i'] else [],
                           [('y', np.float32)], {inits})
            run_onnx(m, [x] if {ins} != ['i'] else [])""", "error")
    conv = ("x = np.ones((1, 1, 4, 4), np.float32)\n"
            "m = onnx_model([('{op}', ['x'] + (['w'] if '{op}' == 'Conv' else []), ['y'], {attrs})], "
            "[('x', np.float32, [1, 1, 4, 4])], [('y', np.float32)], "
            "[('w', np.ones((1, 1, 3, 3), np.float32))] if '{op}' == 'Conv' else [])\n"
            "y = run_onnx(m, [x])[0]\n")
    pool_bad = [{"strides": [0, 0]}, {"strides": [-1, 1]}, {"pads": [-1, 0, 0, 0]}, {"pads": [2 ** 40, 0, 0, 0]},
                {"dilations": [0, 1]}, {"kernel_shape": [9, 9]}, {"kernel_shape": [0, 3]},
                {"dilations": [2 ** 62, 1]}, {"pads": [0, 0, 2 ** 62, 0]}]
    for op in ("Conv", "MaxPool", "AveragePool"):
        for i, a in enumerate(pool_bad):
            attrs = dict({"kernel_shape": [3, 3]}, **a)
            if op == "AveragePool" and "dilations" in a:
                continue
            add(g, f"{op}-attrs-{i}", conv.replace("{op}", op).replace("{attrs}", repr(attrs)), "error",
                slow=op == "AveragePool")  # MaxPool's geometry
    add(g, "Conv-group-0", conv.replace("{op}", "Conv").replace("{attrs}", "{'group': 0}"), "error")
    add(g, "Conv-healthy", conv.replace("{op}", "Conv").replace("{attrs}", "{'pads': [1, 1, 1, 1]}")
        + "want = np.array([[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]], np.float32)\n"
        + "close(y, want.reshape(1, 1, 4, 4))", "ok")
    for op, want in (("Conv", 9), ("MaxPool", 1), ("AveragePool", 1)):  # a stride past the input: one window
        add(g, f"{op}-huge-stride", conv.replace("{op}", op).replace("{attrs}", "{'kernel_shape': [3, 3], 'strides': [2 ** 62, 1]}")
            + f"close(y, np.full((1, 1, 1, 2), {want}))", "ok")
    add(g, "MaxPool-healthy", conv.replace("{op}", "MaxPool").replace("{attrs}", "{'kernel_shape': [2, 2], 'strides': [2, 2]}")
        + "close(y, np.ones((1, 1, 2, 2)))", "ok")


def onnx_deep_chain_cases():
    """A deep chain of nodes reading a trainable initializer, run with loom tensors (so autograd
    records it) and differentiated: the issue's SIGSEGV at depth."""
    for n in (2000, 50_000):
        add("onnx", f"deep-chain-backward-{n}", f"""
            from onnx import helper, TensorProto
            from loom import sonnx
            nodes = [helper.make_node('Add', ['x' if i == 0 else f'y{{i - 1}}', 'w'], [f'y{{i}}'], name=f'a{{i}}')
                     for i in range({n})]
            g = helper.make_graph(nodes, 'deep', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2])],
                                  [helper.make_tensor_value_info(f'y{{{n} - 1}}', TensorProto.FLOAT, None)],
                                  [helper.make_tensor('w', TensorProto.FLOAT, [1], [0.5])])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]); m.ir_version = 8
            autograd.training = True
            rep = sonnx.prepare(m.SerializeToString())
            y, = rep.run([T([1.0, 2.0])])
            close(tensor.to_numpy(y), [1.0 + 0.5 * {n}, 2.0 + 0.5 * {n}], tol=1e-3)
            w = rep.graph.parameters()['w']
            close(tensor.to_numpy(autograd.gradients(autograd.reduce_sum(y, [0], 0))[w]), [2.0 * {n}])""", "ok",
            slow=n > 10_000, timeout=120 if n > 10_000 else None)


def onnx_file_cases():
    g = "onnx-file"
    model = "one_op('Relu', np.zeros((2, 3), np.float32))"
    prep = "from loom import sonnx, onnx_import\n"
    for frac in (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99):
        add(g, f"truncated-{frac}", prep + f"b = {model}\nsonnx.prepare(b[:int(len(b) * {frac})])", "error")
    for i, junk in enumerate(["b'\\xff' * 64", "b'\\x08' + b'\\xff' * 20", "os.urandom(1000)", "b'\\x12\\xff\\xff\\xff\\xff\\x0f'"]):
        add(g, f"corrupt-{i}", prep + f"sonnx.prepare({junk})", "error")
    for i, (path, setup) in enumerate([
        ("p", "os.mkfifo(p)"), ("p", "os.mkdir(p)"), ("'/dev/zero'", ""), ("'/dev/null'", ""),
        ("p", ""), ("p", "open(p, 'wb').close()"), ("p", "f = open(p, 'wb'); f.truncate(3 << 30); f.close()"),
        ("p + '\\0x'", ""), ("p", "os.symlink(p + '.missing', p)"),
    ]):
        for call, answer in (("sonnx.prepare({})", ""), ("onnx_import.import_model({})", ""),
                             ("r = sonnx.is_compatible({})", "check(r is False, f'is_compatible: {r}')"),
                             ("r = onnx_import.import_problem({})", "check(r != '', 'import_problem: none')")):
            add(g, f"path-{i}-{call.split('(')[0].split()[-1]}", prep + f"p = os.path.join(TMP, 'model.onnx')\n{setup}\n"
                + call.format(path) + "\n" + (answer + "\nraise Refused(str(r))" if answer else ""), "error",
                slow="import_model" in call or "is_compatible" in call)  # the same reader as prepare's
    good = prep + f"p = os.path.join(TMP, 'model.onnx')\nopen(p, 'wb').write({model})\n"
    add(g, "path-healthy", good + "y = sonnx.prepare(p).run([np.array([[-1, 2, 3], [4, -5, 6]], np.float32)])[0]\n"
        "close(y, [[0, 2, 3], [4, 0, 6]])", "ok")
    # The backend's run: inputs by dict, by list, of the wrong dtype, shape or kind.
    two = ("from loom import sonnx\n"
           "m = onnx_model([('Sub', ['a', 'b'], ['y'], {})], [('a', np.float32, [2]), ('b', np.float32, [2])], "
           "[('y', np.float32)])\n"
           "a, b = np.array([5, 7], np.float32), np.array([1, 2], np.float32)\n"
           "rep = sonnx.prepare(m)\n")
    for name, arg in [("dict-missing-first", "{'b': b}"), ("dict-missing-second", "{'a': a}"),
                      ("dict-extra", "{'a': a, 'b': b, 'c': b}"), ("list-short", "[a]"), ("list-long", "[a, b, b]"),
                      ("dtype", "[a.astype(np.float64), b]"), ("shape", "[np.zeros(3, np.float32), b]"),
                      ("none", "[None, b]"), ("strings", "[np.array(['x', 'y']), b]"), ("object", "[[1, [2]], b]"),
                      ("int-key", "{0: a, 1: b}")]:
        add(g, "run-" + name, two + f"rep.run({arg})", "error")
    add(g, "run-dict-healthy", two + "close(rep.run({'b': b, 'a': a})[0], a - b)", "ok")
    for name, call in [("device-CUDA:x", "sonnx.prepare(m, 'CUDA:x')"), ("device-TPU", "sonnx.prepare(m, 'TPU')"),
                       ("device-int", "sonnx.prepare(m, 3)"), ("last_layers-str", "rep.run([a, b], last_layers='x')"),
                       ("last_layers-huge", "rep.run([a, b], last_layers=2 ** 70)"),
                       ("model-int", "sonnx.prepare(12)"), ("model-none", "sonnx.prepare(None)")]:
        add(g, "backend-" + name, two + call, "error")


def onnx_export_cases():
    g = "onnx-export"
    base = ("from loom import onnx_export\n"
            "import onnxruntime as ort\n"
            "def export(fn, shape):\n"
            "    x = T(np.random.default_rng(0).normal(size=shape))\n"
            "    class Net(model.Model):\n"
            "        def forward(self, x):\n"
            "            return fn(x)\n"
            "    return onnx_export.to_onnx([x], Net(), 'n', dynamic_batch=True).SerializeToString()\n"
            "def run_ort(b, x):\n"
            "    s = ort.InferenceSession(b, providers=['CPUExecutionProvider'])\n"
            "    return s.run(None, {s.get_inputs()[0].name: x})[0]\n")
    # Each function exported at batch 4, then run at batch 8 by onnxruntime: the output's batch
    # dimension is declared symbolic, so it must be 8 and hold fn of the batch-8 input.
    for name, fn, shape, ref in [
        ("reshape-keeps-batch", "lambda x: autograd.reshape(x, (4, 3, 2))", (4, 6), "x.reshape(8, 3, 2)"),
        ("flatten", "lambda x: autograd.flatten(x)", (4, 2, 3), "x.reshape(8, 6)"),
        ("reshape-mixes-batch", "lambda x: autograd.reshape(x, (2, 12))", (4, 6), None),
        ("reshape-batch-last", "lambda x: autograd.reshape(x, (6, 4))", (4, 6), None),
        ("transpose-batch", "lambda x: autograd.transpose(x, (1, 0))", (4, 6), None),
        ("sum-over-batch", "lambda x: autograd.reduce_sum(x, [0], 1)", (4, 6), None),
    ]:
        code = base + f"b = export({fn}, {shape})\nx = np.random.default_rng(1).normal(size=(8,) + {shape}[1:]).astype(np.float32)\n"
        code += "y = run_ort(b, x)\n"
        if ref:
            add(g, "dynamic-" + name, code + f"close(y, {ref}, what='batch 8')", "ok")
        else:  # the batch is not the leading dimension of the result: refuse, or declare it honestly
            add(g, "dynamic-" + name, code + "check(y.shape[0] == 8, f'declared a batch dimension, computed {y.shape}')",
                "error")


# ---------------------------------------------------------------------------------------------
# Autograd over long histories.

def autograd_cases():
    g = "autograd"
    for n in (1000, 100_000):
        slow = n > 10_000
        add(g, f"chain-{n}", f"""
            autograd.training = True
            x = T([0.5]); x.requires_grad = True; x.stores_grad = True
            y = x
            for _ in range({n}):
                y = autograd.add(y, x)
            close(tensor.to_numpy(autograd.gradients(autograd.reduce_sum(y, [0], 0))[x]), [{n} + 1.0])""", "ok", slow=slow, timeout=120 if slow else None)
        add(g, f"running-loss-{n}", f"""
            autograd.training = True
            w = T([1.0, 2.0]); w.requires_grad = True; w.stores_grad = True
            total = None
            for i in range({n}):
                l = autograd.reduce_sum(autograd.mul(w, w), [0], 0)
                total = l if total is None else autograd.add(total, l)
            close(tensor.to_numpy(autograd.gradients(total)[w]), [2.0 * {n}, 4.0 * {n}], tol=1e-4)""",
            "ok", slow=slow, timeout=120 if slow else None)
        add(g, f"history-kept-then-dropped-{n}", f"""
            autograd.training = True
            x = T([1.0]); x.requires_grad = True
            y = x
            for _ in range({n}):
                y = autograd.mul(y, T([1.0]))
            del y  # the whole history freed at once
            z = autograd.mul(x, T([3.0]))
            close(tensor.to_numpy(z), [3.0])""", "ok", slow=slow, timeout=120 if slow else None)
    for steps in (50, 3000):
        add(g, f"rnn-unroll-{steps}", f"""
            autograd.training = True
            rng = np.random.default_rng(0)
            W = rng.normal(scale=0.3, size=(4, 4)).astype(np.float32)
            w = T(W); w.requires_grad = True; w.stores_grad = True
            h = T(np.full((1, 4), 0.1))
            hs = [np.full((1, 4), 0.1, np.float32)]
            for _ in range({steps}):
                h = autograd.tanh(autograd.matmul(h, w))
                hs.append(np.tanh(hs[-1] @ W))
            gw = tensor.to_numpy(autograd.gradients(autograd.reduce_sum(h, [0, 1], 0))[w])
            # numpy's backward through the same unroll
            dh, dW = np.ones((1, 4)), np.zeros((4, 4))
            for t in range({steps}, 0, -1):
                da = dh * (1 - hs[t] ** 2)
                dW += hs[t - 1].T @ da
                dh = da @ W.T
            close(gw, dW, tol=1e-3)""", "ok", slow=steps > 1000, timeout=120)


# ---------------------------------------------------------------------------------------------
# Graph mode: state after replays, setters after the capture, the step cache's bound.

def graph_cases():
    g = "graph"
    for n in (1, 3, 10):
        add(g, f"step_count-{n}", f"""
            m = train_mlp(True, before={n}, after=0)
            e = train_mlp(False, before={n}, after=0)
            check(m.optimizer.step_count == e.optimizer.step_count == {n},
                  f'graph {{m.optimizer.step_count}}, eager {{e.optimizer.step_count}}')""", "ok")
    add(g, "step_count-in-checkpoint", """
        m = train_mlp(True, before=7, after=0)
        p = os.path.join(TMP, 'm.ckpt')
        m.save_states(p)
        m2 = Mlp(); m2.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
        x, y = mlp_data(); m2.compile([x], is_train=True, use_graph=True)
        m2.load_states(p)
        check(m2.optimizer.step_count == 7, f'restored step_count {m2.optimizer.step_count}')""", "ok")
    changes = {
        "set_grad_clip": "lambda m, s: __import__('loom.clip').clip.set_grad_clip(s, max_norm=0.01)",
        "set_optimizer": "lambda m, s: m.set_optimizer(opt.SGD(lr=0.02, momentum=0.5))",
        "set_optimizer-adam": "lambda m, s: m.set_optimizer(opt.Adam(lr=0.01))",
        "set_schedule": "lambda m, s: __import__('loom.schedule').schedule.set_schedule(s, "
                        "__import__('loom.schedule').schedule.ExponentialDecay(0.1, 1, 0.5))",
        "lr-setter": "lambda m, s: s.set_learning_rate(0.01)",
        "momentum-attr": "lambda m, s: setattr(s, 'momentum', 0.0)",
        "eval-then-train": "lambda m, s: (m.train(False), m.train(True))",
    }
    for name, ch in changes.items():
        add(g, "after-capture-" + name, f"""
            ch = {ch}
            e, gr, base = train_mlp(False, ch), train_mlp(True, ch), train_mlp(False)
            same_params(e, gr, 'graph against eager')
            check(e.optimizer.step_count == gr.optimizer.step_count, 'step counts differ')
            if '{name}' not in ('eval-then-train', 'momentum-attr'):
                check(any(not np.array_equal(a, b) for a, b in zip(params(e), params(base))), 'the change changed nothing')""",
            "ok")
    add(g, "graph-equals-eager", "same_params(train_mlp(False), train_mlp(True), 'graph against eager')", "ok")
    for arg in ("1.0 + i / 100", "[1.0] * (i % 3 + 1)", "{'s': i}", "float(i)"):
        add(g, "cache-bound-" + arg, f"""
            import warnings
            class Scaled(Mlp):
                def train_one_batch(self, x, y, s):
                    scale = s if isinstance(s, float) else 1.0
                    loss = autograd.softmax_cross_entropy(self.forward(x), y) * scale
                    self.optimizer(loss)
                    return loss
            m = Scaled(); m.set_optimizer(opt.SGD(lr=0.01))
            x, y = mlp_data()
            m.compile([x], is_train=True, use_graph=True, graph_options={{'max_step_graphs': 4}})
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                for i in range(30):
                    m.train_one_batch(x, y, {arg})
            check(len(m._steps) <= 4, f'{{len(m._steps)}} graphs kept')""", "ok")
    # Graph options, wherever they are taken.
    bad = {"num_workers": [-1, 1025, 100000, 2 ** 63, NAN, 1.5, "4", None],
           "bucket_bytes": [0, -1, NAN, INF, "x", 2 ** 70, -(2 ** 63)],
           "first_bucket_bytes": [-5, NAN, "x", 2 ** 70],
           "max_step_graphs": [-1, "x", NAN],
           "memory": ["planed", 3, None],
           "profile": ["yes", 2],
           "num_wrokers": [2]}
    for opt_name, values in bad.items():
        for i, v in enumerate(values):
            add(g, f"option-{opt_name}-{v}-compile", f"train_mlp(True, before=1, after=0, graph_options={{'{opt_name}': {v!r}}})",
                "error", slow=i >= 2)
            add(g, f"option-{opt_name}-{v}-device", f"dev.set_graph_options({opt_name}={v!r})", "error", slow=i >= 3)
    add(g, "option-num_workers-2", """
        same_params(train_mlp(False), train_mlp(True, graph_options={'num_workers': 2}), 'num_workers 2')""", "ok")
    for v in ["'1GB'", "math.nan", "math.inf", "-1", "1.5", "True", "2 ** 70", "[1]"]:
        add(g, f"memory_budget-{v}", f"""
            m = Mlp(); m.set_optimizer(opt.SGD(lr=0.1))
            x, y = mlp_data()
            m.compile([x], is_train=True, use_graph=True, memory_budget={v})
            m.train_one_batch(x, y)""", "error")
        add(g, f"memory_budget-option-{v}", f"train_mlp(True, before=1, after=0, graph_options={{'memory_budget': {v}}})",
            "error")
    add(g, "memory_budget-generous", """
        m = Mlp(); m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
        x, y = mlp_data()
        m.compile([x], is_train=True, use_graph=True, memory_budget=1 << 30)
        for _ in range(4): m.train_one_batch(x, y)
        same_params(m, train_mlp(False, before=4, after=0), 'with a budget')""", "ok")


# ---------------------------------------------------------------------------------------------
# The trainer's checkpoint folders.

def trainer_cases():
    g = "trainer"
    add(g, "another-runs-steps", """
        d = os.path.join(TMP, 'run'); trainer_run(d)
        before = snapshot(d)
        try:
            trainer_run(d, max_steps=5)
        finally:
            kept(before, d)""", "error")
    add(g, "another-runs-best", """
        d = os.path.join(TMP, 'run'); os.makedirs(d)
        open(os.path.join(d, 'best.ckpt'), 'wb').write(b"another run's best")
        before = snapshot(d)
        try:
            trainer_run(d)
        finally:
            kept(before, d)""", "error")
    add(g, "another-runs-best-resume", """
        d = os.path.join(TMP, 'run'); os.makedirs(d)
        open(os.path.join(d, 'best.ckpt'), 'wb').write(b"another run's best")
        before = snapshot(d)
        try:
            trainer_run(d, resume=True)
        finally:
            kept(before, d)""", "error")
    add(g, "foreign-files-kept", """
        d = os.path.join(TMP, 'run'); os.makedirs(d)
        open(os.path.join(d, 'notes.txt'), 'w').write('mine')
        open(os.path.join(d, 'step-x.ckpt'), 'w').write('not a checkpoint')
        before = snapshot(d)
        trainer_run(d, max_steps=4, keep_last=1)
        kept(before, d)""", "ok")
    for new in (16, 4):
        add(g, f"resume-batch-8-to-{new}", f"""
            d = os.path.join(TMP, 'run'); trainer_run(d, batch=8, max_steps=4)
            trainer_run(d, batch={new}, max_steps=6, resume=True)""", "error")
    add(g, "resume-same-batch", """
        d = os.path.join(TMP, 'run'); trainer_run(d, batch=8, max_steps=4)
        r = trainer_run(d, batch=8, max_steps=6, resume=True)
        check(r['resumed_from'] == 4, f"resumed from {r['resumed_from']}")""", "ok")
    add(g, "resume-truncated-checkpoint", """
        d = os.path.join(TMP, 'run'); trainer_run(d, max_steps=2)
        last = sorted(f for f in os.listdir(d) if f.startswith('step-'))[-1]
        p = os.path.join(d, last); b = open(p, 'rb').read(); open(p, 'wb').write(b[: len(b) // 2])
        trainer_run(d, max_steps=4, resume=True)""", "error")
    add(g, "checkpoint_dir-is-a-file", """
        p = os.path.join(TMP, 'file'); open(p, 'w').write('x')
        try:
            trainer_run(p)
        finally:
            check(open(p).read() == 'x', 'the file changed')""", "error")
    for kw, v in [("epochs", "'x'"), ("epochs", "math.nan"), ("max_steps", "-3"), ("max_steps", "'5'"),
                  ("log_every", "math.inf"), ("checkpoint_every", "-1"), ("keep_last", "-2"), ("keep_last", "'x'"),
                  ("eval_every", "-1"), ("checkpoint_dir", "3")]:
        add(g, f"option-{kw}-{v}", f"""
            from loom import trainer
            m = Mlp(); m.set_optimizer(opt.SGD(lr=0.05))
            loader, _, _ = array_loader(batch_size=8)
            kw = dict(max_steps=2, progress=False, verbose=False)
            kw['{kw}'] = {v}
            trainer.Trainer(m, loader, **kw).fit()""", "error")


# ---------------------------------------------------------------------------------------------
# Data loaders.

def data_cases():
    g = "data"
    for name, mean, std in [("mean-nan", "[math.nan]", "[1.0]"), ("mean-inf", "[math.inf]", "[1.0]"),
                            ("std-inf", "[0.0]", "[math.inf]"), ("std-0", "[0.0]", "[0.0]"),
                            ("std-denormal", "[0.0]", "[1e-310]"), ("std-negative-0", "[0.0]", "[-0.0]"),
                            ("std-nan", "[0.0]", "[math.nan]"), ("mean-str", "['a']", "[1.0]"),
                            ("mean-long", "[0.1, 0.2]", "[1.0]"), ("std-tiny-float32", "[0.0]", "[1e-39]")]:
        add(g, "image-" + name, f"image_loader(mean={mean}, std={std}, batch_size=4)[0].next()", "error")
    add(g, "image-normalised", """
        loader, images, labels = image_loader(n=20, batch_size=20, shuffle=False, mean=[0.5], std=[0.25])
        x, y, _, _ = loader.next()
        close(tensor.to_numpy(x).reshape(20, 8, 8), (images / 255.0 - 0.5) / 0.25, tol=1e-5)
        check(list(tensor.to_numpy(y)) == list(labels), 'labels')""", "ok")
    for b in (41, 100, 2 ** 40, 2 ** 64):  # Python's loader has no int64 bound
        add(g, f"array-batch-{b}", f"""
            loader, x, _ = array_loader(n=40, batch_size={b}, shuffle=False)
            bs = list(loader)
            check(len(bs) == 1, f'{{len(bs)}} batches')
            close(tensor.to_numpy(bs[0][0]), x)""", "ok")
        add(g, f"array-batch-{b}-drop_last", f"array_loader(n=40, batch_size={b}, drop_last=True)", "error")
    for b in (21, 100, 2 ** 40, 2 ** 63 - 1):
        add(g, f"image-batch-{b}", f"""
            loader, images, _ = image_loader(n=20, batch_size={b}, shuffle=False)
            bs = list(loader)
            check(len(bs) == 1 and tensor.to_numpy(bs[0][0]).shape[0] == 20, f'{{len(bs)}} batches')""", "ok")
        add(g, f"image-batch-{b}-drop_last", f"image_loader(n=20, batch_size={b}, drop_last=True)[0].next()", "error")
    for i, b in enumerate((0, -1, -(2 ** 63), 2 ** 64, "'8'", 2.5, NAN, True)):
        add(g, f"image-batch_size-{b}", f"image_loader(batch_size={b})", "error", slow=i in (1, 2))
        if b != 2 ** 64:
            add(g, f"array-batch_size-{b}", f"array_loader(batch_size={b})", "error", slow=i in (1, 2))
    for seed in (0, 7, 2 ** 63 - 1):
        add(g, f"image-shuffle-seed-{seed}", f"""
            loader, images, labels = image_loader(n=20, batch_size=6, seed={seed})
            for epoch in range(2):
                got = np.concatenate([tensor.to_numpy(y) for _, y in loader])
                check(len(got) == 20 and sorted(got) == sorted(labels), f'epoch {{epoch}}: {{got}}')""", "ok")
        add(g, f"array-shuffle-seed-{seed}", f"""
            loader, x, _ = array_loader(n=40, batch_size=7, seed={seed})
            rows = np.concatenate([tensor.to_numpy(b) for b, _ in loader])
            check(rows.shape == x.shape, str(rows.shape))
            check(sorted(map(tuple, rows)) == sorted(map(tuple, x)), 'not a permutation')""", "ok")
    for seed in (-1, 2 ** 64, "'x'", NAN):
        add(g, f"image-seed-{seed}", f"image_loader(seed={seed})", "error")
    for i, shard in enumerate(("(2, 2)", "(-1, 2)", "(0, 0)", "(0, -1)", "3", "('a', 2)", "(0, 2 ** 64)")):
        add(g, f"image-shard-{shard}", f"image_loader(shard={shard})", "error", slow=i % 2 == 1)
        add(g, f"array-shard-{shard}", f"array_loader(shard={shard})", "error", slow=i % 2 == 0)
    for n, v in [("prefetch", -1), ("prefetch", 2 ** 40), ("crop_padding", -1), ("crop_padding", 2 ** 40)]:
        add(g, f"image-{n}-{v}", f"image_loader({n}={v})[0].next()", "error")
    for e, i in [(-1, 0), (0, 99), (0, -1), (2 ** 63, 0)]:
        add(g, f"image-seek-{e}-{i}", f"image_loader(batch_size=4)[0].seek({e}, {i})", "error")


# ---------------------------------------------------------------------------------------------
# Numerics: answers at the edges of float32, against numpy.

def numeric_cases():
    g = "numerics"
    x = "np.array([[1e30, -1e30, 0.0], [88.0, 89.0, -104.0], [-math.inf, 0.0, 1.0]], np.float32)"
    for i, (op, ref) in enumerate([
        ("autograd.softmax(T(x))", "np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)"),
        ("autograd.exp(T(x))", "np.exp(x.astype(np.float64)).astype(np.float32)"),
        ("autograd.relu(T(x))", "np.maximum(x, 0)"),
        ("autograd.sigmoid(T(x))", "1 / (1 + np.exp(-x.astype(np.float64)))"),
        ("autograd.tanh(T(x))", "np.tanh(x)"),
        ("autograd.log(T(np.abs(x)))", "np.log(np.abs(x).astype(np.float64))"),
        ("autograd.sqrt(T(np.array([-1.0, 0.0, 4.0])))", "np.array([math.nan, 0, 2])"),
        ("autograd.div(T([1.0, -1.0, 0.0]), T([0.0, 0.0, 0.0]))", "np.array([math.inf, -math.inf, math.nan])"),
        ("autograd.reduce_sum(T(np.full(10 ** 6, 0.1)), [0], 0)", "np.array(1e5)"),
        ("autograd.matmul(T(np.full((2, 3), 1e20)), T(np.full((3, 2), 1e20)))", "np.full((2, 2), math.inf)"),
    ]):
        with_x = "x = " + x + "\n"
        with_x += "with np.errstate(all='ignore'):\n    want = " + ref + "\n"
        add(g, f"{op.split('(')[0].split('.')[-1]}-edges-{i}",
            with_x + f"got = tensor.to_numpy({op})\nclose(got, want, tol=1e-4 if 'reduce_sum' not in '{op}' else 1e-2)",
            "ok")
    add(g, "softmax_cross_entropy-huge-logits", """
        s = np.array([[1e30, 0.0, -1e30], [0.0, 0.0, 0.0]], np.float32)
        got = tensor.to_numpy(autograd.softmax_cross_entropy(T(s), T([0, 2], np.int32))).item()
        close(got, (0.0 + math.log(3)) / 2)""", "ok")
    for t in (3, -1, 2 ** 31 - 1):
        add(g, f"softmax_cross_entropy-target-{t}",
            f"tensor.to_numpy(autograd.softmax_cross_entropy(T(np.zeros((2, 3))), T([0, {t}], np.int32)))", "error")
    for shape in ("(0, 3)", "(3, 0)", "(0,)"):
        add(g, f"empty-{shape}", f"""
            a = np.zeros({shape}, np.float32)
            close(tensor.to_numpy(autograd.relu(T(a))), a)
            close(tensor.to_numpy(autograd.add(T(a), T(a))), a)""", "ok")
    for name, call in [("from_numpy-str", "tensor.from_numpy(np.array(['a']), dev)"),
                       ("from_numpy-object", "tensor.from_numpy(np.array([1, None]), dev)"),
                       ("from_numpy-complex", "tensor.from_numpy(np.zeros(2, complex), dev)"),
                       ("reshape-bad", "autograd.reshape(T(np.zeros(6)), (4, 2))"),
                       ("reshape-negative", "autograd.reshape(T(np.zeros(6)), (-2, -3))"),
                       ("reshape-huge", "autograd.reshape(T(np.zeros(6)), (2 ** 62, 0))"),
                       ("reshape-str", "autograd.reshape(T(np.zeros(6)), 'ab')"),
                       ("matmul-shapes", "autograd.matmul(T(np.zeros((2, 3))), T(np.zeros((2, 3))))"),
                       ("add-shapes", "autograd.add(T(np.zeros(3)), T(np.zeros(4)))"),
                       ("add-none", "autograd.add(T(np.zeros(3)), None)"),
                       ("add-str", "autograd.add(T(np.zeros(3)), 'x')"),
                       ("transpose-axes", "autograd.transpose(T(np.zeros((2, 3))), (0, 0))"),
                       ("reduce_sum-axis", "autograd.reduce_sum(T(np.zeros((2, 3))), [5], 0)"),
                       ("Tensor-negative-shape", "tensor.Tensor((-1, 3), dev)"),
                       ("Tensor-huge-shape", "tensor.Tensor((2 ** 40, 2 ** 40), dev)"),
                       ("Tensor-huge-alloc", "tensor.to_numpy(tensor.Tensor((2 ** 26, 2 ** 20), dev))"),
                       ("Tensor-str-shape", "tensor.Tensor('ab', dev)"),
                       ("Tensor-float-shape", "tensor.Tensor((2.5, 3), dev)"),
                       ("Tensor-dtype", "tensor.Tensor((2, 3), dev, 'float128')"),
                       ("astype-bad", "T([1.0]).astype('complex64')"),
                       ("item-many", "T([1.0, 2.0]).item()"),
                       ("gaussian-std-nan", "tensor.Tensor((3,), dev).gaussian(0.0, math.nan)"),
                       ("uniform-reversed", "tensor.Tensor((3,), dev).uniform(1.0, -1.0)"),
                       ("set_num_threads-0", "device.set_num_threads(0)"),
                       ("set_num_threads-str", "device.set_num_threads('x')"),
                       ("set_num_threads-huge", "device.set_num_threads(2 ** 70)"),
                       ("SetRandSeed-negative", "dev.SetRandSeed(-1)"),
                       ("SetRandSeed-str", "dev.SetRandSeed('x')"),
                       ("cuda-device-str", "device.create_cuda_device('0')"),
                       ("SGD-lr-nan", "opt.SGD(lr=math.nan)"), ("SGD-lr-str", "opt.SGD(lr='x')"),
                       ("SGD-momentum-negative", "opt.SGD(lr=0.1, momentum=-1)"),
                       ("Adam-beta-2", "opt.Adam(beta_1=2.0)"), ("Adam-eps-str", "opt.Adam(epsilon='x')"),
                       ("Linear-negative", "layer.Linear(-1, 3)"), ("Linear-str", "layer.Linear('a', 3)"),
                       ("Linear-huge", "layer.Linear(2 ** 40, 2 ** 40, device=dev)"),
                       ("Conv2d-kernel-0", "layer.Conv2d(1, 4, 0)(T(np.zeros((1, 1, 4, 4))))"),
                       ("Conv2d-stride-0", "layer.Conv2d(1, 4, 3, stride=0)(T(np.zeros((1, 1, 4, 4))))"),
                       ("Dropout-2", "layer.Dropout(2.0)"), ("Dropout-nan", "layer.Dropout(math.nan)"),
                       ("MaxPool-0", "layer.MaxPool2d(0)(T(np.zeros((1, 1, 4, 4))))"),
                       ("method-on-None", "tensor.copy_from_numpy(None, np.ones(2))"),
                       ("Device-method-on-None", "loom.core.Device.name(None)"),
                       ("checkpoint-path-int", "__import__('loom.io').io.load_checkpoint(3)"),
                       ("mnist-path-list", "__import__('loom.io').io.load_mnist_dir(['a'])"),
                       ("checkpoint-missing", "__import__('loom.io').io.load_checkpoint(os.path.join(TMP, 'none'))"),
                       ("checkpoint-dir", "__import__('loom.io').io.load_checkpoint(TMP)"),
                       ("checkpoint-fifo", "p = os.path.join(TMP, 'f'); os.mkfifo(p); __import__('loom.io').io.load_checkpoint(p)"),
                       ("checkpoint-junk", "p = os.path.join(TMP, 'f'); open(p, 'wb').write(os.urandom(4000)); "
                                           "__import__('loom.io').io.load_checkpoint(p)"),
                       ("save-into-missing-dir", "__import__('loom.io').io.save_checkpoint(os.path.join(TMP, 'a', 'b'), {'w': T([1.0])})"),
                       ("save-not-tensors", "__import__('loom.io').io.save_checkpoint(os.path.join(TMP, 'c'), {'w': 3})"),
                       ("load_states-missing", "m = train_mlp(False, before=1, after=0); m.load_states(os.path.join(TMP, 'x'))"),
                       ("mnist-missing", "__import__('loom.io').io.load_mnist_dir(os.path.join(TMP, 'x'))"),
                       ("mnist-truncated", "write_idx(TMP, 10); p = os.path.join(TMP, 'train-images-idx3-ubyte'); "
                                           "b = open(p, 'rb').read(); open(p, 'wb').write(b[:100]); "
                                           "__import__('loom.io').io.load_mnist_dir(TMP)"),
                       ("clip-negative", "__import__('loom.clip').clip.set_grad_clip(opt.SGD(), max_norm=-1)"),
                       ("clip-nan", "__import__('loom.clip').clip.set_grad_clip(opt.SGD(), max_norm=math.nan)"),
                       ("schedule-str", "__import__('loom.schedule').schedule.ExponentialDecay('x', 1, 0.5)"),
                       ("schedule-steps-0", "__import__('loom.schedule').schedule.ExponentialDecay(0.1, 0, 0.5)"),
                       ("compile-not-tensors", "m = Mlp(); m.set_optimizer(opt.SGD()); m.compile([[[0.0] * 12]], is_train=True)"),
                       ("compile-precision", "m = Mlp(); m.set_optimizer(opt.SGD()); m.compile([mlp_data()[0]], precision='fp8')"),
                       ("train-wrong-shape", "m = train_mlp(True, before=1, after=0); m.train_one_batch(T(np.zeros((6, 5))), mlp_data()[1])"),
                       ("graph-dtype-change", "m = train_mlp(True, before=1, after=0); m.train_one_batch(T(np.zeros((6, 12)), np.float64), mlp_data()[1])"),
                       ]:
        add(g if not name.startswith(("checkpoint", "save", "load", "mnist")) else "files", name, call, "error")


# ---------------------------------------------------------------------------------------------
# graph_dump on files that are not graph dumps.

def graph_dump_cases():
    g = "graph_dump"
    tool = os.path.join(ROOT, "build", "graph_dump")
    run = (f"import signal, subprocess\nr = subprocess.run([{tool!r}, p], capture_output=True, text=True)\n"
           "if r.returncode < 0:  # the tool died of a signal: this case dies of it too (a crash)\n"
           "    signal.signal(-r.returncode, signal.SIG_DFL); os.kill(os.getpid(), -r.returncode)\n"
           "check(r.returncode > 0, f'exit {r.returncode}: {r.stdout[-200:]} {r.stderr[-200:]}')\n"
           "check(r.stderr.startswith('graph_dump:') or '[' in r.stderr, r.stderr[-300:])\n"
           "raise Refused(r.stderr.strip())\n")
    for name, setup in [("sparse-3GiB", "f = open(p, 'wb'); f.truncate(3 << 30); f.close()"),
                        ("sparse-64GiB", "f = open(p, 'wb'); f.truncate(64 << 30); f.close()"),
                        ("empty", "open(p, 'wb').close()"), ("junk", "open(p, 'wb').write(os.urandom(5000))"),
                        ("fifo", "os.mkfifo(p)"), ("dir", "os.mkdir(p)"), ("missing", "")]:
        add(g, name, f"p = os.path.join(TMP, 'dump.pb')\n{setup}\n" + run, "error")


# ---------------------------------------------------------------------------------------------
# Collectives: a 1-rank in-process communicator here, and 2 MPI ranks (the `mpi` cases, --all).

def comm_cases():
    g = "comm"
    one = "from loom import comm\nc = loom.core.inproc_communicator_of_one()\n"
    add(g, "inproc-all_reduce", one + "t = T([1.0, 2.0]); c.all_reduce(t); close(tensor.to_numpy(t), [1, 2])", "ok")
    add(g, "inproc-broadcast-root-kw", one + "t = T([1.0, 2.0]); c.broadcast(t, root=0); close(tensor.to_numpy(t), [1, 2])", "ok")
    for name, call in [("broadcast-root-1", "c.broadcast(T([1.0]), root=1)"),
                       ("broadcast-root-negative", "c.broadcast(T([1.0]), root=-1)"),
                       ("broadcast-root-str", "c.broadcast(T([1.0]), root='0')"),
                       ("all_reduce-op", "c.all_reduce(T([1.0]), op='mean')"),
                       ("all_reduce-int8", "c.all_reduce(tensor.from_numpy(np.zeros(2, np.uint8), dev))"),
                       ("all_reduce-none", "c.all_reduce(None)"),
                       ("backend-bad", "comm.communicator('gloo')"), ("backend-nccl-cpu", "comm.communicator('nccl')")]:
        add(g, "inproc-" + name, one + call, "error")
    mpi = ("import os\nfrom loom import comm\nos.environ.setdefault('LOOM_COMM_CHECK', '1')\n"
           "c = comm.communicator('mpi')\nr = c.rank()\n")
    for name, call in [("dtype", "t = tensor.from_numpy(np.ones(4, np.float32 if r == 0 else np.int32), dev); c.all_reduce(t)"),
                       ("count", "c.all_reduce(T(np.ones(4 + r)))"), ("op", "c.all_reduce(T(np.ones(4)), op='sum' if r == 0 else 'max')"),
                       ("root", "c.broadcast(T(np.ones(4)), root=r)"), ("kind", "t = T(np.ones(4)); c.all_reduce(t) if r == 0 else c.broadcast(t, root=0)")]:
        add(g, "mpi-mismatch-" + name, mpi + call, "error", slow=True, mpi=2)
    for v in ("inf", "1e300", "1e10"):
        add(g, f"mpi-timeout-{v}", f"os.environ['LOOM_COMM_TIMEOUT_S'] = '{v}'\n" + mpi
            + "t = T([1.0 + r]); c.all_reduce(t); close(tensor.to_numpy(t), [3.0])", "ok", slow=True, mpi=2)
    for v in ("nan", "-1", "abc", "0"):
        add(g, f"mpi-timeout-{v}", f"os.environ['LOOM_COMM_TIMEOUT_S'] = '{v}'\n" + mpi + "c.all_reduce(T([1.0]))",
            "error", slow=True, mpi=2)
    add(g, "mpi-broadcast-root-kw", mpi + "t = T([1.0 + r]); c.broadcast(t, root=1); close(tensor.to_numpy(t), [2.0])",
        "ok", slow=True, mpi=2)


def planted_cases():
    """One case per bad outcome, each bad on purpose: --selftest runs them, and test_probe.py
    checks that the probe names each outcome (a probe that cannot see a crash finds none)."""
    g = "selftest"
    for outcome, expect, code in [
        ("crash", "ok", "import ctypes; ctypes.string_at(0)"),  # SIGSEGV
        ("crash", "ok", "os.abort()"),
        ("crash", "ok", "os._exit(3)"),  # gone without a report
        ("hang", "ok", "import time\nwhile True: time.sleep(0.05)"),
        ("silent", "error", "autograd.relu(T([1.0]))"),
        ("silent", "ok", "close(tensor.to_numpy(autograd.relu(T([-1.0]))), [-1.0])"),
        ("untyped", "error", "int('x')"),
        ("failed", "ok", "autograd.add(T(np.zeros(3)), T(np.zeros(4)))"),
        ("lost", "ok", "p = os.path.join(TMP, 'f'); open(p, 'w').write('a'); before = snapshot(TMP); os.remove(p); "
                       "kept(before, TMP)"),
        ("typed", "error", "autograd.add(T(np.zeros(3)), T(np.zeros(4)))"),
        ("ok", "ok", "close(tensor.to_numpy(autograd.relu(T([-1.0, 2.0]))), [0.0, 2.0])"),
    ]:
        CASES.append(Case(g, f"{outcome}-{len([c for c in CASES if c.group == g])}", code, expect, timeout=3,
                          planted=outcome))


def api_cases():
    from probe_api import api_cases as sweep
    sweep(add)


for _make in (planted_cases, onnx_cases, onnx_deep_chain_cases, onnx_file_cases, onnx_export_cases, autograd_cases, graph_cases, trainer_cases, data_cases,
              numeric_cases, graph_dump_cases, comm_cases, api_cases):
    _make()
assert len({c.name for c in CASES}) == len(CASES), [c.name for c in CASES if sum(d.name == c.name for d in CASES) > 1]


# ---------------------------------------------------------------------------------------------
# Running one case (in the child) and many (in the parent).

MARK = "LOOM_PROBE_RESULT "


def child(name):
    """Runs one case in this process and prints its outcome as one JSON line."""
    case = next(c for c in CASES if c.name == name)
    ns = {}
    exec(PRELUDE, ns)
    loom = ns["loom"]
    try:
        exec(case.code, ns)
    except ns["Wrong"] as e:
        outcome, detail = "silent", str(e)
    except ns["Lost"] as e:
        outcome, detail = "lost", str(e)
    except loom.Error as e:
        outcome, detail = ("typed" if case.expect == "error" else "failed"), f"{type(e).__name__}: {e}"
    except BaseException as e:  # noqa: B036 - a built-in error escaping is the finding
        outcome, detail = "untyped", f"{type(e).__module__}.{type(e).__name__}: {e}"
    else:
        outcome, detail = ("ok" if case.expect == "ok" else "silent"), ("" if case.expect == "ok" else "no error")
    sys.stdout.flush()
    rank = os.environ.get("OMPI_COMM_WORLD_RANK")
    print(MARK + json.dumps({"outcome": outcome, "detail": detail[:500], "rank": rank}), flush=True)


def _results(out):
    """The children's result lines in `out`. mpirun interleaves the ranks' output, so one rank's
    line may begin or end in the middle of another's: each MARK is decoded where it starts."""
    decoder, results, i = json.JSONDecoder(), [], out.find(MARK)
    while i >= 0:
        end = i + len(MARK)
        try:
            result, end = decoder.raw_decode(out, end)
            results.append(result)
        except ValueError:  # cut off (a child killed while printing): not a result
            pass
        i = out.find(MARK, end)
    return results


def classify(case, rc, out, timed_out):
    results = _results(out)
    if timed_out:
        return "hang", "ran past the timeout"
    want = max(case.mpi, 1)
    if rc is not None and rc < 0:
        return "crash", f"signal {-rc} ({signal.Signals(-rc).name})"
    if len(results) < want:
        tail = " | ".join(out.strip().splitlines()[-3:])
        return "crash", f"exit {rc} without a result: {tail[-400:]}"
    bad = [r for r in results if r["outcome"] not in GOOD]
    r = bad[0] if bad else results[0]
    if len({x["outcome"] for x in results}) > 1 and not bad:
        return "silent", "the ranks disagree: " + "; ".join(x["outcome"] for x in results)
    return r["outcome"], r["detail"]


def run_case(case, timeout, python):
    tmp = tempfile.mkdtemp(prefix="loom-probe-")
    env = dict(os.environ, LOOM_PROBE_TMP=tmp, PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
    env.setdefault("LOOM_NUM_THREADS", "1")
    cmd = [python, os.path.abspath(__file__), "--child", case.name]
    if case.mpi:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-n", str(case.mpi), "-x", "LOOM_PROBE_TMP",
               "-x", "PYTHONPATH", "-x", "LOOM_NUM_THREADS"] + cmd
    limit = case.timeout or timeout
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp, text=True,
                         errors="replace", start_new_session=True)
    try:
        out, _ = p.communicate(timeout=limit)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        timed_out = True
    seconds = time.monotonic() - start
    shutil.rmtree(tmp, ignore_errors=True)
    outcome, detail = classify(case, p.returncode, out, timed_out)
    return {"case": case.name, "group": case.group, "expect": case.expect, "outcome": outcome, "detail": detail,
            "seconds": round(seconds, 2)}


def select(args):
    if args.selftest:
        return [c for c in CASES if c.planted]
    cases = [c for c in CASES if not c.planted and (args.all or not c.slow)]
    if args.only:
        keys = args.only.split(",")
        cases = [c for c in cases if any(c.group == k or c.name.startswith(k) for k in keys)]
    return cases


def summary(results):
    groups = sorted({r["group"] for r in results})
    head = f"{'group':<13}{'cases':>6}" + "".join(f"{o:>9}" for o in OUTCOMES)
    lines = [head, "-" * len(head)]
    for g in groups + ["total"]:
        rs = [r for r in results if g in ("total", r["group"])]
        lines.append(f"{g:<13}{len(rs):>6}" + "".join(f"{sum(r['outcome'] == o for r in rs):>9}" for o in OUTCOMES))
        if g == groups[-1]:
            lines.append("-" * len(head))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true", help="every case, the slow ones too")
    ap.add_argument("--only", help="comma-separated groups or case-name prefixes")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--selftest", action="store_true", help="run the planted cases, one per outcome, instead")
    ap.add_argument("--json", help="write every outcome to this file")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="children at a time (default 2)")
    ap.add_argument("--timeout", type=float, default=20, help="seconds before a case is a hang (default 20)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs the cases")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return 0
    cases = select(args)
    if args.list:
        for c in cases:
            print(f"{c.name}  ({c.expect}{', slow' if c.slow else ''})")
        return 0
    if any(c.mpi for c in cases) and not shutil.which("mpirun"):
        print("probe: mpirun not found: the mpi cases are left out", file=sys.stderr)
        cases = [c for c in cases if not c.mpi]
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda c: run_case(c, args.timeout, args.python), cases))
    if args.selftest:  # the probe itself is right when each planted case gets its outcome
        for r, c in zip(results, cases):
            r["planted"] = c.planted
        bad = [r for r in results if r["outcome"] != r["planted"]]
    else:
        bad = [r for r in results if r["outcome"] not in GOOD]
    for r in bad:
        print(f"{r['outcome']:>8}  {r['case']}: {r['detail']}")
    print(summary(results))
    print(f"probe: {len(results)} cases in {time.monotonic() - start:.0f}s, {len(bad)} bad")
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"cases": len(results), "bad": len(bad), "results": results}, f, indent=1)
        os.replace(tmp, args.json)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
