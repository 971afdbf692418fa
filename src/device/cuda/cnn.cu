// CUDA kernels for the convolutional-network ops that are not cuDNN calls (cudnn.cc has
// convolution and batch norm): pooling, layer norm, embedding, and the inference-mode batch-norm
// gradient. Semantics follow src/device/cpu/kernels/{pool,norm,embedding}.cc.
//
// Why pooling is not cuDNN's: max_pool2d's contract is a second output, the int32 index of the
// first maximum of each window (NaN wins), which backward scatters through; cuDNN's pooling
// produces no indices and its backward recomputes the window maxima. The kernels below give the
// CPU's bits: forward windows are scanned in the CPU's order, and the gradients gather, for each
// input pixel, the windows that contain it in increasing output order, which is the order in
// which the CPU's scatter adds them.
#include "device/cuda/common.cuh"

namespace loom {
namespace cuda {
namespace {

__device__ __forceinline__ int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

// The output rows (or columns) whose window covers input position i: [lo, hi].
__device__ __forceinline__ void Covering(int64_t i, int64_t k, int64_t s, int64_t p, int64_t out, int64_t& lo,
                                         int64_t& hi) {
  const int64_t a = i + p - k + 1;  // o * s >= a
  lo = a <= 0 ? 0 : (a + s - 1) / s;
  hi = Min64((i + p) / s, out - 1);  // o * s <= i + p
}

// Thread t of a pooling gradient kernel: input pixel (ih, iw) of plane p, and the outputs
// [oi0, oi1] x [oj0, oj1] whose windows cover it.
struct Covered {
  int64_t p, ih, iw, oi0, oi1, oj0, oj1;
};
__device__ __forceinline__ Covered CoveredBy(const PoolDims& d, int64_t t) {
  Covered c;
  c.p = t / (d.h * d.w);
  c.ih = (t / d.w) % d.h;
  c.iw = t % d.w;
  Covering(c.ih, d.kh, d.sh, d.ph, d.oh, c.oi0, c.oi1);
  Covering(c.iw, d.kw, d.sw, d.pw, d.ow, c.oj0, c.oj1);
  return c;
}

// x: (N, C, H, W) -> y: (N, C, OH, OW), argmax: int32 (N, C, OH, OW); one thread per output
template <typename T>
__global__ void MaxPoolKernel(const T* x, T* y, int32_t* arg, PoolDims d) {
  LOOM_GRID_STRIDE(t, d.planes * d.oh * d.ow) {
    const int64_t p = t / (d.oh * d.ow), oi = (t / d.ow) % d.oh, oj = t % d.ow;
    T m;
    const int64_t best = WindowArgMax(x + p * d.h * d.w, d.w, RowSpan(d, oi), ColSpan(d, oj), m);
    y[t] = m;
    arg[t] = int32_t(best);
  }
}

void MaxPool2dCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.inputs[0].dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.inputs[0].shape(), op.outputs[0].shape());
    const int64_t n = d.planes * d.oh * d.ow;
    if (n == 0) return;
    MaxPoolKernel<<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(op.inputs[0].data<T>(), op.outputs[0].data<T>(),
                                                                 op.outputs[1].data<int32_t>(), d);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// argmax, dy: (N, C, OH, OW) -> dx: (N, C, H, W); one thread per input pixel
template <typename T>
__global__ void MaxPoolGradKernel(const int32_t* arg, const T* dy, T* dx, PoolDims d) {
  LOOM_GRID_STRIDE(t, d.planes * d.h * d.w) {
    const Covered c = CoveredBy(d, t);
    const int32_t self = int32_t(c.ih * d.w + c.iw);
    const int32_t* ap = arg + c.p * d.oh * d.ow;
    const T* dyp = dy + c.p * d.oh * d.ow;
    T acc = T(0);
    for (int64_t oi = c.oi0; oi <= c.oi1; ++oi)
      for (int64_t oj = c.oj0; oj <= c.oj1; ++oj)
        if (ap[oi * d.ow + oj] == self) acc += dyp[oi * d.ow + oj];
    dx[t] = acc;
  }
}

void MaxPool2dGradCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "max_pool2d_grad", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.outputs[0].shape(), op.inputs[1].shape());
    const int64_t n = d.planes * d.h * d.w;
    if (n == 0) return;
    MaxPoolGradKernel<<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(
        op.inputs[0].data<int32_t>(), op.inputs[1].data<T>(), op.outputs[0].data<T>(), d);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
__global__ void AvgPoolKernel(const T* x, T* y, PoolDims d, bool include_pad) {
  LOOM_GRID_STRIDE(t, d.planes * d.oh * d.ow) {
    const int64_t p = t / (d.oh * d.ow), oi = (t / d.ow) % d.oh, oj = t % d.ow;
    const T* xp = x + p * d.h * d.w;
    const Span rows = RowSpan(d, oi), cols = ColSpan(d, oj);
    T s = T(0);
    for (int64_t i = rows.lo; i < rows.hi; ++i)
      for (int64_t j = cols.lo; j < cols.hi; ++j) s += xp[i * d.w + j];
    y[t] = s / T(AvgCount(d, include_pad, oi, oj));
  }
}

void AvgPool2dCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.inputs[0].dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.inputs[0].shape(), op.outputs[0].shape());
    const int64_t n = d.planes * d.oh * d.ow;
    if (n == 0) return;
    AvgPoolKernel<<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(op.inputs[0].data<T>(), op.outputs[0].data<T>(), d,
                                                                 op.attrs.Int("count_include_pad", 1) != 0);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
