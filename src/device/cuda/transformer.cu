// CUDA kernels for the transformer's row ops that are not products (attention.cu has attention;
// linalg.cc the products): layer norm and its gradient, embedding and its gradient. Semantics
// follow src/device/cpu/kernels/{norm,embedding}.cc.
#include <cub/device/device_radix_sort.cuh>

#include "device/cuda/common.cuh"

namespace loom {
namespace cuda {
namespace {

#include "device/cuda/layer_norm_kernels.cuh"

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
