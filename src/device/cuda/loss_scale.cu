// CUDA kernels of dynamic loss scaling (core/ops/loss_scale.cc, Note [Loss scaling] in
// nn/loss_scale.h), as on the CPU (cpu/kernels/loss_scale.cc): the scale is read on the device,
// the flag written on the device, so a recorded device graph replays a skipped step too.
#include "device/cuda/common.cuh"
#include "device/optimizer_formulas.h"

namespace loom {
namespace cuda {
namespace {

// g[i] *= 1 / scale (the reciprocal rounded to float32); any non-finite product sets *found to 1.
// Every thread that finds one writes the same value: the flag does not depend on the order.
template <typename T>
__global__ void UnscaleKernel(T* g, int64_t n, const float* scale, float* found) {
  const T inv = T(float(1.0 / double(*scale)));
  bool bad = false;
  LOOM_GRID_STRIDE(i, n) {
    const T x = g[i] * inv;
    g[i] = x;
    bad |= !isfinite(x);
  }
  if (bad) *found = 1.0f;
}

// g_1 ... g_n (any shapes), scale: () float32, found_inf: () float32 -> g_1 ... g_n in place,
// found_inf = 1 when any unscaled element is not finite, else 0
void UnscaleGradsCuda(const OpRecord& op, const KernelContext& ctx) {
  CudaDeviceImpl& dev = Dev(ctx);
  const size_t n = op.inputs.size() - 2;
  const float* scale = op.inputs[n].data<float>();
  float* found = op.outputs[n].data<float>();
  LOOM_CUDA_CHECK(cudaMemsetAsync(found, 0, sizeof(float), dev.stream()));  // 0.0f
  for (size_t k = 0; k < n; ++k) {
    const Tensor& g = op.outputs[k];
    const int64_t count = g.numel();
    if (count == 0) continue;
    FloatDispatch(g.dtype(), "unscale_grads", [&](auto tag) {
      using T = decltype(tag);
      UnscaleKernel<T><<<Blocks(count), kThreads, 0, dev.stream()>>>(g.data<T>(), count, scale, found);
    });
    LOOM_CUDA_CHECK_LAUNCH();
  }
}

__global__ void UpdateLossScaleKernel(float* scale, double* good, double* skipped, const float* found, float growth,
                                      float backoff, double interval) {
  optim::NextLossScale(scale, good, skipped, *found != 0.0f, growth, backoff, interval);
}

// scale: () float32, good, skipped: () float64, found_inf: () float32 -> scale, good, skipped
void UpdateLossScaleCuda(const OpRecord& op, const KernelContext& ctx) {
  UpdateLossScaleKernel<<<1, 1, 0, Dev(ctx).stream()>>>(
      op.outputs[0].data<float>(), op.outputs[1].data<double>(), op.outputs[2].data<double>(),
      op.inputs[3].data<float>(), float(op.attrs.Float("growth")), float(op.attrs.Float("backoff")),
      double(op.attrs.Int("interval")));
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

LOOM_KERNEL(unscale_grads, kCUDA, UnscaleGradsCuda);
LOOM_KERNEL(update_loss_scale, kCUDA, UpdateLossScaleCuda);

}  // namespace cuda
}  // namespace loom
