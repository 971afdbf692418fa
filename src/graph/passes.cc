// Step 1b of graph.h: the pass frame (passes.h): the registry and the pipeline.
#include "graph/passes.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/debug.h"
#include "core/device.h"

namespace loom {
namespace {

// Registration runs from static initialisers in any order (LOOM_PASS), so the registry is
// made at first use.
struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<PassDef>> passes;  // in pipeline order
};
Registry& GetRegistry() {
  static Registry* r = new Registry;  // never destroyed: passes may be looked up at exit
  return *r;
}

bool Declares(const PassDef& pass, const std::string& counter) {
  for (const PassCounterDef& c : pass.counters)
    if (counter == c.name) return true;
  return false;
}

}  // namespace

bool RegisterPass(PassDef def) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> l(r.mu);
  for (const auto& p : r.passes) {
    LOOM_ASSERT(std::strcmp(p->name, def.name) != 0, "graph pass '", def.name, "' registered twice");
    LOOM_ASSERT(p->order != def.order, "graph passes '", p->name, "' and '", def.name, "' share order ", def.order);
    for (const PassCounterDef& c : def.counters)
      LOOM_ASSERT(!Declares(*p, c.name), "counter '", c.name, "' of graph pass '", def.name,
                  "' is declared by '", p->name, "' too");
  }
  LOOM_ASSERT(def.run && def.doc && *def.doc, "graph pass '", def.name, "' needs a function and a doc");
  auto at = std::find_if(r.passes.begin(), r.passes.end(), [&](const auto& p) { return p->order > def.order; });
  r.passes.insert(at, std::make_unique<PassDef>(std::move(def)));
  return true;
}

std::vector<const PassDef*> RegisteredPasses() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> l(r.mu);
  std::vector<const PassDef*> out;
  for (const auto& p : r.passes) out.push_back(p.get());
  return out;
}

std::vector<PassFieldInfo> PassSwitches::Fields() {
  std::vector<PassFieldInfo> out;
  for (const PassDef* p : RegisteredPasses()) out.push_back({p->name, p->doc});
  return out;
}

std::vector<PassFieldInfo> PassCounters::Fields() {
  std::vector<PassFieldInfo> out;
  for (const PassDef* p : RegisteredPasses())
    for (const PassCounterDef& c : p->counters) out.push_back({c.name, c.doc});
  return out;
}

PassResult RunPasses(OpList ops, const Device& device, const GraphOptions& options) {
  PassResult all{std::move(ops)};
  if (!options.run_passes) return all;
  const PassContext ctx{device, options};
  for (const PassDef* pass : RegisteredPasses()) {
    if (!(pass->devices & DeviceBit(device.type())) || !options.passes.On(pass->name)) continue;
    PassResult r = pass->run(std::move(all.ops), ctx);
    all.ops = std::move(r.ops);
    for (BufferRequest& b : r.buffers) all.buffers.push_back(std::move(b));
    for (GuardRequest& g : r.guards) all.guards.push_back(std::move(g));
    for (const auto& [name, n] : r.counters.counts()) {
      LOOM_ASSERT(Declares(*pass, name), "graph pass '", pass->name, "' counts '", name, "', which it does not declare");
      all.counters.Add(name, n);
    }
    if (DebugLevel() >= 3)
      std::fprintf(stderr, "[loom] graph '%s': pass %s: %zu ops\n", all.ops.graph_name().c_str(), pass->name,
                   all.ops.size());
  }
  return all;
}

}  // namespace loom
