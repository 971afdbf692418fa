#include "nn/step_monitor.h"

#include "core/autograd.h"
#include "core/ops.h"
#include "core/device.h"
#include "graph/step.h"

namespace loom {
namespace nn {

StepMonitor::StepMonitor(std::shared_ptr<Device> dev, NamedTensors watched, bool use_graph, GraphOptions options)
    : dev_(std::move(dev)), watched_(std::move(watched)), use_graph_(use_graph), options_(options) {
  LOOM_CHECK(dev_, DeviceError, "[step_monitor] no device");
  CheckGraphOptions(options_);
  for (const auto& kv : watched_)
    LOOM_CHECK(kv.second.defined() && kv.second.device() == dev_.get(), DeviceError, "[step_monitor] watched tensor '",
               kv.first, "' is not on ", dev_->name());
  Device::SetupScope setup(dev_.get());
  for (Tensor* t : {&steps_, &first_bad_, &loss_sum_}) {
    *t = ops::Zeros({}, DType::kFloat64, dev_);
    t->block()->set_persistent(true);
  }
}

StepMonitor::~StepMonitor() = default;

std::vector<Tensor> StepMonitor::Step(const std::vector<Tensor>& in) {
  // Note [Non-finite steps are caught on the device] in step_monitor.h.
  Tensor loss = ops::Cast(in[0], DType::kFloat64);
  Tensor zero_or_nan = ops::MulScalar(loss, 0.0);
  for (const auto& kv : watched_)
    zero_or_nan = ops::Add(zero_or_nan, ops::Cast(ops::Sum(ops::MulScalar(kv.second, 0.0)), DType::kFloat64));
  Tensor bad = ops::Cast(ops::NotEqual(zero_or_nan, zero_or_nan), DType::kFloat64);
  Tensor step = ops::AddScalar(steps_, 1.0);
  Tensor none_yet = ops::Cast(ops::Equal(first_bad_, ops::Zeros({}, DType::kFloat64, dev_)), DType::kFloat64);
  ops::CopyInto(first_bad_, ops::Add(first_bad_, ops::Mul(ops::Mul(none_yet, bad), step)));
  ops::CopyInto(steps_, step);
  ops::CopyInto(loss_sum_, ops::Add(loss_sum_, loss));
  return {};
}

void StepMonitor::Record(const Tensor& loss) {
  // A scalar, or one value of another shape: SINGA's losses are (1,) (Note [Loss shape] in
  // swig/python/loom/autograd.py).
  LOOM_CHECK(loss.defined() && loss.numel() == 1 && IsFloating(loss.dtype()), ShapeError,
             "[step_monitor] the loss must be a floating-point scalar, got ",
             loss.defined() ? loss.Describe() : "none");
  NoGradGuard no_grad;
  Tensor l = loss.ndim() == 0 ? loss.Detach() : ops::Reshape(loss.Detach(), {});
  if (use_graph_) {
    if (!step_)
      step_ = std::make_unique<CapturedStep>(
          dev_, [this](const std::vector<Tensor>& in) { return Step(in); }, "step_monitor", /*recapture=*/true,
          /*sequential=*/true, options_);
    (*step_)({l});
  } else {
    Step({l});
  }
  ++losses_;
}

StepMonitor::Reading StepMonitor::Read(bool restart_loss_sum) {
  NoGradGuard no_grad;
  std::vector<double> v =  // one host read of the three scalars (a read synchronises with the device)
      ops::Concat({ops::Reshape(steps_, {1}), ops::Reshape(first_bad_, {1}), ops::Reshape(loss_sum_, {1})}, 0)
          .ToVector<double>();
  Reading r;
  r.steps = int64_t(v[0]);
  r.first_bad = int64_t(v[1]);
  r.loss_sum = v[2];
  r.losses = losses_;
  if (restart_loss_sum) {
    ops::Fill(loss_sum_, 0.0);
    losses_ = 0;
  }
  return r;
}

void StepMonitor::SetSteps(int64_t steps, double loss_sum, int64_t losses) {
  LOOM_CHECK(steps >= 0 && losses >= 0, ValueError, "[step_monitor] step count ", steps, " or loss count ", losses,
             " is negative");
  ops::Fill(steps_, double(steps));
  ops::Fill(first_bad_, 0.0);
  ops::Fill(loss_sum_, loss_sum);
  losses_ = losses;
}

NonFiniteError::NonFiniteError(int64_t step, std::string last_good_checkpoint)
    : ValueError(detail::Cat("[trainer] the loss or a gradient was not finite (NaN or infinite) at step ", step,
                             last_good_checkpoint.empty()
                                 ? std::string("; no checkpoint was written before it")
                                 : "; the last good checkpoint is '" + last_good_checkpoint + "'")),
      step_(step),
      checkpoint_(std::move(last_good_checkpoint)) {}

}  // namespace nn
}  // namespace loom
