// Note [Loss scaling] (loss_scale.h).
#include "nn/loss_scale.h"

#include <cmath>
#include <limits>

#include "core/device.h"
#include "core/ops.h"

LOOM_OP_KIND(unscale_grads);
LOOM_OP_KIND(update_loss_scale);

namespace loom {
namespace nn {

void CheckLossScaling(const LossScaling& s) {
  LOOM_CHECK(std::isfinite(s.init_scale) && s.init_scale > 0 && s.init_scale <= std::numeric_limits<float>::max(),
             ValueError, "[loss scaling] init_scale ", s.init_scale, ": must be a finite number > 0 that float32 holds");
  LOOM_CHECK(std::isfinite(s.growth) && s.growth > 1, ValueError, "[loss scaling] growth ", s.growth,
             ": must be a finite number > 1");
  LOOM_CHECK(s.backoff > 0 && s.backoff < 1, ValueError, "[loss scaling] backoff ", s.backoff, ": must lie in (0, 1)");
  LOOM_CHECK(s.interval >= 1, ValueError, "[loss scaling] interval ", s.interval, ": must be >= 1 step");
}

LossScaleState MakeLossScaleState(const std::shared_ptr<Device>& dev, const LossScaling& s) {
  CheckLossScaling(s);
  Device::SetupScope setup(dev.get());
  LossScaleState st{ops::Full({}, s.init_scale, DType::kFloat32, dev), ops::Zeros({}, DType::kFloat64, dev),
                    ops::Zeros({}, DType::kFloat64, dev), ops::Zeros({}, DType::kFloat32, dev)};
  for (const Tensor* t : {&st.scale, &st.good, &st.skipped, &st.found_inf}) t->block()->set_persistent(true);
  return st;
}

LossScaleReading Read(const LossScaleState& state) {
  return {state.scale.Item(), int64_t(state.good.Item()), int64_t(state.skipped.Item())};
}

void Write(const LossScaleState& state, const LossScaleReading& r) {
  LOOM_CHECK(std::isfinite(r.scale) && r.scale > 0 && r.scale <= std::numeric_limits<float>::max(), ValueError,
             "[loss scaling] scale ", r.scale, ": must be a finite number > 0 that float32 holds");
  LOOM_CHECK(r.good_steps >= 0 && r.skipped_steps >= 0, ValueError, "[loss scaling] step counts ", r.good_steps,
             " and ", r.skipped_steps, " must be >= 0");
  const float scale = float(r.scale);
  const double good = double(r.good_steps), skipped = double(r.skipped_steps);
  Tensor s = state.scale, g = state.good, k = state.skipped;  // handles on the same blocks
  s.CopyFromHost(&scale, sizeof scale);
  g.CopyFromHost(&good, sizeof good);
  k.CopyFromHost(&skipped, sizeof skipped);
}

void UnscaleGradients(const std::vector<Tensor>& grads, const LossScaleState& state) {
  LOOM_CHECK(!grads.empty(), ValueError, "[loss scaling] no gradients to unscale");
  for (const Tensor& g : grads) {
    LOOM_CHECK(g.defined(), ValueError, "[unscale_grads] a gradient is undefined");
    LOOM_CHECK(g.device() == state.scale.device(), DeviceError, "[unscale_grads] gradient ", g.Describe(),
               " is not on the loss scale's device ", state.scale.device()->name(),
               ": loss scaling keeps one scale per device; unscale each device's gradients with its own");
    LOOM_CHECK(g.is_contiguous(), ValueError, "[unscale_grads] gradient ", g.Describe(), " must be contiguous");
  }
  NoGradGuard no_grad;
  std::vector<Tensor> in = grads, out = grads;
  in.push_back(state.scale);
  in.push_back(state.found_inf);
  out.push_back(state.found_inf);
  CallInto(op_kind::unscale_grads, in, out);
}

void UpdateLossScale(const LossScaleState& state, const LossScaling& s) {
  CheckLossScaling(s);
  NoGradGuard no_grad;
  CallInto(op_kind::update_loss_scale, {state.scale, state.good, state.skipped, state.found_inf},
           {state.scale, state.good, state.skipped},
           Attrs{{"growth", s.growth}, {"backoff", s.backoff}, {"interval", s.interval}});
}

}  // namespace nn
}  // namespace loom
