// The CUDA device (cuda_device.h) and libloom_cuda.so's table, through which libloom.so's
// CudaDevice / CudaAvailable / CudaSetupError reach it (device/cuda_entry.cc).
#include "device/cuda/cuda_device.h"

#include <dlfcn.h>

#include <memory>
#include <string>
#include <vector>

#include "core/backend_library.h"
#include "core/communicator.h"

namespace loom {
namespace cuda {

namespace {

// cudaGetDevice is a cheap runtime query; cudaSetDevice only when the thread is elsewhere.
void SetCurrent(int id) {
  int cur = -1;
  LOOM_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != id) LOOM_CUDA_CHECK(cudaSetDevice(id));
}

void* RawAlloc(int id, size_t bytes) {
  SetCurrent(id);
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;  // the caching allocator empties its cache and tries once more
  }
  LOOM_CUDA_CHECK(e);
  return p;
}

void RawFree(int id, void* p) {
  SetCurrent(id);
  LOOM_CUDA_CHECK(cudaFree(p));
}

std::string DeviceCountError(cudaError_t e) {
  return detail::Cat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

}  // namespace

CudaDeviceImpl::CudaDeviceImpl(int id)
    : Device(DeviceType::kCUDA, id, [id](size_t bytes) { return RawAlloc(id, bytes); },
             [id](void* p) { RawFree(id, p); }) {
  MakeCurrent();
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, id));
  // Note [Errors found on the GPU] (cuda_device.h): the error struct, in pinned host memory and on
  // the device.
  LOOM_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&error_host_), sizeof(KernelError)));
  *error_host_ = KernelError{0, 0, 0, 0, 0, 0};
  LOOM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&error_dev_), sizeof(KernelError)));
  LOOM_CUDA_CHECK(cudaMemsetAsync(error_dev_, 0, sizeof(KernelError), stream_));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// CUDA devices live as long as the process (CudaDevice never drops them); this runs only for a
// device destroyed explicitly, not at exit, when the CUDA runtime may already be gone. No graph
// is left then: every graph holds its device.
CudaDeviceImpl::~CudaDeviceImpl() {
  try {
    MakeCurrent();
    cudaStreamSynchronize(stream_);
    if (gemm_workspace_) Free(gemm_workspace_);
    if (workspace_) Free(workspace_);
    if (cudnn_) cudnnDestroy(cudnn_);
    if (cublaslt_) cublasLtDestroy(cublaslt_);
    if (cublas_) cublasDestroy(cublas_);
    if (error_host_) cudaFreeHost(error_host_);
    if (error_dev_) cudaFree(error_dev_);
    cudaStreamDestroy(stream_);
  } catch (...) {
  }
}

void CudaDeviceImpl::MakeCurrent() const { SetCurrent(id()); }

cublasHandle_t CudaDeviceImpl::cublas() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!cublas_) {
    MakeCurrent();
    cublasHandle_t h;
    LOOM_CUDA_CHECK(cublasCreate(&h));
    LOOM_CUDA_CHECK(cublasSetStream(h, stream_));
    // An explicit workspace: cuBLAS then allocates nothing itself, which a device-graph
    // recording requires (docs/design.md, lessons).
    if (!gemm_workspace_) gemm_workspace_ = Malloc(kGemmWorkspaceBytes);
    LOOM_CUDA_CHECK(cublasSetWorkspace(h, gemm_workspace_, kGemmWorkspaceBytes));
    // Full float32 arithmetic (no TF32): results comparable with the CPU's.
    LOOM_CUDA_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    LOOM_CUDA_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    cublas_ = h;
  }
  return cublas_;
}

cublasLtHandle_t CudaDeviceImpl::cublaslt() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!cublaslt_) {
    MakeCurrent();
    LOOM_CUDA_CHECK(cublasLtCreate(&cublaslt_));
    if (!gemm_workspace_) gemm_workspace_ = Malloc(kGemmWorkspaceBytes);
  }
  return cublaslt_;
}

void* CudaDeviceImpl::gemm_workspace() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!gemm_workspace_) gemm_workspace_ = Malloc(kGemmWorkspaceBytes);
  return gemm_workspace_;
}

cudnnHandle_t CudaDeviceImpl::cudnn() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!cudnn_) {
    MakeCurrent();
    LOOM_CUDA_CHECK(cudnnCreate(&cudnn_));
    LOOM_CUDA_CHECK(cudnnSetStream(cudnn_, stream_));
  }
  return cudnn_;
}

void* CudaDeviceImpl::Workspace(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes <= workspace_bytes_) return workspace_;
  // Growing replaces the address. A recorded device graph goes on using the old one, so while any
  // exists the old workspace is retired, not freed: freed when the last device graph is released.
  bool recorded = false;
  for (auto& kv : graphs_) recorded = recorded || kv.second.exec || kv.second.recording;
  if (workspace_ && recorded) {
    retired_workspaces_.push_back(workspace_);
  } else if (workspace_) {
    Free(workspace_);
  }
  workspace_ = Malloc(bytes);
  workspace_bytes_ = bytes;
  return workspace_;
}

