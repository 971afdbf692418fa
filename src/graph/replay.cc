// Replay (step 4 of graph.h): serial or dependency-driven, dynamic or planned memory.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/debug.h"
#include "device/cpu/blas.h"
#include "device/cpu/parallel.h"
#include "device/device.h"
#include "graph/graph.h"
#include "graph/replay_workers.h"

namespace loom {

namespace {
double NowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

// ---------------------------------------------------------------- workers
ReplayWorkers::ReplayWorkers(int n) {
  for (int i = 1; i < n; ++i) threads_.emplace_back([this, i] { Loop(i); });
}

ReplayWorkers::~ReplayWorkers() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplayWorkers::Loop(int thread) {
  SerialRegion serial;
  uint64_t seen = 0;
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    Work(thread, l);
  }
}

void ReplayWorkers::Work(int thread, std::unique_lock<std::mutex>& l) {
  while (true) {
    cv_.wait(l, [&] { return !ready_.empty() || finished_ == total_ || error_ || stop_; });
    if (ready_.empty() || error_ || stop_) {
      if (finished_ == total_ || error_ || stop_) return;
      continue;
    }
    int op = ready_.back();
    ready_.pop_back();
    // Note [Alone in flight]: an op dispatched when nothing else is ready or running is the
    // only one in flight until it ends (no other op can become ready before it finishes), so
    // it gets the whole pool for its own loops. Otherwise ops run serially inside, one core
    // each: a chain of ops is then no slower than serial replay.
    const bool alone = ready_.empty() && busy_ == 0;
    ++busy_;
    l.unlock();
    std::exception_ptr err;
    try {
      SerialRegion region(!alone);
      (*run_)(op, thread);
    } catch (...) {
      err = std::current_exception();
    }
    l.lock();
    --busy_;
    if (err && !error_) error_ = err;
    ++finished_;
    if (!err)
      for (int s : (*succs_)[size_t(op)])
        if (--remaining_[size_t(s)] == 0) ready_.push_back(s);
    if (finished_ == total_ || error_) done_cv_.notify_all();
    cv_.notify_all();
  }
}

void ReplayWorkers::Run(const std::vector<std::vector<int>>& succs, const std::vector<int>& npreds,
                        const std::function<void(int, int)>& run) {
  std::unique_lock<std::mutex> l(mu_);
  succs_ = &succs;
  run_ = &run;
  remaining_ = npreds;
  ready_.clear();
  // Seed in reverse so that the vector pops ops in issue order first.
  for (size_t i = npreds.size(); i-- > 0;)
    if (npreds[i] == 0) ready_.push_back(int(i));
  finished_ = 0;
  total_ = npreds.size();
  error_ = nullptr;
  ++generation_;
  cv_.notify_all();
  {
    SerialRegion serial;
    Work(0, l);
  }
  done_cv_.wait(l, [&] { return busy_ == 0 && (finished_ == total_ || error_); });
  std::exception_ptr err = error_;
  succs_ = nullptr;
  run_ = nullptr;
  total_ = 0;
  finished_ = 0;
  if (err) std::rethrow_exception(err);
}

// ---------------------------------------------------------------- graph
void Graph::BindMemory() {
  // Persistent blocks born in the capture (the loss, gradients the user kept) get pool memory
  // once and keep it.
  for (size_t b = 0; b < blocks_.size(); ++b)
    if (analysis_.blocks[b].persistent && analysis_.blocks[b].first >= 0) blocks_[b]->Allocate();
  if (options_.memory == MemoryMode::kPlanned && plan_.arena_bytes > 0) {
    // Note [Block lifetime]: planned blocks point into the arena and never own memory.
    arena_ = device_->Malloc(std::max<size_t>(plan_.arena_bytes, 1));
    for (int b : planned_) {
      Block& blk = *blocks_[size_t(b)];
      LOOM_ASSERT(!blk.allocated(), "intermediate block ", blk.id(), " already has memory");
      blk.Bind(static_cast<char*>(arena_) + offset_of_[size_t(b)]);
    }
  }
  bound_ = true;
}

void Graph::RunOp(int i, const KernelContext& ctx, int thread) {
  const OpRecord& op = ops_[size_t(i)];
  double t0 = options_.profile ? NowUs() : 0;
  if (!scratch_offset_.empty() && scratch_offset_[size_t(i)] != SIZE_MAX) {
    KernelContext with_scratch = ctx;  // Note [Planned scratch]
    with_scratch.scratch = static_cast<char*>(arena_) + scratch_offset_[size_t(i)];
    with_scratch.scratch_bytes = scratch_size_[size_t(i)];
    device_->RunKernel(op, with_scratch);
  } else {
    device_->RunKernel(op, ctx);
  }
  if (options_.profile) {
    double t1 = NowUs();
    profile_[size_t(i)] = OpTiming{i, thread, t0 - profile_t0_, t1 - profile_t0_};
  }
}

void Graph::RunSerial(const KernelContext& ctx) {
  const bool dynamic = options_.memory == MemoryMode::kDynamic;
  size_t live = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (dynamic) {
      for (int b : analysis_.allocs[i]) {
        blocks_[size_t(b)]->Allocate();
        live += facts_[size_t(b)].bytes;
      }
      stats_.dynamic_peak_bytes = std::max(stats_.dynamic_peak_bytes, live);
    }
    RunOp(int(i), ctx, 0);
    if (dynamic) {
      // Refcount zero: the last op touching the block has run (Note [Block lifetime in a graph]).
      for (int b : analysis_.frees[i]) {
        blocks_[size_t(b)]->Release();
        live -= facts_[size_t(b)].bytes;
      }
    }
  }
}

