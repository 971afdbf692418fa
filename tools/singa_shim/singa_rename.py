"""A pytest plugin that renames SINGA's imports to loom's and nothing else (tools/singa_suite.sh).

`import singa.X` / `from singa import X` load loom.X (SINGA's SWIG module, singa.singa_wrap,
is loom.singa_wrap). The aliases are the loom modules
themselves (sys.modules holds the same object under both names), so a test sees exactly what a
script written for loom sees. Load it with `pytest -p singa_rename` with this folder on PYTHONPATH.
"""
import importlib
import importlib.abc
import importlib.util
import sys

_FROM, _TO = "singa", "loom"


def target_name(fullname):
    """The loom module that stands for SINGA's module `fullname` (None: not SINGA's)."""
    if fullname != _FROM and not fullname.startswith(_FROM + "."):
        return None
    return _TO + fullname[len(_FROM):]


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        name = target_name(fullname)
        if name is None:
            return None
        module = importlib.import_module(name)
        return importlib.util.spec_from_loader(fullname, self, is_package=hasattr(module, "__path__"),
                                               origin=name)

    def create_module(self, spec):
        return importlib.import_module(spec.origin)

    def exec_module(self, module):
        pass  # the loom module ran when it was imported


def install():
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())


install()
