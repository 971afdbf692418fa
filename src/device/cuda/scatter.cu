// CUDA scatter_elements / gather_elements (Note [Element scatter and gather] in
// src/core/ops/scatter.cc). Semantics follow src/device/cpu/kernels/scatter.cc: the scatter
// runs one thread per line along the axis, its entries in order, so repeated positions end as
// on the CPU. An index out of range cannot throw from the GPU (Note [Errors found on the GPU]):
// the elements it touches become NaN and the next host read throws the CPU's ValueError.
#include "device/cuda/common.cuh"
#include "core/scatter_geometry.h"

namespace loom {
namespace cuda {
namespace {

// y already holds x; line l of the updates is written in order.
template <typename T, typename I>
__global__ void ScatterLinesKernel(ElementLines g, const I* idx, const T* upd, T* y, KernelError* err) {
  LOOM_GRID_STRIDE(l, g.lines) {
    int64_t pos, xbase;
    LineStart(g, l, &pos, &xbase);
    for (int64_t k = 0; k < g.len; ++k, pos += g.es[g.axis]) {
      const int64_t j = AxisIndex(g, (long long)idx[pos]);
      if (j < 0) {
        RaiseKernelError(err, kIndexOutOfRange, kOpScatterElements, pos, (long long)idx[pos], g.axis_dim);
        for (int64_t r = 0; r < g.axis_dim; ++r) y[xbase + r * g.xs[g.axis]] = QuietNaN<T>();
        break;
      }
      y[xbase + j * g.xs[g.axis]] = upd[pos];
    }
  }
}

// x: (D...), indices: (E...), updates: (E...) -> y: (D...)
void ScatterElementsCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor &x = op.inputs[0], &indices = op.inputs[1], &updates = op.inputs[2], &y = op.outputs[0];
  const ElementLines g = MakeElementLines("scatter_elements", x.shape(), indices.shape(), op.attrs.Int("axis"));
  CudaDeviceImpl& dev = Dev(ctx);
  if (x.numel() == 0) return;
  LOOM_CUDA_CHECK(cudaMemcpyAsync(y.raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyDeviceToDevice, dev.stream()));
  if (g.lines * g.len == 0) return;
  FloatDispatch(x.dtype(), "scatter_elements", [&](auto tag) {
    using T = decltype(tag);
    IndexDispatch(indices.dtype(), "scatter_elements", [&](auto itag) {
      using I = decltype(itag);
      ScatterLinesKernel<<<Blocks(g.lines), kThreads, 0, dev.stream()>>>(
          g, indices.data<I>(), updates.data<T>(), y.data<T>(), dev.kernel_error());
      LOOM_CUDA_CHECK_LAUNCH();
    });
  });
}

// One thread per entry of the indices.
template <typename T, typename I>
__global__ void GatherLinesKernel(ElementLines g, const I* idx, const T* x, T* y, KernelError* err) {
  LOOM_GRID_STRIDE(t, g.lines * g.len) {
    const int64_t l = t / g.len, k = t % g.len;
    int64_t pos, xbase;
    LineStart(g, l, &pos, &xbase);
    pos += k * g.es[g.axis];
    const int64_t j = AxisIndex(g, (long long)idx[pos]);
    if (j < 0) {
      RaiseKernelError(err, kIndexOutOfRange, kOpGatherElements, pos, (long long)idx[pos], g.axis_dim);
      y[pos] = QuietNaN<T>();
    } else {
      y[pos] = x[xbase + j * g.xs[g.axis]];
    }
  }
}

// x: (D...), indices: (E...) -> y: (E...)
void GatherElementsCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor &x = op.inputs[0], &indices = op.inputs[1], &y = op.outputs[0];
  const ElementLines g = MakeElementLines("gather_elements", x.shape(), indices.shape(), op.attrs.Int("axis"));
  if (g.lines * g.len == 0) return;
  CudaDeviceImpl& dev = Dev(ctx);
  FloatDispatch(x.dtype(), "gather_elements", [&](auto tag) {
    using T = decltype(tag);
    IndexDispatch(indices.dtype(), "gather_elements", [&](auto itag) {
      using I = decltype(itag);
      GatherLinesKernel<<<Blocks(g.lines * g.len), kThreads, 0, dev.stream()>>>(
          g, indices.data<I>(), x.data<T>(), y.data<T>(), dev.kernel_error());
      LOOM_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

LOOM_KERNEL(scatter_elements, kCUDA, ScatterElementsCuda);
LOOM_KERNEL(gather_elements, kCUDA, GatherElementsCuda);

}  // namespace cuda
}  // namespace loom
