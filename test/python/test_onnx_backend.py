"""ONNX's own backend node tests (onnx.backend.test) through loom's importer (loom.sonnx).

Every node test whose ops are all in the importer's registry (loom.sonnx.supported_ops(), which
is generated from the C++ registry) runs through ONNX's BackendTest runner: it must pass, or be
skipped by the runner because LoomBackend.is_compatible refused the model at import (an attribute,
opset or dtype loom does not implement: the reasons are printed). Tests with an op outside the
registry are counted as skipped-unsupported. The test prints the three counts.

The node tests come from the onnx package's backend/test/data, or from Debian's libonnx-testdata
(/usr/share/libonnx-testdata/data) when the package has no data; tools/setup.sh installs both.
"""
import collections
import functools
import glob
import os
import unittest

import pytest

try:
    import onnx
    import onnx.backend.test
    import onnx.backend.test.runner as onnx_runner
    from onnx.backend.test.loader import DATA_DIR as ONNX_DATA_DIR
except ImportError as e:  # pragma: no cover - depends on the machine
    pytest.skip(f"the onnx package is not installed ({e}); tools/setup.sh installs python3-onnx", allow_module_level=True)

import numpy as np

from loom import onnx_import, sonnx

# onnx 1.12's runner compares dtypes with np.object, which numpy 1.24 removed (Debian ships the
# two together); the alias it meant is the builtin.
if "object" not in np.__dict__:
    np.object = object

DEBIAN_DATA_DIR = "/usr/share/libonnx-testdata/data"
# A floor on the passing count, so that a registry or runner change that quietly turns most tests
# into skips fails here (711 pass with onnx 1.12's node tests when this was written).
MIN_PASSED = 670


def _data_dir():
    for d in (ONNX_DATA_DIR, DEBIAN_DATA_DIR):
        if glob.glob(os.path.join(d, "node", "test_*", "model.onnx")):
            return d
    pytest.skip(f"no ONNX backend node tests in {ONNX_DATA_DIR} or {DEBIAN_DATA_DIR}; tools/setup.sh installs "
                "python3-onnx and libonnx-testdata")


def _node_tests(data_dir):
    """{test name: set of op types} for every node test."""
    out = {}
    for model_path in sorted(glob.glob(os.path.join(data_dir, "node", "test_*", "model.onnx"))):
        m = onnx.load(model_path)
        out[os.path.basename(os.path.dirname(model_path))] = {n.op_type for n in m.graph.node}
    return out


def test_supported_ops_come_from_the_registry():
    ops = sonnx.supported_ops()
    assert ops == sorted(set(ops)) and len(ops) >= 75
    ranges = onnx_import.supported_op_ranges()
    assert {r[0] for r in ranges} == set(ops)
    for op, since, until in ranges:
        assert 1 <= since <= until, (op, since, until)
    # Every op the registry declares has at least one ONNX node test that exercises it, or is
    # named here with the reason it has none.
    tests = _node_tests(_data_dir())
    covered = set().union(*tests.values())
    without_tests = set(ops) - covered
    assert without_tests <= {"Size"}, without_tests  # onnx 1.12 ships no Size node test


def test_onnx_backend_node_tests():
    data_dir = _data_dir()
    tests = _node_tests(data_dir)
    supported = set(sonnx.supported_ops())
    runnable = sorted(name for name, ops in tests.items() if ops <= supported)
    unsupported_op = sorted(set(tests) - set(runnable))

    # ONNX's runner reads onnx's own data folder; point it at the one found (node tests only).
    original = onnx_runner.load_model_tests

    def node_tests_only(data_dir_=data_dir, kind=None):
        return original(data_dir_, kind) if kind == "node" else []

    onnx_runner.load_model_tests = functools.partial(node_tests_only, data_dir)
    try:
        backend_test = onnx.backend.test.BackendTest(sonnx.LoomBackend, __name__)
    finally:
        onnx_runner.load_model_tests = original
    for name in runnable:
        backend_test.include(f"^{name}_cpu$")
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for case in backend_test.test_cases.values():
        for t in loader.loadTestsFromTestCase(case):
            if t._testMethodName.endswith("_cpu") and t._testMethodName[: -len("_cpu")] in runnable:
                suite.addTest(t)
    result = unittest.TextTestRunner(verbosity=0, stream=open(os.devnull, "w")).run(suite)

    skipped = {t._testMethodName[: -len("_cpu")]: why for t, why in result.skipped}
    failed = [(t._testMethodName, tb) for t, tb in result.failures + result.errors]
    passed = result.testsRun - len(result.skipped) - len(failed)
    reasons = collections.Counter()
    for name, why in sorted(skipped.items()):
        assert why == "Not compatible with backend", (name, why)
        problem = onnx_import.import_problem(os.path.join(data_dir, "node", name, "model.onnx"))
        assert problem, f"{name}: skipped as incompatible, but it imports"
        reasons[problem.split(": ", 1)[-1].split(";")[0][:90]] += 1
    print(f"\nONNX backend node tests ({data_dir}): {passed} passed, "
          f"{len(unsupported_op) + len(skipped)} skipped as unsupported "
          f"({len(unsupported_op)} with an op outside loom's {len(supported)}, {len(skipped)} refused at import), "
          f"{len(failed)} failed")
    for why, n in reasons.most_common():
        print(f"  refused at import x{n}: {why}")
    for name, tb in failed:
        print(f"FAILED {name}:\n{tb}")
    assert result.testsRun == len(runnable)
    assert not failed, f"{len(failed)} backend tests failed: {[n for n, _ in failed]}"
    assert passed >= MIN_PASSED, f"only {passed} backend tests passed (expected at least {MIN_PASSED})"
