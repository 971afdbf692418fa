// loom.core: the SWIG-generated layer of the Python package. Users import `loom` (the pure-
// Python package in swig/python/loom/), which builds SINGA's API on these names.
//
// One file per concern, in the order the types depend on each other:
//   errors.i    C++ exceptions -> loom.Error and its subclasses (ValueError, TypeError, ...)
//   typemaps.i  sequences <-> Shape, vectors of Tensors, (name, Tensor) lists
//   tensor.i    Tensor, dtypes, host copies and zero-copy facts
//   device.i    Device, buffering and replay, memory statistics, graph dumps
//   ops.i       the op functions and autograd
//   nn.i        layers, optimizers, Model, zoo, PyStep (graph mode for Python step functions)
//   cnn.i       convolution, pooling, normalisation ops and layers (when built)
//   io.i        checkpoints (named tensors, optimizer state), MNIST / CIFAR-10 and the DataLoader
%module(package="loom") core

// Python names such as sum, max, abs, pow and slice are deliberate: they live in loom.core and
// loom.autograd, never in builtins.
#pragma SWIG nowarn=321

%{
#define SWIG_FILE_WITH_INIT
#include <memory>
#include <string>
#include <utility>
#include <vector>
%}

%include <stdint.i>
%include <std_string.i>
%include <std_shared_ptr.i>

// Every smart-pointer type is declared before any signature mentions it: a declaration that
// comes later leaves the earlier uses wrapped as raw pointers into C++ objects (dangling once
// those die).
%shared_ptr(loom::Device)

%include "errors.i"
%include "typemaps.i"
%include "tensor.i"
%include "device.i"
%include "ops.i"
%include "nn.i"
#ifdef LOOM_PY_CNN
%include "cnn.i"
#endif
%include "io.i"

%pythoncode %{
HAVE_CNN = "global_avg_pool" in globals()
%}
