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


constexpr int kColX = 32, kColY = 8;  // column reductions: 32 outputs x 8 partial sums per block
constexpr unsigned kMaxGridY = 65535;

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

// A loaded value as a number: itself, or (In uint16_t: bias_grad's bfloat16 dy, Note [Attention
// results kept in bfloat16] in graph/bf16_attention.cc) the float32 of its bfloat16 bits, so a
// sum of bfloat16 values is the sum of their float32 copies, bit for bit.
template <typename In>
__device__ __forceinline__ auto ValueOf(In v) {
  if constexpr (std::is_same<In, uint16_t>::value) return DevBFloat16ToFloat(v);
  else return v;
}

// inner > 1: block (32, 8) covers 32 adjacent outputs (coalesced reads along inner) of rows
// [blockIdx.z * slab, ...) (Note [Column sums by slabs]); its 8 rows of threads take every 8th
// k, and row 0 combines the 8 partials in order into y, or into part[(slab, o, i)] when there are
// several slabs. x's elements are In (T, or bfloat16 bits for a sum). copy (a float32 sum's,
// or null): each element of x as the cast op rounds it to 16 bits (bias_grad's copy_dtype, Note
// [Casts fused into their producers] in graph/fuse_casts.cc), written as it is read.
template <typename T, bool kMax, typename In = T>
__global__ void ColReduceKernel(const In* x, T* y, typename std::conditional<kMax, T, double>::type* part,
                                int64_t outer, int64_t r, int64_t inner, int64_t slab, uint16_t* copy,
                                bool copy_bf16) {
  static_assert(std::is_same<In, T>::value || !kMax, "a maximum of bfloat16 bits is not taken");
  using Acc = typename std::conditional<kMax, T, double>::type;
  __shared__ Acc sums[kColY][kColX + 1];
  const int64_t i = int64_t(blockIdx.x) * kColX + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.z) * slab, r1 = Min64(r, r0 + slab);
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    Acc acc = kMax ? Acc(-Infinity<T>()) : Acc(0);
    if (i < inner)
      for (int64_t k0 = r0 + threadIdx.y; k0 < r1; k0 += kColY * kLoadsAhead) {
        In v[kLoadsAhead];  // loaded together, combined in order (kLoadsAhead in common.cuh)
#pragma unroll
        for (int q = 0; q < kLoadsAhead; ++q)
          if (k0 + q * kColY < r1) v[q] = x[(o * r + k0 + q * kColY) * inner + i];
        if constexpr (std::is_same<In, float>::value && !kMax) {
          if (copy) {
#pragma unroll
            for (int q = 0; q < kLoadsAhead; ++q)
              if (k0 + q * kColY < r1) copy[(o * r + k0 + q * kColY) * inner + i] = DevCastTo16(double(v[q]), copy_bf16);
          }
        }
#pragma unroll
        for (int q = 0; q < kLoadsAhead; ++q)
          if (k0 + q * kColY < r1) acc = kMax ? Acc(MaxOf(T(acc), T(ValueOf(v[q])))) : acc + Acc(ValueOf(v[q]));
      }
    sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
      Acc a = sums[0][threadIdx.x];
      for (int j = 1; j < kColY; ++j) a = kMax ? Acc(MaxOf(T(a), T(sums[j][threadIdx.x]))) : a + sums[j][threadIdx.x];
      if (part)
        part[(int64_t(blockIdx.z) * outer + o) * inner + i] = a;
      else
        y[o * inner + i] = T(a);
    }
    __syncthreads();
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
    const unsigned cols = unsigned((d.inner + kColX - 1) / kColX), outer = unsigned(std::min<int64_t>(d.outer, kMaxGridY));
    const ColumnSlabs sl = ColumnSlabsOf(d.r, int64_t(cols) * outer);
    const dim3 grid(cols, outer, unsigned(sl.slabs));
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
