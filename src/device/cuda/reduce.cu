// CUDA reductions over a run of axes, the input seen as (outer, R, inner) as on the CPU
// (src/device/cpu/kernels/reduce.cc): sum, max, max_grad, and bias_grad (a sum over the
// leading dimensions). Sums accumulate in double in a fixed order per launch shape, so results
// are deterministic from run to run.
#include "device/kernel_shapes.h"
#include "device/cuda/common.cuh"
#include "device/kernel_dispatch.h"

namespace loom {
namespace cuda {
namespace {


#include "device/cuda/column_sums.cuh"

// inner == 1: one block per row of R elements (grid-stride over rows).
template <typename T, bool kMax>
__global__ void RowReduceKernel(const T* x, T* y, int64_t outer, int64_t r) {
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* row = x + o * r;
    if (kMax) {
      T m = -Infinity<T>();
      for (int64_t k = threadIdx.x; k < r; k += blockDim.x) m = MaxOf(m, row[k]);
      m = BlockMax(m);
      if (threadIdx.x == 0) y[o] = m;
    } else {
      double acc = 0;
      for (int64_t k = threadIdx.x; k < r; k += blockDim.x) acc += double(row[k]);
      acc = BlockSum(acc);
      if (threadIdx.x == 0) y[o] = T(acc);
    }
  }
}

// x: (outer, R, inner) -> y: (outer, inner). columns: the column kernel even for inner == 1
// (bias_grad, whose order bias_act_grad's column sums repeat for any width); it also takes x as
// bfloat16 bits (In uint16_t, a sum).
template <typename T, bool kMax, typename In = T>
void Reduce(const In* x, T* y, const ReduceDims& d, CudaDeviceImpl& dev, bool columns = false,
            uint16_t* copy = nullptr, bool copy_bf16 = false) {
  if (d.outer * d.inner == 0) return;
  cudaStream_t s = dev.stream();
  if constexpr (!std::is_same<In, T>::value) columns = true;  // RowReduceKernel reads T
  LOOM_ASSERT(!copy || columns, "Reduce: a 16-bit copy is written by the column kernel only");
  if (d.inner == 1 && !columns) {
    int threads = d.r >= 1024 ? 256 : int(std::max<int64_t>(32, (d.r + 31) / 32 * 32));
    threads = std::min(threads, 256);
    unsigned blocks = unsigned(std::min<int64_t>(d.outer, int64_t(1) << 20));
    if constexpr (std::is_same<In, T>::value) RowReduceKernel<T, kMax><<<blocks, threads, 0, s>>>(x, y, d.outer, d.r);
  } else {
    using Acc = typename std::conditional<kMax, T, double>::type;
    const ColumnLaunch cl = ColumnLaunchOf(d);
    const ColumnSlabs sl = cl.slabs;
    const dim3 grid(cl.cols, cl.outer, unsigned(sl.slabs));
    if (sl.slabs == 1) {
      ColReduceKernel<T, kMax, In><<<grid, dim3(kColX, kColY), 0, s>>>(x, y, nullptr, d.outer, d.r, d.inner, sl.rows,
                                                                        copy, copy_bf16);
    } else {
      const int64_t count = d.outer * d.inner;
      std::lock_guard<std::mutex> lock(dev.library_mutex());  // the workspace
      Acc* part = static_cast<Acc*>(dev.Workspace(size_t(sl.slabs * count) * sizeof(Acc)));
      ColReduceKernel<T, kMax, In><<<grid, dim3(kColX, kColY), 0, s>>>(x, y, part, d.outer, d.r, d.inner, sl.rows,
                                                                        copy, copy_bf16);
      ColumnSlabsTotalKernel<Acc, T, kMax><<<Blocks(count), kThreads, 0, s>>>(part, y, sl.slabs, count);
    }
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

// x: (outer, R, inner) -> y: (outer, inner)
void SumCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& x = op.inputs[0];
  ReduceDims d = MakeReduceDims(x.shape(), op.attrs.Int("begin"), op.attrs.Int("end"));
  FloatDispatch(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    Reduce<T, false>(x.data<T>(), op.outputs[0].data<T>(), d, Dev(ctx));
  });
}

// x: (outer, R, inner) -> y: (outer, inner)
void MaxCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& x = op.inputs[0];
  ReduceDims d = MakeReduceDims(x.shape(), op.attrs.Int("begin"), op.attrs.Int("end"));
  LOOM_CHECK(d.r > 0, ShapeError, "[max] reduction over an empty axis of ", x.Describe());
  FloatDispatch(x.dtype(), "max", [&](auto tag) {
    using T = decltype(tag);
    Reduce<T, true>(x.data<T>(), op.outputs[0].data<T>(), d, Dev(ctx));
  });
}

// dy: (R, N) (leading dimensions flattened) -> db: (N), the sum over R; a bfloat16 dy gives a
// float32 db (Note [Attention results kept in bfloat16]).
void BiasGradCuda(const OpRecord& op, const KernelContext& ctx) {
  const int64_t cols = op.outputs[0].numel();
  if (op.inputs[0].dtype() == DType::kBFloat16) {
    if (cols == 0) return;
    ReduceDims d{1, op.inputs[0].numel() / cols, cols};
    Reduce<float, false>(static_cast<const uint16_t*>(op.inputs[0].raw_data()), op.outputs[0].data<float>(), d,
                         Dev(ctx), /*columns=*/true);
    return;
  }
  uint16_t* copy = op.outputs.size() > 1 ? static_cast<uint16_t*>(op.outputs[1].raw_data()) : nullptr;
  const bool copy_bf16 = copy && op.outputs[1].dtype() == DType::kBFloat16;
  FloatDispatch(op.outputs[0].dtype(), "bias_grad", [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = op.outputs[0].numel();
    if (n == 0) return;
    ReduceDims d{1, op.inputs[0].numel() / n, n};
    Reduce<T, false>(op.inputs[0].data<T>(), op.outputs[0].data<T>(), d, Dev(ctx), /*columns=*/true, copy, copy_bf16);
  });
}

// Ties share the gradient: dx = dy / ties where x == y, else 0 (src/device/cpu/kernels/reduce.cc).
// inner == 1: one block per row counts the ties, then writes the row.
template <typename T>
__global__ void MaxGradRowKernel(const T* x, const T* y, const T* dy, T* dx, int64_t outer, int64_t r) {
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* xo = x + o * r;
    T* go = dx + o * r;
    const T yo = y[o], g = dy[o];
    int64_t ties = 0;
    for (int64_t k = threadIdx.x; k < r; k += blockDim.x) ties += xo[k] == yo;
    ties = BlockSum(ties);
    for (int64_t k = threadIdx.x; k < r; k += blockDim.x) go[k] = xo[k] == yo ? g / T(ties) : T(0);
  }
}
// inner > 1: one thread per output column (o, i), reads coalesced along inner.
template <typename T>
__global__ void MaxGradColKernel(const T* x, const T* y, const T* dy, T* dx, int64_t outer, int64_t r,
                                 int64_t inner) {
  LOOM_GRID_STRIDE(t, outer * inner) {
    const int64_t o = t / inner, i = t % inner;
    const T* xo = x + o * r * inner + i;
    T* go = dx + o * r * inner + i;
    const T yo = y[t], g = dy[t];
    int64_t ties = 0;
    for (int64_t k = 0; k < r; ++k) ties += xo[k * inner] == yo;
    for (int64_t k = 0; k < r; ++k) go[k * inner] = xo[k * inner] == yo ? g / T(ties) : T(0);
  }
}

