// Note [The graph API in tests]
// Tests outside test/graph capture and replay through this one class, so that a change of the
// graph API changes this file, not every suite. It owns a Graph (graph/graph.h) and captures a
// step that returns what its replays fill, which Graph::Capture's void step cannot.
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "graph/graph.h"

namespace loom {
namespace test {

class CapturedGraph {
 public:
  CapturedGraph(std::shared_ptr<Device> dev, std::string name, GraphOptions options = {})
      : graph_(std::make_unique<Graph>(std::move(dev), std::move(name), options)) {}

  // Runs `step` while the device captures it into this graph (nothing runs), then finalises the
  // graph, and returns what step returned. If step throws, the capture is discarded.
  template <typename F>
  decltype(auto) Capture(F&& step) {
    graph_->BeginCapture();
    try {
      if constexpr (std::is_void_v<decltype(step())>) {
        step();
        graph_->EndCapture();
      } else {
        decltype(auto) out = step();
        graph_->EndCapture();
        return out;
      }
    } catch (...) {
      graph_->AbortCapture();
      throw;
    }
  }
  void Replay(bool sequential = true) { graph_->Run(sequential); }
  Graph& graph() { return *graph_; }

 private:
  std::unique_ptr<Graph> graph_;
};

}  // namespace test
}  // namespace loom
