// Step 6 of graph.h: replay (replay.h).
#include "graph/replay.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

#include <time.h>

#include "core/debug.h"
#include "core/device.h"
#include "graph/replay_workers.h"

namespace loom {

namespace {
double NowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double ProcessCpuUs() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e6 + double(t.tv_nsec) * 1e-3;
}
}  // namespace

Replayer::Replayer() = default;
Replayer::~Replayer() { ReleaseDeviceGraph(); }

void Replayer::ReleaseDeviceGraph() noexcept {
  if (device_ && device_graph_stage_ > 0) device_->ReleaseDeviceGraph(this);
  device_graph_stage_ = 0;
}

void Replayer::RunOp(const ReplayInputs& g, int i, const KernelContext& ctx, int thread) {
  const OpRecord& op = g.ops.ops[size_t(i)];
  const double t0 = profiling_ ? NowUs() : 0;
  const double c0 = profiling_ ? ProcessCpuUs() : 0;
  if (void* scratch = g.binding.Scratch(g.layout, i)) {
    KernelContext with_scratch = ctx;  // Note [Planned scratch]
    with_scratch.scratch = scratch;
    with_scratch.scratch_bytes = g.layout.ScratchBytes(i);
    g.device.RunKernel(op, with_scratch);
  } else {
    g.device.RunKernel(op, ctx);
  }
  if (profiling_) {
    // Note [Profiling an asynchronous device]: the end stamp waits for the kernel, not its launch.
    g.device.Synchronize();
    const double c1 = ProcessCpuUs();
    profile_[size_t(i)] = OpTiming{i, thread, t0 - profile_t0_, NowUs() - profile_t0_, c1 - c0};
  }
}

void Replayer::RunSerial(const ReplayInputs& g, const KernelContext& ctx, GraphStats& stats) {
  const bool dynamic = g.options.memory == MemoryMode::kDynamic;
  size_t live = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (dynamic) {
      for (int b : g.analysis.allocs[i]) {
        g.ops.blocks[size_t(b)]->Allocate();
        live += g.ops.facts[size_t(b)].bytes;
      }
      stats.dynamic_peak_bytes = std::max(stats.dynamic_peak_bytes, live);
    }
    RunOp(g, int(i), ctx, 0);
    if (dynamic) {
      // Refcount zero: the last op touching the block has run (Note [Block lifetime in a graph]).
      for (int b : g.analysis.frees[i]) {
        g.ops.blocks[size_t(b)]->Release();
        live -= g.ops.facts[size_t(b)].bytes;
      }
    }
  }
}

void Replayer::RunParallel(const ReplayInputs& g, const KernelContext& ctx, GraphStats& stats) {
  const int n = g.options.num_workers > 0 ? g.options.num_workers : g.device.HostThreads();
  if (!workers_ || workers_->size() != n) workers_ = std::make_unique<ReplayWorkers>(n, g.device);
  const bool dynamic = g.options.memory == MemoryMode::kDynamic;
  // Dynamic memory under a parallel schedule: a block is allocated by its first writer (all its
  // other users depend on that op) and released when its reference count drops to zero.
  std::vector<std::atomic<int>> refs(dynamic ? g.ops.blocks.size() : 0);
  std::mutex live_mu;
  size_t live = 0;
  if (dynamic)
    for (size_t b = 0; b < g.ops.blocks.size(); ++b) refs[b] = g.analysis.blocks[b].accessors;
  auto run = [&](int i, int thread) {
    if (dynamic) {
      for (int b : g.analysis.allocs[size_t(i)]) {
        g.ops.blocks[size_t(b)]->Allocate();
        std::lock_guard<std::mutex> l(live_mu);
        live += g.ops.facts[size_t(b)].bytes;
        stats.dynamic_peak_bytes = std::max(stats.dynamic_peak_bytes, live);
      }
    }
    RunOp(g, i, ctx, thread);
    if (dynamic) {
      for (int b : g.analysis.touches[size_t(i)]) {
        if (--refs[size_t(b)] == 0) {
          g.ops.blocks[size_t(b)]->Release();
          std::lock_guard<std::mutex> l(live_mu);
          live -= g.ops.facts[size_t(b)].bytes;
        }
      }
    }
  };
  workers_->Run(g.schedule.succs, g.schedule.npreds, g.schedule.lane, run);
}

// Note [Parallel or serial] (schedule.h): the first parallel replay runs serially, timing each
// op, and the schedule with those costs decides how later ones run.
void Replayer::MeasureParallelism(const ReplayInputs& g, const KernelContext& ctx, GraphStats& stats) {
  const bool was_profiling = profiling_;
  if (!was_profiling) {
    profiling_ = true;
    profile_.assign(g.ops.size(), OpTiming{0, 0, 0, 0, 0});
    g.device.Synchronize();
    profile_t0_ = NowUs();
  }
  try {
    RunSerial(g, ctx, stats);
  } catch (...) {
    profiling_ = was_profiling;
    throw;
  }
  profiling_ = was_profiling;
  std::vector<double> costs(g.ops.size());
  for (size_t i = 0; i < costs.size(); ++i) costs[i] = profile_[i].end_us - profile_[i].start_us;
  const int threads = g.device.HostThreads();  // Note [Replay threads]
  const int workers = g.options.num_workers > 0 ? g.options.num_workers : threads;
  const ParallelChoice c = ChooseParallelOrSerial(g.schedule, costs, workers, threads);
  stats.parallelism = c.parallelism;
  stats.parallel_runs_serial = c.run_serially;
  if (DebugLevel() >= 1)
    std::fprintf(stderr,
                 "[loom] graph '%s': parallelism %.2f (%d workers, %d pool threads), estimated serial %.0f us, "
                 "parallel %.0f us: later parallel replays run %s\n",
                 g.name.c_str(), c.parallelism, workers, threads, c.serial_cost, c.parallel_cost,
                 c.run_serially ? "serially" : "in parallel");
}

