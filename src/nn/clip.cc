#include "nn/clip.h"

#include <cmath>
#include <limits>

#include "core/op.h"
#include "core/ops.h"

LOOM_OP_KIND(grad_norm);

namespace loom {
namespace nn {

void CheckGradClip(const GradClip& c) {
  LOOM_CHECK(std::isfinite(c.max_norm) && c.max_norm >= 0, ValueError, "[clip] max_norm ", c.max_norm,
             ": must be a finite number >= 0 (0: no clipping by norm)");
  LOOM_CHECK(std::isfinite(c.clip_value) && c.clip_value >= 0, ValueError, "[clip] clip_value ", c.clip_value,
             ": must be a finite number >= 0 (0: no clipping by value)");
  LOOM_CHECK(std::isfinite(c.eps) && c.eps >= 0, ValueError, "[clip] eps ", c.eps, ": must be a finite number >= 0");
  LOOM_CHECK(!(c.max_norm > 0 && c.clip_value > 0), ValueError, "[clip] max_norm ", c.max_norm, " and clip_value ",
             c.clip_value, ": choose one kind of clipping");
}

Tensor GlobalGradNorm(const std::vector<Tensor>& grads) {
  LOOM_CHECK(!grads.empty(), ValueError, "[clip] no gradients to take the norm of");
  for (const Tensor& g : grads) {
    LOOM_CHECK(g.defined(), ValueError, "[clip] a gradient is undefined");
    LOOM_CHECK(g.device() == grads[0].device(), DeviceError, "[clip] gradients on different devices: ",
               grads[0].Describe(), " and ", g.Describe());
  }
  NoGradGuard no_grad;
  return Call1(op_kind::grad_norm, grads);
}

Tensor ClipScale(const Tensor& norm, double max_norm, double eps) {
  CheckGradClip(GradClip{max_norm, 0, eps});
  LOOM_CHECK(norm.dtype() == DType::kFloat64 && norm.numel() == 1, DTypeError, "[clip] the norm must be a float64 "
             "scalar, got ", norm.Describe());
  NoGradGuard no_grad;
  // max_norm / (norm + eps), at most 1; a NaN or infinite norm gives NaN or 0, as in torch.
  return ops::Clamp(ops::RDivScalar(ops::AddScalar(norm, eps), max_norm), 0.0,
                    1.0);
}

}  // namespace nn
}  // namespace loom
