"""loom.singa_wrap: the names of SINGA's SWIG module (singa.singa_wrap) that SINGA's Python code
and tests call, over loom's own core.

SINGA's C++ tensor and its Python tensor are two objects (`t.data` is the C++ one); loom's
Tensor is both, so `singa_wrap.Tensor` is loom's Tensor and the free functions here take and
return loom tensors. SINGA's dtype constants (kFloat32, kInt, ...) are loom's DType enum values,
which `Tensor.data_type()` returns and `Tensor.AsType` accepts. Handles (BatchNormHandle,
PoolingHandle, ...) are descriptions of the op's settings that the functions below read.
"""
from . import core, errors
from .core import Tensor

USE_CUDA = bool(core.cuda_available())
USE_DNNL = False  # SINGA's oneDNN code paths: loom chooses its CPU kernels itself
USE_DIST = bool(core.mpi_built())

kFloat16 = core.DType_kFloat16
kFloat32 = core.DType_kFloat32
kFloat64 = core.DType_kFloat64
kInt = core.DType_kInt32
kInt64 = core.DType_kInt64
kUChar = core.DType_kUInt8
kBool = core.DType_kBool


def Gaussian(mean, std, t):
    """Fills t in place with N(mean, std) samples."""
    _tensor("Gaussian", t).gaussian(mean, std)


def Uniform(low, high, t):
    """Fills t in place with U(low, high) samples."""
    _tensor("Uniform", t).uniform(low, high)


def _tensor(fn, t):
    if not isinstance(t, Tensor):
        raise errors.TypeError(f"[singa_wrap.{fn}] expects a Tensor, got {type(t).__name__}")
    return t
