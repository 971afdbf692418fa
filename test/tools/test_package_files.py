"""The Python package's build files agree with the CMake build they drive (pyproject.toml names
options, an install component and a version file that live elsewhere), and tools/wheel.sh refuses
bad arguments before it builds anything.

Needs no build. Run with `pytest -q test/tools`."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")


def read(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return f.read()


@pytest.fixture(scope="module")
def pyproject():
    return tomllib.loads(read("pyproject.toml"))


def test_cmake_defines_are_options_of_the_build(pyproject):
    cmake = read("CMakeLists.txt")
    defines = pyproject["tool"]["scikit-build"]["cmake"]["define"]
    assert defines == {"LOOM_BUILD_TESTS": "OFF", "LOOM_BUILD_PROGRAMS": "OFF"}
    for name in defines:
        assert re.search(rf"^option\({name} ", cmake, re.M), f"{name} is not an option in CMakeLists.txt"


def test_installed_components_are_the_ones_swig_installs(pyproject):
    components = pyproject["tool"]["scikit-build"]["install"]["components"]
    installed = set(re.findall(r"\bCOMPONENT (\w+)", read("swig/CMakeLists.txt")))
    assert components and set(components) <= installed, (components, installed)


def test_version_comes_from_the_package(pyproject):
    provider = pyproject["tool"]["scikit-build"]["metadata"]["version"]
    assert pyproject["project"]["dynamic"] == ["version"]
    m = re.search(r'^__version__ = "([0-9.]+)"$', read(provider["input"]), re.M)
    assert m, f"no __version__ in {provider['input']}"
    assert read("CMakeLists.txt").count(f"project(loom VERSION {'.'.join(m.group(1).split('.')[:2])} ") == 1


def test_license_is_the_apache_text(pyproject):
    assert pyproject["project"]["license"] == "Apache-2.0"
    text = read(pyproject["project"]["license-files"][0])
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def wheel_sh(*args):
    p = subprocess.run(["bash", os.path.join(ROOT, "tools", "wheel.sh"), *args], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout + p.stderr


def test_wheel_sh_refuses_a_define_without_a_value():
    rc, out = wheel_sh("--python", sys.executable, "-D", "LOOM_USE_CUDA")
    assert rc == 1 and "-D takes NAME=VALUE, not 'LOOM_USE_CUDA'" in out
    assert "building" not in out


def test_wheel_sh_refuses_an_unknown_argument_with_its_usage():
    rc, out = wheel_sh("--pyhton", sys.executable)
    assert rc == 2 and "unknown argument '--pyhton'" in out
    assert "tools/wheel.sh [--python PATH] [-D NAME=VALUE]..." in out


def test_wheel_sh_refuses_a_missing_python():
    rc, out = wheel_sh("--python", "/no/such/python3")
    assert rc == 1 and "no Python '/no/such/python3'" in out
