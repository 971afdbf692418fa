"""The package as users import it: the extension checked against the running Python (Note [One
extension per Python]) and every submodule reachable from a plain `import loom` (Note [Submodules on
demand])."""
import glob
import importlib.machinery
import os
import subprocess
import sys

import pytest

import loom
from conftest import python_env
from loom import _extension

# EXTENSION_SUFFIXES of a CPython other than this one (3.12's, or 3.13's under 3.12).
OTHER = (3, 13, 0) if sys.version_info[:2] == (3, 12) else (3, 12, 1)
OTHER_SUFFIXES = [f".cpython-3{OTHER[1]}-x86_64-linux-gnu.so", ".abi3.so", ".so"]
CP312 = [".cpython-312-x86_64-linux-gnu.so", ".abi3.so", ".so"]


def plant(tmp_path, *names):
    for n in ("__init__.py", "core.py") + names:
        (tmp_path / n).write_text("")
    return str(tmp_path)


def test_extension_for_this_python_passes(tmp_path):
    d = plant(tmp_path, "_core" + importlib.machinery.EXTENSION_SUFFIXES[0])
    assert _extension.problem(d) is None
    _extension.check(d)  # does not raise
    assert _extension.problem(os.path.dirname(loom.__file__)) is None  # the loom under test


def test_extension_for_another_python_names_both():
    # The loom under test as another CPython sees it: only this Python's file is there.
    msg = _extension.problem(os.path.dirname(loom.__file__), suffixes=OTHER_SUFFIXES, version=OTHER,
                             executable="/opt/other/bin/python3")
    assert msg is not None
    v = sys.version_info
    assert f"built for Python {v[0]}.{v[1]} (_core{importlib.machinery.EXTENSION_SUFFIXES[0]})" in msg
    assert f"this is Python 3.{OTHER[1]}.{OTHER[2]} (/opt/other/bin/python3)" in msg
    assert f"loads only _core{OTHER_SUFFIXES[0]}" in msg
    assert "tools/wheel.sh --python /opt/other/bin/python3" in msg
    assert "circular" not in msg


def test_extension_of_several_builds_lists_each(tmp_path):
    d = plant(tmp_path, "_core.cpython-310-x86_64-linux-gnu.so", "_core.cpython-313-x86_64-linux-gnu.so")
    msg = _extension.problem(d, suffixes=CP312, version=(3, 12, 0), executable="py")
    assert "built for Python 3.10, Python 3.13 (" in msg


def test_extension_of_another_interpreter_is_named_by_file(tmp_path):
    d = plant(tmp_path, "_core.pypy310-pp73-x86_64-linux-gnu.so")
    msg = _extension.problem(d, suffixes=CP312, version=(3, 12, 0), executable="py")
    assert "another interpreter (_core.pypy310-pp73-x86_64-linux-gnu.so)" in msg


def test_sources_without_extension_say_so(tmp_path):
    d = plant(tmp_path)
    msg = _extension.problem(d, suffixes=CP312, version=(3, 12, 0), executable="py")
    assert "the compiled extension (_core) is missing" in msg
    with pytest.raises(ImportError, match="is missing"):
        _extension.check(d)


def other_cpythons():
    """CPython 3.10-3.13 interpreters other than this one (pyenv's, where installed)."""
    here = os.path.realpath(sys.executable)
    found = []
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    for exe in sorted(glob.glob(os.path.join(root, "versions", "3.1[0-3].*", "bin", "python3"))):
        if os.path.realpath(exe) != here and f"{sys.version_info[0]}.{sys.version_info[1]}." not in exe:
            found.append(exe)
    return found


def test_import_under_another_python_names_both_versions():
    others = other_cpythons()
    if not others:
        pytest.skip("no other CPython 3.10-3.13 found under ~/.pyenv/versions")
    r = subprocess.run([others[0], "-c", "import loom"], capture_output=True, text=True, env=python_env(),
                       timeout=60)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: [loom] "), r.stderr
    assert f"built for Python {sys.version_info[0]}.{sys.version_info[1]}" in last
    assert "circular import" not in r.stderr


def test_every_submodule_is_an_attribute_after_import_loom():
    pkg = os.path.dirname(loom.__file__)
    names = sorted(f[:-3] for f in os.listdir(pkg) if f.endswith(".py") and not f.startswith("_"))
    assert {"clip", "launch", "trainer", "sonnx"} <= set(names)
    # A fresh interpreter: in this one, other tests may have imported them already.
    code = ("import sys, types, loom\n"
            f"names = {names!r}\n"
            "assert 'loom.clip' not in sys.modules\n"
            "assert all(isinstance(getattr(loom, n), types.ModuleType) for n in names)\n"
            "assert set(names) <= set(dir(loom))\n"
            "try:\n    loom.no_such_module\nexcept AttributeError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=python_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "module 'loom' has no attribute 'no_such_module'"


def test_launch_runs_as_main_without_warning():
    # -W error: runpy's warning that the package imported loom.launch before running it fails.
    r = subprocess.run([sys.executable, "-W", "error", "-m", "loom.launch", "--help"], capture_output=True,
                       text=True, env=python_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "python3 -m loom.launch -n 2 train.py" in r.stdout
    assert r.stderr == ""