// Note [Device graph replay]
// With GraphOptions::device_graph, a sequential replay on a device with device graphs (CUDA) is
// recorded once and relaunched as one unit:
//  - replay 1 runs serially on the device stream, as a warm-up: cuBLAS and cuDNN pick their
//    algorithms and workspaces then, since a recording must not allocate;
//  - replay 2 records the same serial replay (recording runs nothing), then launches it;
//  - later replays only launch.
// A recording keeps every kernel argument, so whatever changes between replays lives in device
// memory: the planned arena (fixed addresses: planned memory is required), fed inputs, the
// learning rate and step count (device tensors), and the Philox base, which recorded random
// kernels read from the address Begin returned and each launch sets first.
void Replayer::RunDeviceGraph(const ReplayInputs& g, const KernelContext& ctx, GraphStats& stats) {
  if (device_graph_stage_ == 0) {
    RunSerial(g, ctx, stats);
    device_graph_stage_ = 1;
    return;
  }
  if (device_graph_stage_ == 1) {
    KernelContext rec = ctx;
    rec.rng_base_device = g.device.BeginDeviceGraphCapture(this);
    const bool was_profiling = profiling_;
    profiling_ = false;  // nothing runs while recording, and a recording stream cannot be waited for
    try {
      RunSerial(g, rec, stats);
    } catch (...) {
      profiling_ = was_profiling;
      g.device.ReleaseDeviceGraph(this);
      throw;
    }
    profiling_ = was_profiling;
    g.device.EndDeviceGraphCapture(this);
    device_graph_stage_ = 2;
  }
  g.device.LaunchDeviceGraph(this, ctx.rng_seed, ctx.rng_base);
}

void Replayer::Prepare(const ReplayInputs& g) {
  LOOM_CHECK(!g.options.device_graph || g.options.memory == MemoryMode::kPlanned, GraphError, "[graph '", g.name,
             "'] device_graph replay needs planned memory: a recorded device graph runs on fixed addresses");
  LOOM_CHECK(!g.options.device_graph || g.device.HasDeviceGraphs(), DeviceError, "[graph] device graphs are not ",
             "supported on ", g.device.name(), " (graph '", g.name, "' has GraphOptions::device_graph set)");
  device_ = &g.device;
  if (!g.binding.bound()) g.binding.Bind(g.device, g.ops, g.analysis, g.layout, g.options.memory, g.buffers);
}

void Replayer::Run(const ReplayInputs& g, bool sequential, GraphStats& stats) {
  Prepare(g);
  KernelContext ctx;
  ctx.device = &g.device;
  ctx.rng_seed = g.device.rng_seed();
  ctx.rng_base = g.device.rng_counter();
  profiling_ = g.options.profile;
  // Note [Profiling an asynchronous device]
  // A CUDA kernel returns as soon as it is queued: stamps around the call time the launch. While
  // profiling, the replay waits for the device before its first stamp and after every op (a no-op
  // on the CPU), so each op's interval covers its kernels. Profiling costs that serialisation;
  // it is a diagnostic mode (GraphOptions::profile), never on by default.
  if (profiling_) {
    profile_.assign(g.ops.size(), OpTiming{0, 0, 0, 0, 0});
    g.device.Synchronize();
    profile_t0_ = NowUs();
  }
  try {
    if (sequential && g.options.device_graph) RunDeviceGraph(g, ctx, stats);
    else if (sequential) RunSerial(g, ctx, stats);
    else if (g.options.parallel_fallback && stats.parallelism == 0) MeasureParallelism(g, ctx, stats);
    else if (g.options.parallel_fallback && stats.parallel_runs_serial) RunSerial(g, ctx, stats);
    else {
      RunParallel(g, ctx, stats);
      stats.parallel_replays++;
    }
  } catch (...) {
    if (g.options.memory == MemoryMode::kDynamic) g.binding.ReleaseIntermediates();
    g.device.AdvanceRng(g.ops.random_draws);
    throw;
  }
  // Random ops drew counters [base, base + draws): the next replay or eager op starts after.
  g.device.AdvanceRng(g.ops.random_draws);
  stats.replays++;
  if (profiling_ && DebugLevel() >= 2) {
    double total = 0;
    for (const OpTiming& t : profile_) total += t.end_us - t.start_us;
    std::fprintf(stderr, "[loom] replay %llu of '%s': %zu ops, %.1f us in kernels\n",
                 (unsigned long long)stats.replays, g.name.c_str(), g.ops.size(), total);
    for (const OpTiming& t : profile_)
      std::fprintf(stderr, "[loom]   %4d %-24s %8.1f us\n", t.op, g.ops.ops[size_t(t.op)].name().c_str(),
                   t.end_us - t.start_us);
  }
}

}  // namespace loom
