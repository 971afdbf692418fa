// CPU pooling kernels. Every (n, c) plane is independent: work is split by plane, and the
// gradients write each plane of dx from that plane of dy only, so they need no atomics and
// give the same bits for any thread count.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

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

// Note [Max pooling in vectors]
// WindowArgMax scans a window comparing each pixel with the running maximum. On activations
// that comparison is a coin toss, and as a branch it mispredicts about every other pixel: the
// small CNN's first pool ((32, 32, 32, 32), 2x2) took 4.3 ms on one thread, five times the
// convolution before it. For float32 with stride 1 or 2, 16 (or 8, on narrow rows)
// neighbouring outputs of a row whose windows lie inside the plane are scanned together in
// vector registers: window position by window position in WindowArgMax's order, its test as a
// lane mask, selects instead of branches. Same comparisons in the same order, so the same
// maximum, the same first argmax and NaN winning as before: bitwise WindowArgMax's result
// (0.3 ms on that pool, one thread, on a shared machine). Border windows that padding clips,
// float64 and other strides keep WindowArgMax. The op-case rows "with ties" and "NaN wins"
// cover the vector path.

// L float32 or int32 lanes (L = 8 or 16: 256- or 512-bit vectors, or what the compiler makes
// of them without AVX).
template <int L>
struct Lanes {
  typedef float F __attribute__((vector_size(4 * L)));
  typedef int32_t I __attribute__((vector_size(4 * L)));
};

// The L values at p[0], p[SW], p[2 SW], ... (SW 1 or 2; reads p[0 .. SW L)).
template <int L, int SW>
inline typename Lanes<L>::F LoadLanes(const float* p) {
  using F = typename Lanes<L>::F;
  using I = typename Lanes<L>::I;
  F a;
  std::memcpy(&a, p, sizeof a);
  if (SW == 1) return a;
  F b;
  std::memcpy(&b, p + L, sizeof b);
  I even;
  for (int l = 0; l < L; ++l) even[l] = 2 * l;
  return __builtin_shuffle(a, b, even);
}

// L neighbouring outputs of one row, every window inside plane xp (width w), the first window's
// top left at `start`: maxima into y, first argmax into arg.
template <int L, int SW>
void MaxPoolLanes(const float* xp, int32_t start, int32_t w, int32_t kh, int32_t kw, float* y, int32_t* arg) {
  using F = typename Lanes<L>::F;
  using I = typename Lanes<L>::I;
  I lane;
  for (int l = 0; l < L; ++l) lane[l] = l * SW;
  F m = LoadLanes<L, SW>(xp + start);
  I best = start + lane;
  for (int32_t ki = 0; ki < kh; ++ki)
    for (int32_t kj = 0; kj < kw; ++kj) {
      const int32_t at = start + ki * w + kj;
      const F v = LoadLanes<L, SW>(xp + at);
      const I take = (v > m) | ((v != v) & (m == m));  // WindowArgMax's test, lane by lane
      m = take ? v : m;
      best = take ? at + lane : best;
    }
  std::memcpy(y, &m, sizeof m);
  std::memcpy(arg, &best, sizeof best);
}

// The vector path of one output row (Note [Max pooling in vectors]): outputs [oj0, oj1) in
// groups of `lanes`, the last group moved left to end at oj1 (it recomputes a few outputs of
// the group before, to the same values); or none (lanes 0).
struct VectorRun {
  int64_t oj0 = 0, oj1 = 0;
  int lanes = 0;
};
VectorRun MaxPoolVectorRun(const PoolDims& d, int64_t oi) {
  const int64_t r0 = oi * d.sh - d.ph;
  if ((d.sw != 1 && d.sw != 2) || r0 < 0 || r0 + d.kh > d.h) return {};
  const int64_t oj0 = (d.pw + d.sw - 1) / d.sw;  // the first window starting inside the row
  const int64_t whole = d.w + d.pw >= d.kw ? std::min(d.ow, (d.w + d.pw - d.kw) / d.sw + 1) : 0;
  // A group starting at output oj reads up to (bottom row) + oj sw - pw + kw - 1 + sw lanes.
  auto fits = [&](int64_t oj, int lanes) {
    return (r0 + d.kh - 1) * d.w + oj * d.sw - d.pw + d.kw - 1 + d.sw * lanes <= d.h * d.w;
  };
  for (int lanes : {16, 8}) {
    int64_t oj1 = whole;
    while (oj1 - oj0 >= lanes && !fits(oj1 - lanes, lanes)) --oj1;
    if (oj1 - oj0 >= lanes) return {oj0, oj1, lanes};
  }
  return {};
}

template <int L>
void MaxPoolRun(const float* xp, const PoolDims& d, int64_t oi, const VectorRun& run, float* yr, int32_t* ar) {
  const int32_t w = int32_t(d.w), kh = int32_t(d.kh), kw = int32_t(d.kw);
  for (int64_t at = run.oj0; at < run.oj1; at += L) {
    const int64_t oj = std::min<int64_t>(at, run.oj1 - L);
    const int32_t start = int32_t((oi * d.sh - d.ph) * d.w + oj * d.sw - d.pw);
    if (d.sw == 1)
      MaxPoolLanes<L, 1>(xp, start, w, kh, kw, yr + oj, ar + oj);
    else
      MaxPoolLanes<L, 2>(xp, start, w, kh, kw, yr + oj, ar + oj);
  }
}

