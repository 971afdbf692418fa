// SINGA's keyed graph calls (registry.h).
#include "graph/registry.h"

#include <map>
#include <mutex>

namespace loom {

namespace {

struct DeviceGraphs {
  std::map<std::string, std::shared_ptr<Graph>> graphs;
  std::shared_ptr<Graph> capturing;  // between EnableGraph(true) and EnableGraph(false)
  GraphOptions options;
};

std::mutex& Mutex() {
  static std::mutex mu;
  return mu;
}

// Never destroyed: graphs can hold memory and device graphs of devices (CUDA) whose runtime is
// gone by the time static objects die at exit.
std::map<const Device*, DeviceGraphs>& Table() {
  static auto* table = new std::map<const Device*, DeviceGraphs>();
  return *table;
}

}  // namespace

void EnableGraph(Device& device, bool on, const std::string& key) {
  std::shared_ptr<Graph> g;
  if (on) {
    GraphOptions options;
    {
      std::lock_guard<std::mutex> l(Mutex());
      options = Table()[&device].options;
    }
    g = std::make_shared<Graph>(device.shared_from_this(), key, options);
    g->BeginCapture();  // throws while another capture runs on the device
    std::lock_guard<std::mutex> l(Mutex());
    DeviceGraphs& d = Table()[&device];
    d.capturing = g;
    d.graphs[key] = g;
    return;
  }
  {
    std::lock_guard<std::mutex> l(Mutex());
    DeviceGraphs& d = Table()[&device];
    g = std::move(d.capturing);
  }
  LOOM_CHECK(g, GraphError, "[graph] EnableGraph(false) on ", device.name(), " without a capture in progress");
  try {
    g->EndCapture();
  } catch (...) {
    std::lock_guard<std::mutex> l(Mutex());
    auto& graphs = Table()[&device].graphs;
    auto it = graphs.find(g->name());
    if (it != graphs.end() && it->second == g) graphs.erase(it);
    throw;
  }
}

std::shared_ptr<Graph> GetGraph(Device& device, const std::string& key) {
  std::lock_guard<std::mutex> l(Mutex());
  auto& graphs = Table()[&device].graphs;
  auto it = graphs.find(key);
  LOOM_CHECK(it != graphs.end(), GraphError, "[graph] ", device.name(), " has no graph '", key, "'");
  return it->second;
}

bool HasGraph(Device& device, const std::string& key) {
  std::lock_guard<std::mutex> l(Mutex());
  return Table()[&device].graphs.count(key) > 0;
}

void RunGraph(Device& device, bool sequential, const std::string& key) {
  std::shared_ptr<Graph> g = GetGraph(device, key);  // held for the whole replay
  g->Run(sequential);
}

void ResetGraph(Device& device, const std::string& key) {
  std::vector<std::shared_ptr<Graph>> dropped;  // destroyed outside the lock
  std::lock_guard<std::mutex> l(Mutex());
  DeviceGraphs& d = Table()[&device];
  LOOM_CHECK(!d.capturing || (!key.empty() && key != d.capturing->name()), GraphError, "[graph] ResetGraph('", key,
             "') while graph '", d.capturing ? d.capturing->name() : "", "' is being captured");
  if (key.empty()) {
    for (auto& kv : d.graphs) dropped.push_back(std::move(kv.second));
    d.graphs.clear();
  } else {
    auto it = d.graphs.find(key);
    if (it != d.graphs.end()) {
      dropped.push_back(std::move(it->second));
      d.graphs.erase(it);
    }
  }
}

GraphOptions RegistryGraphOptions(Device& device) {
  std::lock_guard<std::mutex> l(Mutex());
  return Table()[&device].options;
}

void SetRegistryGraphOptions(Device& device, const GraphOptions& options) {
  CheckGraphOptions(options);
  std::lock_guard<std::mutex> l(Mutex());
  Table()[&device].options = options;
}

}  // namespace loom
