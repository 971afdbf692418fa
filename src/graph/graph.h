// Graph: one captured training step (forward, backward, optimizer update) and everything loom
// derives from it once: dependencies, block lifetimes, the memory plan, the schedule.
//
// The buffering story, in order (one file of this folder each):
//   1. capture   (graph.cc)     Device::Submit appends OpRecords while the device buffers;
//                               nothing runs, nothing is allocated.
//  1b. optimise  (fuse.cc)      rewrites the captured ops where a captured step allows what
//                               eager cannot (a weight gradient computed into its update).
//   2. analyse   (analysis.cc)  blocks, refcounts, lifetimes, persistence, RAW/WAR/WAW edges.
//   3. plan      (plan.cc)      lifetimes -> offsets in one arena (a pure function).
//   4. replay    (replay.cc)    serial in issue order, or by dependency on worker threads;
//                               memory dynamic (pool at first use, back at refcount zero) or
//                               planned (the arena, bound at the first replay).
//   5. observe   (dump.cc)      DOT graph, Chrome trace of a replay, memory timeline.
// The contract between capture and replay: a replay runs exactly the captured ops on exactly
// the captured blocks. New data reaches it by writing into the blocks it reads (inputs are
// fed, not baked); anything else needs a new capture (graph/step.h does that per shape).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/op.h"
#include "graph/analysis.h"
#include "graph/plan.h"

namespace loom {

class Device;
class ReplayWorkers;

enum class MemoryMode { kPlanned, kDynamic };
const char* Name(MemoryMode m);

struct GraphOptions {
  MemoryMode memory = MemoryMode::kPlanned;
  int num_workers = 0;   // threads of the parallel replay; 0 = the CPU pool's size
  bool profile = false;  // record per-op timings of every replay (LOOM_DEBUG >= 2 sets it)
  // Sequential replays are recorded once as a device graph (a CUDA graph) and relaunched; needs
  // planned memory and a device with device graphs (Note [Device graph replay] in replay.cc).
  bool device_graph = false;
  // A parallel replay first runs serially, timing each op, and stays serial when the schedule
  // has too little independent work to pay for one core per op (Note [Parallel or serial] in
  // replay.cc). false: always the parallel schedule.
  bool parallel_fallback = true;
  // Graph passes at the end of the capture (graph/fuse.cc). false: replay the ops as issued.
  bool fuse = true;
};

struct GraphStats {
  size_t num_ops = 0;
  size_t num_blocks = 0;
  size_t num_intermediate = 0;     // non-persistent blocks: what the plan packs
  size_t persistent_bytes = 0;     // parameters, state, inputs, held outputs
  size_t lower_bound_bytes = 0;    // liveness lower bound of the intermediates (with in-place reuse
                                   // in planned mode: blocks sharing memory count once)
  size_t lower_bound_no_inplace_bytes = 0;  // the same without in-place reuse (dynamic mode's)
  size_t inplace_ops = 0;          // ops whose output took over an input's memory
  size_t fused_ops = 0;            // op pairs the passes of fuse.cc made one
  size_t arena_bytes = 0;          // planned arena (0 in dynamic mode)
  size_t dynamic_peak_bytes = 0;   // max intermediate bytes held at once by a dynamic replay
  std::string plan_strategy;
  MemoryMode memory = MemoryMode::kPlanned;
  uint64_t replays = 0;
  uint64_t random_draws = 0;       // Philox counters one replay consumes
  // Parallel replays: total op time / longest dependency chain, measured by the first one
  // (0 until then), and whether later ones run serially because it was too small.
  double parallelism = 0;
  bool parallel_runs_serial = false;
};

struct OpTiming {
  int op;
  int thread;
  double start_us;
  double end_us;
};

class Graph {
 public:
  Graph(Device* device, std::string key);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& key() const { return key_; }
  Device* device() const { return device_; }

  // ---- 1. capture ----
  void Append(OpRecord op);
  // Ends the capture: analysis and planning (no allocation). Called by EnableGraph(false).
  void Finalize(const GraphOptions& options);
  bool finalized() const { return finalized_; }

  // ---- 4. replay ----
  void Run(bool sequential);

  // ---- inspection ----
  const std::vector<OpRecord>& ops() const { return ops_; }
  const std::vector<std::shared_ptr<Block>>& blocks() const { return blocks_; }
  const std::vector<BlockFacts>& block_facts() const { return facts_; }
  const Analysis& analysis() const { return analysis_; }
  const MemoryPlan& plan() const { return plan_; }
  // Offset in the arena of block index b, or SIZE_MAX when b is not planned.
  size_t PlannedOffset(int b) const;
  const GraphStats& stats() const { return stats_; }
  std::string Summary() const;  // "graph 'train': 41 ops, 37 blocks, arena 1.2 MB, ..."
  void set_profile(bool on) { options_.profile = on; }
  const std::vector<OpTiming>& last_profile() const { return profile_; }

  // ---- 5. observe (dump.cc) ----
  std::string ToDot() const;
  std::string TraceJson() const;          // the last profiled replay, with a memory counter track
  std::string MemoryTimelineCsv() const;  // op, name, live intermediate bytes, arena bytes
  void WriteDot(const std::string& path) const;
  void WriteTrace(const std::string& path) const;

 private:
  int IndexOf(const std::shared_ptr<Block>& b);
  bool CanRunInPlace(int op, int input) const;
  size_t FuseWeightGradientsIntoUpdates();  // Note [Weight gradient into the update] (fuse.cc)
  void BindMemory();     // first replay: persistent outputs get memory; planned: the arena
  void RunSerial(const KernelContext& ctx);
  void RunParallel(const KernelContext& ctx);
  void MeasureParallelism(const KernelContext& ctx);
  void RunDeviceGraph(const KernelContext& ctx);
  void RunOp(int i, const KernelContext& ctx, int thread);
  void ReleaseDynamic();  // after a failed dynamic replay

  Device* device_;
  std::string key_;
  GraphOptions options_;
  std::vector<OpRecord> ops_;
  std::vector<AccessList> access_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::unordered_map<Block*, int> block_index_;
  std::vector<BlockFacts> facts_;
  std::vector<int> written_;  // per block: written by an earlier captured op
  uint64_t rng_draws_ = 0;
  bool finalized_ = false;

  Analysis analysis_;
  MemoryPlan plan_;
  std::vector<int> planned_;        // block index per plan entry
  std::vector<size_t> offset_of_;   // per block: arena offset or SIZE_MAX
  std::vector<size_t> planned_live_bytes_;  // per op: live intermediate bytes as planned
  std::vector<size_t> scratch_offset_;      // per op: arena offset of its scratch or SIZE_MAX
  std::vector<size_t> scratch_size_;        // per op: scratch bytes (Note [Planned scratch])
  std::vector<std::vector<int>> recycled_by_;  // per op: the non-persistent blocks it touches (once each)
  // Schedule for the parallel replay: the analysis' edges plus, in planned mode, edges that
  // stop a block from being overwritten while an earlier tenant of its memory is in use.
  std::vector<std::vector<int>> sched_succs_;
  std::vector<int> sched_npreds_;
  void* arena_ = nullptr;
  bool bound_ = false;
  int device_graph_stage_ = 0;  // 0: not run, 1: warmed up, 2: recorded
  std::unique_ptr<ReplayWorkers> workers_;
  std::vector<OpTiming> profile_;
  double profile_t0_ = 0;
  GraphStats stats_;
};

}  // namespace loom