__global__ void AvgPoolGradKernel(const T* dy, T* dx, PoolDims d, bool include_pad) {
  LOOM_GRID_STRIDE(t, d.planes * d.h * d.w) {
    const Covered c = CoveredBy(d, t);
    const T* dyp = dy + c.p * d.oh * d.ow;
    T acc = T(0);
    for (int64_t oi = c.oi0; oi <= c.oi1; ++oi)
      for (int64_t oj = c.oj0; oj <= c.oj1; ++oj) acc += dyp[oi * d.ow + oj] / T(AvgCount(d, include_pad, oi, oj));
    dx[t] = acc;
  }
}

void AvgPool2dGradCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "avg_pool2d_grad", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.outputs[0].shape(), op.inputs[0].shape());
    const int64_t n = d.planes * d.h * d.w;
    if (n == 0) return;
    AvgPoolGradKernel<<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(op.inputs[0].data<T>(), op.outputs[0].data<T>(),
                                                                     d, op.attrs.Int("count_include_pad", 1) != 0);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// x: (P, HW) -> y: (P), one block per plane, summed in double
template <typename T>
__global__ void GlobalAvgPoolKernel(const T* x, T* y, int64_t planes, int64_t hw) {
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    double acc = 0;
    for (int64_t i = threadIdx.x; i < hw; i += blockDim.x) acc += double(x[p * hw + i]);
    acc = BlockSum(acc);
    if (threadIdx.x == 0) y[p] = T(acc / double(hw));
  }
}

void GlobalAvgPoolCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.inputs[0].dtype(), "global_avg_pool", [&](auto tag) {
    using T = decltype(tag);
    const Shape& s = op.inputs[0].shape();
    const int64_t planes = s[0] * s[1], hw = s[2] * s[3];
    if (planes == 0) return;
    GlobalAvgPoolKernel<<<unsigned(std::min<int64_t>(planes, 1 << 20)), hw >= 256 ? 256 : 64, 0, Dev(ctx).stream()>>>(
        op.inputs[0].data<T>(), op.outputs[0].data<T>(), planes, hw);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
__global__ void GlobalAvgPoolGradKernel(const T* dy, T* dx, int64_t planes, int64_t hw) {
  LOOM_GRID_STRIDE(t, planes * hw) dx[t] = T(dy[t / hw] / T(hw));
}

void GlobalAvgPoolGradCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "global_avg_pool_grad", [&](auto tag) {
    using T = decltype(tag);
    const Shape& s = op.outputs[0].shape();
    const int64_t planes = s[0] * s[1], hw = s[2] * s[3];
    if (planes * hw == 0) return;
    GlobalAvgPoolGradKernel<<<Blocks(planes * hw), kThreads, 0, Dev(ctx).stream()>>>(
        op.inputs[0].data<T>(), op.outputs[0].data<T>(), planes, hw);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// ---------------------------------------------------------------- layer norm
// x seen as (R, D): one block per row; sums in double, two passes, as on the CPU.

template <typename T, typename Out>
__global__ void LayerNormKernel(const T* x, const T* gamma, const T* beta, Out* y, T* mean_out, T* invstd_out,
                                int64_t rows, int64_t d, double eps, bool bf16) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    Out* yr = y + r * d;
    double sum = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += double(xr[j]);
    const double mean = BlockSum(sum) / double(d);
    double sq = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double v = double(xr[j]) - mean;
      sq += v * v;
    }
    sq = BlockSum(sq);
    const double invstd = 1.0 / sqrt(sq / double(d) + eps);
    const T tm = T(mean), ti = T(invstd);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      yr[j] = StoreResult<Out>(T((xr[j] - tm) * ti * gamma[j] + beta[j]), bf16);
    if (threadIdx.x == 0) {
      mean_out[r] = tm;
      invstd_out[r] = ti;
    }
  }
}

// x: (R, D), gamma, beta: (D) -> y: (R, D) (or its 16-bit rounding with out_dtype: Note [Casts
// fused into their producers]), mean, invstd: (R)
void LayerNormCuda(const OpRecord& op, const KernelContext& ctx) {
  FusedCastDispatch(op, "layer_norm", [&](auto tag, auto out_tag, bool bf16) {
    using T = decltype(tag);
    using Out = decltype(out_tag);
    const RowDims d = MakeRowDims(op.inputs[0].shape(), op.inputs[1].shape());
    if (d.r == 0) return;
    LayerNormKernel<<<RowBlocks(d.r), RowThreads(d.d), 0, Dev(ctx).stream()>>>(
        op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.inputs[2].data<T>(),
        static_cast<Out*>(op.outputs[0].raw_data()), op.outputs[1].data<T>(), op.outputs[2].data<T>(), d.r, d.d,
        op.attrs.Float("eps"), bf16);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
__global__ void LayerNormGradRowsKernel(const T* x, const T* gamma, const T* mean, const T* invstd, const T* dy,
                                        T* dx, int64_t rows, int64_t d) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    const T* gr = dy + r * d;
    T* dr = dx + r * d;
    const double mu = double(mean[r]), is = double(invstd[r]);
    double s1 = 0, s2 = 0;  // sum(dxhat), sum(dxhat * xhat) with dxhat = dy * gamma
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double g = double(gr[j]) * double(gamma[j]);
      s1 += g;
      s2 += g * (double(xr[j]) - mu) * is;
    }
    s1 = BlockSum(s1);
    s2 = BlockSum(s2);
    const double a = s1 / double(d), b = s2 / double(d);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double xhat = (double(xr[j]) - mu) * is;
      dr[j] = T(is * (double(gr[j]) * double(gamma[j]) - a - xhat * b));
    }
  }
}

// dgamma, dbeta: one thread per column, rows summed in order (the CPU's order).
template <typename T>
__global__ void LayerNormGradColsKernel(const T* x, const T* mean, const T* invstd, const T* dy, T* dgamma, T* dbeta,
                                        int64_t rows, int64_t d) {
  LOOM_GRID_STRIDE(j, d) {
    double sg = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double g = double(dy[r * d + j]);
      sg += g * (double(x[r * d + j]) - double(mean[r])) * double(invstd[r]);
      sb += g;
    }
    dgamma[j] = T(sg);
    dbeta[j] = T(sb);
  }
}

