// CPU pooling kernels. Every (n, c) plane is independent: work is split by plane, and the
// gradients write each plane of dx from that plane of dy only, so they need no atomics and
// give the same bits for any thread count.
#include <algorithm>

#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {
namespace {

template <typename F>
void ForPlanes(const PoolDims& d, int64_t work_per_plane, F f) {
  ParallelFor(d.planes, std::max<int64_t>(1, kGrain / std::max<int64_t>(work_per_plane, 1)),
              [&](int64_t p0, int64_t p1) {
                for (int64_t p = p0; p < p1; ++p) f(p);
              });
}

// x: (N, C, H, W) -> y: (N, C, OH, OW), argmax: int32 (N, C, OH, OW)
void MaxPool2dCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.inputs[0].shape(), op.outputs[0].shape());
    const T* x = op.inputs[0].data<T>();
    T* y = op.outputs[0].data<T>();
    int32_t* arg = op.outputs[1].data<int32_t>();
    ForPlanes(d, d.oh * d.ow * d.kh * d.kw, [&](int64_t p) {
      const T* xp = x + p * d.h * d.w;
      T* yp = y + p * d.oh * d.ow;
      int32_t* ap = arg + p * d.oh * d.ow;
      for (int64_t oi = 0; oi < d.oh; ++oi) {
        const Span rows = RowSpan(d, oi);
        for (int64_t oj = 0; oj < d.ow; ++oj) {
          T m;
          const int64_t best = WindowArgMax(xp, d.w, rows, ColSpan(d, oj), m);
          yp[oi * d.ow + oj] = m;
          ap[oi * d.ow + oj] = int32_t(best);
        }
      }
    });
  });
}

// argmax: int32 (N, C, OH, OW), dy: (N, C, OH, OW) -> dx: (N, C, H, W)
void MaxPool2dGradCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "max_pool2d_grad", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.outputs[0].shape(), op.inputs[1].shape());
    const int32_t* arg = op.inputs[0].data<int32_t>();
    const T* dy = op.inputs[1].data<T>();
    T* dx = op.outputs[0].data<T>();
    ForPlanes(d, d.h * d.w + d.oh * d.ow, [&](int64_t p) {
      T* dxp = dx + p * d.h * d.w;
      const T* dyp = dy + p * d.oh * d.ow;
      const int32_t* ap = arg + p * d.oh * d.ow;
      std::fill(dxp, dxp + d.h * d.w, T(0));
      for (int64_t i = 0; i < d.oh * d.ow; ++i) dxp[ap[i]] += dyp[i];
    });
  });
}

// x: (N, C, H, W) -> y: (N, C, OH, OW)
void AvgPool2dCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.inputs[0].shape(), op.outputs[0].shape());
    const bool include_pad = op.attrs.Int("count_include_pad", 1) != 0;
    const T* x = op.inputs[0].data<T>();
    T* y = op.outputs[0].data<T>();
    ForPlanes(d, d.oh * d.ow * d.kh * d.kw, [&](int64_t p) {
      const T* xp = x + p * d.h * d.w;
      T* yp = y + p * d.oh * d.ow;
      for (int64_t oi = 0; oi < d.oh; ++oi) {
        const Span rows = RowSpan(d, oi);
        for (int64_t oj = 0; oj < d.ow; ++oj) {
          const Span cols = ColSpan(d, oj);
          T s = 0;
          for (int64_t i = rows.lo; i < rows.hi; ++i)
            for (int64_t j = cols.lo; j < cols.hi; ++j) s += xp[i * d.w + j];
          yp[oi * d.ow + oj] = s / T(AvgCount(d, include_pad, oi, oj));
        }
      }
    });
  });
}

// dy: (N, C, OH, OW) -> dx: (N, C, H, W)
void AvgPool2dGradCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "avg_pool2d_grad", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.outputs[0].shape(), op.inputs[0].shape());
    const bool include_pad = op.attrs.Int("count_include_pad", 1) != 0;
    const T* dy = op.inputs[0].data<T>();
    T* dx = op.outputs[0].data<T>();
    ForPlanes(d, d.h * d.w + d.oh * d.ow * d.kh * d.kw, [&](int64_t p) {
      T* dxp = dx + p * d.h * d.w;
      const T* dyp = dy + p * d.oh * d.ow;
      std::fill(dxp, dxp + d.h * d.w, T(0));
      for (int64_t oi = 0; oi < d.oh; ++oi) {
        const Span rows = RowSpan(d, oi);
        for (int64_t oj = 0; oj < d.ow; ++oj) {
          const Span cols = ColSpan(d, oj);
          const T g = dyp[oi * d.ow + oj] / T(AvgCount(d, include_pad, oi, oj));
          for (int64_t i = rows.lo; i < rows.hi; ++i)
            for (int64_t j = cols.lo; j < cols.hi; ++j) dxp[i * d.w + j] += g;
        }
      }
    });
  });
}

// x: (N, C, H, W) -> y: (N, C)
void GlobalAvgPoolCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "global_avg_pool", [&](auto tag) {
    using T = decltype(tag);
    const Shape& s = op.inputs[0].shape();
    const int64_t planes = s[0] * s[1], hw = s[2] * s[3];
    const T* x = op.inputs[0].data<T>();
    T* y = op.outputs[0].data<T>();
    ParallelFor(planes, std::max<int64_t>(1, kGrain / hw), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const T* xp = x + p * hw;
        double acc = 0;
        for (int64_t i = 0; i < hw; ++i) acc += double(xp[i]);
        y[p] = T(acc / double(hw));
      }
    });
  });
}

// dy: (N, C) -> dx: (N, C, H, W)
void GlobalAvgPoolGradCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "global_avg_pool_grad", [&](auto tag) {
    using T = decltype(tag);
    const Shape& s = op.outputs[0].shape();
    const int64_t planes = s[0] * s[1], hw = s[2] * s[3];
    const T* dy = op.inputs[0].data<T>();
    T* dx = op.outputs[0].data<T>();
    ParallelFor(planes, std::max<int64_t>(1, kGrain / std::max<int64_t>(hw, 1)), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) std::fill(dx + p * hw, dx + (p + 1) * hw, T(dy[p] / T(hw)));
    });
  });
}

}  // namespace

LOOM_KERNEL(max_pool2d, kCPU, MaxPool2dCpu);
LOOM_KERNEL(max_pool2d_grad, kCPU, MaxPool2dGradCpu);
LOOM_KERNEL(avg_pool2d, kCPU, AvgPool2dCpu);
LOOM_KERNEL(avg_pool2d_grad, kCPU, AvgPool2dGradCpu);
LOOM_KERNEL(global_avg_pool, kCPU, GlobalAvgPoolCpu);
LOOM_KERNEL(global_avg_pool_grad, kCPU, GlobalAvgPoolGradCpu);

}  // namespace cpu
}  // namespace loom