void Graph::RunParallel(const KernelContext& ctx) {
  int n = options_.num_workers > 0 ? options_.num_workers : NumThreads();
  if (!workers_ || workers_->size() != n) workers_ = std::make_unique<ReplayWorkers>(n);
  const bool dynamic = options_.memory == MemoryMode::kDynamic;
  // Dynamic memory under a parallel schedule: a block is allocated by its first writer (all its
  // other users depend on that op) and released when its reference count drops to zero.
  std::vector<std::atomic<int>> refs(dynamic ? blocks_.size() : 0);
  std::mutex live_mu;
  size_t live = 0;
  if (dynamic)
    for (size_t b = 0; b < blocks_.size(); ++b) refs[b] = analysis_.blocks[b].accessors;
  BlasSetThreads(1);
  auto run = [&](int i, int thread) {
    if (dynamic) {
      for (int b : analysis_.allocs[size_t(i)]) {
        blocks_[size_t(b)]->Allocate();
        std::lock_guard<std::mutex> l(live_mu);
        live += facts_[size_t(b)].bytes;
        stats_.dynamic_peak_bytes = std::max(stats_.dynamic_peak_bytes, live);
      }
    }
    RunOp(i, ctx, thread);
    if (dynamic) {
      for (int b : recycled_by_[size_t(i)]) {
        if (--refs[size_t(b)] == 0) {
          blocks_[size_t(b)]->Release();
          std::lock_guard<std::mutex> l(live_mu);
          live -= facts_[size_t(b)].bytes;
        }
      }
    }
  };
  try {
    workers_->Run(sched_succs_, sched_npreds_, run);
  } catch (...) {
    BlasSetThreads(NumThreads());
    throw;
  }
  BlasSetThreads(NumThreads());
}

