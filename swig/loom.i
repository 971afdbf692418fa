// loom.core: the SWIG-generated layer of the Python package. Users import `loom` (the pure-
// Python package in swig/python/loom/), which builds SINGA's API on these names.
//
// Note [Bindings come from the headers]
// SWIG reads the C++ headers themselves (%include "core/ops.h", "nn/layer.h", ...): no
// signature is typed twice, so a binding cannot drift from its declaration, and adding an op
// (declaration in core/ops.h, LOOM_OP registration, kernels) needs no edit under swig/:
// loom.core gets the function under the naming rule below and loom.autograd re-exports every
// core function that is a registered, user-facing op (test/python/test_bindings.py checks it).
// What a header declares that Python cannot use (std::function members, templates, raw
// pointers, references into C++ objects) is %ignore'd by name next to its %include, and a
// C++ signature that Python should see differently gets an adapter in loom_py (%inline)
// rather than a second declaration.
//
// The naming rule: a C++ function or method FooBar is foo_bar in Python (SWIG's undercase),
// except the members of Device and nn::Model, which keep SINGA's spellings (EnableGraph,
// RunGraph, Compile, ...). Exceptions to the rule are %rename'd where the header is included.
//
// One file per concern, in the order the types depend on each other:
//   errors.i    C++ exceptions -> loom.Error and its subclasses (ValueError, TypeError, ...)
//   typemaps.i  sequences <-> Shape, vectors of Tensors, (name, Tensor) lists
//   tensor.i    Tensor, dtypes, host copies and zero-copy facts
//   ops.i       the op functions (core/ops.h, core/ops_cnn.h), gradient mode, ops by name
//   device.i    Device, buffering and replay, memory statistics, graph dumps
//   comm.i      communicators (MPI, NCCL): rank, size, all_reduce of a tensor, barrier
//   nn.i        layers, optimizers, Model, zoo, PyStep (graph mode for Python step functions)
//   io.i        checkpoints (named tensors, optimizer state), MNIST / CIFAR-10 and the DataLoader
//   text.i      the text corpus and its byte-level BPE tokenizer, the default data folders
//   data.i      what Python's loom.data.DataLoader shares with C++'s: the epoch order, run states
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

// The naming rule (Note [Bindings come from the headers]). Of two matching rules the later wins.
%rename("%(undercase)s", %$isfunction) "";
%rename("%(regex:/^.*::(\\w+)$/\\1/)s", regextarget=1, fullname=1, %$isfunction) "^loom::(Device|nn::Model)::";

// Every smart-pointer type is declared before any signature mentions it: a declaration that
// comes later leaves the earlier uses wrapped as raw pointers into C++ objects (dangling once
// those die).
%shared_ptr(loom::Device)
%shared_ptr(loom::Communicator)

// One wrapper per function with default arguments, not an overload set: SWIG's overload
// dispatcher takes any TypeError raised inside (loom.DTypeError is one) for an argument mismatch
// and appends "Wrong number or type of arguments" to loom's message (errors.i).
%feature("compactdefaultargs");

%include "errors.i"
%include "typemaps.i"
%include "tensor.i"
%include "ops.i"
%include "device.i"
%include "comm.i"
%include "nn.i"
%include "io.i"
%include "text.i"
%include "data.i"
%include "onnx_export.i"
%include "onnx_import.i"
