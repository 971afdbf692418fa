// Device: where kernels run and memory lives. A device either runs each submitted op at once
// (eager) or, while a capture sink is active, hands it to the sink (a Graph of src/graph, which
// the device knows only through this interface).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/op.h"
#include "core/allocator.h"

namespace loom {

// Note [Capture sink]
// While a sink is active on a device, Submit appends every op to it instead of running it
// (docs/design.md invariant 4: capture runs nothing). A device has at most one active sink, and it
// belongs to the thread that began the capture (invariant 10): an op another thread submits
// meanwhile raises GraphError instead of landing in someone else's graph. Ops of a SetupScope
// on the capturing thread run eagerly (Note [Setup inside a capture]).
class CaptureSink {
 public:
  virtual void Append(OpRecord op) = 0;
  virtual const std::string& capture_name() const = 0;  // for messages: "graph 'train'"

 protected:
  ~CaptureSink() = default;
};

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
  // kernels this thread issues (nothing runs) and returns the device-resident Philox {base, seed}
  // that the recorded random kernels must read (KernelContext::rng_base_device). End makes the
  // recording launchable. Launch sets those two words, then runs the recorded kernels.
  // Release drops owner's device graph, also an unfinished recording. The defaults throw
  // DeviceError: the CPU has no device graphs.
  virtual bool HasDeviceGraphs() const { return false; }
  virtual const uint64_t* BeginDeviceGraphCapture(const void* owner);
  virtual void EndDeviceGraphCapture(const void* owner);
  virtual void LaunchDeviceGraph(const void* owner, uint64_t rng_seed, uint64_t rng_base);
  virtual void ReleaseDeviceGraph(const void* owner) noexcept {}

  // ---- threads (Note [Replay threads]) ----
  // Note [Replay threads]
  // A parallel replay (graph/replay_workers.h) runs independent ops on worker threads of the
  // host, and how many pay depends on the device: the CPU's kernels themselves split work over
  // its pool (Note [Thread counts] in device/cpu/parallel.h), so its replay takes as many workers
  // as the pool has and asks each worker's kernels not to fan out again on the same cores; a GPU
  // only needs host threads to issue kernels. The graph asks the device both, and knows no pool.
  // HostThreads: the workers of a parallel replay when GraphOptions::num_workers is 0, and the
  // threads one op's kernel may use (the cost model of Note [Parallel or serial]).
  virtual int HostThreads() const;
  // Whether kernels issued by the calling thread may split their work over the device's threads
  // (false on a replay worker while other ops run beside it); returns the previous setting.
  virtual bool SetKernelFanOut(bool fan_out) { return fan_out; }

  // ---- ops ----
  // Eager: allocates the outputs' blocks if needed and runs the kernel. Buffering: appends the
  // record to the active capture sink; nothing runs and nothing is allocated.
  void Submit(OpRecord op);
  // Runs a kernel on blocks that already have memory. Used by eager Submit and by replay.
  void RunKernel(const OpRecord& op, const KernelContext& ctx);
  bool HasKernel(const OpDef& def) const { return def.kernels[int(type_)] != nullptr; }
  // This device has a kernel for op.def and that kernel handles this record (Note [What a kernel
  // supports] in core/op.h). Graph passes ask it before they create a fused op.
  // A record whose attributes are not bound to its op yet (a pass's new record) is checked as
  // Submit would check it (Note [Declared attributes] in core/attrs.h).
  bool Supports(const OpRecord& op) const;
  uint64_t ops_run() const { return ops_run_.load(std::memory_order_relaxed); }
  // Eager memory timeline: when on, every eagerly run op appends (op name, live bytes after it).
  // For plots and tests; off by default.
  void RecordEagerTimeline(bool on) { record_timeline_ = on; timeline_.clear(); }
  std::vector<std::pair<std::string, size_t>> TakeEagerTimeline() { return std::move(timeline_); }

  // ---- random numbers: one Philox key per device, a counter that only moves forward ----
  void SetRandSeed(uint64_t seed) { rng_seed_ = seed; rng_counter_ = 0; }
  uint64_t rng_seed() const { return rng_seed_; }
  uint64_t rng_counter() const { return rng_counter_; }
  void AdvanceRng(uint64_t n) { rng_counter_ += n; }

  // ---- capture (Note [Capture sink]) ----
  // Makes `sink` the active sink, owned by the calling thread; GraphError if one is active.
  void BeginCapture(CaptureSink* sink);
  // Ends `sink`'s capture (nothing if it is not the active one).
  void EndCapture(const CaptureSink* sink) noexcept;
  bool capturing() const { return sink_.load(std::memory_order_acquire) != nullptr; }
  // The calling thread's ops are being captured (it owns the active sink, outside a SetupScope).
  bool buffering() const;
  std::string capture_name() const;  // "" when nothing is captured

  // Note [Host-transfer trap]
  // "Replay is host-free" is testable: every host read of a block (Tensor::ToVector, Item,
  // printing, checkpoints: CheckHostReadAllowed) and every host write (Tensor::CopyFromHost) is
  // counted here, and with the trap on, one made while a graph of this device replays raises
  // GraphError naming the graph and the transfer. Graph::Run marks its replay with a
  // ReplayScope. Off by default (a debug flag: tests and LOOM_DEBUG sessions turn it on).
  void set_trap_host_transfers(bool on) { trap_host_transfers_.store(on, std::memory_order_relaxed); }
  bool trap_host_transfers() const { return trap_host_transfers_.load(std::memory_order_relaxed); }
  uint64_t host_reads() const { return host_reads_.load(std::memory_order_relaxed); }
  uint64_t host_writes() const { return host_writes_.load(std::memory_order_relaxed); }
  // Counts a host read (write = false) or write of `what` ("item", "copy_from_host", ...) and
  // throws when the trap is on and a replay is running.
  void NoteHostTransfer(const char* what, bool write);
  class ReplayScope {
   public:
    ReplayScope(Device* d, const std::string& graph_name);
    ~ReplayScope();
    ReplayScope(const ReplayScope&) = delete;
    ReplayScope& operator=(const ReplayScope&) = delete;

