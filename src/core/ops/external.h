// Ops whose value and gradient the host language computes (SINGA's Python autograd.Operator).
//
// Note [External ops]
// A user-defined operator computes its output y from inputs x with loom ops of its own, outside
// autograd, and says how to turn dy into dx with a function of its own. ops::External(y, xs, id)
// joins the two to autograd: it returns y itself (a view, no kernel) with a node whose backward
// calls the host's function for `id` (SetExternalBackward) with dy. The function's loom ops run
// like any backward's: at once eagerly, or recorded while a device captures, so a graph holds
// the operator's forward and backward as ordinary op records and replays them without calling
// the host again. Gradients do not flow into y (the host's result, made without history).
// An operator with several outputs joins them into one y first, so that its backward runs once
// with all their gradients (Note [Operators with several outputs] in swig/python/loom/autograd.py).
#pragma once

#include <functional>
#include <vector>

#include "core/op.h"

namespace loom {

// (id, dy, which inputs need a gradient) -> one gradient per input x (undefined: none).
using ExternalBackwardFn = std::function<std::vector<Tensor>(int64_t id, const Tensor& grad_output,
                                                             const std::vector<bool>& needs_input_grad)>;
// The host's dispatcher for every external op (one per process: the Python module sets it).
void SetExternalBackward(ExternalBackwardFn fn);

namespace ops {
// y: the host's result; xs: the inputs it was computed from (at least one) -> y, with autograd
// history back to xs when gradients are enabled and an x requires them.
Tensor External(const Tensor& y, const std::vector<Tensor>& xs, int64_t id);
}  // namespace ops

}  // namespace loom
