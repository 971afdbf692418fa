// Device's graph API: keyed graphs, capture on and off, replay.
#include "device/device.h"
#include "graph/graph.h"

namespace loom {

GraphOptions& Device::graph_options() { return *graph_options_; }

void Device::EnableGraph(bool on, const std::string& key) {
  if (on) {
    LOOM_CHECK(!capturing_, GraphError, "[graph] ", name(), " is already capturing graph '", capture_key_,
               "'; end it with EnableGraph(false) first");
    auto g = std::make_unique<Graph>(this, key);
    capturing_ = g.get();
    capture_key_ = key;
    graphs_[key] = std::move(g);
    return;
  }
  LOOM_CHECK(capturing_, GraphError, "[graph] EnableGraph(false) on ", name(), " without a capture in progress");
  Graph* g = capturing_;
  capturing_ = nullptr;
  g->Finalize(*graph_options_);
}

bool Device::HasGraph(const std::string& key) const { return graphs_.count(key) > 0; }

Graph& Device::GetGraph(const std::string& key) {
  auto it = graphs_.find(key);
  LOOM_CHECK(it != graphs_.end(), GraphError, "[graph] ", name(), " has no graph '", key, "'");
  return *it->second;
}

void Device::RunGraph(bool sequential, const std::string& key) {
  LOOM_CHECK(!capturing_, GraphError, "[graph] RunGraph('", key, "') while graph '", capture_key_,
             "' is being captured; call EnableGraph(false) first");
  GetGraph(key).Run(sequential);
}

void Device::ResetGraph(const std::string& key) {
  // Other graphs may go while one is being captured; the one being captured may not.
  LOOM_CHECK(!capturing_ || (!key.empty() && key != capture_key_), GraphError, "[graph] ResetGraph('", key,
             "') while graph '", capture_key_, "' is being captured");
  if (key.empty()) graphs_.clear();
  else graphs_.erase(key);
}

}  // namespace loom