   private:
    Device* d_;
    const std::string* previous_;
  };

  // Note [One user at a time]
  // A device runs one thing at a time (docs/design.md invariant 10): an eager op and a graph replay
  // each hold this lock while they run, so a second thread waits instead of interleaving
  // kernels on the same memory (two replays of one graph, a replay and an eager update of the
  // same weights). Recursive: a replay may submit eager ops (a CapturedStep's input copies).
  std::unique_lock<std::recursive_mutex> Use() { return std::unique_lock<std::recursive_mutex>(use_mu_); }

  // Note [Setup inside a capture]
  // Creating persistent state (parameters, optimizer moments, running statistics) is setup,
  // not part of the step: if it happens during a capture it must run once, now, rather than
  // on every replay (re-zeroing a momentum buffer each step would be a silent bug). Code that
  // creates such state opens a SetupScope; ops submitted inside it run eagerly.
  class SetupScope {
   public:
    explicit SetupScope(Device* d);
    ~SetupScope();
    SetupScope(const SetupScope&) = delete;
    SetupScope& operator=(const SetupScope&) = delete;

   private:
    Device* d_;
  };

 private:
  DeviceType type_;
  int id_;
  std::unique_ptr<CachingAllocator> alloc_;
  uint64_t rng_seed_ = 0x5eed;
  uint64_t rng_counter_ = 0;
  std::atomic<uint64_t> ops_run_{0};  // parallel replay workers count too
  bool record_timeline_ = false;
  std::vector<std::pair<std::string, size_t>> timeline_;
  std::mutex capture_mu_;  // Begin/EndCapture
  std::atomic<CaptureSink*> sink_{nullptr};
  std::atomic<std::thread::id> capture_thread_{};
  std::recursive_mutex use_mu_;
  std::atomic<bool> trap_host_transfers_{false};
  std::atomic<uint64_t> host_reads_{0}, host_writes_{0};
  std::atomic<const std::string*> replaying_{nullptr};  // the replaying graph's name (ReplayScope)
};

// The process-wide CPU device (created on first use).
std::shared_ptr<Device> CpuDevice();
// A CPU device of its own (pool, capture, lock): one per rank of an in-process group of ranks
// (io/comm/inproc.h), whose threads would otherwise wait on each other's Use() and capture.
std::shared_ptr<Device> NewCpuDevice(int id);
// CUDA device `id`; throws DeviceError when the CUDA backend is not built or no GPU is visible.
std::shared_ptr<Device> CudaDevice(int id = 0);
bool CudaAvailable();  // built with CUDA and at least one GPU visible
int CudaDeviceCount();  // the GPUs visible (0 without the CUDA backend)
// Note [No GPU, or a broken one]
// A machine without an NVIDIA driver, or whose driver sees no device, has no GPU: GPU tests skip
// (unless LOOM_REQUIRE_GPU=1). A driver that is installed but fails (too old for this CUDA, fabric
// manager down, device in a bad state) is a setup error: CudaSetupError() says what the runtime
// answered, and GPU tests fail with it instead of reporting "skipped". "" when there is none.
std::string CudaSetupError();

// Note [Float32 math on the GPU]
// How CUDA kernels compute float32 matrix products and convolutions. kTF32, the default, lets
// cuBLAS, cuBLASLt and cuDNN run them on TF32 tensor cores: operands rounded to 10 mantissa bits,
// products accumulated in float32, so a result is within about 1e-3 relative of the float32
// one on long reductions (K of thousands), the default of PyTorch's convolutions and of JAX on
// GPUs. kFull keeps IEEE float32 arithmetic (no tensor cores): the op-table comparison with the
// CPU and the bitwise tests run in it. float64 is always full, and the CPU is unaffected.
// Process-wide, read where a kernel picks its algorithm (each mode has its own cached plans);
// a recorded device graph (Note [Device graph replay]) refuses to launch after the mode changed.
// The initial mode comes from LOOM_CUDA_FLOAT32_MATH (tf32 or full) when set.
enum class Float32Math { kTF32, kFull };
void SetCudaFloat32Math(Float32Math m);
Float32Math CudaFloat32Math();  // throws ValueError when LOOM_CUDA_FLOAT32_MATH is neither
const char* Name(Float32Math m);  // "tf32", "full"
Float32Math Float32MathFromName(const std::string& name);  // throws ValueError naming the choices
// Sets the mode for the life of the scope, then puts the previous one back (tests).
class ScopedFloat32Math {
 public:
  explicit ScopedFloat32Math(Float32Math m) : previous_(CudaFloat32Math()) { SetCudaFloat32Math(m); }
  ~ScopedFloat32Math() { SetCudaFloat32Math(previous_); }
  ScopedFloat32Math(const ScopedFloat32Math&) = delete;
  ScopedFloat32Math& operator=(const ScopedFloat32Math&) = delete;

 private:
  Float32Math previous_;
};

}  // namespace loom