void CudaDeviceImpl::SyncAndCheck() {
  LOOM_CUDA_CHECK(cudaMemcpyAsync(error_host_, error_dev_, sizeof(KernelError), cudaMemcpyDeviceToHost, stream_));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  KernelError e = *error_host_;
  if (e.code == kKernelOk) return;
  LOOM_CUDA_CHECK(cudaMemsetAsync(error_dev_, 0, sizeof(KernelError), stream_));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  *error_host_ = KernelError{0, 0, 0, 0, 0, 0};
  const char* op = e.op == kOpSoftmaxCrossEntropy       ? "softmax_cross_entropy"
                   : e.op == kOpSoftmaxCrossEntropyGrad ? "softmax_cross_entropy_grad"
                   : e.op == kOpEmbedding               ? "embedding"
                   : e.op == kOpEmbeddingGrad           ? "embedding_grad"
                   : e.op == kOpScatterElements         ? "scatter_elements"
                   : e.op == kOpGatherElements          ? "gather_elements"
                   : e.op == kOpLinearCrossEntropy      ? "linear_cross_entropy"
                                                        : "constant_of_shape";
  // The messages of the CPU kernels, and where the error surfaced.
  const std::string where = detail::Cat(" (found on ", name(), " by an earlier kernel; its outputs were set to NaN)");
  if (e.code == kLabelOutOfRange)
    throw ValueError(detail::Cat("[", op, "] label ", e.b, " in row ", e.a, " is outside [0, ", e.c, ")", where));
  if (e.code == kIndexOutOfRange && (e.op == kOpScatterElements || e.op == kOpGatherElements))
    throw ValueError(detail::Cat("[", op, "] index ", e.b, " at position ", e.a, " is out of range for an axis of ",
                                 e.c, where));
  if (e.code == kIndexOutOfRange)
    throw ValueError(detail::Cat("[", op, "] index ", e.b, " at position ", e.a, " is out of range for a table of ",
                                 e.c, " rows", where));
  if (e.code == kShapeMismatch)
    throw ValueError(detail::Cat("[", op, "] the shape tensor holds ", e.b, " at position ", e.a,
                                 " but the op was recorded for ", e.c, " there: a graph's shapes are fixed when it "
                                 "is captured", where));
  throw InternalError(detail::Cat("[", name(), "] unknown kernel error code ", e.code));
}

void CudaDeviceImpl::Synchronize() {
  MakeCurrent();
  SyncAndCheck();
}

void CudaDeviceImpl::MemcpyToHost(void* dst, const void* src, size_t bytes) {
  MakeCurrent();
  if (bytes) LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  SyncAndCheck();
}

void CudaDeviceImpl::MemcpyFromHost(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  MakeCurrent();
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  // The caller may reuse `src` as soon as this returns (it may be pinned, when the copy would
  // otherwise still be in flight). Feeding happens between steps, never inside one.
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---- device graphs (Note [Device graph replay] in graph/replay.cc) ----

const uint64_t* CudaDeviceImpl::BeginDeviceGraphCapture(const void* owner) {
  MakeCurrent();
  DeviceGraph& g = graphs_[owner];
  LOOM_CHECK(!g.recording && !g.exec, GraphError, "[graph] ", name(), " already holds a device graph for this graph");
  // Two words of bookkeeping, straight from cudaMalloc (not tensor memory, not counted).
  if (!g.rng_base) LOOM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&g.rng_base), 2 * sizeof(uint64_t)));
  // Thread-local mode: other threads may go on using CUDA (their own streams, allocations).
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  g.recording = true;
  g.math = CudaFloat32Math();
  return g.rng_base;
}

void CudaDeviceImpl::EndDeviceGraphCapture(const void* owner) {
  MakeCurrent();
  auto it = graphs_.find(owner);
  LOOM_ASSERT(it != graphs_.end() && it->second.recording, "EndDeviceGraphCapture without a recording");
  DeviceGraph& g = it->second;
  cudaGraph_t graph = nullptr;
  g.recording = false;
  LOOM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaError_t e = cudaGraphInstantiate(&g.exec, graph, 0);
  if (e != cudaSuccess) g.exec = nullptr;
  cudaError_t d = cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  LOOM_CUDA_CHECK(e);
  LOOM_CUDA_CHECK(d);
}

