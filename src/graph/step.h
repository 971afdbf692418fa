// CapturedStep: a step function turned into replayed graphs, one per input signature.
//
// The first call with a given (shape, dtype, device) of every input copies the inputs into
// persistent placeholder tensors, captures fn(placeholders) on the device, and runs the graph
// once. Later calls with the same signature copy the new inputs into the placeholders and replay
// (inputs are fed, not baked: docs/design.md invariant 6). A new signature either captures another
// graph (recapture = true: the last, smaller batch of an epoch just works) or throws a
// GraphError that shows what differs.
//
// Note [Bounded recapture]
// A step keeps at most GraphOptions::max_step_graphs graphs (8 by default; 0: no bound): a run
// that feeds ever new shapes (every batch size from 1 to 400) would otherwise keep a graph, an
// arena and placeholders per shape for ever. Capturing one more drops the least recently used,
// and the first time a step does, a warning names it and the bound. A dropped shape that comes
// back is captured again.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/options.h"

namespace loom {

class Device;
class Graph;

class CapturedStep {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;
  CapturedStep(std::shared_ptr<Device> device, Fn fn, std::string name = "step", bool recapture = true,
               bool sequential = true, GraphOptions options = {});

  // Runs the step on `inputs`; returns the step's outputs (tensors the graph keeps alive and
  // rewrites on every replay: read them before the next call).
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);

  // The graph's own input tensors for inputs shaped like `like` (empty before that capture).
  // Writing a batch straight into them and passing them back saves the copy and the memory of a
  // second input buffer: a call whose inputs are the placeholders copies nothing.
  std::vector<Tensor> Placeholders(const std::vector<Tensor>& like) const;
  void set_sequential(bool s) { sequential_ = s; }
  const GraphOptions& options() const { return options_; }
  size_t num_graphs() const { return entries_.size(); }
  // The graph of the most recent call (shared: a handle stays valid after the step is gone).
  const std::shared_ptr<Graph>& last_graph() const;
  static std::string Signature(const std::vector<Tensor>& inputs);

 private:
  struct Entry {
    std::shared_ptr<Graph> graph;
    std::vector<Tensor> placeholders;
    std::vector<Tensor> outputs;
    uint64_t used = 0;  // the call that last ran it (Note [Bounded recapture])
  };
  void DropLeastRecentlyUsed();
  // The entry captured for inputs of this signature, or null. Compares shapes and dtypes with
  // the placeholders (the last entry first): no Signature string is built on a replay.
  Entry* Find(const std::vector<Tensor>& inputs);
  std::shared_ptr<Device> device_;
  Fn fn_;
  std::string name_;
  bool recapture_;
  bool sequential_;
  GraphOptions options_;
  std::map<std::string, Entry> entries_;  // by Signature; a map: last_ stays valid as it grows
  Entry* last_ = nullptr;                 // the entry of the most recent call
  uint64_t calls_ = 0;
  bool warned_ = false;
};

}  // namespace loom
