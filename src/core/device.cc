#include "core/device.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

#include "core/autocast.h"
#include "core/error.h"

namespace loom {

Device::Device(DeviceType type, int id, CachingAllocator::RawAlloc alloc, CachingAllocator::RawFree free)
    : type_(type), id_(id), alloc_(std::make_unique<CachingAllocator>(std::move(alloc), std::move(free))) {}

Device::~Device() = default;

std::string Device::name() const { return std::string(Name(type_)) + ":" + std::to_string(id_); }

int Device::HostThreads() const { return int(std::max(1u, std::thread::hardware_concurrency())); }

void* Device::Malloc(size_t bytes) { return alloc_->Malloc(bytes); }
void Device::Free(void* p) { alloc_->Free(p); }

const uint64_t* Device::BeginDeviceGraphCapture(const void*) {
  throw DeviceError(detail::Cat("[graph] device graphs are not supported on ", name()));
}
void Device::EndDeviceGraphCapture(const void*) {
  throw DeviceError(detail::Cat("[graph] device graphs are not supported on ", name()));
}
void Device::LaunchDeviceGraph(const void*, uint64_t, uint64_t) {
  throw DeviceError(detail::Cat("[graph] device graphs are not supported on ", name()));
}

void Device::RunKernel(const OpRecord& op, const KernelContext& ctx) {
  KernelFn fn = op.def->kernels[int(type_)];
  LOOM_ASSERT(fn, "no ", Name(type_), " kernel for ", op.name());
  // Note [Declared attributes]: every record reaches its kernel through Submit or an OpList,
  // which bound its attributes; one pointer comparison keeps it so.
  LOOM_ASSERT(op.attrs.op() == op.def, op.name(), " record reached its kernel with attributes not bound to it");
  fn(op, ctx);
  ops_run_.fetch_add(1, std::memory_order_relaxed);
}

namespace {
// The devices with a SetupScope open on this thread (Note [Setup inside a capture]).
thread_local std::vector<const Device*> t_setup_scopes;
}  // namespace

Device::SetupScope::SetupScope(Device* d) : d_(d) { t_setup_scopes.push_back(d_); }
Device::SetupScope::~SetupScope() {
  auto it = std::find(t_setup_scopes.rbegin(), t_setup_scopes.rend(), d_);
  if (it != t_setup_scopes.rend()) t_setup_scopes.erase(std::next(it).base());
}

void Device::BeginCapture(CaptureSink* sink) {
  LOOM_ASSERT(sink, "BeginCapture without a sink");
  std::lock_guard<std::mutex> l(capture_mu_);
  CaptureSink* active = sink_.load(std::memory_order_acquire);
  LOOM_CHECK(!active, GraphError, "[graph] ", name(), " is already capturing ", active ? active->capture_name() : "",
             "; end that capture first");
  capture_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  sink_.store(sink, std::memory_order_release);
}

void Device::EndCapture(const CaptureSink* sink) noexcept {
  std::lock_guard<std::mutex> l(capture_mu_);
  if (sink_.load(std::memory_order_acquire) != sink) return;
  sink_.store(nullptr, std::memory_order_release);
  capture_thread_.store(std::thread::id(), std::memory_order_relaxed);
}

void Device::NoteHostTransfer(const char* what, bool write) {
  (write ? host_writes_ : host_reads_).fetch_add(1, std::memory_order_relaxed);
  if (!trap_host_transfers()) return;
  const std::string* graph = replaying_.load(std::memory_order_acquire);
  LOOM_CHECK(!graph, GraphError, "[", what, "] host ", write ? "write to" : "read of", " a block of ", name(),
             " while graph '", graph ? *graph : std::string(), "' replays (Note [Host-transfer trap]: the trap is on, "
             "and a replay must need no host transfer)");
}

Device::ReplayScope::ReplayScope(Device* d, const std::string& graph_name)
    : d_(d), previous_(d->replaying_.exchange(&graph_name, std::memory_order_acq_rel)) {}

Device::ReplayScope::~ReplayScope() { d_->replaying_.store(previous_, std::memory_order_release); }

bool Device::buffering() const {
  if (!capturing() || capture_thread_.load(std::memory_order_relaxed) != std::this_thread::get_id()) return false;
  return std::find(t_setup_scopes.begin(), t_setup_scopes.end(), this) == t_setup_scopes.end();
}

std::string Device::capture_name() const {
  CaptureSink* s = sink_.load(std::memory_order_acquire);
  return s ? s->capture_name() : std::string();
}

bool Device::Supports(const OpRecord& op) const {
  if (op.attrs.op() != op.def) {  // a record made by a pass: checked as Submit would
    OpRecord bound = op;
    bound.BindAttrs();
    return Supports(bound);
  }
  auto pred = op.def->supports[int(type_)];
  return HasKernel(*op.def) && (!pred || pred(op));
}

void Device::Submit(OpRecord op) {
  LOOM_CHECK(HasKernel(*op.def), DeviceError, "[", op.name(), "] has no kernel for device ", name());
  // Note [Precision policy]: inside an AutocastScope, eagerly and while capturing alike.
  if (AutocastPrecision() != Precision::kFloat32 && Lowers(op, AutocastPrecision())) {
    for (OpRecord& r : Lower(op, AutocastPrecision())) Submit(std::move(r));
    return;
  }
  op.BindAttrs();  // Note [Declared attributes]: bound already by Call; a record built by hand here
  for (const Tensor& t : op.inputs)
    LOOM_CHECK(t.device() == this, DeviceError, "[", op.name(), "] input ", t.Describe(), " is not on ", name());
  for (const Tensor& t : op.outputs)
    LOOM_CHECK(t.device() == this, DeviceError, "[", op.name(), "] output ", t.Describe(), " is not on ", name());
  if (CaptureSink* sink = sink_.load(std::memory_order_acquire)) {
    // Note [Capture sink]: the capturing thread's ops go to the sink (unless it is setting up
    // state); another thread's op would land in a graph it knows nothing of.
    LOOM_CHECK(capture_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id(), GraphError, "[",
               op.name(), "] submitted to ", name(), " by another thread while ", sink->capture_name(),
               " is being captured; a capture belongs to the thread that began it (docs/design.md invariant 10)");
    if (buffering()) {
      sink->Append(std::move(op));
      return;
    }
  }
  for (size_t i = 0; i < op.inputs.size(); ++i)
    LOOM_CHECK(op.inputs[i].block()->allocated(), ValueError, "[", op.name(), "] input ", i, " (",
               op.inputs[i].Describe(), ") was never written");
  auto in_use = Use();  // Note [One user at a time]
  for (const Tensor& t : op.outputs) t.block()->Allocate();
  if (op.def->random_draws) {
    op.rng_offset = rng_counter_;
    rng_counter_ += op.def->random_draws(op);
  }
  KernelContext ctx;
  ctx.device = this;
  ctx.rng_seed = rng_seed_;
  ctx.rng_base = 0;
  RunKernel(op, ctx);
  if (record_timeline_) timeline_.emplace_back(op.name(), alloc_->stats().live_bytes);
}

// Note [Float32 math on the GPU]: -1 until first read (then LOOM_CUDA_FLOAT32_MATH, else tf32).
namespace {
std::atomic<int> g_float32_math{-1};
}  // namespace

const char* Name(Float32Math m) { return m == Float32Math::kFull ? "full" : "tf32"; }

Float32Math Float32MathFromName(const std::string& name) {
  if (name == "tf32") return Float32Math::kTF32;
  if (name == "full") return Float32Math::kFull;
  throw ValueError(detail::Cat("[cuda_float32_math] '", name, "': expected 'tf32' (TF32 tensor cores, the default) or ",
                               "'full' (IEEE float32)"));
}

void SetCudaFloat32Math(Float32Math m) { g_float32_math.store(int(m), std::memory_order_relaxed); }

Float32Math CudaFloat32Math() {
  int m = g_float32_math.load(std::memory_order_relaxed);
  if (m >= 0) return Float32Math(m);
  Float32Math initial = Float32Math::kTF32;
  if (const char* env = std::getenv("LOOM_CUDA_FLOAT32_MATH"); env && *env) {
    try {
      initial = Float32MathFromName(env);
    } catch (const ValueError& e) {
      throw ValueError(detail::Cat("LOOM_CUDA_FLOAT32_MATH: ", e.what()));
    }
  }
  int expected = -1;  // a SetCudaFloat32Math meanwhile wins
  g_float32_math.compare_exchange_strong(expected, int(initial), std::memory_order_relaxed);
  return Float32Math(g_float32_math.load(std::memory_order_relaxed));
}

}  // namespace loom
