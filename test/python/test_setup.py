"""tools/setup.sh's modes (docs/guide.md, "Without root"): LOOM_SETUP_APT=0 checks no Debian package and
goes on to the data, the configure and the build of an existing build folder; --demo checks only the
demo's packages; anything else is refused with the usage."""
import os
import shutil
import subprocess

import pytest

from conftest import ROOT


def build_dir():
    import loom
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(loom.__file__))))
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        pytest.skip(f"loom is not imported from a build folder ({build})")
    return build


def run_setup(cmd):
    env = dict(os.environ, LOOM_BUILD_DIR=build_dir())
    return subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)


def test_setup_without_apt_goes_on_to_the_build():
    r = run_setup("LOOM_SETUP_APT=0 bash tools/setup.sh --demo")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "setup: packages: not checked (LOOM_SETUP_APT=0: CMake finds what your toolchain has)"
    assert any(line.startswith("setup: data: digits") for line in lines)
    assert any(line.startswith("setup: build: ") for line in lines), r.stdout
    assert not any("onnxruntime" in line for line in lines)  # the tests' runtime is not the demo's


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="not a Debian system: setup.sh's package step is Debian's")
def test_setup_demo_checks_the_demos_packages_and_refuses_other_arguments():
    r = run_setup("bash tools/setup.sh --demo")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0].endswith("present (the demo's)"), r.stdout
    with open(os.path.join(ROOT, "tools/setup.sh"), encoding="utf-8") as f:
        script = f.read()
    demo = script[script.index("DEMO_PACKAGES=("):script.index(")", script.index("DEMO_PACKAGES=("))]
    for extra in ("libgtest-dev", "python3-torch", "clang", "openmpi-bin", "swig"):
        assert extra not in demo and extra in script, extra
    r = run_setup("bash tools/setup.sh --everything")
    assert r.returncode == 2 and "usage: tools/setup.sh [--demo | --gpu-bundle]" in r.stderr


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="not a Debian system: setup.sh's package step is Debian's")
def test_setup_gpu_bundle_sets_up_what_the_bundle_packs_and_builds_nothing():
    """tools/gpu_bundle.sh's first step: its packages, the data, cudnn-frontend; no configure, no build."""
    build = build_dir()
    before = os.path.getmtime(os.path.join(build, "build.ninja"))
    r = run_setup("bash tools/setup.sh --gpu-bundle")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].endswith("present (the GPU bundle's)"), r.stdout
    assert not any(l.startswith(("setup: configure", "setup: build", "setup: onnxruntime")) for l in lines), r.stdout
    assert os.path.getmtime(os.path.join(build, "build.ninja")) == before
    with open(os.path.join(ROOT, "tools/setup.sh"), encoding="utf-8") as f:
        script = f.read()
    bundle = script[script.index("BUNDLE_PACKAGES=("):script.index(")", script.index("BUNDLE_PACKAGES=("))]
    for needed in ("libgtest-dev", "swig", "libopenmpi-dev"):  # the GPU tests, the Python module, MPI
        assert needed in bundle, needed
    assert "python3-torch" not in bundle
