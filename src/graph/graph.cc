// Graph: the capture and the pipeline at its end (graph.h).
#include "graph/graph.h"

#include <cstdio>

#include "core/debug.h"
#include "graph/passes.h"
#include "graph/ranks.h"
#include "graph/recompute.h"

namespace loom {

Graph::Graph(std::shared_ptr<Device> device, std::string name, GraphOptions options)
    : device_(std::move(device)), name_(std::move(name)), options_(options), ops_(name_) {
  LOOM_CHECK(device_, DeviceError, "[graph '", name_, "'] no device");
  CheckGraphOptions(options_);
  quoted_name_ = "graph '" + name_ + "'";
  if (DebugLevel() >= 2) options_.profile = true;
}

Graph::~Graph() { AbortCapture(); }

std::unique_ptr<Graph> Graph::Capture(std::shared_ptr<Device> device, std::string name,
                                      const std::function<void()>& step, GraphOptions options) {
  auto g = std::make_unique<Graph>(std::move(device), std::move(name), options);
  g->BeginCapture();
  try {
    step();
  } catch (...) {
    g->AbortCapture();
    throw;
  }
  g->EndCapture();
  return g;
}

void Graph::BeginCapture() {
  LOOM_CHECK(state_ == State::kEmpty, GraphError, "[", quoted_name_, "] was captured already; a graph is ",
             "captured once (make a new one to capture again)");
  device_->BeginCapture(this);
  state_ = State::kCapturing;
}

void Graph::Append(OpRecord op) {
  LOOM_ASSERT(state_ == State::kCapturing, "op appended to ", quoted_name_, " outside its capture");
  ops_.Append(std::move(op));
}

void Graph::AbortCapture() noexcept {
  if (state_ != State::kCapturing) return;
  device_->EndCapture(this);
  ops_ = OpList(name_);
  state_ = State::kAborted;
}

void Graph::EndCapture() {
  LOOM_CHECK(state_ == State::kCapturing, GraphError, "[", quoted_name_, "] EndCapture without a capture in progress");
  device_->EndCapture(this);
  try {
    Finalize();
  } catch (...) {
    ops_ = OpList(name_);
    state_ = State::kAborted;
    throw;
  }
  state_ = State::kReady;
  if (DebugLevel() >= 1) std::fprintf(stderr, "[loom] %s\n", Summary().c_str());
}

// Steps 1b-4 of graph.h, each a pure function of the ones before.
void Graph::Finalize() {
  ops_.NoteHolders();
  CheckRanksCapturedTheSame(ops_, *device_);  // Note [Ranks capture the same graph]
  PassResult passed = RunPasses(std::move(ops_), *device_, options_);  // Note [Passes]
  ops_ = std::move(passed.ops);
  const bool planned = options_.memory == MemoryMode::kPlanned;
  auto plan = [&](const OpList& list, const Analysis& analysis) {
    std::vector<size_t> scratch(list.size(), 0);  // Note [Planned scratch]
    for (size_t i = 0; i < list.size(); ++i)
      if (auto fn = list.ops[i].def->scratch[int(device_->type())]) scratch[i] = fn(list.ops[i]);
    return PlanMemory(list, analysis, scratch);
  };
  RecomputeResult rc;  // Note [Recomputing for a memory budget]
  if (options_.memory_budget) {
    rc = RecomputeForBudget(std::move(ops_), options_.memory_budget, [&](const OpList& list, const Analysis& a) {
      if (!planned) return PeakEstimate{a.lower_bound_bytes + a.persistent_bytes, a.live_bytes};
      MemoryLayout m = plan(list, a);
      return PeakEstimate{m.packing.arena_bytes + a.persistent_bytes, std::move(m.live_bytes)};
    });
    if (DebugLevel() >= 1)
      for (const std::string& c : rc.choices) std::fprintf(stderr, "[loom] %s memory budget: %s\n", quoted_name_.c_str(), c.c_str());
    LOOM_CHECK(rc.met, GraphError, "[", quoted_name_, "] memory budget of ", options_.memory_budget,
               " bytes cannot be met by recomputation: the smallest peak reached is ", rc.peak_bytes,
               " bytes (", planned ? "planned arena" : "liveness bound", " plus persistent blocks, after dropping ",
               rc.dropped_blocks, " activations)");
    ops_ = std::move(rc.ops);
  }
  analysis_ = Analyse(ops_.access, ops_.facts);
  if (planned) layout_ = plan(ops_, analysis_);
  schedule_ = BuildSchedule(ops_, analysis_, layout_);

  stats_.num_ops = ops_.size();
  stats_.num_blocks = ops_.blocks.size();
  stats_.num_intermediate = 0;
  for (const BlockLife& l : analysis_.blocks) stats_.num_intermediate += !l.persistent && l.first >= 0;
  stats_.persistent_bytes = analysis_.persistent_bytes;
  stats_.lower_bound_bytes = planned ? layout_.lower_bound_bytes : analysis_.lower_bound_bytes;
  stats_.lower_bound_no_inplace_bytes = analysis_.lower_bound_bytes;
  stats_.inplace_ops = layout_.inplace.size();
  stats_.counters = std::move(passed.counters);
  stats_.recomputed_ops = rc.recomputed_ops;
  stats_.recompute_flops = rc.added_flops;
  stats_.arena_bytes = planned ? layout_.packing.arena_bytes : 0;
  stats_.plan_strategy = planned ? layout_.packing.strategy : "dynamic";
  stats_.memory = options_.memory;
  stats_.random_draws = ops_.random_draws;
  // Last, once nothing above can throw: the passes' effects (Note [Passes]). Buffers are bound
  // with the rest of the memory at the first replay; guards put their blocks back when the
  // graph goes.
  buffers_ = std::move(passed.buffers);
  for (GuardRequest& g : passed.guards) guards_.push_back(std::make_unique<LayoutGuard>(std::move(g)));
}

void Graph::Run(bool sequential) {
  LOOM_CHECK(state_ == State::kReady, GraphError, "[", quoted_name_, "] ",
             state_ == State::kCapturing ? "is still being captured" : "has no finished capture to replay");
  auto in_use = device_->Use();  // Note [One user at a time]
  Device::ReplayScope replaying(device_.get(), name_);  // Note [Host-transfer trap]
  const ReplayInputs inputs{*device_, name_, options_, ops_, analysis_, layout_, schedule_, buffers_, binding_};
  // Bound before the guards begin: a copy guard writes into a buffer the binding allocates. Every
  // replay, a device graph's launch too, runs after its guards' conversions (Note [Layout guards]).
  replayer_.Prepare(inputs);
  LayoutReplayScope layouts(guards_);
  replayer_.Run(inputs, sequential, stats_);
  layouts.Completed();
}

}  // namespace loom
