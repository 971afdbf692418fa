// CPU reductions over a run of axes: the input is viewed as (outer, R, inner).
#include <algorithm>
#include <limits>

#include "device/kernel_shapes.h"
#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {
namespace {


// Sums in blocks of kBlock with a double accumulator per block: fixed association, whatever
// the thread count, so results are bitwise reproducible.
constexpr int64_t kBlock = 4096;

template <typename T>
void SumRows(const T* x, T* y, const ReduceDims& d) {
  if (d.inner == 1) {
    ParallelFor(d.outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(d.r, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* row = x + o * d.r;
        double acc = 0;
        for (int64_t k0 = 0; k0 < d.r; k0 += kBlock) {
          double part = 0;
          int64_t k1 = std::min(d.r, k0 + kBlock);
          for (int64_t k = k0; k < k1; ++k) part += double(row[k]);
          acc += part;
        }
        y[o] = T(acc);
      }
    });
    return;
  }
  // Vectorised over inner: y[o, :] = sum_k x[o, k, :]
  int64_t work_per_outer = d.r * d.inner;
  ParallelFor(d.outer * d.inner, std::max<int64_t>(1, kGrain / std::max<int64_t>(d.r, 1)),
              [&](int64_t b, int64_t e) {
                // Split on (outer, inner) pairs; process contiguous inner stretches.
                for (int64_t idx = b; idx < e;) {
                  int64_t o = idx / d.inner, i0 = idx % d.inner;
                  int64_t i1 = std::min(d.inner, i0 + (e - idx));
                  const T* base = x + o * work_per_outer;
                  T* yo = y + o * d.inner;
                  for (int64_t i = i0; i < i1; ++i) yo[i] = T(0);
                  for (int64_t k = 0; k < d.r; ++k) {
                    const T* xr = base + k * d.inner;
                    for (int64_t i = i0; i < i1; ++i) yo[i] += xr[i];
                  }
                  idx += i1 - i0;
                }
              });
}

// x: (outer, R, inner) -> y: (outer, inner)
void SumCpu(const OpRecord& op, const KernelContext&) {
  const Tensor& x = op.inputs[0];
  ReduceDims d = MakeReduceDims(x.shape(), op.attrs.Int("begin"), op.attrs.Int("end"));
  FloatDispatch(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    SumRows<T>(x.data<T>(), op.outputs[0].data<T>(), d);
  });
}

// x: (outer, R, inner) -> y: (outer, inner)
void MaxCpu(const OpRecord& op, const KernelContext&) {
  const Tensor& x = op.inputs[0];
  ReduceDims d = MakeReduceDims(x.shape(), op.attrs.Int("begin"), op.attrs.Int("end"));
  LOOM_CHECK(d.r > 0, ShapeError, "[max] reduction over an empty axis of ", x.Describe());
  FloatDispatch(x.dtype(), "max", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = op.outputs[0].data<T>();
    ParallelFor(d.outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(d.r * d.inner, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        T* yo = yp + o * d.inner;
        const T* xo = xp + o * d.r * d.inner;
        for (int64_t i = 0; i < d.inner; ++i) yo[i] = xo[i];
        for (int64_t k = 1; k < d.r; ++k)
          for (int64_t i = 0; i < d.inner; ++i) yo[i] = MaxNaN(yo[i], xo[k * d.inner + i]);
      }
    });
  });
}

// x: (outer, R, inner), y: (outer, 1, inner), dy: (outer, 1, inner) -> dx: (outer, R, inner)
void MaxGradCpu(const OpRecord& op, const KernelContext&) {
  const Tensor& x = op.inputs[0];
  ReduceDims d = MakeReduceDims(x.shape(), op.attrs.Int("begin"), op.attrs.Int("end"));
  FloatDispatch(x.dtype(), "max_grad", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* yp = op.inputs[1].data<T>();
    const T* gp = op.inputs[2].data<T>();
    T* dx = op.outputs[0].data<T>();
    ParallelFor(d.outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(d.r * d.inner, 1)), [&](int64_t b, int64_t e) {
      std::vector<int64_t> ties(size_t(d.inner));
      for (int64_t o = b; o < e; ++o) {
        const T* xo = xp + o * d.r * d.inner;
        T* go = dx + o * d.r * d.inner;
        const T* yo = yp + o * d.inner;
        const T* dyo = gp + o * d.inner;
        std::fill(ties.begin(), ties.end(), 0);
        for (int64_t k = 0; k < d.r; ++k)
          for (int64_t i = 0; i < d.inner; ++i) ties[size_t(i)] += xo[k * d.inner + i] == yo[i];
        for (int64_t k = 0; k < d.r; ++k)
          for (int64_t i = 0; i < d.inner; ++i)
            go[k * d.inner + i] = xo[k * d.inner + i] == yo[i] ? dyo[i] / T(ties[size_t(i)]) : T(0);
      }
    });
  });
}

}  // namespace

LOOM_KERNEL(sum, kCPU, SumCpu);
LOOM_KERNEL(max, kCPU, MaxCpu);
LOOM_KERNEL(max_grad, kCPU, MaxGradCpu);

}  // namespace cpu
}  // namespace loom
