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

#include "device/cuda/embedding_kernels.cuh"

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
