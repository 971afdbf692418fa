// CPU embedding lookup and its scatter-add gradient.
#include <algorithm>
#include <cstring>

#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {
namespace {

// Throws for the first index outside [0, rows). Serial, before any parallel work.
template <typename I>
void CheckRange(const char* op, const I* idx, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; ++i)
    LOOM_CHECK(idx[i] >= 0 && int64_t(idx[i]) < rows, ValueError, "[", op, "] index ", int64_t(idx[i]),
               " at position ", i, " is out of range for a table of ", rows, " rows");
}

// table: (V, D), indices: (L) (flattened) -> y: (L, D)
void EmbeddingCpu(const OpRecord& op, const KernelContext&) {
  const Tensor& table = op.inputs[0];
  const Tensor& indices = op.inputs[1];
  const int64_t v = table.dim(0), d = table.dim(1), n = indices.numel();
  FloatDispatch(table.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    IndexDispatch(indices.dtype(), "embedding", [&](auto itag) {
      using I = decltype(itag);
      const I* idx = indices.data<I>();
      CheckRange("embedding", idx, n, v);
      const T* tp = table.data<T>();
      T* y = op.outputs[0].data<T>();
      if (d == 0) return;
      ParallelFor(n, std::max<int64_t>(1, kGrain / d), [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) std::memcpy(y + i * d, tp + int64_t(idx[i]) * d, size_t(d) * sizeof(T));
      });
    });
  });
}

// indices: (L) (flattened), dy: (L, D) -> dtable: (V, D), rows summed in index order
// Split by columns of D, so that no two threads add into one element and the order of the
// additions is fixed.
void EmbeddingGradCpu(const OpRecord& op, const KernelContext&) {
  const Tensor& indices = op.inputs[0];
  const Tensor& dt = op.outputs[0];
  const int64_t v = dt.dim(0), d = dt.dim(1), n = indices.numel();
  FloatDispatch(dt.dtype(), "embedding_grad", [&](auto tag) {
    using T = decltype(tag);
    IndexDispatch(indices.dtype(), "embedding_grad", [&](auto itag) {
      using I = decltype(itag);
      const I* idx = indices.data<I>();
      CheckRange("embedding_grad", idx, n, v);
      const T* dy = op.inputs[1].data<T>();
      T* g = dt.data<T>();
      std::fill(g, g + v * d, T(0));
      if (d == 0) return;
      ParallelFor(d, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t j0, int64_t j1) {
        for (int64_t i = 0; i < n; ++i) {
          T* row = g + int64_t(idx[i]) * d;
          const T* src = dy + i * d;
          for (int64_t j = j0; j < j1; ++j) row[j] += src[j];
        }
      });
    });
  });
}

}  // namespace

LOOM_KERNEL(embedding, kCPU, EmbeddingCpu);
LOOM_KERNEL(embedding_grad, kCPU, EmbeddingGradCpu);

}  // namespace cpu
}  // namespace loom
