// Gradient clipping as ops (Note [Clipping folded into the update] in core/ops/optimizer.cc).
//
// By global norm: norm = sqrt(sum of every gradient element squared) and
// scale = min(1, max_norm / (norm + eps)) are float64 device scalars made by ops, and each
// update multiplies its gradient by the scale as it reads it: no branch, no host read, nothing
// written back into the gradients (torch's clip_grad_norm_ computes the same scale). By value:
// each update clamps its gradient elements to [-clip_value, clip_value].
//
// Optimizer::SetGradClip(GradClip{...}) turns either on for Optimizer::Step; the functions below
// are the pieces, for code that drives its own updates.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace loom {
namespace nn {

struct GradClip {
  double max_norm = 0;    // > 0: clip by global 2-norm; 0: off
  double clip_value = 0;  // > 0: clamp each element to [-clip_value, clip_value]; 0: off
  double eps = 1e-6;      // added to the norm (torch's value)
  bool enabled() const { return max_norm > 0 || clip_value > 0; }
};
// ValueError naming the bad field: negative, not finite, or both kinds at once.
void CheckGradClip(const GradClip& clip);

// The 2-norm of all elements of `grads` together: a float64 scalar on their device (one op).
Tensor GlobalGradNorm(const std::vector<Tensor>& grads);
// min(1, max_norm / (norm + eps)) for a float64 scalar norm: a float64 scalar (device ops).
Tensor ClipScale(const Tensor& norm, double max_norm, double eps = 1e-6);

}  // namespace nn
}  // namespace loom