// x: (R, D), gamma: (D), mean, invstd: (R), dy: (R, D) -> dx: (R, D), dgamma, dbeta: (D)
void LayerNormGradCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.inputs[0].dtype(), "layer_norm_grad", [&](auto tag) {
    using T = decltype(tag);
    const RowDims d = MakeRowDims(op.inputs[0].shape(), op.inputs[1].shape());
    if (d.d == 0) return;
    cudaStream_t s = Dev(ctx).stream();
    const T *x = op.inputs[0].data<T>(), *gamma = op.inputs[1].data<T>(), *mean = op.inputs[2].data<T>();
    const T *invstd = op.inputs[3].data<T>(), *dy = op.inputs[4].data<T>();
    if (d.r > 0) {
      LayerNormGradRowsKernel<<<RowBlocks(d.r), RowThreads(d.d), 0, s>>>(x, gamma, mean, invstd, dy,
                                                                         op.outputs[0].data<T>(), d.r, d.d);
      LOOM_CUDA_CHECK_LAUNCH();
    }
    LayerNormGradColsKernel<<<Blocks(d.d), kThreads, 0, s>>>(x, mean, invstd, dy, op.outputs[1].data<T>(),
                                                             op.outputs[2].data<T>(), d.r, d.d);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// ---------------------------------------------------------------- embedding
// An index outside [0, V) cannot throw from the GPU (Note [Errors found on the GPU]): the rows
// it touches become NaN and the next host read throws the CPU's ValueError.

template <typename T, typename I>
__global__ void EmbeddingKernel(const T* table, const I* idx, T* y, int64_t n, int64_t v, int64_t d,
                                KernelError* err) {
  LOOM_GRID_STRIDE(t, n * d) {
    const int64_t i = t / d, j = t % d;
    const long long k = (long long)idx[i];
    if (k < 0 || k >= v) {
      if (j == 0) RaiseKernelError(err, kIndexOutOfRange, kOpEmbedding, i, k, v);
      y[t] = QuietNaN<T>();
    } else {
      y[t] = table[k * d + j];
    }
  }
}

// table: (V, D), indices: (L) (flattened) -> y: (L, D)
void EmbeddingCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& table = op.inputs[0];
  const Tensor& indices = op.inputs[1];
  const int64_t v = table.dim(0), d = table.dim(1), n = indices.numel();
  if (n * d == 0) return;
  CudaDeviceImpl& dev = Dev(ctx);
  FloatDispatch(table.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    IndexDispatch(indices.dtype(), "embedding", [&](auto itag) {
      using I = decltype(itag);
      EmbeddingKernel<<<Blocks(n * d), kThreads, 0, dev.stream()>>>(table.data<T>(), indices.data<I>(),
                                                                    op.outputs[0].data<T>(), n, v, d,
                                                                    dev.kernel_error());
      LOOM_CUDA_CHECK_LAUNCH();
    });
  });
}

// One thread per column of D adds the rows of dy into dtable in index order, as the CPU does:
// no atomics, the same association. A bad index makes the thread's whole column NaN.
template <typename T, typename I>
__global__ void EmbeddingGradKernel(const I* idx, const T* dy, T* g, int64_t n, int64_t v, int64_t d,
                                    KernelError* err) {
  LOOM_GRID_STRIDE(j, d) {
    for (int64_t r = 0; r < v; ++r) g[r * d + j] = T(0);
    bool bad = false;
    for (int64_t i = 0; i < n; ++i) {
      const long long k = (long long)idx[i];
      if (k < 0 || k >= v) {
        if (j == 0) RaiseKernelError(err, kIndexOutOfRange, kOpEmbeddingGrad, i, k, v);
        bad = true;
        continue;
      }
      g[k * d + j] += dy[i * d + j];
    }
    if (bad)
      for (int64_t r = 0; r < v; ++r) g[r * d + j] = QuietNaN<T>();
  }
}

