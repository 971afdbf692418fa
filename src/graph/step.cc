#include "graph/step.h"

#include <sstream>

#include "core/ops.h"
#include "device/device.h"
#include "graph/graph.h"

namespace loom {

CapturedStep::CapturedStep(std::shared_ptr<Device> device, Fn fn, std::string name, bool recapture, bool sequential)
    : device_(std::move(device)), fn_(std::move(fn)), name_(std::move(name)), recapture_(recapture),
      sequential_(sequential) {
  LOOM_CHECK(device_, DeviceError, "[captured_step] no device");
}

CapturedStep::~CapturedStep() {
  // A destructor must not throw: a graph that cannot go now (its device is capturing it) is left
  // to the device, which drops it at the next capture of that key or at ResetGraph().
  for (auto& kv : entries_) {
    try {
      if (device_->HasGraph(kv.second.graph_key)) device_->ResetGraph(kv.second.graph_key);
    } catch (const Error&) {
    }
  }
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

Graph& CapturedStep::last_graph() {
  LOOM_CHECK(last_, GraphError, "[captured_step '", name_, "'] has not run yet");
  return device_->GetGraph(last_->graph_key);
}

std::vector<Tensor> CapturedStep::operator()(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    LOOM_CHECK(t.defined() && t.device() == device_.get(), DeviceError, "[captured_step '", name_, "'] input ",
               t.Describe(), " is not on ", device_->name());
  // A replay builds no strings: the inputs are matched by shape and dtype (Find), and the
  // signature is spelt out only for a capture or an error.
  if (Entry* found = Find(inputs)) {
    Entry& e = *found;
    NoGradGuard no_grad;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].block() != e.placeholders[i].block()) ops::CopyInto(e.placeholders[i], inputs[i]);
    device_->RunGraph(sequential_, e.graph_key);
    last_ = &e;
    return e.outputs;
  }
  std::string sig = Signature(inputs);
  if (!entries_.empty() && !recapture_) {
    const std::string& have = entries_.begin()->first;
    throw GraphError("[captured_step '" + name_ + "'] was captured for inputs\n    " + have +
                     "\n  and cannot replay with\n    " + sig +
                     "\n  (enable recapture to capture a graph per input shape)");
  }
  Entry e;
  e.graph_key = name_ + "[" + sig + "]";
  {
    NoGradGuard no_grad;
    for (const Tensor& t : inputs) {
      Tensor p(t.shape(), t.dtype(), device_);
      p.block()->set_persistent(true);
      ops::CopyInto(p, t);
      e.placeholders.push_back(p);
    }
  }
  device_->EnableGraph(true, e.graph_key);
  try {
    e.outputs = fn_(e.placeholders);
  } catch (...) {
    device_->EnableGraph(false);
    device_->ResetGraph(e.graph_key);
    throw;
  }
  device_->EnableGraph(false);
  // Capture ran nothing: this call's results come from the first replay.
  device_->RunGraph(sequential_, e.graph_key);
  auto& slot = entries_[sig];
  slot = std::move(e);
  last_ = &slot;
  return slot.outputs;
}

}  // namespace loom