// x: (outer, R, inner), y: (outer, 1, inner), dy: (outer, 1, inner) -> dx: (outer, R, inner)
void MaxGradCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& x = op.inputs[0];
  ReduceDims d = MakeReduceDims(x.shape(), op.attrs.Int("begin"), op.attrs.Int("end"));
  if (x.numel() == 0) return;
  cudaStream_t s = Dev(ctx).stream();
  FloatDispatch(x.dtype(), "max_grad", [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.data<T>(), *yp = op.inputs[1].data<T>(), *gp = op.inputs[2].data<T>();
    T* dx = op.outputs[0].data<T>();
    if (d.inner == 1) {
      unsigned blocks = unsigned(std::min<int64_t>(d.outer, int64_t(1) << 20));
      MaxGradRowKernel<<<blocks, d.r >= 256 ? 256 : 32 * int((d.r + 31) / 32), 0, s>>>(xp, yp, gp, dx, d.outer, d.r);
    } else {
      MaxGradColKernel<<<Blocks(d.outer * d.inner), kThreads, 0, s>>>(xp, yp, gp, dx, d.outer, d.r, d.inner);
    }
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// dy's own dtype, or float32 from a bfloat16 dy (Note [Attention results kept in bfloat16]); a
// 16-bit copy of a float32 dy.
bool BiasGradCudaSupports(const OpRecord& op) {
  const DType in = op.inputs[0].dtype(), out = op.outputs[0].dtype();
  if (op.outputs.size() > 1) return BiasGradCopySupported(op);
  return in == out ? in == DType::kFloat32 || in == DType::kFloat64 : in == DType::kBFloat16 && out == DType::kFloat32;
}

}  // namespace

LOOM_KERNEL(sum, kCUDA, SumCuda);
LOOM_KERNEL(max, kCUDA, MaxCuda);
LOOM_KERNEL(max_grad, kCUDA, MaxGradCuda);
LOOM_KERNEL(bias_grad, kCUDA, BiasGradCuda);
LOOM_KERNEL_SUPPORTS(bias_grad, kCUDA, BiasGradCudaSupports);

}  // namespace cuda
}  // namespace loom
