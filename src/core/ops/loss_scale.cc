// The ops of dynamic loss scaling (Note [Loss scaling] in nn/loss_scale.h): unscale the
// gradients and find non-finite ones, then move the scale. Device scalars in, device scalars
// out, no host read, so a captured step replays them.
#include <cmath>

#include "core/ops/common.h"

namespace loom {

using namespace opdecl;

namespace {
void CheckScalar(const char* op, const TensorMeta& m, DType dt, const char* what) {
  LOOM_CHECK(m.dtype == dt && NumElements(m.shape) == 1, DTypeError, "[", op, "] ", what, " must be a ", Name(dt),
             " scalar, got ", Name(m.dtype), " ", ToString(m.shape));
}
}  // namespace

// inputs: g_1 ... g_n (float32 or float64, any shapes, contiguous), scale (float32 scalar),
// found_inf (float32 scalar) -> outputs: g_1 ... g_n, found_inf, all in place.
// Every element of every g_k becomes g_k[i] * (1 / scale), the reciprocal rounded to float32
// (exact for a power of two, as the scale always is); found_inf is then written (not
// accumulated): 1 when any of those products is NaN or infinite, else 0. Its old value is not
// read; it is an input so that the flag keeps one block, which the updates read.
LOOM_OP(unscale_grads) {
  def.internal = "nn::Optimizer's loss scaling (Note [Loss scaling]), reached through precision fp16";
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    LOOM_CHECK(in.size() >= 3, ValueError, "[unscale_grads] takes the gradients, the scale and the found_inf flag (",
               "at least 3 inputs), got ", in.size());
    const size_t n = in.size() - 2;
    for (size_t k = 0; k < n; ++k) CheckFloat("unscale_grads", in[k], "gradient");
    CheckScalar("unscale_grads", in[n], DType::kFloat32, "scale");
    CheckScalar("unscale_grads", in[n + 1], DType::kFloat32, "found_inf");
    std::vector<TensorMeta> out(in.begin(), in.begin() + int64_t(n));
    out.push_back(in[n + 1]);
    return out;
  };
}

// inputs: scale (float32 scalar), good_steps, skipped_steps (float64 scalars), found_inf
// (float32 scalar) -> outputs: scale, good_steps, skipped_steps, in place. attrs: growth (> 1),
// backoff (in (0, 1)), interval (>= 1). With found_inf set: scale *= backoff, good_steps = 0,
// skipped_steps += 1. Otherwise good_steps += 1, and when it reaches interval: scale *= growth
// (kept when the product is not finite in float32) and good_steps = 0. torch.amp.GradScaler's
// update, on the device (optim::NextLossScale in device/optimizer_formulas.h).
LOOM_OP(update_loss_scale) {
  def.internal = "nn::Optimizer's loss scaling (Note [Loss scaling]), reached through precision fp16";
  def.attrs = {{"growth", kFloat}, {"backoff", kFloat}, {"interval", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("update_loss_scale", in, 4);
    CheckScalar("update_loss_scale", in[0], DType::kFloat32, "scale");
    CheckScalar("update_loss_scale", in[1], DType::kFloat64, "good-step count");
    CheckScalar("update_loss_scale", in[2], DType::kFloat64, "skipped-step count");
    CheckScalar("update_loss_scale", in[3], DType::kFloat32, "found_inf");
    const double growth = a.Float("growth"), backoff = a.Float("backoff");
    const int64_t interval = a.Int("interval");
    LOOM_CHECK(std::isfinite(growth) && growth > 1, ValueError, "[update_loss_scale] growth ", growth,
               ": must be a finite number > 1");
    LOOM_CHECK(backoff > 0 && backoff < 1, ValueError, "[update_loss_scale] backoff ", backoff, ": must lie in (0, 1)");
    LOOM_CHECK(interval >= 1, ValueError, "[update_loss_scale] interval ", interval, ": must be >= 1");
    return std::vector<TensorMeta>{in[0], in[1], in[2]};
  };
}

}  // namespace loom
