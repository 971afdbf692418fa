// Step 6 of graph.h: replay — every captured op once, on the captured blocks.
//   serial     issue order, on the calling thread (the reference: bitwise equal to eager);
//   parallel   by dependency (schedule.h) on worker threads, or serially when the graph has
//              too little independent work (Note [Parallel or serial]);
//   device     a serial replay recorded once as a device graph (CUDA graph) and relaunched
//              (Note [Device graph replay]).
// Memory is dynamic (each intermediate from the pool at its first writer, back after its last
// reader) or planned (bound once, bind.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/analysis.h"
#include "graph/bind.h"
#include "graph/capture.h"
#include "graph/options.h"
#include "graph/plan.h"
#include "graph/schedule.h"

namespace loom {

class Device;
class ReplayWorkers;
struct KernelContext;

struct OpTiming {
  int op;
  int thread;
  double start_us;
  double end_us;
  // The process's CPU time (every thread's) while the op ran: the op's own in a serial replay
  // (its pool threads included), more than its own where ops overlap (Note [Ranks sharing cores]
  // in io/comm/simulated.h reads it from serial replays).
  double cpu_us = 0;
};

// What a replay reads: the products of steps 1-5, owned by the Graph.
struct ReplayInputs {
  Device& device;
  const std::string& name;
  const GraphOptions& options;
  const OpList& ops;
  const Analysis& analysis;
  const MemoryLayout& layout;
  const Schedule& schedule;
  const std::vector<BufferRequest>& buffers;  // the passes' (Note [Passes]), bound with the rest
  Binding& binding;
};

class Replayer {
 public:
  Replayer();
  ~Replayer();
  Replayer(const Replayer&) = delete;
  Replayer& operator=(const Replayer&) = delete;

  // Checks that the device can replay as the options ask, and binds memory the first time (bind.h).
  void Prepare(const ReplayInputs& g);
  // Prepares, then runs the ops. Updates stats (replays, the
  // dynamic peak, the parallel-or-serial choice). On an exception, dynamic intermediates go
  // back to the pool and the device's random counter still advances.
  void Run(const ReplayInputs& g, bool sequential, GraphStats& stats);
  // Per op, the last profiled replay (GraphOptions::profile).
  const std::vector<OpTiming>& profile() const { return profile_; }
  // Drops the device graph this replayer recorded, if any; before the arena goes.
  void ReleaseDeviceGraph() noexcept;

 private:
  void RunSerial(const ReplayInputs& g, const KernelContext& ctx, GraphStats& stats);
  void RunParallel(const ReplayInputs& g, const KernelContext& ctx, GraphStats& stats);
  void MeasureParallelism(const ReplayInputs& g, const KernelContext& ctx, GraphStats& stats);
  void RunDeviceGraph(const ReplayInputs& g, const KernelContext& ctx, GraphStats& stats);
  void RunOp(const ReplayInputs& g, int i, const KernelContext& ctx, int thread);

  Device* device_ = nullptr;
  std::unique_ptr<ReplayWorkers> workers_;
  std::vector<OpTiming> profile_;
  bool profiling_ = false;
  double profile_t0_ = 0;
  int device_graph_stage_ = 0;  // 0: not run, 1: warmed up, 2: recorded
};

}  // namespace loom
