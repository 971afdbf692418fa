#include "io/checkpoint.h"

#include <cmath>
#include <set>

#include "core/ops.h"
#include "device/device.h"
#include "io/checkpoint_format.h"
#include "io/file.h"
#include "nn/optimizer.h"

namespace loom {
namespace io {

namespace {

// The tensor's bytes, contiguous, on the host.
std::string HostBytes(const Tensor& t, const std::string& name) {
  LOOM_CHECK(t.defined(), ValueError, "[checkpoint] tensor '", name, "' is undefined");
  CheckHostReadAllowed(t, "checkpoint");
  NoGradGuard no_grad;
  Tensor c = t.is_contiguous() ? t : t.Detach().Contiguous();
  std::string out(c.nbytes(), '\0');
  if (!out.empty()) {
    c.device()->Synchronize();
    c.device()->MemcpyToHost(&out[0], c.raw_data(), out.size());
  }
  return out;
}

// Writes host bytes into an existing tensor of any layout.
void WriteHostBytes(const Tensor& dst, const std::string& bytes) {
  if (dst.is_contiguous()) {
    Tensor d = dst;
    d.CopyFromHost(bytes.data(), bytes.size());
    return;
  }
  NoGradGuard no_grad;
  Tensor staging(dst.shape(), dst.dtype(), dst.device_ptr());
  staging.CopyFromHost(bytes.data(), bytes.size());
  ops::CopyInto(dst.Detach(), staging);
}

}  // namespace

bool Checkpoint::Has(const std::string& name) const {
  for (const auto& kv : tensors)
    if (kv.first == name) return true;
  return false;
}

const Tensor& Checkpoint::Get(const std::string& name) const {
  for (const auto& kv : tensors)
    if (kv.first == name) return kv.second;
  throw IOError("[checkpoint] '" + path + "' holds no tensor named '" + name + "'");
}

double Checkpoint::Meta(const std::string& name) const {
  auto it = meta.find(name);
  LOOM_CHECK(it != meta.end(), IOError, "[checkpoint] '", path, "' holds no metadata named '", name, "'");
  return it->second;
}

double Checkpoint::Meta(const std::string& name, double dflt) const {
  auto it = meta.find(name);
  return it == meta.end() ? dflt : it->second;
}

EncodedCheckpoint EncodeCheckpointOf(const NamedTensors& tensors, const std::map<std::string, double>& meta) {
  RawCheckpoint raw;
  raw.meta = meta;
  raw.tensors.reserve(tensors.size());
  for (const auto& kv : tensors) {
    RawTensor r;
    r.name = kv.first;
    r.dtype = kv.second.dtype();
    r.shape = kv.second.shape();
    r.data = HostBytes(kv.second, kv.first);
    raw.tensors.push_back(std::move(r));
  }
  return EncodeCheckpoint(std::move(raw));
}

void WriteCheckpointFile(const std::string& path, const EncodedCheckpoint& enc) {
  WriteFileAtomic(path, {enc.head, enc.payload}, "checkpoint");
}

std::string ReadCheckpointFile(const std::string& path) { return ReadFile(path, "checkpoint"); }

void SaveCheckpoint(const std::string& path, const NamedTensors& tensors, const std::map<std::string, double>& meta) {
  CheckNoNulByte(path, "checkpoint", "the path");  // before the host reads, not only at the write
  WriteCheckpointFile(path, EncodeCheckpointOf(tensors, meta));
}

Checkpoint DecodeCheckpointBytes(const std::string& bytes, const std::string& source) {
  RawCheckpoint raw = DecodeCheckpoint(bytes.data(), bytes.size(), source);
  Checkpoint ck;
  ck.path = source;
  ck.meta = std::move(raw.meta);
  auto cpu = CpuDevice();
  for (RawTensor& r : raw.tensors) {
    Tensor t(r.shape, r.dtype, cpu);
    t.CopyFromHost(r.data.data(), r.data.size());
    std::string().swap(r.data);  // give the host copy back as we go
    ck.tensors.emplace_back(r.name, t);
  }
  return ck;
}

Checkpoint LoadCheckpoint(const std::string& path) { return DecodeCheckpointBytes(ReadCheckpointFile(path), path); }

namespace {

// Note [Check everything, then copy] in checkpoint.h. Appends to `problems` every reason the
// checkpoint cannot be restored into `targets` and sets (*sources)[i] to target i's source
// (null when absent). Mistakes in the call itself (an undefined target, a name given twice, a
// device that is capturing) throw at once.
void CollectRestoreProblems(const Checkpoint& ckpt, const NamedTensors& targets, std::vector<const Tensor*>* sources,
                            std::vector<std::string>* problems) {
  std::set<std::string> seen;
  sources->clear();
  for (const auto& kv : targets) {
    const std::string& name = kv.first;
    const Tensor& dst = kv.second;
    LOOM_CHECK(dst.defined(), ValueError, "[checkpoint] restore target '", name, "' is undefined");
    LOOM_CHECK(seen.insert(name).second, ValueError, "[checkpoint] restore target '", name, "' is named twice");
    LOOM_CHECK(!dst.device()->buffering(), GraphError, "[checkpoint] cannot restore '", name, "' into ",
               dst.Describe(), " while ", dst.device()->name(), " is capturing ", dst.device()->capture_name(),
               ": restore between replays");
    const Tensor* src = nullptr;
    for (const auto& c : ckpt.tensors)
      if (c.first == name) src = &c.second;
    sources->push_back(src);
    if (!src) {
      problems->push_back("'" + name + "': not in the file");
      continue;
    }
    if (src->shape() != dst.shape())
      problems->push_back("'" + name + "': shape " + ToString(src->shape()) + " in the file, " +
                          ToString(dst.shape()) + " in the target");
    if (src->dtype() != dst.dtype())
      problems->push_back("'" + name + "': dtype " + Name(src->dtype()) + " in the file, " + Name(dst.dtype()) +
                          " in the target");
  }
}

[[noreturn]] void ThrowProblems(const std::string& head, const std::vector<std::string>& problems) {
  std::string msg = detail::Cat(head, ", nothing was restored. ", problems.size(), " mismatch(es): ");
  for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
  throw IOError(msg);
}

std::string DoesNotFit(const Checkpoint& ckpt, size_t n) {
  return detail::Cat("[checkpoint] '", ckpt.path, "' does not fit the ", n, " target tensor(s)");
}

}  // namespace

void CheckRestoreInto(const Checkpoint& ckpt, const NamedTensors& targets) {
  std::vector<const Tensor*> sources;
  std::vector<std::string> problems;
  CollectRestoreProblems(ckpt, targets, &sources, &problems);
  if (!problems.empty()) ThrowProblems(DoesNotFit(ckpt, targets.size()), problems);
}

void RestoreInto(const Checkpoint& ckpt, const NamedTensors& targets) {
  std::vector<const Tensor*> sources;
  std::vector<std::string> problems;
  CollectRestoreProblems(ckpt, targets, &sources, &problems);
  if (!problems.empty()) ThrowProblems(DoesNotFit(ckpt, targets.size()), problems);
  for (size_t i = 0; i < targets.size(); ++i)
    WriteHostBytes(targets[i].second, HostBytes(*sources[i], targets[i].first));
}

// ---- optimizers: Note [Optimizer state in checkpoints] in checkpoint.h ----

void AddOptimizerState(nn::Optimizer& opt, NamedTensors* tensors, std::map<std::string, double>* meta,
                       const std::string& prefix) {
  for (const auto& kv : opt.states()) tensors->emplace_back(prefix + kv.first, kv.second);
  (*meta)[prefix + "lr"] = opt.learning_rate();
  if (auto* adam = dynamic_cast<nn::Adam*>(&opt)) {
    if (!opt.states().empty())
      (*meta)[prefix + "adam_steps"] = double(adam->steps_taken(opt.states().begin()->second.device_ptr()));
  }
  const int64_t schedule_step = opt.schedule_step();
  if (schedule_step >= 0) (*meta)[prefix + "schedule_step"] = double(schedule_step);
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
NamedTensors StateTargets(const nn::Optimizer& opt, const std::string& prefix) {
  NamedTensors targets;
  for (const auto& kv : opt.states()) targets.emplace_back(prefix + kv.first, kv.second);
  return targets;
}

}  // namespace

void CheckOptimizerState(const Checkpoint& ckpt, const nn::Optimizer& opt, const std::string& prefix) {
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
  if (steps != ckpt.meta.end() && dynamic_cast<const nn::Adam*>(&opt) &&
      !(steps->second >= 0 && steps->second <= 9.0e15 && steps->second == std::floor(steps->second)))
    problems.push_back(detail::Cat("'", steps->first, "' is ", steps->second, ", not a step count"));
  auto sched = ckpt.meta.find(prefix + "schedule_step");
  if (sched != ckpt.meta.end() &&
      !(sched->second >= 0 && sched->second <= 9.0e15 && sched->second == std::floor(sched->second)))
    problems.push_back(detail::Cat("'", sched->first, "' is ", sched->second, ", not a step count"));
  if (!problems.empty())
    ThrowProblems(detail::Cat("[checkpoint] '", ckpt.path, "' does not fit the optimizer"), problems);
}

void RestoreOptimizerState(const Checkpoint& ckpt, nn::Optimizer& opt, const std::shared_ptr<Device>& dev,
                           const std::string& prefix) {
  LOOM_CHECK(dev, DeviceError, "[checkpoint] RestoreOptimizerState needs the parameters' device");
  CheckOptimizerState(ckpt, opt, prefix);  // Note [Check everything, then copy]: nothing changed yet
  // Slots the optimizer keeps but has not created yet (a fresh optimizer) are created as zeros,
  // then everything is overwritten with the saved values.
  for (const auto& kv : SavedSlots(ckpt, prefix))
    opt.EnsureState(kv.first, kv.second->shape(), kv.second->dtype(), dev);
  if (auto* adam = dynamic_cast<nn::Adam*>(&opt)) {
    auto steps = ckpt.meta.find(prefix + "adam_steps");
    if (steps != ckpt.meta.end()) adam->SetStepsTaken(dev, int64_t(steps->second));
  }
  auto sched = ckpt.meta.find(prefix + "schedule_step");
  if (sched != ckpt.meta.end()) opt.SetScheduleStep(dev, int64_t(sched->second));
  RestoreInto(ckpt, StateTargets(opt, prefix));
  auto lr = ckpt.meta.find(prefix + "lr");
  if (lr != ckpt.meta.end()) opt.SetLearningRate(lr->second);
}

void SaveOptimizer(const std::string& path, nn::Optimizer& opt) {
  NamedTensors tensors;
  std::map<std::string, double> meta;
  AddOptimizerState(opt, &tensors, &meta);
  SaveCheckpoint(path, tensors, meta);
}

void RestoreOptimizerFile(const Checkpoint& ckpt, nn::Optimizer& opt, const std::shared_ptr<Device>& dev) {
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

void LoadOptimizer(const std::string& path, nn::Optimizer& opt, const std::shared_ptr<Device>& dev) {
  RestoreOptimizerFile(LoadCheckpoint(path), opt, dev);
}

}  // namespace io
}  // namespace loom
