// Device: where kernels run and memory lives. A device either runs each submitted op at once
// (eager) or, between EnableGraph(true) and EnableGraph(false), buffers it into a Graph that is
// analysed once and replayed by RunGraph (src/graph). Buffering is a property of one device and
// of one keyed graph: a training step and an evaluation step can each have their own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/op.h"
#include "device/allocator.h"

namespace loom {

class Graph;
struct GraphOptions;

class Device : public std::enable_shared_from_this<Device> {
 public:
  // `alloc`/`free` give the backend's raw memory to the caching pool.
  Device(DeviceType type, int id, CachingAllocator::RawAlloc alloc, CachingAllocator::RawFree free);
  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  DeviceType type() const { return type_; }
  int id() const { return id_; }
  std::string name() const;  // "cpu:0", "cuda:0"

  // ---- memory ----
  void* Malloc(size_t bytes);
  void Free(void* p);
  MemStats stats() const { return alloc_->stats(); }
  void ResetPeak() { alloc_->ResetPeak(); }
  void EmptyCache() { alloc_->EmptyCache(); }
  virtual void MemcpyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void MemcpyFromHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void Synchronize() {}

  // ---- device graphs (CUDA graphs; Note [Device graph replay] in graph/replay.cc) ----
  // Keyed by `owner` (a Graph), so several graphs can each hold one. Begin starts recording the
  // kernels this thread issues (nothing runs) and returns the device-resident Philox base that
  // the recorded random kernels must read (KernelContext::rng_base_device). End makes the
  // recording launchable. Launch sets that base to `rng_base`, then runs the recorded kernels.
  // Release drops owner's device graph, also an unfinished recording. The defaults throw
  // DeviceError: the CPU has no device graphs.
  virtual bool HasDeviceGraphs() const { return false; }
  virtual const uint64_t* BeginDeviceGraphCapture(const void* owner);
  virtual void EndDeviceGraphCapture(const void* owner);
  virtual void LaunchDeviceGraph(const void* owner, uint64_t rng_base);
  virtual void ReleaseDeviceGraph(const void* owner) noexcept {}

  // ---- ops ----
  // Eager: allocates the outputs' blocks if needed and runs the kernel. Buffering: appends the
  // record to the graph being captured; nothing runs and nothing is allocated.
  void Submit(OpRecord op);
  // Runs a kernel on blocks that already have memory. Used by eager Submit and by replay.
  void RunKernel(const OpRecord& op, const KernelContext& ctx);
  bool HasKernel(const OpDef& def) const { return def.kernels[int(type_)] != nullptr; }
  uint64_t ops_run() const { return ops_run_; }
  // Eager memory timeline: when on, every eagerly run op appends (op name, live bytes after it).
  // For plots and tests; off by default.
  void RecordEagerTimeline(bool on) { record_timeline_ = on; timeline_.clear(); }
  std::vector<std::pair<std::string, size_t>> TakeEagerTimeline() { return std::move(timeline_); }

  // ---- random numbers: one Philox key per device, a counter that only moves forward ----
  void SetRandSeed(uint64_t seed) { rng_seed_ = seed; rng_counter_ = 0; }
  uint64_t rng_seed() const { return rng_seed_; }
  uint64_t rng_counter() const { return rng_counter_; }
  void AdvanceRng(uint64_t n) { rng_counter_ += n; }

  // ---- graphs (defined in src/graph/device_graphs.cc) ----
  // EnableGraph(true, key) starts capturing into the graph named key (replacing an old graph
  // of that name); EnableGraph(false) ends the capture, analyses and plans it.
  void EnableGraph(bool on, const std::string& key = "default");
  // Replays a captured graph: serially in issue order, or on worker threads by dependency.
  void RunGraph(bool sequential = true, const std::string& key = "default");
  // Drops one graph ("" drops all of them) and the memory it planned.
  void ResetGraph(const std::string& key = "");
  bool HasGraph(const std::string& key = "default") const;
  Graph& GetGraph(const std::string& key = "default");
  bool buffering() const { return capturing_ != nullptr && setup_depth_ == 0; }
  const std::string& capture_key() const { return capture_key_; }
  GraphOptions& graph_options();

  // Note [Setup inside a capture]
  // Creating persistent state (parameters, optimizer moments, running statistics) is setup,
  // not part of the step: if it happens during a capture it must run once, now, rather than
  // on every replay (re-zeroing a momentum buffer each step would be a silent bug). Code that
  // creates such state opens a SetupScope; ops submitted inside it run eagerly.
  class SetupScope {
   public:
    explicit SetupScope(Device* d) : d_(d) { ++d_->setup_depth_; }
    ~SetupScope() { --d_->setup_depth_; }
   private:
    Device* d_;
  };

 private:
  DeviceType type_;
  int id_;
  std::unique_ptr<CachingAllocator> alloc_;
  uint64_t rng_seed_ = 0x5eed;
  uint64_t rng_counter_ = 0;
  uint64_t ops_run_ = 0;
  int setup_depth_ = 0;
  bool record_timeline_ = false;
  std::vector<std::pair<std::string, size_t>> timeline_;
  std::map<std::string, std::unique_ptr<Graph>> graphs_;
  std::unique_ptr<GraphOptions> graph_options_;
  Graph* capturing_ = nullptr;
  std::string capture_key_;
};

// The process-wide CPU device (created on first use).
std::shared_ptr<Device> CpuDevice();
// CUDA device `id`; throws DeviceError when the CUDA backend is not built or no GPU is visible.
std::shared_ptr<Device> CudaDevice(int id = 0);
bool CudaAvailable();  // built with CUDA and at least one GPU visible

}  // namespace loom
