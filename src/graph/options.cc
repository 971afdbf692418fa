#include "graph/options.h"

#include "core/error.h"
#include "graph/passes.h"

namespace loom {

const char* Name(MemoryMode m) { return m == MemoryMode::kPlanned ? "planned" : "dynamic"; }

MemoryMode ParseMemoryMode(const std::string& s) {
  if (s == "planned") return MemoryMode::kPlanned;
  if (s == "dynamic") return MemoryMode::kDynamic;
  throw ValueError("[graph] memory mode must be 'planned' or 'dynamic', got '" + s + "'");
}

void CheckGraphOptions(const GraphOptions& o) {
  LOOM_CHECK(o.num_workers >= 0 && o.num_workers <= kMaxReplayWorkers, ValueError, "[graph] option num_workers is ",
             o.num_workers, ", expected 0 (the device's threads) to ", kMaxReplayWorkers);
  LOOM_CHECK(o.bucket_bytes > 0, ValueError, "[graph] option bucket_bytes is ", o.bucket_bytes,
             ", expected a positive number of bytes");
  LOOM_CHECK(o.first_bucket_bytes >= 0, ValueError, "[graph] option first_bucket_bytes is ", o.first_bucket_bytes,
             ", expected a number of bytes (0: bucket_bytes)");
  LOOM_CHECK(o.max_step_graphs >= 0, ValueError, "[graph] option max_step_graphs is ", o.max_step_graphs,
             ", expected a number of graphs (0: no bound)");
}

namespace {

// Note [Pass switches and counters]: the registered pass of that name, or a ValueError listing them.
const PassDef& FindPass(const std::string& name) {
  std::string known;
  for (const PassDef* p : RegisteredPasses()) {
    if (name == p->name) return *p;
    known += (known.empty() ? "" : ", ") + std::string(p->name);
  }
  throw ValueError("[graph] no graph pass is called '" + name + "' (passes: " + known + ")");
}

void CheckCounter(const std::string& name) {
  std::string known;
  for (const PassFieldInfo& c : PassCounters::Fields()) {
    if (name == c.name) return;
    known += (known.empty() ? "" : ", ") + std::string(c.name);
  }
  throw ValueError("[graph] no graph pass counts '" + name + "' (counters: " + known + ")");
}

}  // namespace

bool PassSwitches::On(const std::string& pass) const {
  const PassDef& p = FindPass(pass);
  auto it = set_.find(pass);
  return it == set_.end() ? p.on : it->second;
}

void PassSwitches::Set(const std::string& pass, bool on) {
  FindPass(pass);
  set_[pass] = on;
}

bool& PassSwitches::Ref(const std::string& pass) {
  const PassDef& p = FindPass(pass);
  return set_.emplace(pass, p.on).first->second;
}

int64_t PassCounters::Get(const std::string& counter) const {
  CheckCounter(counter);
  auto it = counts_.find(counter);
  return it == counts_.end() ? 0 : it->second;
}

void PassCounters::Add(const std::string& counter, int64_t n) {
  CheckCounter(counter);
  counts_[counter] += n;
}

int64_t& PassCounters::Ref(const std::string& counter) {
  CheckCounter(counter);
  return counts_[counter];
}

}  // namespace loom