// x: (N, C, H, W) -> y: (N, C, OH, OW), argmax: int32 (N, C, OH, OW)
void MaxPool2dCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.inputs[0].shape(), op.outputs[0].shape());
    const T* x = op.inputs[0].data<T>();
    T* y = op.outputs[0].data<T>();
    int32_t* arg = op.outputs[1].data<int32_t>();
    std::vector<VectorRun> runs(size_t(d.oh));
    if (std::is_same<T, float>::value)
      for (int64_t oi = 0; oi < d.oh; ++oi) runs[size_t(oi)] = MaxPoolVectorRun(d, oi);
    ForPlanes(d, d.oh * d.ow * d.kh * d.kw, [&](int64_t p) {
      const T* xp = x + p * d.h * d.w;
      T* yp = y + p * d.oh * d.ow;
      int32_t* ap = arg + p * d.oh * d.ow;
      auto scalar = [&](int64_t oi, int64_t oj0, int64_t oj1) {
        for (int64_t oj = oj0; oj < oj1; ++oj) {
          T m;
          const int64_t best = WindowArgMax(xp, d.w, RowSpan(d, oi), ColSpan(d, oj), m);
          yp[oi * d.ow + oj] = m;
          ap[oi * d.ow + oj] = int32_t(best);
        }
      };
      for (int64_t oi = 0; oi < d.oh; ++oi) {
        const VectorRun& run = runs[size_t(oi)];
        scalar(oi, 0, run.oj0);
        const float* xf = reinterpret_cast<const float*>(xp);  // read only when T is float
        float* yf = reinterpret_cast<float*>(yp + oi * d.ow);
        if (run.lanes == 16) MaxPoolRun<16>(xf, d, oi, run, yf, ap + oi * d.ow);
        if (run.lanes == 8) MaxPoolRun<8>(xf, d, oi, run, yf, ap + oi * d.ow);
        scalar(oi, run.oj1, d.ow);
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

// Plane p = (n, c) of an (N, C, H, W) tensor: where it starts and the step between its pixels,
// in NCHW or, with the attribute a graph sets (Note [Activation layouts] in graph/layout.cc), in
// oneDNN's nChw16c (C a multiple of 16: pixel k of channel c at ((n C/16 + c/16) H W + k) 16 +
// c % 16).
struct Planes {
  int64_t c, hw;
  bool blocked;
  int64_t Start(int64_t p) const {
    return blocked ? ((p / c) * (c / 16) + (p % c) / 16) * hw * 16 + p % 16 : p * hw;
  }
  int64_t Step() const { return blocked ? 16 : 1; }
};
Planes PlanesOf(const OpRecord& op, const Shape& s, const char* attr) {
  return Planes{s[1], s[2] * s[3], op.attrs.Int(attr, 0) != 0};
}

// x: (N, C, H, W) -> y: (N, C); each plane summed in pixel order in either layout
void GlobalAvgPoolCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "global_avg_pool", [&](auto tag) {
    using T = decltype(tag);
    const Shape& s = op.inputs[0].shape();
    const int64_t planes = s[0] * s[1], hw = s[2] * s[3];
    const Planes pl = PlanesOf(op, s, "x_blocked");
    const T* x = op.inputs[0].data<T>();
    T* y = op.outputs[0].data<T>();
    ParallelFor(planes, std::max<int64_t>(1, kGrain / hw), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const T* xp = x + pl.Start(p);
        const int64_t step = pl.Step();
        double acc = 0;
        for (int64_t i = 0; i < hw; ++i) acc += double(xp[i * step]);
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
    const Planes pl = PlanesOf(op, s, "dx_blocked");
    const T* dy = op.inputs[0].data<T>();
    T* dx = op.outputs[0].data<T>();
    ParallelFor(planes, std::max<int64_t>(1, kGrain / std::max<int64_t>(hw, 1)), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        T* dp = dx + pl.Start(p);
        const T v = T(dy[p] / T(hw));
        for (int64_t i = 0; i < hw; ++i) dp[i * pl.Step()] = v;
      }
    });
  });
}

// Note [What a kernel supports]: every NCHW record; a blocked one for C a multiple of 16.
bool GlobalAvgPoolSupports(const OpRecord& op) {
  return op.attrs.Int("x_blocked", 0) == 0 || op.inputs[0].shape()[1] % 16 == 0;
}
bool GlobalAvgPoolGradSupports(const OpRecord& op) {
  return op.attrs.Int("dx_blocked", 0) == 0 || op.outputs[0].shape()[1] % 16 == 0;
}

}  // namespace

LOOM_KERNEL(max_pool2d, kCPU, MaxPool2dCpu);
LOOM_KERNEL(max_pool2d_grad, kCPU, MaxPool2dGradCpu);
LOOM_KERNEL(avg_pool2d, kCPU, AvgPool2dCpu);
LOOM_KERNEL(avg_pool2d_grad, kCPU, AvgPool2dGradCpu);
LOOM_KERNEL(global_avg_pool, kCPU, GlobalAvgPoolCpu);
LOOM_KERNEL(global_avg_pool_grad, kCPU, GlobalAvgPoolGradCpu);
LOOM_KERNEL_SUPPORTS(global_avg_pool, kCPU, GlobalAvgPoolSupports);
LOOM_KERNEL_SUPPORTS(global_avg_pool_grad, kCPU, GlobalAvgPoolGradSupports);

}  // namespace cpu
}  // namespace loom
