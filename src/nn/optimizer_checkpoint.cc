// Note [Optimizer state in checkpoints] (optimizer_checkpoint.h).
#include "nn/optimizer_checkpoint.h"

#include <cmath>

#include "core/device.h"
#include "nn/dist_opt.h"
#include "nn/optimizer.h"

namespace loom {
namespace nn {

using io::CollectRestoreProblems;
using io::LoadCheckpoint;
using io::RestoreInto;
using io::SaveCheckpoint;
using io::ThrowProblems;

namespace {
// A DistOpt keeps no state of its own: the optimizer it wraps does (moments, Adam's step count).
Optimizer& Inner(const Optimizer& opt) {
  if (auto* d = dynamic_cast<const DistOpt*>(&opt)) return Inner(d->optimizer());
  return const_cast<Optimizer&>(opt);
}
}  // namespace

void AddOptimizerState(Optimizer& outer, NamedTensors* tensors, std::map<std::string, double>* meta,
                       const std::string& prefix) {
  Optimizer& opt = Inner(outer);
  for (const auto& kv : opt.states()) tensors->emplace_back(prefix + kv.first, kv.second);
  (*meta)[prefix + "lr"] = opt.learning_rate();
  if (auto* adam = dynamic_cast<Adam*>(&opt)) {
    if (!opt.states().empty())
      (*meta)[prefix + "adam_steps"] = double(adam->steps_taken(opt.states().begin()->second.device_ptr()));
  }
  const int64_t schedule_step = opt.schedule_step();
  if (schedule_step >= 0) (*meta)[prefix + "schedule_step"] = double(schedule_step);
  if (opt.scales_losses()) {
    const LossScaleReading r = opt.loss_scale();
    (*meta)[prefix + "loss_scale"] = r.scale;
    (*meta)[prefix + "loss_scale_good_steps"] = double(r.good_steps);
    (*meta)[prefix + "skipped_steps"] = double(r.skipped_steps);
  }
}

namespace {

// The saved slots under `prefix`, by state key ("w0/momentum").
std::map<std::string, const Tensor*> SavedSlots(const Checkpoint& ckpt, const std::string& prefix) {
  std::map<std::string, const Tensor*> saved;
  for (const auto& kv : ckpt.tensors)
    if (kv.first.compare(0, prefix.size(), prefix) == 0) saved[kv.first.substr(prefix.size())] = &kv.second;
  return saved;
}

// The optimizer's existing state as restore targets, named as in the file.
NamedTensors StateTargets(const Optimizer& opt, const std::string& prefix) {
  NamedTensors targets;
  for (const auto& kv : opt.states()) targets.emplace_back(prefix + kv.first, kv.second);
  return targets;
}

}  // namespace

void CheckOptimizerState(const Checkpoint& ckpt, const Optimizer& outer, const std::string& prefix) {
  const Optimizer& opt = Inner(outer);
  std::vector<std::string> problems;
  // Slots the optimizer keeps already: in the file, with their shape and dtype.
  std::vector<const Tensor*> sources;
  CollectRestoreProblems(ckpt, StateTargets(opt, prefix), &sources, &problems);
  // Saved slots: each one the optimizer keeps (those it has not created yet are created at restore).
  for (const auto& kv : SavedSlots(ckpt, prefix)) {
    size_t slash = kv.first.rfind('/');
    if (slash == std::string::npos) {
      problems.push_back("saved state '" + kv.first + "' is not named <parameter>/<slot>");
    } else if (!opt.HasSlot(kv.first.substr(slash + 1))) {
      problems.push_back("saved slot '" + kv.first + "': the optimizer keeps no '" + kv.first.substr(slash + 1) +
                         "' (saved by an optimizer of another kind or with other settings?)");
    }
  }
  auto lr = ckpt.meta.find(prefix + "lr");
  if (lr != ckpt.meta.end() && !(std::isfinite(lr->second) && lr->second >= 0))
    problems.push_back(detail::Cat("'", lr->first, "' is ", lr->second, ", not a finite learning rate >= 0"));
  auto steps = ckpt.meta.find(prefix + "adam_steps");
  if (steps != ckpt.meta.end() && dynamic_cast<const Adam*>(&opt) &&
      !(steps->second >= 0 && steps->second <= 9.0e15 && steps->second == std::floor(steps->second)))
    problems.push_back(detail::Cat("'", steps->first, "' is ", steps->second, ", not a step count"));
  auto sched = ckpt.meta.find(prefix + "schedule_step");
  if (sched != ckpt.meta.end() &&
      !(sched->second >= 0 && sched->second <= 9.0e15 && sched->second == std::floor(sched->second)))
    problems.push_back(detail::Cat("'", sched->first, "' is ", sched->second, ", not a step count"));
  // Note [Loss scaling]: all three or none, into an optimizer that scales losses.
  const char* const kScaleKeys[] = {"loss_scale", "loss_scale_good_steps", "skipped_steps"};
  int scale_keys = 0;
  for (const char* k : kScaleKeys) {
    auto it = ckpt.meta.find(prefix + k);
    if (it == ckpt.meta.end()) continue;
    ++scale_keys;
    const double v = it->second;
    const bool ok = k == kScaleKeys[0] ? std::isfinite(v) && v > 0 && v <= 3.4028234663852886e38
                                       : v >= 0 && v <= 9.0e15 && v == std::floor(v);
    if (!ok) problems.push_back(detail::Cat("'", it->first, "' is ", v, ", not a ", k == kScaleKeys[0] ? "loss scale" : "step count"));
  }
  if (scale_keys != 0 && scale_keys != 3)
    problems.push_back(detail::Cat("loss scaling's state is incomplete: '", prefix, "loss_scale', '", prefix,
                                   "loss_scale_good_steps' and '", prefix, "skipped_steps' come together"));
  if (scale_keys != 0 && !opt.scales_losses())
    problems.push_back(detail::Cat("'", prefix, "loss_scale': saved by an optimizer with loss scaling (precision fp16), ",
                                   "but this one does not scale losses: set the precision to fp16 (or SetLossScaling) ",
                                   "before restoring"));
  if (!problems.empty())
    ThrowProblems(detail::Cat("[checkpoint] '", ckpt.path, "' does not fit the optimizer"), problems);
}

void RestoreOptimizerState(const Checkpoint& ckpt, Optimizer& outer, const std::shared_ptr<Device>& dev,
                           const std::string& prefix) {
  Optimizer& opt = Inner(outer);
  LOOM_CHECK(dev, DeviceError, "[checkpoint] RestoreOptimizerState needs the parameters' device");
  CheckOptimizerState(ckpt, opt, prefix);  // Note [Check everything, then copy]: nothing changed yet
  // Slots the optimizer keeps but has not created yet (a fresh optimizer) are created as zeros,
  // then everything is overwritten with the saved values.
  for (const auto& kv : SavedSlots(ckpt, prefix))
    opt.EnsureState(kv.first, kv.second->shape(), kv.second->dtype(), dev);
  if (auto* adam = dynamic_cast<Adam*>(&opt)) {
    auto steps = ckpt.meta.find(prefix + "adam_steps");
    if (steps != ckpt.meta.end()) adam->SetStepsTaken(dev, int64_t(steps->second));
  }
  auto sched = ckpt.meta.find(prefix + "schedule_step");
  if (sched != ckpt.meta.end()) opt.SetScheduleStep(dev, int64_t(sched->second));
  auto scale = ckpt.meta.find(prefix + "loss_scale");
  if (scale != ckpt.meta.end())
    opt.SetLossScale(dev, LossScaleReading{scale->second, int64_t(ckpt.meta.at(prefix + "loss_scale_good_steps")),
                                           int64_t(ckpt.meta.at(prefix + "skipped_steps"))});
  RestoreInto(ckpt, StateTargets(opt, prefix));
  auto lr = ckpt.meta.find(prefix + "lr");
  if (lr != ckpt.meta.end()) opt.SetLearningRate(lr->second);
}

void SaveOptimizer(const std::string& path, Optimizer& opt) {
  NamedTensors tensors;
  std::map<std::string, double> meta;
  AddOptimizerState(opt, &tensors, &meta);
  SaveCheckpoint(path, tensors, meta);
}

void RestoreOptimizerFile(const Checkpoint& ckpt, Optimizer& opt, const std::shared_ptr<Device>& dev) {
  const std::string prefix = "optimizer/";
  std::vector<std::string> others;
  for (const auto& kv : ckpt.tensors)
    if (kv.first.compare(0, prefix.size(), prefix) != 0) others.push_back(kv.first);
  std::string why;
  if (!ckpt.meta.count(prefix + "lr"))
    why += "it has no metadata '" + prefix + "lr', which SaveOptimizer always writes";
  if (!others.empty()) {
    why += detail::Cat(why.empty() ? "" : "; ", "it holds ", others.size(), " tensor(s) outside '", prefix, "' (");
    for (size_t i = 0; i < others.size() && i < 3; ++i) why += (i ? ", '" : "'") + others[i] + "'";
    why += others.size() > 3 ? ", ...)" : ")";
  }
  if (!others.empty())
    why += ". A model checkpoint? Restore it with its model (Model.load_states in Python; RestoreInto and "
           "RestoreOptimizerState)";
  if (!why.empty()) throw IOError("[checkpoint] '" + ckpt.path + "' is not an optimizer file: " + why);
  RestoreOptimizerState(ckpt, opt, dev, prefix);
}

void LoadOptimizer(const std::string& path, Optimizer& opt, const std::shared_ptr<Device>& dev) {
  RestoreOptimizerFile(LoadCheckpoint(path), opt, dev);
}

}  // namespace nn
}  // namespace loom
