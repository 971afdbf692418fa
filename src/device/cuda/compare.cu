// CUDA kernels for the comparisons: one kernel per row of LOOM_COMPARE_FORMULAS, the CPU's
// formulas (Note [Comparisons] in core/compare_formulas.h). One indexed kernel serves every
// broadcast: MakeIndexer drops unit dimensions and merges neighbours, so operands of one shape
// index as rank 1.
#include "core/compare_formulas.h"
#include "device/cuda/common.cuh"

namespace loom {
namespace cuda {
namespace {

template <typename T, typename F>
__global__ void CompareKernel(const T* a, const T* b, uint8_t* y, int64_t n, Indexer ix, F f) {
  LOOM_GRID_STRIDE(i, n) {
    int64_t off[2];
    Offsets(ix, i, off);
    y[i] = uint8_t(f(a[off[0]], b[off[1]]));
  }
}

// a: (A...), b: (B...) one dtype, contiguous -> y: broadcast(A, B) bool
template <typename F>
void CompareCuda(const OpRecord& op, const KernelContext& ctx, const char* name, F f) {
  const Tensor& ta = op.inputs[0];
  const Tensor& tb = op.inputs[1];
  const Tensor& ty = op.outputs[0];
  const int64_t n = ty.numel();
  if (n == 0) return;
  Indexer ix = MakeIndexer(
      ty.shape(), {BroadcastStrides(ta.shape(), ty.shape()), BroadcastStrides(tb.shape(), ty.shape())}, name);
  ew::DispatchComparable(ta.dtype(), name, "CUDA", [&](auto tag) {
    using T = decltype(tag);
    CompareKernel<<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(ta.data<T>(), tb.data<T>(), ty.data<uint8_t>(), n,
                                                                 ix, f);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

#define LOOM_CUDA_COMPARE(op, formula)                                                                      \
  void op##_cuda(const OpRecord& o, const KernelContext& ctx) { CompareCuda(o, ctx, #op, ew::op##_f{}); } \
  LOOM_KERNEL(op, kCUDA, op##_cuda);
LOOM_COMPARE_FORMULAS(LOOM_CUDA_COMPARE)
#undef LOOM_CUDA_COMPARE

}  // namespace
}  // namespace cuda
}  // namespace loom
