// CUDA kernels of the schedule and clipping ops (core/ops/schedule.cc), as on the CPU
// (cpu/kernels/schedule.cc): the schedule's formula is the shared one (core/schedule_formula.h);
// the norm sums in double, in a fixed order per launch shape, so it is deterministic.
#include "device/cuda/common.cuh"
#include "core/schedule_formula.h"

namespace loom {
namespace cuda {
namespace {

__global__ void LrScheduleKernel(sched::Spec spec, const double* step, double* lr) {
  *lr = sched::ScheduleValue(spec, *step);
}

// step: () float64 -> lr: () float64 (Note [Schedules on the device])
void LrScheduleCuda(const OpRecord& op, const KernelContext& ctx) {
  const sched::Spec spec = sched::FromAttrs(op.attrs);
  LrScheduleKernel<<<1, 1, 0, Dev(ctx).stream()>>>(spec, op.inputs[0].data<double>(), op.outputs[0].data<double>());
  LOOM_CUDA_CHECK_LAUNCH();
}

constexpr int kNormThreads = 512;
constexpr int64_t kNormBlocks = 128;  // at most, per gradient

int64_t NormBlocks(int64_t n) { return std::clamp<int64_t>((n + kNormThreads - 1) / kNormThreads, 1, kNormBlocks); }

// partial[block] = sum of g[i]^2 over the block's grid-stride share of g
template <typename T>
__global__ void __launch_bounds__(kNormThreads) SumSquaresKernel(const T* g, int64_t n, double* partial) {
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double v = double(g[i]);
    acc += v * v;
  }
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kNormThreads) SqrtOfSumKernel(const double* partial, int64_t parts, double* out) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < parts; i += blockDim.x) acc += partial[i];
  acc = BlockSum(acc);
  if (threadIdx.x == 0) out[0] = sqrt(acc);
}

size_t GradNormScratch(const OpRecord& op) {
  int64_t parts = 0;
  for (const Tensor& t : op.inputs) parts += NormBlocks(t.numel());
  return size_t(parts) * sizeof(double);
}

// g_1 ... g_k: any shapes -> norm: () float64
void GradNormCuda(const OpRecord& op, const KernelContext& ctx) {
  CudaDeviceImpl& dev = Dev(ctx);
  const size_t bytes = GradNormScratch(op);
  const bool planned = ctx.scratch && ctx.scratch_bytes >= bytes;
  double* partial = static_cast<double*>(planned ? ctx.scratch : dev.Malloc(bytes));
  cudaError_t launched = cudaSuccess;
  int64_t at = 0;
  for (const Tensor& t : op.inputs) {
    const int64_t n = t.numel(), blocks = NormBlocks(n);
    FloatDispatch(t.dtype(), "grad_norm", [&](auto tag) {
      using T = decltype(tag);
      SumSquaresKernel<<<unsigned(blocks), kNormThreads, 0, dev.stream()>>>(t.data<T>(), n, partial + at);
    });
    at += blocks;
    if ((launched = cudaGetLastError()) != cudaSuccess) break;
  }
  if (launched == cudaSuccess) {
    SqrtOfSumKernel<<<1, kNormThreads, 0, dev.stream()>>>(partial, at, op.outputs[0].data<double>());
    launched = cudaGetLastError();
  }
  // Back to the pool at once: only work queued later on this stream can reach it.
  if (!planned) dev.Free(partial);
  LOOM_CUDA_CHECK(launched);
}

}  // namespace

LOOM_KERNEL(lr_schedule, kCUDA, LrScheduleCuda);
LOOM_KERNEL(grad_norm, kCUDA, GradNormCuda);
LOOM_KERNEL_SCRATCH(grad_norm, kCUDA, GradNormScratch);

}  // namespace cuda
}  // namespace loom
