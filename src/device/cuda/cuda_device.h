// The CUDA device: one non-default stream, cuBLAS/cuBLASLt/cuDNN handles bound to it, memory from
// the shared caching allocator over cudaMalloc (never managed memory), device graphs.
//
// Everything a kernel issues goes to the device's stream in issue order, so kernels never wait
// for each other on the host and memory returned to the pool can be handed out again at once:
// a later user is queued behind every earlier user on the same stream. The host waits only when
// it reads a value (Synchronize, MemcpyToHost): docs/design.md, lessons (synchronise when the host reads).
//
// Note [Errors found on the GPU]
// Device code cannot throw. A kernel that finds bad input (a class label outside [0, C) in
// softmax_cross_entropy and its gradient, an index outside the table in embedding and its
// gradient) writes NaN where the CPU would have thrown (so no plausible value passes for a
// result) and records
// the first such error in a small struct in device memory (RaiseKernelError in common.cuh):
// the first kernel's, at the smallest row or position, as the CPU's scan would report it (threads
// find errors in any order; a tiny lock in the struct keeps the smallest).
// Every synchronisation (any host read, Synchronize) queues a copy of that struct to pinned host
// memory behind the work it waits for, so the same wait brings it back; when it holds an error,
// the host clears it and throws the ValueError the CPU kernel throws, naming the op, the row and
// the value.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "device/cuda/cuda_check.h"
#include "device/cuda/kernel_error.h"
#include "core/device.h"

namespace loom {
namespace cuda {

class CudaDeviceImpl : public Device {
 public:
  explicit CudaDeviceImpl(int id);
  ~CudaDeviceImpl() override;

  void MemcpyToHost(void* dst, const void* src, size_t bytes) override;
  void MemcpyFromHost(void* dst, const void* src, size_t bytes) override;
  void Synchronize() override;

  bool HasDeviceGraphs() const override { return true; }
  const uint64_t* BeginDeviceGraphCapture(const void* owner) override;
  void EndDeviceGraphCapture(const void* owner) override;
  void LaunchDeviceGraph(const void* owner, uint64_t rng_seed, uint64_t rng_base) override;
  void ReleaseDeviceGraph(const void* owner) noexcept override;

  // Makes this device the calling thread's current CUDA device.
  void MakeCurrent() const;
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas();      // bound to stream(), with the GEMM workspace set
  cublasLtHandle_t cublaslt();
  cudnnHandle_t cudnn();        // bound to stream()
  // One workspace for cuBLAS and cuBLASLt (both run on stream(), one call at a time), taken from
  // the device allocator at the first GEMM and counted in its statistics.
  void* gemm_workspace();
  static constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;
  // Scratch of at least `bytes` that stays allocated for the device's life (counted), grown on
  // demand: for kernels that need temporary memory (cuDNN workspaces). Single stream: one user
  // at a time. Growing it is an allocation, so a device-graph recording must find it big enough
  // (the warm-up replay sizes it: Note [Device graph replay]).
  void* Workspace(size_t bytes);
  // Held by kernels while they use the cuDNN handle or Workspace(): cuDNN handles must not be
  // used by two threads at once (the parallel replay runs kernels from worker threads), and a
  // workspace must not grow under a kernel that was handed the old one.
  std::mutex& library_mutex() { return library_mu_; }
  KernelError* kernel_error() const { return error_dev_; }  // device-side address
  int sm_count() const { return sm_count_; }

 private:
  // Waits for the stream (with the error struct's copy queued last), then throws what kernels
  // recorded.
  void SyncAndCheck();
  struct DeviceGraph {
    cudaGraphExec_t exec = nullptr;
    uint64_t* rng_base = nullptr;  // device memory: {base, seed}, what recorded random kernels read
    bool recording = false;
    Float32Math math = Float32Math::kTF32;  // what the recording's kernels were planned with
  };

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  void* gemm_workspace_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::vector<void*> retired_workspaces_;  // outgrown while device graphs used them (Workspace())
  KernelError* error_host_ = nullptr;  // pinned
  KernelError* error_dev_ = nullptr;   // device memory (cudaMalloc: bookkeeping, not counted)
  int sm_count_ = 0;
  std::mutex mu_;  // handles and workspaces created on first use, possibly from replay workers
  std::mutex library_mu_;
  std::map<const void*, DeviceGraph> graphs_;
};

// The CUDA device a kernel runs on, made current on the calling thread.
CudaDeviceImpl& Dev(const KernelContext& ctx);

// Whether NHWC operands are allowed at all (LOOM_CUDNN_LAYOUT=nchw says no; Note [NHWC
// convolutions on cuDNN] in cudnn.cc, which defines it): the layout predicates of cudnn.cc and
// cnn.cu ask it.
bool CudaNhwcAllowed();

// Tiny kernels the device itself launches (defined in creation.cu).
void LaunchSetU64x2(uint64_t* p, uint64_t first, uint64_t second, cudaStream_t stream);  // p[0], p[1]

}  // namespace cuda
}  // namespace loom
