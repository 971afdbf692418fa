// Graph: one captured training step (forward, backward, optimizer update) and everything loom
// derives from it once. The buffering story, each step in its own files of this folder, each a
// pure function of the steps before it (unit-tested on synthetic op lists):
//
//   1. capture   capture.h   Device::Submit hands each op to the graph (a CaptureSink);
//                            nothing runs, nothing is allocated. -> OpList (with who reads and
//                            writes each block); ranks.h checks every rank captured the same.
//  1b. passes    passes.h    op list -> op list + effects: what a captured step allows and eager
//                            cannot. The frame runs the registered passes in order: one file
//                            each here (the table in docs/design.md, "Passes"; sharing
//                            op_uses.h), a backend's in its folder (device/cpu/passes).
//                            Effects are applied by their owners: buffers by bind.h, layout
//                            and copy guards by layout_guard.h.
//  1c. budget    recompute.h op list -> op list meeting GraphOptions::memory_budget: activations
//                            dropped and computed again before their backward readers.
//   2. analyse   analysis.h  RAW/WAR/WAW dependencies, block lifetimes and refcounts,
//                            which blocks persist. -> Analysis
//   3. plan      plan.h      intermediate blocks, in-place groups, scratch -> plan entries
//                pack.h      -> offsets in one arena. -> MemoryLayout
//   4. schedule  schedule.h  dependency and memory-reuse edges for the parallel replay,
//                            and whether it pays. -> Schedule
//   5. bind      bind.h      at the first replay: the arena and the passes' buffers, blocks
//                            pointed into them. -> Binding
//   6. replay    replay.h    serial, by dependency on worker threads (replay_workers.h), or a
//                            device graph; memory planned or dynamic (pool at first use, back
//                            at refcount 0).
//   7. observe   dump.h      DOT, Chrome trace of a replay, memory timeline.
// What a graph is asked and what it reports: options.h. Index spaces (op, block, plan entry):
// Note [Index spaces] in capture.h. Graphs keyed by name for SINGA's calls: registry.h; one graph
// per input shape of a step function: step.h; FLOPs of a record: flops.h.
//
// The contract between capture and replay: a replay runs exactly the captured ops on exactly
// the captured blocks. New data reaches it by writing into the blocks it reads (inputs are fed,
// not baked); anything else needs a new capture (graph/step.h does that per input shape).
// A graph belongs to whoever made it (a CapturedStep, a Model, a user's object; SINGA's keyed
// calls are a registry of them, registry.h) and keeps its device alive.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/device.h"
#include "graph/analysis.h"
#include "graph/bind.h"
#include "graph/capture.h"
#include "graph/layout_guard.h"
#include "graph/options.h"
#include "graph/passes.h"
#include "graph/plan.h"
#include "graph/replay.h"
#include "graph/schedule.h"

namespace loom {

class Graph final : public CaptureSink {
 public:
  Graph(std::shared_ptr<Device> device, std::string name, GraphOptions options = {});
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  // Captures what `step` submits to `device` into a new graph, finalised (steps 1-4). If step
  // throws, the capture is dropped and the exception passes on.
  static std::unique_ptr<Graph> Capture(std::shared_ptr<Device> device, std::string name,
                                        const std::function<void()>& step, GraphOptions options = {});

  // ---- 1. capture, then 1b-4 at its end ----
  void BeginCapture();             // the device buffers into this graph (this thread's ops)
  void EndCapture();               // stops it; passes, budget, analysis, plan, schedule
  void AbortCapture() noexcept;    // stops it and discards what was captured
  void Append(OpRecord op) override;  // CaptureSink: called by Device::Submit
  const std::string& capture_name() const override { return quoted_name_; }

  // ---- 5-6. replay (binds memory the first time); serialised per device ----
  void Run(bool sequential = true);

  // ---- inspection ----
  const std::string& name() const { return name_; }
  Device& device() const { return *device_; }
  const GraphOptions& options() const { return options_; }
  bool finalized() const { return state_ == State::kReady; }
  const OpList& ops() const { return ops_; }
  const Analysis& analysis() const { return analysis_; }
  const MemoryLayout& layout() const { return layout_; }
  const Schedule& schedule() const { return schedule_; }
  const GraphStats& stats() const { return stats_; }
  std::string Summary() const;  // "graph 'train' on cpu:0: 41 ops, 37 blocks, arena 1.2 MB, ..."
  void set_profile(bool on) { options_.profile = on; }
  const std::vector<OpTiming>& last_profile() const { return replayer_.profile(); }

  // ---- 7. observe (dump.cc) ----
  std::string ToDot() const;
  std::string TraceJson() const;          // the last profiled replay, with a memory counter track
  std::string ProfiledTraceJson() const;  // TraceJson(), or GraphError when no replay was profiled
  std::string MemoryTimelineCsv() const;  // op, name, live intermediate bytes, arena bytes
  void WriteDot(const std::string& path) const;
  void WriteTrace(const std::string& path) const;

 private:
  enum class State { kEmpty, kCapturing, kReady, kAborted };
  void Finalize();

  std::shared_ptr<Device> device_;
  std::string name_, quoted_name_;
  GraphOptions options_;
  // Atomic: Run on another thread (RunGraph while its key is recaptured, registry.h) reads it;
  // the store of kReady after Finalize publishes the op list, plan and schedule to that thread.
  std::atomic<State> state_{State::kEmpty};
  OpList ops_;             // 1, 1b
  Analysis analysis_;      // 2
  MemoryLayout layout_;    // 3 (empty for dynamic memory)
  Schedule schedule_;      // 4
  std::vector<BufferRequest> buffers_;  // 1b: bound with the rest (5)
  Binding binding_;        // 5
  Replayer replayer_;      // 6 (declared after binding_: its device graph goes before the arena)
  // 1b: Note [Layout guards]: the blocks this graph keeps in a kernel's layout between replays.
  std::vector<std::unique_ptr<LayoutGuard>> guards_;
  GraphStats stats_;
};

}  // namespace loom
