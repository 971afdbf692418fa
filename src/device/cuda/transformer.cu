// CUDA kernels for the transformer's row ops that are not products (attention.cu has attention;
// linalg.cc the products): layer norm and its gradient, embedding and its gradient. Semantics
// follow src/device/cpu/kernels/{norm,embedding}.cc.
#include <cub/device/device_radix_sort.cuh>

#include "device/cuda/common.cuh"

namespace loom {
namespace cuda {
namespace {

// ---------------------------------------------------------------- layer norm
// x seen as (R, D); sums in double, two passes, as on the CPU.
//
// Note [Layer norm rows by warps]
// A float32 row of at most kWarpRowMax x 32 values (GPT-2's 768) is one warp's: each lane loads
// its values (j = lane, lane + 32, ...) into registers at once, the sums are lane sums in order of
// j then a fixed shuffle tree (WarpAllSum), and the second pass and the output come from the
// registers. A block per row (256 threads, 3 values each for GPT-2) waited out two block-wide
// reductions and three trips to memory per row, over 8 waves of blocks. Longer rows and float64
// keep the block kernels. Which kernel runs depends on the shape alone (eager and replay agree).
constexpr int kWarpRowMax = 32;  // values per lane, at most (the kernels take 8, 16, 24 or 32)

__device__ __forceinline__ double WarpAllSum(double v) {
  return __shfl_sync(0xffffffffu, WarpReduce(v, SumOp{}), 0);
}

bool WarpRows(DType t, int64_t d) { return t == DType::kFloat32 && d > 0 && d <= 32 * kWarpRowMax; }

// Rows per block of the warp kernels (4 warps: with about 100 to 170 registers a thread, blocks
// of 128 threads let 3 or more share an SM), and their grid.
constexpr int kWarpRowsPerBlock = 4;
unsigned WarpRowBlocks(int64_t rows) { return RowBlocks((rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock); }

// Calls f(std::integral_constant<int, N>) with the fewest values per lane N (8, 16, 24, 32) that
// hold a row of d values: registers are the warp kernels' limit on how many share an SM.
template <typename F>
void WithLaneValues(int64_t d, F&& f) {
  if (d <= 32 * 8) return f(std::integral_constant<int, 8>{});
  if (d <= 32 * 16) return f(std::integral_constant<int, 16>{});
  if (d <= 32 * 24) return f(std::integral_constant<int, 24>{});
  f(std::integral_constant<int, 32>{});
}

template <int N, typename Out>
__global__ void LayerNormWarpKernel(const float* x, const float* gamma, const float* beta, Out* y, float* mean_out,
                                    float* invstd_out, int64_t rows, int64_t d64, double eps, bool bf16) {
  const int lane = threadIdx.x & 31, d = int(d64);  // d <= 32 N
  const int64_t warps = int64_t(gridDim.x) * kWarpRowsPerBlock;
  for (int64_t r = int64_t(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5); r < rows; r += warps) {
    const float* xr = x + r * d64;
    float v[N];
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (lane + 32 * k < d) v[k] = xr[lane + 32 * k];
    double sum = 0;
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (lane + 32 * k < d) sum += double(v[k]);
    const double mean = WarpAllSum(sum) / double(d);
    double sq = 0;
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (lane + 32 * k < d) {
        const double dv = double(v[k]) - mean;
        sq += dv * dv;
      }
    const double invstd = 1.0 / sqrt(WarpAllSum(sq) / double(d) + eps);
    const float tm = float(mean), ti = float(invstd);
    Out* yr = y + r * d64;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int j = lane + 32 * k;
      if (j < d) yr[j] = StoreResult<Out>(float((v[k] - tm) * ti * gamma[j] + beta[j]), bf16);
    }
    if (lane == 0) {
      mean_out[r] = tm;
      invstd_out[r] = ti;
    }
  }
}

// One block per row: longer rows, float64.
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
    if constexpr (std::is_same<T, float>::value) {
      if (WarpRows(op.inputs[0].dtype(), d.d)) {
        WithLaneValues(d.d, [&](auto n) {
          LayerNormWarpKernel<decltype(n)::value, Out><<<WarpRowBlocks(d.r), 32 * kWarpRowsPerBlock, 0,
                                                         Dev(ctx).stream()>>>(
              op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.inputs[2].data<T>(),
              static_cast<Out*>(op.outputs[0].raw_data()), op.outputs[1].data<T>(), op.outputs[2].data<T>(), d.r,
              d.d, op.attrs.Float("eps"), bf16);
        });
        LOOM_CUDA_CHECK_LAUNCH();
        return;
      }
    }
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

// LayerNormGradRowsKernel by warps (Note [Layer norm rows by warps]): x and dy loaded at once.
template <int N>
__global__ void LayerNormGradRowsWarpKernel(const float* x, const float* gamma, const float* mean,
                                            const float* invstd, const float* dy, float* dx, int64_t rows,
                                            int64_t d64) {
  const int lane = threadIdx.x & 31, d = int(d64);  // d <= 32 N
  const int64_t warps = int64_t(gridDim.x) * kWarpRowsPerBlock;
  for (int64_t r = int64_t(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5); r < rows; r += warps) {
    const float* xr = x + r * d64;
    const float* gr = dy + r * d64;
    float xs[N], gs[N];
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (lane + 32 * k < d) xs[k] = xr[lane + 32 * k], gs[k] = gr[lane + 32 * k];
    const double mu = double(mean[r]), is = double(invstd[r]);
    double s1 = 0, s2 = 0;  // sum(dxhat), sum(dxhat * xhat) with dxhat = dy * gamma
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (lane + 32 * k < d) {
        const double g = double(gs[k]) * double(gamma[lane + 32 * k]);
        s1 += g;
        s2 += g * (double(xs[k]) - mu) * is;
      }
    const double a = WarpAllSum(s1) / double(d), b = WarpAllSum(s2) / double(d);
    float* dr = dx + r * d64;
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (lane + 32 * k < d) {
        const double xhat = (double(xs[k]) - mu) * is;
        dr[lane + 32 * k] = float(is * (double(gs[k]) * double(gamma[lane + 32 * k]) - a - xhat * b));
      }
  }
}

// dgamma and dbeta sum over the rows (GPT-2: 8,192 of them for 768 columns). One thread per
// column walking every row left a few blocks to do all of it; instead the rows are cut into
// chunks of kLnRowChunk, a thread per (column, chunk) sums its chunk in order of rows into a
// double, and a thread per column adds its chunks' sums in order. A fixed order for a given
// shape: deterministic, and within double rounding of the CPU's row-by-row sums.
constexpr int64_t kLnRowChunk = 64;

template <typename T>
__global__ void LayerNormGradColPartsKernel(const T* x, const T* mean, const T* invstd, const T* dy, double* part_g,
                                            double* part_b, int64_t rows, int64_t d, int64_t chunks) {
  LOOM_GRID_STRIDE(t, d * chunks) {
    const int64_t j = t % d, c = t / d;  // column fastest: a warp reads adjacent columns
    const int64_t r0 = c * kLnRowChunk, r1 = Min64(rows, r0 + kLnRowChunk);
    double sg = 0, sb = 0;
    for (int64_t r = r0; r < r1; r += kLoadsAhead) {
      double gs[kLoadsAhead], xs[kLoadsAhead], ms[kLoadsAhead], is[kLoadsAhead];  // loaded together, added in order
#pragma unroll
      for (int q = 0; q < kLoadsAhead; ++q)
        if (r + q < r1) {
          gs[q] = double(dy[(r + q) * d + j]);
          xs[q] = double(x[(r + q) * d + j]);
          ms[q] = double(mean[r + q]);
          is[q] = double(invstd[r + q]);
        }
#pragma unroll
      for (int q = 0; q < kLoadsAhead; ++q)
        if (r + q < r1) {
          sg += gs[q] * (xs[q] - ms[q]) * is[q];
          sb += gs[q];
        }
    }
    part_g[c * d + j] = sg;
    part_b[c * d + j] = sb;
  }
}

template <typename T>
__global__ void LayerNormGradColSumsKernel(const double* part_g, const double* part_b, T* dgamma, T* dbeta, int64_t d,
                                           int64_t chunks) {
  LOOM_GRID_STRIDE(j, d) {
    double sg = 0, sb = 0;
    for (int64_t c = 0; c < chunks; c += kLoadsAhead) {
      double g[kLoadsAhead], b[kLoadsAhead];
#pragma unroll
      for (int q = 0; q < kLoadsAhead; ++q)
        if (c + q < chunks) g[q] = part_g[(c + q) * d + j], b[q] = part_b[(c + q) * d + j];
#pragma unroll
      for (int q = 0; q < kLoadsAhead; ++q)
        if (c + q < chunks) sg += g[q], sb += b[q];
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
      if constexpr (std::is_same<T, float>::value) {
        if (WarpRows(op.inputs[0].dtype(), d.d))
          WithLaneValues(d.d, [&](auto n) {
            LayerNormGradRowsWarpKernel<decltype(n)::value><<<WarpRowBlocks(d.r), 32 * kWarpRowsPerBlock, 0, s>>>(
                x, gamma, mean, invstd, dy, op.outputs[0].data<T>(), d.r, d.d);
          });
        else
          LayerNormGradRowsKernel<<<RowBlocks(d.r), RowThreads(d.d), 0, s>>>(x, gamma, mean, invstd, dy,
                                                                             op.outputs[0].data<T>(), d.r, d.d);
      } else {
        LayerNormGradRowsKernel<<<RowBlocks(d.r), RowThreads(d.d), 0, s>>>(x, gamma, mean, invstd, dy,
                                                                           op.outputs[0].data<T>(), d.r, d.d);
      }
      LOOM_CUDA_CHECK_LAUNCH();
    }
    const int64_t chunks = (d.r + kLnRowChunk - 1) / kLnRowChunk;
    CudaDeviceImpl& dev = Dev(ctx);
    std::lock_guard<std::mutex> lock(dev.library_mutex());  // the workspace
    const size_t part_bytes = (size_t(chunks * d.d) * sizeof(double) + 255) / 256 * 256;
    double* part_g = static_cast<double*>(dev.Workspace(std::max<size_t>(2 * part_bytes, 256)));
    double* part_b = reinterpret_cast<double*>(reinterpret_cast<char*>(part_g) + part_bytes);
    if (chunks > 0) {
      LayerNormGradColPartsKernel<<<Blocks(chunks * d.d), kThreads, 0, s>>>(x, mean, invstd, dy, part_g, part_b, d.r,
                                                                            d.d, chunks);
      LOOM_CUDA_CHECK_LAUNCH();
    }
    LayerNormGradColSumsKernel<<<Blocks(d.d), kThreads, 0, s>>>(part_g, part_b, op.outputs[1].data<T>(),
                                                                op.outputs[2].data<T>(), d.d, chunks);
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

// Note [Embedding gradient by sorted rows]
// dtable[k] is the sum of dy[i] over the tokens i with idx[i] = k, added in order of i from zero,
// as the CPU adds them (cpu/kernels/embedding.cc): no atomics, the CPU's association. The tokens
// are first sorted by row, stably (CUB's radix sort keeps equal keys in their input order, so a
// row's tokens stay in order of i), each row's range of the sorted list is marked, and one
// thread per (row, column) adds its row's tokens in that order; a row no token names gets zero.
// So V D threads share the work (GPT-2's 50,304 x 768) where one thread per column (768 threads,
// each walking every token) did it before. A bad index (outside [0, V)) is reported at the next
// host read (the smallest position: RaiseKernelError) and makes every element NaN, as it did.
template <typename I>
__global__ void EmbeddingRowKeysKernel(const I* idx, int64_t n, int64_t v, uint32_t* keys, uint32_t* tokens,
                                       int* bad, KernelError* err) {
  LOOM_GRID_STRIDE(i, n) {
    const long long k = (long long)idx[i];
    const bool out = k < 0 || k >= v;
    if (out) {
      RaiseKernelError(err, kIndexOutOfRange, kOpEmbeddingGrad, i, k, v);
      *bad = 1;
    }
    keys[i] = out ? uint32_t(v) : uint32_t(k);  // bad tokens sort last, into no row
    tokens[i] = uint32_t(i);
  }
}

// begin[k], end[k]: row k's range of the sorted keys (both 0 for a row no token names).
__global__ void EmbeddingRowBoundsKernel(const uint32_t* keys, int64_t n, int64_t v, int* begin, int* end) {
  LOOM_GRID_STRIDE(p, n) {
    const uint32_t k = keys[p];
    if (int64_t(k) >= v) continue;
    if (p == 0 || keys[p - 1] != k) begin[k] = int(p);
    if (p == n - 1 || keys[p + 1] != k) end[k] = int(p + 1);
  }
}

template <typename T>
__global__ void EmbeddingRowSumsKernel(const uint32_t* tokens, const int* begin, const int* end, const int* bad,
                                       const T* dy, T* g, int64_t v, int64_t d) {
  const bool nan = *bad != 0;
  LOOM_GRID_STRIDE(t, v * d) {
    const int64_t k = t / d, j = t - k * d;
    T acc = T(0);
    if (!nan) {
      const int p1 = end[k];
      for (int p = begin[k]; p < p1; p += kLoadsAhead) {
        T vs[kLoadsAhead];  // a frequent token's many rows: loaded together, added in order
#pragma unroll
        for (int q = 0; q < kLoadsAhead; ++q)
          if (p + q < p1) vs[q] = dy[int64_t(tokens[p + q]) * d + j];
#pragma unroll
        for (int q = 0; q < kLoadsAhead; ++q)
          if (p + q < p1) acc += vs[q];
      }
    }
    g[t] = nan ? QuietNaN<T>() : acc;
  }
}

// indices: (L) (flattened), dy: (L, D) -> dtable: (V, D)
void EmbeddingGradCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& indices = op.inputs[0];
  const Tensor& dt = op.outputs[0];
  const int64_t v = dt.dim(0), d = dt.dim(1), n = indices.numel();
  if (v * d == 0) return;
  LOOM_CHECK(n < (int64_t(1) << 31) && v < (int64_t(1) << 31), ShapeError, "[embedding_grad] ", n,
             " indices into ", v, " rows: the CUDA kernel takes fewer than 2^31 of each");
  CudaDeviceImpl& dev = Dev(ctx);
  cudaStream_t s = dev.stream();
  int end_bit = 1;  // keys are 0 ... v (v: a bad index)
  while (end_bit < 32 && (uint64_t(1) << end_bit) <= uint64_t(v)) ++end_bit;
  size_t sort_bytes = 0;
  LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const uint32_t*>(nullptr),
                                                  static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                                  static_cast<uint32_t*>(nullptr), int(n), 0, end_bit, s));
  auto rounded = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t keys_bytes = rounded(size_t(n) * 4), rows_bytes = rounded(size_t(v) * 4);
  std::lock_guard<std::mutex> lock(dev.library_mutex());  // the workspace
  char* w = static_cast<char*>(dev.Workspace(4 * keys_bytes + 2 * rows_bytes + 256 + rounded(sort_bytes)));
  uint32_t* keys = reinterpret_cast<uint32_t*>(w);
  uint32_t* sorted_keys = reinterpret_cast<uint32_t*>(w + keys_bytes);
  uint32_t* tokens = reinterpret_cast<uint32_t*>(w + 2 * keys_bytes);
  uint32_t* sorted_tokens = reinterpret_cast<uint32_t*>(w + 3 * keys_bytes);
  int* begin = reinterpret_cast<int*>(w + 4 * keys_bytes);
  int* end = reinterpret_cast<int*>(w + 4 * keys_bytes + rows_bytes);
  int* bad = reinterpret_cast<int*>(w + 4 * keys_bytes + 2 * rows_bytes);
  void* sort_scratch = w + 4 * keys_bytes + 2 * rows_bytes + 256;
  LOOM_CUDA_CHECK(cudaMemsetAsync(begin, 0, 2 * rows_bytes + 256, s));  // begin, end and bad
  if (n > 0) {
    IndexDispatch(indices.dtype(), "embedding_grad", [&](auto itag) {
      using I = decltype(itag);
      EmbeddingRowKeysKernel<<<Blocks(n), kThreads, 0, s>>>(indices.data<I>(), n, v, keys, tokens, bad,
                                                             dev.kernel_error());
    });
    LOOM_CUDA_CHECK_LAUNCH();
    LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_scratch, sort_bytes, keys, sorted_keys, tokens,
                                                    sorted_tokens, int(n), 0, end_bit, s));
    EmbeddingRowBoundsKernel<<<Blocks(n), kThreads, 0, s>>>(sorted_keys, n, v, begin, end);
    LOOM_CUDA_CHECK_LAUNCH();
  }
  FloatDispatch(dt.dtype(), "embedding_grad", [&](auto tag) {
    using T = decltype(tag);
    EmbeddingRowSumsKernel<<<Blocks(v * d), kThreads, 0, s>>>(sorted_tokens, begin, end, bad,
                                                              op.inputs[1].data<T>(), dt.data<T>(), v, d);
  });
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

LOOM_KERNEL(layer_norm, kCUDA, LayerNormCuda);
LOOM_KERNEL_SUPPORTS(layer_norm, kCUDA, FusedCastSupportedCuda);  // elementwise.cu
LOOM_KERNEL(layer_norm_grad, kCUDA, LayerNormGradCuda);
LOOM_KERNEL(embedding, kCUDA, EmbeddingCuda);
LOOM_KERNEL(embedding_grad, kCUDA, EmbeddingGradCuda);

}  // namespace cuda
}  // namespace loom
