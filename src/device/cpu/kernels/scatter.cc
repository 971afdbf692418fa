// CPU scatter_elements / gather_elements (Note [Element scatter and gather] in
// src/core/ops/scatter.cc): one task per range of lines, each line in order.
#include <algorithm>
#include <cstring>

#include "device/cpu/kernels/common.h"
#include "core/scatter_geometry.h"

namespace loom {
namespace cpu {
namespace {

// Throws for the first index outside [-dim, dim). Serial, before any parallel work.
template <typename I>
void CheckIndices(const char* op, const ElementLines& g, const I* idx, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    LOOM_CHECK(AxisIndex(g, (long long)idx[i]) >= 0, ValueError, "[", op, "] index ", int64_t(idx[i]),
               " at position ", i, " is out of range for an axis of ", g.axis_dim);
}

// x: (D...), indices: (E...), updates: (E...) -> y: (D...)
void ScatterElementsCpu(const OpRecord& op, const KernelContext&) {
  const Tensor &x = op.inputs[0], &indices = op.inputs[1], &updates = op.inputs[2], &y = op.outputs[0];
  const ElementLines g = MakeElementLines("scatter_elements", x.shape(), indices.shape(), op.attrs.Int("axis"));
  FloatDispatch(x.dtype(), "scatter_elements", [&](auto tag) {
    using T = decltype(tag);
    IndexDispatch(indices.dtype(), "scatter_elements", [&](auto itag) {
      using I = decltype(itag);
      const I* idx = indices.data<I>();
      CheckIndices("scatter_elements", g, idx, indices.numel());
      T* yp = y.data<T>();
      std::memcpy(yp, x.data<T>(), size_t(x.numel()) * sizeof(T));
      const T* up = updates.data<T>();
      ParallelFor(g.lines, std::max<int64_t>(1, kGrain / std::max<int64_t>(g.len, 1)), [&](int64_t l0, int64_t l1) {
        for (int64_t l = l0; l < l1; ++l) {
          int64_t pos, xbase;
          LineStart(g, l, &pos, &xbase);
          for (int64_t k = 0; k < g.len; ++k, pos += g.es[g.axis])
            yp[xbase + AxisIndex(g, (long long)idx[pos]) * g.xs[g.axis]] = up[pos];
        }
      });
    });
  });
}

// x: (D...), indices: (E...) -> y: (E...)
void GatherElementsCpu(const OpRecord& op, const KernelContext&) {
  const Tensor &x = op.inputs[0], &indices = op.inputs[1], &y = op.outputs[0];
  const ElementLines g = MakeElementLines("gather_elements", x.shape(), indices.shape(), op.attrs.Int("axis"));
  FloatDispatch(x.dtype(), "gather_elements", [&](auto tag) {
    using T = decltype(tag);
    IndexDispatch(indices.dtype(), "gather_elements", [&](auto itag) {
      using I = decltype(itag);
      const I* idx = indices.data<I>();
      CheckIndices("gather_elements", g, idx, indices.numel());
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      ParallelFor(g.lines, std::max<int64_t>(1, kGrain / std::max<int64_t>(g.len, 1)), [&](int64_t l0, int64_t l1) {
        for (int64_t l = l0; l < l1; ++l) {
          int64_t pos, xbase;
          LineStart(g, l, &pos, &xbase);
          for (int64_t k = 0; k < g.len; ++k, pos += g.es[g.axis])
            yp[pos] = xp[xbase + AxisIndex(g, (long long)idx[pos]) * g.xs[g.axis]];
        }
      });
    });
  });
}

}  // namespace

LOOM_KERNEL(scatter_elements, kCPU, ScatterElementsCpu);
LOOM_KERNEL(gather_elements, kCPU, GatherElementsCpu);

}  // namespace cpu
}  // namespace loom
