#include "nn/optimizer.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/device.h"

LOOM_OP_KIND(adam_update);
LOOM_OP_KIND(increment);
LOOM_OP_KIND(sgd_update);

namespace loom {
namespace nn {

Optimizer::Optimizer(double lr) : lr_(lr) {
  LOOM_CHECK(std::isfinite(lr), ValueError, "[optimizer] learning rate ", lr, ": must be a finite number");
  LOOM_CHECK(lr >= 0, ValueError, "[optimizer] learning rate ", lr, " is negative");
}

void Optimizer::Step(const std::vector<std::pair<Tensor, Tensor>>& param_grads) { StepKeyed(param_grads, true); }

void Optimizer::BackwardAndUpdate(const Tensor& loss, bool key_by_name) {
  if (!needs_every_gradient()) {
    applying_from_backward_ = true;
    try {
      Backward(loss, [&](const Tensor& p, const Tensor& g) { Apply(g, p, key_by_name ? p.name() : ""); });
    } catch (...) {
      applying_from_backward_ = false;
      AbandonStep();
      throw;
    }
    applying_from_backward_ = false;
    FinishStep();
    return;
  }
  std::vector<std::pair<Tensor, Tensor>> pairs;
  Backward(scales_losses() ? ScaleLoss(loss) : loss, [&](const Tensor& p, const Tensor& g) { pairs.emplace_back(p, g); });
  StepKeyed(pairs, key_by_name);
}

void Optimizer::StepKeyed(const std::vector<std::pair<Tensor, Tensor>>& param_grads, bool key_by_name) {
  // Note [Loss scaling]: every gradient unscaled and checked before the norm and the updates.
  LossScaleState* scaling = nullptr;
  if (scales_losses() && !param_grads.empty()) {
    std::vector<Tensor> grads;
    for (const auto& pg : param_grads) grads.push_back(pg.second);
    scaling = &LossScaleOn(param_grads[0].second.device_ptr());
    UnscaleGradients(grads, *scaling);
    if (cross_rank_) cross_rank_(scaling->found_inf, ReduceOp::kMax);  // Note [Sharded optimizer state]
    found_inf_ = scaling->found_inf;
  }
  if (clips_by_norm() && !param_grads.empty()) {
    std::vector<Tensor> grads;
    for (const auto& pg : param_grads) grads.push_back(pg.second);
    last_grad_norm_ = GlobalGradNorm(grads);
    NoGradGuard no_grad;
    if (cross_rank_) {  // Note [Sharded optimizer state]: the norm over every rank's pieces
      Tensor squares = ops::Mul(last_grad_norm_, last_grad_norm_);
      cross_rank_(squares, ReduceOp::kSum);
      last_grad_norm_ = ops::Sqrt(squares);
    }
    if (grad_mult_ != 1) last_grad_norm_ = ops::MulScalar(last_grad_norm_, grad_mult_);  // the norm of what the updates read
    grad_scale_ = ClipScale(last_grad_norm_, clip_.max_norm, clip_.eps);
  }
  struct Reset {
    Tensor &t, &u;
    ~Reset() { t = u = Tensor(); }
  } reset{grad_scale_, found_inf_};
  for (const auto& pg : param_grads) Apply(pg.second, pg.first, key_by_name ? pg.first.name() : "");
  if (scaling) UpdateLossScale(*scaling, *loss_scaling_);
}

void Optimizer::SetLossScaling(const LossScaling& s) {
  CheckLossScaling(s);
  loss_scaling_ = s;
}

void Optimizer::ClearLossScaling() {
  loss_scaling_.reset();
  loss_scales_.clear();
}

LossScaleState& Optimizer::LossScaleOn(const std::shared_ptr<Device>& dev) {
  LOOM_CHECK(loss_scaling_, ValueError, "[optimizer] no loss scaling: SetLossScaling first (precision fp16 sets it)");
  auto it = loss_scales_.find(dev.get());
  if (it == loss_scales_.end()) it = loss_scales_.emplace(dev.get(), MakeLossScaleState(dev, *loss_scaling_)).first;
  return it->second;
}

Tensor Optimizer::ScaleLoss(const Tensor& loss) {
  LOOM_CHECK(loss.defined(), ValueError, "[optimizer] ScaleLoss: the loss is undefined");
  const Tensor& scale = LossScaleOn(loss.device_ptr()).scale;
  return ops::Mul(loss, loss.dtype() == scale.dtype() ? scale : ops::Cast(scale, loss.dtype()));
}

LossScaleReading Optimizer::loss_scale(const std::shared_ptr<Device>& dev) {
  LOOM_CHECK(loss_scaling_, ValueError, "[optimizer] no loss scaling: SetLossScaling first (precision fp16 sets it)");
  auto it = loss_scales_.find(dev.get());
  return it == loss_scales_.end() ? LossScaleReading{loss_scaling_->init_scale, 0, 0} : Read(it->second);
}

LossScaleReading Optimizer::loss_scale() {
  LOOM_CHECK(loss_scaling_, ValueError, "[optimizer] no loss scaling: SetLossScaling first (precision fp16 sets it)");
  if (loss_scales_.empty()) return LossScaleReading{loss_scaling_->init_scale, 0, 0};
  LOOM_CHECK(loss_scales_.size() == 1, ValueError, "[optimizer] loss scaling has a scale on ", loss_scales_.size(),
             " devices: ask for one with loss_scale(device)");
  return Read(loss_scales_.begin()->second);
}

void Optimizer::SetLossScale(const std::shared_ptr<Device>& dev, const LossScaleReading& r) {
  Write(LossScaleOn(dev), r);
}

void Optimizer::CountStep(const Tensor& counter) const {
  if (found_inf_.defined()) CallInto(op_kind::increment, {counter, found_inf_}, {counter});
  else CallInto(op_kind::increment, {counter}, {counter});
}

int Optimizer::ParameterDims(const Tensor& param) const {
  auto it = param_dims_.find(param.block());
  return it == param_dims_.end() ? int(param.ndim()) : it->second;
}

bool Optimizer::OpensStep(const Tensor& param) {
  auto it = opened_by_.find(param.device());
  if (it == opened_by_.end()) it = opened_by_.emplace(param.device(), param.block()).first;
  return it->second == param.block();
}

const Tensor& Optimizer::RateForUpdate(const Tensor& param) {
  const Tensor& lr = LearningRateTensor(param.device_ptr());
  if (schedule_ && OpensStep(param)) {
    Device* dev = param.device();
    auto it = schedule_steps_.find(dev);
    if (it == schedule_steps_.end()) it = schedule_steps_.emplace(dev, DeviceScalar(param.device_ptr(), 0)).first;
    schedule_->EvalInto(it->second, lr);
    CountStep(it->second);
  }
  return lr;
}

void Optimizer::SetSchedule(const Schedule& schedule) { schedule_ = schedule; }

void Optimizer::ClearSchedule() {
  schedule_.reset();
  for (auto& kv : lr_tensors_) kv.second.CopyFromHost(&lr_, sizeof(double));
}

int64_t Optimizer::schedule_step(const std::shared_ptr<Device>& dev) {
  auto it = schedule_steps_.find(dev.get());
  return it == schedule_steps_.end() ? 0 : int64_t(it->second.Item());
}

int64_t Optimizer::schedule_step() {
  if (schedule_steps_.empty()) return -1;
  LOOM_CHECK(schedule_steps_.size() == 1, ValueError, "[optimizer] the schedule counts steps on ",
             schedule_steps_.size(), " devices: ask for one with schedule_step(device)");
  return int64_t(schedule_steps_.begin()->second.Item());
}

void Optimizer::SetScheduleStep(const std::shared_ptr<Device>& dev, int64_t step) {
  LOOM_CHECK(step >= 0, ValueError, "[optimizer] schedule step ", step, " is negative");
  auto it = schedule_steps_.find(dev.get());
  if (it == schedule_steps_.end()) it = schedule_steps_.emplace(dev.get(), DeviceScalar(dev, 0)).first;
  double v = double(step);
  it->second.CopyFromHost(&v, sizeof v);
}

void Optimizer::SetGradClip(const GradClip& clip) {
  CheckGradClip(clip);
  clip_ = clip;
}

void Optimizer::SetGradMultiplier(double m) {
  LOOM_CHECK(std::isfinite(m) && m > 0, ValueError, "[optimizer] gradient multiplier ", m,
             ": must be a finite number > 0");
  grad_mult_ = m;
}

void Optimizer::AddClipping(const char* op, std::vector<Tensor>* inputs, Attrs* attrs) const {
  if (grad_mult_ != 1) attrs->Set("grad_mult", grad_mult_);
  if (clip_.clip_value > 0) attrs->Set("clip_value", clip_.clip_value);
  if (clips_by_norm()) {
    LOOM_CHECK(grad_scale_.defined(), ValueError, "[", op, "] clipping by global norm (max_norm ", clip_.max_norm,
               ") needs every gradient before the first update: use Step(param_grads), not Apply");
    inputs->push_back(grad_scale_);
    attrs->Set("grad_scaled", int64_t(1));
  }
  if (scales_losses()) {  // Note [Skipped updates]: after the clip scale
    LOOM_CHECK(found_inf_.defined(), ValueError, "[", op, "] loss scaling checks every gradient before the first ",
               "update: use Step(param_grads) or BackwardAndUpdate, not Apply (Note [Loss scaling])");
    inputs->push_back(found_inf_);
    attrs->Set("found_inf", int64_t(1));
  }
}

Tensor Optimizer::DeviceScalar(const std::shared_ptr<Device>& dev, double value) {
  Device::SetupScope setup(dev.get());
  Tensor t = ops::Full({}, value, DType::kFloat64, dev);
  t.block()->set_persistent(true);
  return t;
}

void Optimizer::SetLearningRate(double lr) {
  LOOM_CHECK(std::isfinite(lr), ValueError, "[optimizer] learning rate ", lr, ": must be a finite number");
  LOOM_CHECK(lr >= 0, ValueError, "[optimizer] learning rate ", lr, " is negative");
  lr_ = lr;
  // A host write is a feed: it reaches the block now and every later replay reads it.
  for (auto& kv : lr_tensors_) kv.second.CopyFromHost(&lr_, sizeof(double));
}

const Tensor& Optimizer::LearningRateTensor(const std::shared_ptr<Device>& dev) {
  auto it = lr_tensors_.find(dev.get());
  if (it == lr_tensors_.end()) it = lr_tensors_.emplace(dev.get(), DeviceScalar(dev, lr_)).first;
  return it->second;
}

size_t Optimizer::state_bytes() const {
  size_t n = 0;
  for (const auto& kv : states_) n += kv.second.nbytes();
  return n;
}

Tensor& Optimizer::EnsureState(const std::string& key, const Shape& shape, DType dtype,
                               const std::shared_ptr<Device>& dev) {
  auto it = states_.find(key);
  if (it != states_.end()) {
    LOOM_CHECK(it->second.shape() == shape && it->second.dtype() == dtype, ShapeError, "[optimizer] state '", key,
               "' is ", it->second.Describe(), ", wanted ", Name(dtype), " ", ToString(shape));
    return it->second;
  }
  Device::SetupScope setup(dev.get());
  Tensor s = ops::Zeros(shape, dtype, dev);
  s.block()->set_persistent(true);
  return states_.emplace(key, s).first->second;
}

Tensor& Optimizer::State(const Tensor& param, const std::string& name, const std::string& slot) {
  std::string key = (name.empty() ? "block" + std::to_string(param.block()->id()) : name) + "/" + slot;
  return EnsureState(key, param.shape(), param.dtype(), param.device_ptr());
}

static void CheckParamGrad(const char* op, const Tensor& grad, const Tensor& param) {
  LOOM_CHECK(param.defined() && grad.defined(), ValueError, "[", op, "] parameter or gradient is undefined");
  LOOM_CHECK(param.device() == grad.device(), DeviceError, "[", op, "] parameter ", param.Describe(),
             " and gradient ", grad.Describe(), " are on different devices");
  LOOM_CHECK(param.shape() == grad.shape(), ShapeError, "[", op, "] parameter ", param.Describe(), " and gradient ",
             grad.Describe(), " differ in shape");
  LOOM_CHECK(param.is_contiguous(), ValueError, "[", op, "] parameter ", param.Describe(), " must be contiguous");
}

SGD::SGD(double lr, double momentum, double weight_decay, bool nesterov, double dampening)
    : Optimizer(lr), momentum_(momentum), weight_decay_(weight_decay), dampening_(dampening), nesterov_(nesterov) {
  LOOM_CHECK(std::isfinite(momentum), ValueError, "[sgd] momentum ", momentum, ": must be a finite number");
  LOOM_CHECK(momentum >= 0, ValueError, "[sgd] momentum ", momentum, " is negative");
  LOOM_CHECK(std::isfinite(weight_decay), ValueError, "[sgd] weight decay ", weight_decay,
             ": must be a finite number");
  LOOM_CHECK(weight_decay >= 0, ValueError, "[sgd] weight decay ", weight_decay, " is negative");
  LOOM_CHECK(!nesterov || (momentum > 0 && dampening == 0), ValueError,
             "[sgd] Nesterov momentum needs momentum > 0 and no dampening");
}

void SGD::Apply(const Tensor& grad, const Tensor& param, const std::string& name) {
  CheckParamGrad("sgd", grad, param);
  NoGradGuard no_grad;
  Attrs a{{"momentum", momentum_}, {"weight_decay", weight_decay_}, {"nesterov", int64_t(nesterov_)},
          {"dampening", dampening_}};
  const Tensor& lr = RateForUpdate(param);
  std::vector<Tensor> in{param, grad, lr}, out{param};
  if (momentum_ != 0) {
    Tensor& buf = State(param, name, "momentum");
    in.push_back(buf);
    out.push_back(buf);
  }
  AddClipping("sgd", &in, &a);
  CallInto(op_kind::sgd_update, in, out, a);
}

Adam::Adam(double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled)
    : Optimizer(lr), beta1_(beta1), beta2_(beta2), eps_(eps), weight_decay_(weight_decay), decoupled_(decoupled) {
  LOOM_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, ValueError, "[adam] betas (", beta1, ", ", beta2,
             ") must lie in [0, 1)");
  LOOM_CHECK(std::isfinite(eps) && eps > 0, ValueError, "[adam] eps ", eps, ": must be a finite number > 0");
}

void Adam::Apply(const Tensor& grad, const Tensor& param, const std::string& name) {
  CheckParamGrad("adam", grad, param);
  NoGradGuard no_grad;
  Device* dev = param.device();
  auto it = step_tensors_.find(dev);
  if (it == step_tensors_.end()) it = step_tensors_.emplace(dev, DeviceScalar(param.device_ptr(), 0)).first;
  // The step count advances once per step (OpensStep).
  if (OpensStep(param)) CountStep(it->second);
  Tensor& m = State(param, name, "m");
  Tensor& v = State(param, name, "v");
  const Tensor& lr = RateForUpdate(param);
  const bool decays = decay_on_ == DecayOn::kAll || ParameterDims(param) >= 2;
  Attrs a{{"beta1", beta1_}, {"beta2", beta2_}, {"eps", eps_}, {"weight_decay", decays ? weight_decay_ : 0.0},
          {"decoupled", int64_t(decoupled_)}};
  std::vector<Tensor> in{param, grad, lr, m, v, it->second};
  AddClipping("adam", &in, &a);
  CallInto(op_kind::adam_update, in, {param, m, v}, a);
}

void Adam::SetStepsTaken(const std::shared_ptr<Device>& dev, int64_t steps) {
  LOOM_CHECK(steps >= 0, ValueError, "[adam] step count ", steps, " is negative");
  auto it = step_tensors_.find(dev.get());
  if (it == step_tensors_.end()) it = step_tensors_.emplace(dev.get(), DeviceScalar(dev, 0)).first;
  double v = double(steps);
  it->second.CopyFromHost(&v, sizeof v);
}

int64_t Adam::steps_taken(const std::shared_ptr<Device>& dev) {
  auto it = step_tensors_.find(dev.get());
  return it == step_tensors_.end() ? 0 : int64_t(it->second.Item());
}

}  // namespace nn
}  // namespace loom
