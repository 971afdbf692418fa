"""Is the compiled half of loom (the SWIG extension _core) built for the Python that imports it?

Imported by loom/__init__.py before anything that needs the extension; it needs nothing but the
standard library, so it runs under any Python 3.

Note [One extension per Python]
The extension is built for one interpreter: its file name says which
(_core.cpython-311-x86_64-linux-gnu.so is CPython 3.11's), and an interpreter loads only the
names in its own importlib.machinery.EXTENSION_SUFFIXES. Another Python that finds the package
(through PYTHONPATH, a .pth file, a virtualenv made from another base) sees no _core at all, and
`from . import _core` inside the half-imported package fails with Python's own guess, "most likely
due to a circular import". So the package looks first and says which Python the extension was
built for, which Python is running, and how to get a build for it.
"""
import importlib.machinery
import os
import re
import sys

_CPYTHON_TAG = re.compile(r"^_core\.cpython-(\d)(\d+)")


def _built_for(name):
    """'Python 3.11' for _core.cpython-311-....so, else the file name itself."""
    m = _CPYTHON_TAG.match(name)
    return f"Python {m.group(1)}.{m.group(2)}" if m else f"another interpreter ({name})"


def problem(package_dir, suffixes=None, version=None, executable=None):
    """None when package_dir holds _core built for this interpreter, else what is wrong.

    suffixes, version (sys.version_info-like) and executable stand for the running interpreter's
    (importlib.machinery.EXTENSION_SUFFIXES, sys.version_info, sys.executable); the tests pass
    other ones."""
    suffixes = importlib.machinery.EXTENSION_SUFFIXES if suffixes is None else suffixes
    version = sys.version_info if version is None else version
    executable = sys.executable if executable is None else executable
    try:
        names = sorted(os.listdir(package_dir))
    except OSError as e:
        return f"[loom] cannot list the package folder {package_dir}: {e}"
    wanted = {"_core" + s for s in suffixes}
    if any(n in wanted for n in names):
        return None
    running = f"Python {version[0]}.{version[1]}.{version[2]} ({executable})"
    built = [n for n in names if n.startswith("_core.") and not n.endswith((".py", ".pyc"))]
    if not built:
        return (f"[loom] the compiled extension (_core) is missing from {package_dir}: this is the source "
                f"of the package, not a build. Install loom for {running} with `{executable} -m pip install "
                f"<loom's repository>`, or build it (tools/setup.sh) and put <build>/python on PYTHONPATH")
    targets = ", ".join(sorted({_built_for(n) for n in built}))
    return (f"[loom] {package_dir} holds the extension built for {targets} ({', '.join(built)}), but this is "
            f"{running}, which loads only _core{suffixes[0]}. Install loom for this Python "
            f"(`{executable} -m pip install <loom's repository>`, or tools/wheel.sh --python {executable}), "
            f"or run it with {targets}")


def check(package_dir):
    """Raises ImportError saying what is wrong when package_dir has no _core for this Python."""
    message = problem(package_dir)
    if message:
        raise ImportError(message)
