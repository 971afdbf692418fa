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

#include "device/cuda/grad_norm_kernels.cuh"

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
    dtype = t.dtype();
    AddNormTensor(table, t.raw_data(), t.numel());
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