// Note [Parallel or serial]
// On a few cores, one op at a time with the whole pool inside it (serial replay) usually beats
// several ops at once with one core each, and a chain of ops (an MLP) has nothing to run side
// by side anyway. So the first parallel replay runs serially and times every op; the graph's
// parallelism is then the total op time over the longest chain of dependent ops (with those
// times). Below 0.9 x the worker count, later parallel replays run serially too
// (GraphStats::parallel_runs_serial); at or above it, they use the dependency-driven schedule.
// The choice is made once per graph, from one measurement, and results are the same either way
// (a parallel replay agrees with a serial one to rounding).
void Graph::MeasureParallelism(const KernelContext& ctx) {
  const bool profiling = options_.profile;
  if (!profiling) {
    options_.profile = true;
    profile_.assign(ops_.size(), OpTiming{0, 0, 0, 0});
    profile_t0_ = NowUs();
  }
  try {
    RunSerial(ctx);
  } catch (...) {
    options_.profile = profiling;
    throw;
  }
  options_.profile = profiling;
  // Earliest finish of every op with unlimited workers: ops are in issue order, and every edge
  // of the schedule points forward.
  std::vector<double> start(ops_.size(), 0.0);
  double total = 0, longest = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const double cost = std::max(0.0, profile_[i].end_us - profile_[i].start_us);
    const double finish = start[i] + cost;
    total += cost;
    longest = std::max(longest, finish);
    for (int s : sched_succs_[i]) {
      LOOM_ASSERT(size_t(s) > i, "schedule edge ", i, " -> ", s, " points backwards");
      start[size_t(s)] = std::max(start[size_t(s)], finish);
    }
  }
  const int workers = options_.num_workers > 0 ? options_.num_workers : NumThreads();
  stats_.parallelism = longest > 0 ? total / longest : 1.0;
  stats_.parallel_runs_serial = stats_.parallelism < 0.9 * workers;
  if (DebugLevel() >= 1)
    std::fprintf(stderr, "[loom] graph '%s': parallelism %.2f (%d workers): later parallel replays run %s\n",
                 key_.c_str(), stats_.parallelism, workers, stats_.parallel_runs_serial ? "serially" : "in parallel");
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
void Graph::RunDeviceGraph(const KernelContext& ctx) {
  if (device_graph_stage_ == 0) {
    RunSerial(ctx);
    device_graph_stage_ = 1;
    return;
  }
  if (device_graph_stage_ == 1) {
    KernelContext rec = ctx;
    rec.rng_base_device = device_->BeginDeviceGraphCapture(this);
    try {
      RunSerial(rec);
    } catch (...) {
      device_->ReleaseDeviceGraph(this);
      throw;
    }
    device_->EndDeviceGraphCapture(this);
    device_graph_stage_ = 2;
  }
  device_->LaunchDeviceGraph(this, ctx.rng_base);
}

void Graph::ReleaseDynamic() {
  for (int b : planned_) blocks_[size_t(b)]->Release();
}

void Graph::Run(bool sequential) {
  LOOM_CHECK(finalized_, GraphError, "[graph '", key_, "'] is still being captured");
  LOOM_CHECK(!options_.device_graph || options_.memory == MemoryMode::kPlanned, GraphError, "[graph '", key_,
             "'] device_graph replay needs planned memory: a recorded device graph runs on fixed addresses");
  LOOM_CHECK(!options_.device_graph || device_->HasDeviceGraphs(), DeviceError,
             "[graph] device graphs are not supported on ", device_->name(), " (graph '", key_,
             "' has GraphOptions::device_graph set)");
  if (!bound_) BindMemory();
  KernelContext ctx;
  ctx.device = device_;
  ctx.rng_seed = device_->rng_seed();
  ctx.rng_base = device_->rng_counter();
  if (options_.profile) {
    profile_.assign(ops_.size(), OpTiming{0, 0, 0, 0});
    profile_t0_ = NowUs();
  }
  try {
    if (sequential && options_.device_graph) RunDeviceGraph(ctx);
    else if (sequential) RunSerial(ctx);
    else if (options_.parallel_fallback && stats_.parallelism == 0) MeasureParallelism(ctx);
    else if (options_.parallel_fallback && stats_.parallel_runs_serial) RunSerial(ctx);
    else RunParallel(ctx);
  } catch (...) {
    if (options_.memory == MemoryMode::kDynamic) ReleaseDynamic();
    device_->AdvanceRng(rng_draws_);
    throw;
  }
  // Random ops drew counters [base, base + draws): the next replay or eager op starts after.
  device_->AdvanceRng(rng_draws_);
  stats_.replays++;
  if (options_.profile && DebugLevel() >= 2) {
    double total = 0;
    for (const OpTiming& t : profile_) total += t.end_us - t.start_us;
    std::fprintf(stderr, "[loom] replay %llu of '%s': %zu ops, %.1f us in kernels\n",
                 (unsigned long long)stats_.replays, key_.c_str(), ops_.size(), total);
    for (const OpTiming& t : profile_)
      std::fprintf(stderr, "[loom]   %4d %-24s %8.1f us\n", t.op, ops_[size_t(t.op)].name().c_str(),
                   t.end_us - t.start_us);
  }
}

}  // namespace loom