void CudaDeviceImpl::LaunchDeviceGraph(const void* owner, uint64_t rng_seed, uint64_t rng_base) {
  MakeCurrent();
  auto it = graphs_.find(owner);
  LOOM_ASSERT(it != graphs_.end() && it->second.exec, "LaunchDeviceGraph without a recorded graph");
  // Note [Float32 math on the GPU]: the recording's kernels keep the math they were planned with.
  LOOM_CHECK(it->second.math == CudaFloat32Math(), GraphError, "[graph] ", name(),
             ": this device graph was recorded with float32 math '", Name(it->second.math), "' and the math is now '",
             Name(CudaFloat32Math()), "': capture the step again (or set the math back) to replay it");
  // Base and seed travel as kernel arguments, queued before the launch: no host buffer to race
  // with, and a SetRandSeed between launches reaches the recorded kernels.
  LaunchSetU64x2(it->second.rng_base, rng_base, rng_seed, stream_);
  LOOM_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream_));
}

void CudaDeviceImpl::ReleaseDeviceGraph(const void* owner) noexcept {
  auto it = graphs_.find(owner);
  if (it == graphs_.end()) return;
  DeviceGraph& g = it->second;
  cudaSetDevice(id());
  if (g.recording) {  // a recording that failed half-way: end it and drop what it holds
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
  // An executable graph still running is freed when it completes; the memory it uses goes back
  // to the pool, where only work queued after it on the same stream can reach it.
  if (g.exec) cudaGraphExecDestroy(g.exec);
  if (g.rng_base) cudaFree(g.rng_base);
  graphs_.erase(it);
  if (graphs_.empty()) {  // no recording can use an outgrown workspace any more (same stream rule)
    std::lock_guard<std::mutex> lock(mu_);
    for (void* p : retired_workspaces_) {
      try {
        Free(p);
      } catch (...) {  // freeing into the pool does not fail; never throw from a release
      }
    }
    retired_workspaces_.clear();
  }
}

CudaDeviceImpl& Dev(const KernelContext& ctx) {
  LOOM_ASSERT(ctx.device && ctx.device->type() == DeviceType::kCUDA, "a CUDA kernel called for another device");
  auto& d = static_cast<CudaDeviceImpl&>(*ctx.device);
  d.MakeCurrent();
  return d;
}

}  // namespace cuda

namespace {
// What cudaGetDeviceCount answered, once per process (Note [No GPU, or a broken one]).
struct Probe {
  int devices = 0;
  std::string error;  // a setup error; "" for "no GPU"
};

Probe ProbeOnce() {
  Probe p;
  cudaError_t e = cudaGetDeviceCount(&p.devices);
  if (e == cudaSuccess) return p;
  cudaGetLastError();
  p.devices = 0;
  if (e == cudaErrorNoDevice) return p;
  // Without libcuda the runtime says "driver insufficient" too: no driver installed is no GPU.
  if (e == cudaErrorInsufficientDriver) {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver) return p;
    dlclose(driver);
  }
  p.error = cuda::DeviceCountError(e);
  return p;
}

const Probe& GetProbe() {
  static const Probe probe = ProbeOnce();
  return probe;
}

// The table's entries (libloom.so's CudaAvailable, CudaDeviceCount, CudaSetupError and CudaDevice).
bool Available() { return GetProbe().devices > 0; }

int DeviceCount() { return GetProbe().devices; }

std::string SetupError() { return GetProbe().error; }

std::shared_ptr<Device> MakeDevice(int id) {
  // One device object per GPU, for the life of the process: never destroyed, because at exit
  // the CUDA runtime may be torn down before static destructors run.
  static std::mutex mu;
  static auto* devices = new std::map<int, std::shared_ptr<Device>>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = devices->find(id);
  if (it != devices->end()) return it->second;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw DeviceError(detail::Cat("[cuda] cannot create cuda:", id, ": no CUDA GPU is visible (cudaGetDeviceCount: ",
                                  cuda::DeviceCountError(e), ")"));
  }
  LOOM_CHECK(id >= 0 && id < n, DeviceError, "[cuda] cannot create cuda:", id, ": ", n, " GPU",
             (n == 1 ? " is" : "s are"), " visible (ids 0 to ", n - 1, ")");
  auto dev = std::make_shared<cuda::CudaDeviceImpl>(id);
  devices->emplace(id, dev);
  return dev;
}

}  // namespace

}  // namespace loom

// Note [Backends loaded on first use]: libloom.so's CudaDevice, CudaAvailable, CudaSetupError and
// the NCCL communicator reach this library through this table.
extern "C" const void* loom_cuda_backend() {
#ifdef LOOM_WITH_NCCL
  static const loom::CudaBackend backend{loom::MakeDevice, loom::Available, loom::DeviceCount, loom::SetupError,
                                         loom::MakeNcclCommunicator};
#else
  static const loom::CudaBackend backend{loom::MakeDevice, loom::Available, loom::DeviceCount, loom::SetupError,
                                         nullptr};
#endif
  return &backend;
}
