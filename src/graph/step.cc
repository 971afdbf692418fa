#include "graph/step.h"

#include <cstdio>
#include <sstream>

#include "core/ops.h"
#include "graph/graph.h"

namespace loom {

CapturedStep::CapturedStep(std::shared_ptr<Device> device, Fn fn, std::string name, bool recapture, bool sequential,
                           GraphOptions options)
    : device_(std::move(device)), fn_(std::move(fn)), name_(std::move(name)), recapture_(recapture),
      sequential_(sequential), options_(options) {
  LOOM_CHECK(device_, DeviceError, "[captured_step] no device");
  CheckGraphOptions(options_);
}

// Drops the least recently used graph (Note [Bounded recapture] in step.h).
void CapturedStep::DropLeastRecentlyUsed() {
  auto oldest = entries_.begin();
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->second.used < oldest->second.used) oldest = it;
  if (!warned_) {
    warned_ = true;
    std::fprintf(stderr, "[loom] warning: %s\n",
                 detail::Cat("[captured_step '", name_, "'] keeps ", options_.max_step_graphs, " graphs, one per ",
                             "input signature: capturing another drops the least recently used (", oldest->first,
                             "); a shape that comes back is captured again (graph option max_step_graphs)")
                     .c_str());
  }
  if (last_ == &oldest->second) last_ = nullptr;
  entries_.erase(oldest);
}

std::string CapturedStep::Signature(const std::vector<Tensor>& inputs) {
  std::ostringstream o;
  for (size_t i = 0; i < inputs.size(); ++i) o << (i ? "; " : "") << inputs[i].Describe();
  return o.str();
}

// Same Signature(), given that both are on this step's device: the signature names only the
// dtype, shape and device of each input.
static bool SameSignature(const std::vector<Tensor>& inputs, const std::vector<Tensor>& placeholders) {
  if (inputs.size() != placeholders.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].dtype() != placeholders[i].dtype() || inputs[i].shape() != placeholders[i].shape()) return false;
  return true;
}

CapturedStep::Entry* CapturedStep::Find(const std::vector<Tensor>& inputs) {
  if (last_ && SameSignature(inputs, last_->placeholders)) return last_;
  for (auto& kv : entries_)
    if (SameSignature(inputs, kv.second.placeholders)) return &kv.second;
  return nullptr;
}

std::vector<Tensor> CapturedStep::Placeholders(const std::vector<Tensor>& like) const {
  auto it = entries_.find(Signature(like));
  return it == entries_.end() ? std::vector<Tensor>() : it->second.placeholders;
}

const std::shared_ptr<Graph>& CapturedStep::last_graph() const {
  LOOM_CHECK(last_, GraphError, "[captured_step '", name_, "'] has not run yet");
  return last_->graph;
}

std::vector<Tensor> CapturedStep::operator()(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    LOOM_CHECK(t.defined() && t.device() == device_.get(), DeviceError, "[captured_step '", name_, "'] input ",
               t.Describe(), " is not on ", device_->name());
  // A replay builds no strings: the inputs are matched by shape and dtype (Find), and the
  // signature is spelt out only for a capture or an error.
  if (Entry* found = Find(inputs)) {
    Entry& e = *found;
    auto in_use = device_->Use();  // the copies and the replay as one use (Note [One user at a time])
    NoGradGuard no_grad;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].block() != e.placeholders[i].block()) ops::CopyInto(e.placeholders[i], inputs[i]);
    e.graph->Run(sequential_);
    last_ = &e;
    e.used = ++calls_;
    return e.outputs;
  }
  std::string sig = Signature(inputs);
  if (!entries_.empty() && !recapture_) {
    const std::string& have = entries_.begin()->first;
    throw GraphError("[captured_step '" + name_ + "'] was captured for inputs\n    " + have +
                     "\n  and cannot replay with\n    " + sig +
                     "\n  (enable recapture to capture a graph per input shape)");
  }
  if (options_.max_step_graphs > 0 && entries_.size() >= size_t(options_.max_step_graphs)) DropLeastRecentlyUsed();
  Entry e;
  {
    NoGradGuard no_grad;
    for (const Tensor& t : inputs) {
      Tensor p(t.shape(), t.dtype(), device_);
      p.block()->set_persistent(true);
      ops::CopyInto(p, t);
      e.placeholders.push_back(p);
    }
  }
  std::vector<Tensor> outputs;
  e.graph = Graph::Capture(device_, name_ + "[" + sig + "]", [&] { outputs = fn_(e.placeholders); }, options_);
  e.outputs = std::move(outputs);
  // Capture ran nothing: this call's results come from the first replay.
  e.graph->Run(sequential_);
  auto& slot = entries_[sig];
  slot = std::move(e);
  last_ = &slot;
  slot.used = ++calls_;
  return slot.outputs;
}

}  // namespace loom