// indices: (L) (flattened), dy: (L, D) -> dtable: (V, D)
void EmbeddingGradCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& indices = op.inputs[0];
  const Tensor& dt = op.outputs[0];
  const int64_t v = dt.dim(0), d = dt.dim(1), n = indices.numel();
  if (v * d == 0) return;
  CudaDeviceImpl& dev = Dev(ctx);
  FloatDispatch(dt.dtype(), "embedding_grad", [&](auto tag) {
    using T = decltype(tag);
    IndexDispatch(indices.dtype(), "embedding_grad", [&](auto itag) {
      using I = decltype(itag);
      EmbeddingGradKernel<<<Blocks(d, 64), 64, 0, dev.stream()>>>(indices.data<I>(), op.inputs[1].data<T>(),
                                                                 dt.data<T>(), n, v, d, dev.kernel_error());
      LOOM_CUDA_CHECK_LAUNCH();
    });
  });
}

// ---------------------------------------------------------------- batch norm, inference gradient

// x, dy: (N, C, S), gamma, running mean, running var: (C) -> dx, dgamma, dbeta; one block per
// channel, the CPU's formula with the statistics as constants.
template <typename T>
__global__ void BatchNormGradInferKernel(const T* x, const T* gamma, const T* mean_in, const T* var_in, const T* dy,
                                         T* dx, T* dgamma, T* dbeta, int64_t n, int64_t c, int64_t s, double eps) {
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    const double mean = double(mean_in[ch]);
    const double invstd = 1.0 / sqrt(double(var_in[ch]) + eps);
    double sdy = 0, sdyx = 0;
    for (int64_t t = threadIdx.x; t < n * s; t += blockDim.x) {
      const int64_t off = ((t / s) * c + ch) * s + t % s;
      sdy += double(dy[off]);
      sdyx += double(dy[off]) * (double(x[off]) - mean);
    }
    sdy = BlockSum(sdy);
    sdyx = BlockSum(sdyx) * invstd;
    if (threadIdx.x == 0) {
      dgamma[ch] = T(sdyx);
      dbeta[ch] = T(sdy);
    }
    const T a = T(double(gamma[ch]) * invstd), k_x = T(0), b = T(0);
    for (int64_t t = threadIdx.x; t < n * s; t += blockDim.x) {
      const int64_t off = ((t / s) * c + ch) * s + t % s;
      dx[off] = a * dy[off] + k_x * x[off] + b;
    }
  }
}

}  // namespace

// x: (N, C, ...), gamma: (C), running mean, running var: (C), dy -> dx, dgamma, dbeta
void BatchNormGradInference(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_grad", [&](auto tag) {
    using T = decltype(tag);
    const ChannelDims d = MakeChannelDims(op.inputs[0].shape());
    if (d.c == 0) return;
    BatchNormGradInferKernel<<<RowBlocks(d.c), RowThreads(d.n * d.s), 0, Dev(ctx).stream()>>>(
        op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.inputs[2].data<T>(), op.inputs[3].data<T>(),
        op.inputs[4].data<T>(), op.outputs[0].data<T>(), op.outputs[1].data<T>(), op.outputs[2].data<T>(), d.n, d.c,
        d.s, op.attrs.Float("eps"));
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

LOOM_KERNEL(max_pool2d, kCUDA, MaxPool2dCuda);
LOOM_KERNEL(max_pool2d_grad, kCUDA, MaxPool2dGradCuda);
LOOM_KERNEL(avg_pool2d, kCUDA, AvgPool2dCuda);
LOOM_KERNEL(avg_pool2d_grad, kCUDA, AvgPool2dGradCuda);
LOOM_KERNEL(global_avg_pool, kCUDA, GlobalAvgPoolCuda);
LOOM_KERNEL(global_avg_pool_grad, kCUDA, GlobalAvgPoolGradCuda);
LOOM_KERNEL(layer_norm, kCUDA, LayerNormCuda);
LOOM_KERNEL_SUPPORTS(layer_norm, kCUDA, FusedCastSupportedCuda);  // elementwise.cu
LOOM_KERNEL(layer_norm_grad, kCUDA, LayerNormGradCuda);
LOOM_KERNEL(embedding, kCUDA, EmbeddingCuda);
LOOM_KERNEL(embedding_grad, kCUDA, EmbeddingGradCuda);

}  // namespace cuda
}  // namespace loom
