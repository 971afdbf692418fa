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

// Note [Gradient norms in few launches]
// grad_norm's inputs are every parameter's gradient (GPT-2: about 150 tensors, most of 768
// values): one launch per tensor cost more in launches than in sums. A launch takes a table of
// up to kNormTable tensors of one dtype; tensor k gets NormBlocks(n_k) blocks, block b of it
// sums g[i]^2 over its grid-stride share (i = b kNormThreads + thread, step blocks x
// kNormThreads), kLoadsAhead values loaded before any is added, in order, into partial[first
// block of k + b]. The partials' layout and each one's order depend on the shapes alone, so
// eager steps and replays agree bitwise; SqrtOfSumKernel then adds the partials in order.
constexpr int kNormThreads = 512;
constexpr int64_t kNormBlocks = 512;  // at most, per gradient
constexpr int kNormTable = 48;        // tensors per launch (the table is a kernel parameter, ~1.2 KB)

int64_t NormBlocks(int64_t n) { return std::clamp<int64_t>((n + kNormThreads - 1) / kNormThreads, 1, kNormBlocks); }

struct NormTable {
  const void* g[kNormTable];
  int64_t n[kNormTable];
  int64_t first_block[kNormTable + 1];  // of each tensor, from the launch's first partial
  int count = 0;
};

// partial[first_block[k] + b] = sum of g_k[i]^2 over block b's share of tensor k's elements.
template <typename T>
__global__ void __launch_bounds__(kNormThreads) SumSquaresKernel(NormTable t, double* partial) {
  int k = 0;
  while (int64_t(blockIdx.x) >= t.first_block[k + 1]) ++k;
  const T* g = static_cast<const T*>(t.g[k]);
  const int64_t n = t.n[k], b = int64_t(blockIdx.x) - t.first_block[k];
  const int64_t step = (t.first_block[k + 1] - t.first_block[k]) * int64_t(blockDim.x);
  double acc = 0;
  for (int64_t i = b * int64_t(blockDim.x) + threadIdx.x; i < n; i += step * kLoadsAhead) {
    double v[kLoadsAhead];  // loaded together, added in order
#pragma unroll
    for (int q = 0; q < kLoadsAhead; ++q)
      if (i + q * step < n) v[q] = double(g[i + q * step]);
#pragma unroll
    for (int q = 0; q < kLoadsAhead; ++q)
      if (i + q * step < n) acc += v[q] * v[q];
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

// g_1 ... g_k: any shapes -> norm: () float64 (Note [Gradient norms in few launches])
void GradNormCuda(const OpRecord& op, const KernelContext& ctx) {
  CudaDeviceImpl& dev = Dev(ctx);
  const size_t bytes = GradNormScratch(op);
  const bool planned = ctx.scratch && ctx.scratch_bytes >= bytes;
  double* partial = static_cast<double*>(planned ? ctx.scratch : dev.Malloc(bytes));
  cudaError_t launched = cudaSuccess;
  int64_t at = 0;  // partials written by the launches so far
  NormTable table;
  DType dtype = DType::kFloat32;
  auto flush = [&] {
    if (table.count == 0 || launched != cudaSuccess) return;
    const int64_t blocks = table.first_block[table.count];
    FloatDispatch(dtype, "grad_norm", [&](auto tag) {
      using T = decltype(tag);
      SumSquaresKernel<T><<<unsigned(blocks), kNormThreads, 0, dev.stream()>>>(table, partial + at);
    });
    at += blocks;
    table.count = 0;
    launched = cudaGetLastError();
  };
  for (const Tensor& t : op.inputs) {
    if (table.count == kNormTable || (table.count > 0 && t.dtype() != dtype)) flush();
    if (launched != cudaSuccess) break;
    if (table.count == 0) table.first_block[0] = 0;
    dtype = t.dtype();
    const int k = table.count++;
    table.g[k] = t.raw_data();
    table.n[k] = t.numel();
    table.first_block[k + 1] = table.first_block[k] + NormBlocks(t.numel());
  }
  flush();
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
