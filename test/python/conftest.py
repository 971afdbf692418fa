"""pytest set-up for loom's Python tests: finds the module and gives each test a clean device.

Which loom is tested: $LOOM_BUILD_DIR/python when LOOM_BUILD_DIR is set (relative to the
repository root), else whatever `import loom` finds (PYTHONPATH, or the loom.pth that
tools/setup.sh installs), else <repo>/build/python."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _build_python(build):
    return os.path.join(build if os.path.isabs(build) else os.path.join(ROOT, build), "python")


if os.environ.get("LOOM_BUILD_DIR"):
    sys.path.insert(0, _build_python(os.environ["LOOM_BUILD_DIR"]))
try:
    import loom  # noqa: F401
except ImportError:
    sys.path.insert(0, _build_python("build"))
    import loom  # noqa: F401


@pytest.fixture
def dev():
    """The CPU device, with no graphs and the default graph options before and after the test."""
    from loom import device
    d = device.create_cpu_device()
    defaults = loom.core.new_graph(d, "defaults", None).options()  # GraphOptions() as a dict
    d.ResetGraph()
    d.set_graph_options(**defaults)
    d.SetRandSeed(1234)
    yield d
    if d.buffering():  # a failed test must not leave the device capturing for the next one
        d.EnableGraph(False)
    d.ResetGraph()
    d.set_graph_options(**defaults)


@pytest.fixture
def root():
    return ROOT


def python_env():
    """Environment for subprocesses running examples: the same loom as this process."""
    import loom as _loom
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(_loom.__file__))
    env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@pytest.fixture(autouse=True)
def _autograd_training_restored():
    """SINGA's autograd.training is process-wide and Model.train()/eval() set it: each test gets
    back the value it started with, so no test's mode leaks into the next (y.creator, dropout and
    batch norm read it)."""
    from loom import autograd
    saved = autograd.training
    yield
    autograd.training = saved
