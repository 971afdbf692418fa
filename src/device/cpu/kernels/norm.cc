// CPU normalisation kernels. Batch norm sees x as (N, C, S) (S: the spatial axes, flattened)
// and works channel by channel; layer norm sees x as (R, D) and works row by row. Sums are
// taken in double, two passes (mean, then squared deviations), in a fixed order (Note [Sums in
// lanes]): results do not depend on the thread count.
//
// Note [Batch norm with ReLU]
// A graph fuses training batch norm with the ReLU after it (graph/fuse_bn_relu.cc), by the
// record attribute relu = 1 (core/ops/norm.cc):
//   - batch_norm_train then writes relu(y) as its output 0: ReLU on each value right before
//     its store, the relu op's own formula (ew::relu_f) on the value batch norm stores;
//   - batch_norm_grad then takes a sixth input, the ReLU's output a, and its dy is the ReLU's
//     gradient da: wherever the kernel reads dy it reads relu_grad(a, da) (ew::relu_grad_f,
//     computed in T as the relu_grad op stores it), in its sums and in its dx pass.
// Each value the kernels see is bitwise the value the unfused ops store, and everything else is
// unchanged: replay stays bitwise equal to eager. Chosen at compile time (WithRelu), so the
// unfused loops are the loops they were.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "device/cpu/kernels/common.h"
#include "core/elementwise_formulas.h"

LOOM_OP_KIND(batch_norm_grad);

namespace loom {
namespace cpu {
namespace {

template <typename F>
void ForChannels(const ChannelDims& d, F f) {
  ParallelFor(d.c, std::max<int64_t>(1, kGrain / std::max<int64_t>(d.n * d.s, 1)), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) f(c);
  });
}

template <typename F>
void ForRows(const RowDims& d, F f) {
  ParallelFor(d.r, std::max<int64_t>(1, kGrain / std::max<int64_t>(d.d, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) f(r);
  });
}

// Note [Sums in lanes]
// A single running double sum adds one element per step, each add waiting for the last: the
// sums were latency-bound, and batch norm took 2 ms on the small CNN's (32, 32, 32, 32)
// activation, more than the convolution before it. Each sum is kept in kSumLanes partial sums
// instead (element k of a run goes to lane k mod kSumLanes), added in lane order at the end.
// The order is fixed by the shapes alone, so results still do not depend on the thread count
// (and replay stays bitwise equal to eager), and the compiler turns the lanes into vectors.
constexpr int64_t kSumLanes = 8;

struct LaneSums {
  double v[kSumLanes] = {};
  double Total() const {
    double t = 0;
    for (int64_t l = 0; l < kSumLanes; ++l) t += v[l];
    return t;
  }
};

// Adds f(k) for k in [0, len) into s, element k into lane k mod kSumLanes.
template <typename F>
inline void AddRun(LaneSums& s, int64_t len, F f) {
  int64_t k = 0;
  for (; k + kSumLanes <= len; k += kSumLanes)
    for (int64_t l = 0; l < kSumLanes; ++l) s.v[l] += f(k + l);
  for (int64_t l = 0; k + l < len; ++l) s.v[l] += f(k + l);
}

// The mean of `runs` runs of `len` elements (run i at x + i * stride) and the sum of squared
// deviations from it: two passes, summed in double (Note [Sums in lanes]).
template <typename T>
void MeanAndSquares(const T* x, int64_t runs, int64_t len, int64_t stride, double& mean, double& sq) {
  LaneSums sum;
  for (int64_t i = 0; i < runs; ++i) {
    const T* xr = x + i * stride;
    AddRun(sum, len, [&](int64_t k) { return double(xr[k]); });
  }
  mean = sum.Total() / double(runs * len);
  LaneSums dev;
  for (int64_t i = 0; i < runs; ++i) {
    const T* xr = x + i * stride;
    AddRun(dev, len, [&, mean](int64_t k) {
      const double v = double(xr[k]) - mean;
      return v * v;
    });
  }
  sq = dev.Total();
}

// f(std::integral_constant<bool, relu>{}): the fused or the plain loops (Note [Batch norm with
// ReLU]).
template <typename F>
void WithRelu(bool relu, F&& f) {
  if (relu) return f(std::true_type{});
  return f(std::false_type{});
}
// The value batch norm stores: y, or the relu op's relu(y).
template <bool kRelu, typename T>
inline T Out(T y) {
  if constexpr (kRelu) return ew::relu_f{}(y, ew::Params<T>{});
  return y;
}
// The gradient batch_norm_grad sums: dy, or the relu_grad op's relu_grad(a, da) (dy is da).
template <bool kRelu, typename T>
inline T Dz(T a, T dy) {
  if constexpr (kRelu) return ew::relu_grad_f{}(a, dy, ew::Params<T>{});
  return dy;
}

// Batch norm's y = x * scale + shift over channel c, with scale = gamma invstd and
// shift = beta - mean gamma invstd (then ReLU'd with kRelu).
template <bool kRelu = false, typename T>
void ScaleChannel(const ChannelDims& d, int64_t c, const T* x, T* y, double gamma, double beta, double mean,
                  double invstd) {
  const T scale = T(gamma * invstd);
  const T shift = T(beta - mean * gamma * invstd);
  for (int64_t i = 0; i < d.n; ++i) {
    const T* xr = x + (i * d.c + c) * d.s;
    T* yr = y + (i * d.c + c) * d.s;
    for (int64_t k = 0; k < d.s; ++k) yr[k] = Out<kRelu>(xr[k] * scale + shift);
  }
}

// ---- batch norm over an nChw16c x (Note [Activation layouts] in graph/layout.cc) ----
// A graph keeps a convolution's output in oneDNN's blocked layout when batch norm alone reads
// it: element (i, c, k) of x (N, C, S) then lives at ((i C/16 + c/16) S + k) 16 + c % 16, so
// channel c of image i is a run of S values 16 apart. The kernels below take a group of 16
// channels per task and, image by image, each channel's run (the image's block of the group,
// S 16 values, stays in cache for its 16 channels), adding into the per-channel sums of Note
// [Sums in lanes] in the NCHW kernels' order (images in order, pixel k into lane k mod
// kSumLanes): results are bitwise those of the NCHW kernels on the same values.
constexpr int64_t kGroup = 16;
static_assert(kGroup % kSumLanes == 0, "a tile of kGroup pixels starts at lane 0");

// Where channel c of image i starts in a tensor of this layout, and the step between its pixels.
struct ChannelLayout {
  bool blocked = false;
  int64_t Start(const ChannelDims& d, int64_t i, int64_t c) const {
    return blocked ? (i * (d.c / kGroup) + c / kGroup) * d.s * kGroup + c % kGroup : (i * d.c + c) * d.s;
  }
  int64_t Step() const { return blocked ? kGroup : 1; }  // pixel k to k + 1
};

// The attribute a graph sets on a record whose tensor is nChw16c (graph/layout.cc); checked.
ChannelLayout LayoutAttr(const OpRecord& op, const char* attr, const ChannelDims& d, const char* opname) {
  ChannelLayout l{op.attrs.Int(attr, 0) != 0};
  LOOM_CHECK(!l.blocked || (d.c % kGroup == 0 && op.inputs[0].ndim() == 4), ValueError, "[", opname, "] ", attr,
             ": the blocked layout needs (N, C, H, W) with C a multiple of 16, got ", ToString(op.inputs[0].shape()));
  return l;
}

typedef float F32x16 __attribute__((vector_size(64)));
// A whole float tile between 16 runs of 16 values (`stride` apart) and [pixel][channel] order.
inline void RunsToTile(const float* p, int64_t stride, float (*tile)[kGroup]) {
  F32x16 r[16];
  for (int c = 0; c < 16; ++c) std::memcpy(&r[c], p + c * stride, sizeof r[c]);
  Transpose16x16(r);
  std::memcpy(tile, r, sizeof r);
}
inline void TileToRuns(const float (*tile)[kGroup], float* p, int64_t stride) {
  F32x16 r[16];
  std::memcpy(r, tile, sizeof r);
  Transpose16x16(r);
  for (int c = 0; c < 16; ++c) std::memcpy(p + c * stride, &r[c], sizeof r[c]);
}

// The group's values at pixels [k0, k0 + n) of image i, n <= kGroup, as a [pixel][channel]
// tile: copied from a blocked tensor, transposed from an NCHW one (16 runs of n values); and
// back.
template <typename T>
void LoadTile(const ChannelDims& d, const ChannelLayout& l, const T* t, int64_t i, int64_t c0, int64_t k0, int64_t n,
              T (*tile)[kGroup]) {
  const T* p = t + l.Start(d, i, c0);
  if (l.blocked) {
    std::memcpy(tile, p + k0 * kGroup, size_t(n * kGroup) * sizeof(T));
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (n == kGroup) return RunsToTile(p + k0, d.s, tile);
  }
  for (int64_t c = 0; c < kGroup; ++c)
    for (int64_t kk = 0; kk < n; ++kk) tile[kk][c] = p[c * d.s + k0 + kk];
}
template <typename T>
void StoreTile(const ChannelDims& d, const ChannelLayout& l, T* t, int64_t i, int64_t c0, int64_t k0, int64_t n,
               const T (*tile)[kGroup]) {
  T* p = t + l.Start(d, i, c0);
  if (l.blocked) {
    std::memcpy(p + k0 * kGroup, tile, size_t(n * kGroup) * sizeof(T));
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (n == kGroup) return TileToRuns(tile, p + k0, d.s);
  }
  for (int64_t c = 0; c < kGroup; ++c)
    for (int64_t kk = 0; kk < n; ++kk) p[c * d.s + k0 + kk] = tile[kk][c];
}

// f(k0, len, dz) over a run of n values of a and dy, kChunk at a time, dz[k] = relu_grad(a[k0 + k],
// dy[k0 + k]) formed in a loop of its own: it vectorises, where folded into the sums it became a
// branch per value (8x slower). kChunk is a multiple of kSumLanes: value k of the run still goes
// to lane k mod kSumLanes when f adds the chunks in order with AddRun.
constexpr int64_t kChunk = 256;
static_assert(kChunk % kSumLanes == 0, "chunks start at lane 0");
template <typename T, typename F>
void ReluGradChunks(const T* a, const T* dy, int64_t n, F f) {
  T buf[kChunk];
  for (int64_t k0 = 0; k0 < n; k0 += kChunk) {
    const int64_t len = std::min(kChunk, n - k0);
    for (int64_t k = 0; k < len; ++k) buf[k] = Dz<true>(a[k0 + k], dy[k0 + k]);
    f(k0, len, static_cast<const T*>(buf));
  }
}

// LoadTile of relu_grad(a, dy) for a and dy both blocked (Note [Batch norm with ReLU]): the
// pixels' values side by side in both, the gradient is taken where they lie.
template <typename T>
void LoadReluGradTile(const ChannelDims& d, const ChannelLayout& l, const T* a, const T* dy, int64_t i, int64_t c0,
                      int64_t k0, int64_t n, T (*tile)[kGroup]) {
  const int64_t start = l.Start(d, i, c0) + k0 * kGroup;
  T* t = &tile[0][0];
  for (int64_t j = 0; j < n * kGroup; ++j) t[j] = Dz<true>(a[start + j], dy[start + j]);
}

// The same for NCHW a and dy and up to 4 tiles (n <= 64 pixels): each channel's run of n values
// is read at once, then transposed tile by tile.
template <typename T>
void LoadReluGradTiles(const ChannelDims& d, const ChannelLayout& l, const T* a, const T* dy, int64_t i, int64_t c0,
                       int64_t k0, int64_t n, T (*tile)[kGroup]) {
  constexpr int64_t kMax = 4 * kGroup;
  const int64_t start = l.Start(d, i, c0);
  T runs[kGroup][kMax];
  for (int64_t c = 0; c < kGroup; ++c)
    for (int64_t kk = 0; kk < n; ++kk)
      runs[c][kk] = Dz<true>(a[start + c * d.s + k0 + kk], dy[start + c * d.s + k0 + kk]);
  for (int64_t t = 0; t < n; t += kGroup) {
    const int64_t m = std::min(kGroup, n - t);
    if constexpr (std::is_same_v<T, float>) {
      if (m == kGroup) {
        RunsToTile(&runs[0][t], kMax, tile + t);
        continue;
      }
    }
    for (int64_t c = 0; c < kGroup; ++c)
      for (int64_t kk = 0; kk < m; ++kk) tile[t + kk][c] = runs[c][t + kk];
  }
}

// Per channel of the group starting at c0 of a blocked x, the lane sums of f(l, v) over its
// values v (channel c0 + l): images in order, pixel k into lane k mod kSumLanes, Note [Sums in
// lanes]'s order. Each pixel's 16 values are read together, into [lane][channel] accumulators.
// (An NCHW x, where only y is blocked, is summed run by run, in the same order.)
template <typename T, typename F>
void BlockedSums(const ChannelDims& d, const ChannelLayout& xl, const T* x, int64_t c0, LaneSums* sums, F f) {
  if (!xl.blocked) {
    for (int64_t l = 0; l < kGroup; ++l) {
      sums[l] = LaneSums();
      for (int64_t i = 0; i < d.n; ++i) {
        const T* xr = x + xl.Start(d, i, c0 + l);
        AddRun(sums[l], d.s, [&](int64_t k) { return f(l, double(xr[k])); });
      }
    }
    return;
  }
  double acc[kSumLanes][kGroup] = {};
  for (int64_t i = 0; i < d.n; ++i) {
    const T* xb = x + xl.Start(d, i, c0);
    for (int64_t k = 0; k < d.s; ++k) {
      const T* p = xb + k * kGroup;
      double* a = acc[k % kSumLanes];
      for (int64_t l = 0; l < kGroup; ++l) a[l] += f(l, double(p[l]));
    }
  }
  for (int64_t l = 0; l < kGroup; ++l)
    for (int64_t j = 0; j < kSumLanes; ++j) sums[l].v[j] = acc[j][l];
}

// The same sums for float x (and a second float tensor y of the same blocked layout), as fast as
// the NCHW kernels: 8 channels at a time, so that each lane's 8 channel sums are one vector and
// all lanes stay in registers. f(half, x, y, s0, s1) adds the values x, y of pixel k (channels
// c0 + 8 half ..., widened to double) into lane k mod kSumLanes's accumulators s0, s1; the
// result is s0[lane][channel], s1[lane][channel] for the group's 16 channels. With kRelu, x is
// da and f sees relu_grad(a, da) in its place (a: the ReLU's output, same layout; Note [Batch
// norm with ReLU]).
typedef double F64x8 __attribute__((vector_size(64)));
typedef float F32x8 __attribute__((vector_size(32)));
static_assert(kSumLanes == 8, "one accumulator per lane, 8 channels per vector");
inline F64x8 Widen8(const float* p) {
  F32x8 v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, F64x8);
}
template <bool kRelu = false, typename F>
void BlockedLaneSums(const ChannelDims& d, const ChannelLayout& l, const float* x, const float* y, const float* a,
                     int64_t c0, double (*s0)[kGroup], double (*s1)[kGroup], F f) {
  // x's 8 values at p (relu_grad's with kRelu), widened.
  auto first = [](const float* p, const float* pa) {
    if constexpr (kRelu) {
      float g[8];
      for (int j = 0; j < 8; ++j) g[j] = Dz<true>(pa[j], p[j]);
      return Widen8(g);
    }
    return Widen8(p);
  };
  for (int half = 0; half < 2; ++half) {
    F64x8 a0[kSumLanes] = {}, a1[kSumLanes] = {};
    for (int64_t i = 0; i < d.n; ++i) {
      const float* px = x + l.Start(d, i, c0) + half * 8;
      const float* py = y + l.Start(d, i, c0) + half * 8;
      const float* pa = kRelu ? a + l.Start(d, i, c0) + half * 8 : px;  // px: unread
      int64_t k = 0;
      for (; k + kSumLanes <= d.s; k += kSumLanes) {
#pragma GCC unroll 8
        for (int j = 0; j < kSumLanes; ++j)
          f(half, first(px + (k + j) * kGroup, pa + (k + j) * kGroup), Widen8(py + (k + j) * kGroup), a0[j], a1[j]);
      }
      for (int j = 0; k + j < d.s; ++j)
        f(half, first(px + (k + j) * kGroup, pa + (k + j) * kGroup), Widen8(py + (k + j) * kGroup), a0[j], a1[j]);
    }
    for (int j = 0; j < kSumLanes; ++j)
      for (int c = 0; c < 8; ++c) {
        s0[j][half * 8 + c] = a0[j][c];
        s1[j][half * 8 + c] = a1[j][c];
      }
  }
}
inline F64x8 Half(const double* v, int half) {
  F64x8 r;
  std::memcpy(&r, v + half * 8, sizeof r);
  return r;
}

// f(c0) for the first channel of every group of 16, groups split across the pool.
template <typename F>
void ForGroups(const ChannelDims& d, F f) {
  ParallelFor(d.c / kGroup, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) f(g * kGroup);
  });
}

// BatchNormTrainCpu's body for one dtype, fused with relu or not.
template <typename T, bool kRelu>
void BatchNormTrain(const OpRecord& op) {
  const ChannelDims d = MakeChannelDims(op.inputs[0].shape());
  const double momentum = op.attrs.Float("momentum"), eps = op.attrs.Float("eps");
  const T* x = op.inputs[0].data<T>();
  const T* gamma = op.inputs[1].data<T>();
  const T* beta = op.inputs[2].data<T>();
  T* y = op.outputs[0].data<T>();
  T* mean_out = op.outputs[1].data<T>();
  T* invstd_out = op.outputs[2].data<T>();
  T* rmean = op.outputs[3].data<T>();  // == inputs[3] (Note [Running statistics are updated in place])
  T* rvar = op.outputs[4].data<T>();
  const double m = double(d.n * d.s);
  // Channel c's statistics from its mean and squared deviations: outputs, running statistics.
  auto finish = [&](int64_t c, double mean, double sq) {
    const double var = sq / m;
    const double invstd = 1.0 / std::sqrt(var + eps);
    mean_out[c] = T(mean);
    invstd_out[c] = T(invstd);
    rmean[c] = T((1 - momentum) * double(rmean[c]) + momentum * mean);
    rvar[c] = T((1 - momentum) * double(rvar[c]) + momentum * sq / (m - 1));
    return invstd;
  };
  const ChannelLayout xl = LayoutAttr(op, "x_blocked", d, "batch_norm_train");
  const ChannelLayout yl = LayoutAttr(op, "y_blocked", d, "batch_norm_train");
  if (!xl.blocked && !yl.blocked) {
    ForChannels(d, [&](int64_t c) {
      double mean, sq;
      MeanAndSquares(x + c * d.s, d.n, d.s, d.c * d.s, mean, sq);
      const double invstd = finish(c, mean, sq);
      ScaleChannel<kRelu>(d, c, x, y, double(gamma[c]), double(beta[c]), mean, invstd);
    });
    return;
  }
  ForGroups(d, [&](int64_t c0) {  // as above, 16 channels at once
    LaneSums sums[kGroup], devs[kGroup];
    double mean[kGroup];
    T scale[kGroup], shift[kGroup];
    bool done = false;
    if constexpr (std::is_same_v<T, float>) {
      if (xl.blocked) {  // BlockedSums' sums, vectorised
        double s0[kSumLanes][kGroup], s1[kSumLanes][kGroup];
        BlockedLaneSums(d, xl, x, x, x, c0, s0, s1, [](int, F64x8 v, F64x8, F64x8& a0, F64x8&) { a0 += v; });
        for (int64_t l = 0; l < kGroup; ++l) {
          for (int64_t j = 0; j < kSumLanes; ++j) sums[l].v[j] = s0[j][l];
          mean[l] = sums[l].Total() / m;
        }
        BlockedLaneSums(d, xl, x, x, x, c0, s0, s1, [&](int half, F64x8 v, F64x8, F64x8& a0, F64x8&) {
          const F64x8 dev = v - Half(mean, half);
          a0 += dev * dev;
        });
        for (int64_t l = 0; l < kGroup; ++l)
          for (int64_t j = 0; j < kSumLanes; ++j) devs[l].v[j] = s0[j][l];
        done = true;
      }
    }
    if (!done) {
      BlockedSums(d, xl, x, c0, sums, [](int64_t, double v) { return v; });
      for (int64_t l = 0; l < kGroup; ++l) mean[l] = sums[l].Total() / m;
      BlockedSums(d, xl, x, c0, devs, [&](int64_t l, double v) {
        const double dev = v - mean[l];
        return dev * dev;
      });
    }
    for (int64_t l = 0; l < kGroup; ++l) {
      const int64_t c = c0 + l;
      const double g = double(gamma[c]), b = double(beta[c]);
      const double invstd = finish(c, mean[l], devs[l].Total());
      scale[l] = T(g * invstd);  // ScaleChannel's
      shift[l] = T(b - mean[l] * g * invstd);
    }
    for (int64_t i = 0; xl.blocked && yl.blocked && i < d.n; ++i) {  // y = x scale + shift, in place
      const T* xb = x + xl.Start(d, i, c0);
      T* yb = y + yl.Start(d, i, c0);
      for (int64_t k = 0; k < d.s * kGroup; k += kGroup)
        for (int64_t l = 0; l < kGroup; ++l) yb[k + l] = Out<kRelu>(xb[k + l] * scale[l] + shift[l]);
    }
    for (int64_t i = 0; !(xl.blocked && yl.blocked) && i < d.n; ++i)  // the same in tiles of 16 pixels
      for (int64_t k0 = 0; k0 < d.s; k0 += kGroup) {
        const int64_t n = std::min(kGroup, d.s - k0);
        T t[kGroup][kGroup];
        LoadTile(d, xl, x, i, c0, k0, n, t);
        for (int64_t k = 0; k < n; ++k)
          for (int64_t l = 0; l < kGroup; ++l) t[k][l] = Out<kRelu>(t[k][l] * scale[l] + shift[l]);
        StoreTile(d, yl, y, i, c0, k0, n, t);
      }
  });
}

// x: (N, C, S), gamma, beta, running_mean, running_var: (C)
//   -> y: (N, C, S) (relu(y) with relu = 1), mean, invstd: (C); running_mean, running_var updated in place
void BatchNormTrainCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_train", [&](auto tag) {
    using T = decltype(tag);
    WithRelu(op.attrs.Int("relu", 0) != 0, [&](auto fused) { BatchNormTrain<T, decltype(fused)::value>(op); });
  });
}

// x: (N, C, S), gamma, beta, running_mean, running_var: (C) -> y: (N, C, S)
void BatchNormInferCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_infer", [&](auto tag) {
    using T = decltype(tag);
    const ChannelDims d = MakeChannelDims(op.inputs[0].shape());
    const double eps = op.attrs.Float("eps");
    const T* x = op.inputs[0].data<T>();
    const T* gamma = op.inputs[1].data<T>();
    const T* beta = op.inputs[2].data<T>();
    const T* rmean = op.inputs[3].data<T>();
    const T* rvar = op.inputs[4].data<T>();
    T* y = op.outputs[0].data<T>();
    ForChannels(d, [&](int64_t c) {
      const double invstd = 1.0 / std::sqrt(double(rvar[c]) + eps);
      ScaleChannel(d, c, x, y, double(gamma[c]), double(beta[c]), double(rmean[c]), invstd);
    });
  });
}

// BatchNormGradCpu's body for one dtype, fused with relu_grad or not.
template <typename T, bool kRelu>
void BatchNormGrad(const OpRecord& op) {
  const ChannelDims d = MakeChannelDims(op.inputs[0].shape());
  const bool training = op.attrs.Int("training") != 0;
  const double eps = op.attrs.Float("eps");
  const T* x = op.inputs[0].data<T>();
  const T* gamma = op.inputs[1].data<T>();
  const T* mean_in = op.inputs[2].data<T>();
  const T* stat = op.inputs[3].data<T>();
  const T* dy = op.inputs[4].data<T>();
  const T* act = kRelu ? op.inputs[5].data<T>() : dy;  // the ReLU's output (dy: unread)
  T* dx = op.outputs[0].data<T>();
  T* dgamma = op.outputs[1].data<T>();
  T* dbeta = op.outputs[2].data<T>();
  const double m = double(d.n * d.s);
  // Layouts of x, dy, a and dx; Note [Activation layouts] in graph/layout.cc.
  const ChannelLayout xl = LayoutAttr(op, "x_blocked", d, "batch_norm_grad");
  const ChannelLayout dyl = LayoutAttr(op, "dy_blocked", d, "batch_norm_grad");
  const ChannelLayout al = kRelu ? LayoutAttr(op, "a_blocked", d, "batch_norm_grad") : dyl;
  const ChannelLayout dxl = LayoutAttr(op, "dx_blocked", d, "batch_norm_grad");
  // Channel c from its two sums: dgamma, dbeta, and dx's coefficients a, k_x, b.
  struct Coef {
    T a, k_x, b;
  };
  auto finish = [&](int64_t c, double invstd, double mean, double sdy, double sdyx) {
    sdyx *= invstd;  // sum(dy * xhat)
    dgamma[c] = T(sdyx);
    dbeta[c] = T(sdy);
    const double gi = double(gamma[c]) * invstd;
    // training: dx = gamma invstd (dy - sum(dy)/M - xhat sum(dy xhat)/M)
    return Coef{T(gi), training ? T(-gi * sdyx * invstd / m) : T(0),
                training ? T(-gi * sdy / m + gi * sdyx * invstd * mean / m) : T(0)};
  };
  auto invstd_of = [&](int64_t c) { return training ? double(stat[c]) : 1.0 / std::sqrt(double(stat[c]) + eps); };
  if (!xl.blocked && !dyl.blocked && !al.blocked && !dxl.blocked) {
    ForChannels(d, [&](int64_t c) {
      const double mean = double(mean_in[c]);
      const double invstd = invstd_of(c);
      // f(k0, len, dz) for image i's run: dz[k] is dz at pixel k0 + k (ReluGradChunks's chunks).
      auto chunks = [&](int64_t i, auto&& f) {
        const T* gr = dy + (i * d.c + c) * d.s;
        if constexpr (kRelu) return ReluGradChunks(act + (i * d.c + c) * d.s, gr, d.s, f);
        return f(int64_t(0), d.s, gr);
      };
      LaneSums sum_dy, sum_dyx;  // sum(dy), sum(dy * (x - mean)) (Note [Sums in lanes])
      for (int64_t i = 0; i < d.n; ++i) {
        const T* xr = x + (i * d.c + c) * d.s;
        chunks(i, [&](int64_t k0, int64_t len, const T* gr) {
          AddRun(sum_dy, len, [&](int64_t k) { return double(gr[k]); });
          AddRun(sum_dyx, len, [&](int64_t k) { return double(gr[k]) * (double(xr[k0 + k]) - mean); });
        });
      }
      const Coef f = finish(c, invstd, mean, sum_dy.Total(), sum_dyx.Total());
      for (int64_t i = 0; i < d.n; ++i) {
        const T* xr = x + (i * d.c + c) * d.s;
        T* dr = dx + (i * d.c + c) * d.s;
        chunks(i, [&](int64_t k0, int64_t len, const T* gr) {
          for (int64_t k = 0; k < len; ++k) dr[k0 + k] = f.a * gr[k] + f.k_x * xr[k0 + k] + f.b;
        });
      }
    });
    return;
  }
  // x, dy (a) and dx all blocked (a graph's blocked region, Note [Activation layouts]): each
  // pixel's 16 values are side by side in all of them, so the passes read them in place.
  const bool all_blocked = xl.blocked && dyl.blocked && al.blocked && dxl.blocked;
  // The fused gradient with a and da NCHW but x or dx blocked (the ReLU's output is read by an
  // op without a blocked kernel) takes tiles of kWide pixels, so that each of the 32 runs of a
  // and da read at once is read 4 lines at a time (with 16-pixel tiles the fused gradient was
  // 1.4x slower than relu_grad and batch_norm_grad apart).
  const bool runs = kRelu && !al.blocked && !dyl.blocked;
  constexpr int64_t kWide = 4 * kGroup;
  const int64_t width = runs ? kWide : kGroup;
  ForGroups(d, [&](int64_t c0) {  // as above, 16 channels at once
    LaneSums sum_dy[kGroup], sum_dyx[kGroup];
    Coef f[kGroup];
    // Tiles of `width` pixels, the group's 16 channels side by side (LoadTile); pixel k0 + k
    // adds into lane k mod kSumLanes (k0 is a multiple of kSumLanes).
    double mean[kGroup], a_dy[kSumLanes][kGroup] = {}, a_dyx[kSumLanes][kGroup] = {};
    T tx[kWide][kGroup], tg[kWide][kGroup], ta[kGroup][kGroup], fa[kGroup], fk[kGroup], fb[kGroup];
    // The group's pixels [k0, k0 + n) of image i, n <= width: x into tx, dz into tg (dy's,
    // relu_grad's with kRelu).
    auto load = [&](int64_t i, int64_t k0, int64_t n) {
      for (int64_t t = 0; t < n; t += kGroup) LoadTile(d, xl, x, i, c0, k0 + t, std::min(kGroup, n - t), tx + t);
      if constexpr (kRelu) {
        if (runs) return LoadReluGradTiles(d, dyl, act, dy, i, c0, k0, n, tg);
        if (al.blocked && dyl.blocked) return LoadReluGradTile(d, dyl, act, dy, i, c0, k0, n, tg);
      }
      LoadTile(d, dyl, dy, i, c0, k0, n, tg);
      if constexpr (kRelu) {
        LoadTile(d, al, act, i, c0, k0, n, ta);
        for (int64_t k = 0; k < n; ++k)
          for (int64_t l = 0; l < kGroup; ++l) tg[k][l] = Dz<true>(ta[k][l], tg[k][l]);
      }
    };
    for (int64_t l = 0; l < kGroup; ++l) mean[l] = double(mean_in[c0 + l]);
    if constexpr (std::is_same_v<T, float>) {
      if (all_blocked)
        BlockedLaneSums<kRelu>(d, xl, dy, x, act, c0, a_dy, a_dyx,
                               [&](int half, F64x8 g, F64x8 v, F64x8& s1, F64x8& s2) {
                                 s1 += g;
                                 s2 += g * (v - Half(mean, half));
                               });
    }
    for (int64_t i = 0; all_blocked && !std::is_same_v<T, float> && i < d.n; ++i) {
      const T* xb = x + xl.Start(d, i, c0);
      const T* gb = dy + dyl.Start(d, i, c0);
      const T* ab = act + al.Start(d, i, c0);
      for (int64_t k = 0; k < d.s; ++k) {
        const T* xp = xb + k * kGroup;
        const T* gp = gb + k * kGroup;
        const T* ap = ab + k * kGroup;
        double* s1 = a_dy[k % kSumLanes];
        double* s2 = a_dyx[k % kSumLanes];
        for (int64_t l = 0; l < kGroup; ++l) {
          const double g = double(Dz<kRelu>(ap[l], gp[l]));
          s1[l] += g;
          s2[l] += g * (double(xp[l]) - mean[l]);
        }
      }
    }
    for (int64_t i = 0; !all_blocked && i < d.n; ++i)
      for (int64_t k0 = 0; k0 < d.s; k0 += width) {
        const int64_t n = std::min(width, d.s - k0);
        load(i, k0, n);
        for (int64_t k = 0; k < n; ++k) {
          double* s1 = a_dy[k % kSumLanes];
          double* s2 = a_dyx[k % kSumLanes];
          for (int64_t l = 0; l < kGroup; ++l) {
            const double g = double(tg[k][l]);
            s1[l] += g;
            s2[l] += g * (double(tx[k][l]) - mean[l]);
          }
        }
      }
    for (int64_t l = 0; l < kGroup; ++l) {
      for (int64_t j = 0; j < kSumLanes; ++j) {
        sum_dy[l].v[j] = a_dy[j][l];
        sum_dyx[l].v[j] = a_dyx[j][l];
      }
      const int64_t c = c0 + l;
      f[l] = finish(c, invstd_of(c), mean[l], sum_dy[l].Total(), sum_dyx[l].Total());
      fa[l] = f[l].a;
      fk[l] = f[l].k_x;
      fb[l] = f[l].b;
    }
    for (int64_t i = 0; all_blocked && i < d.n; ++i) {
      const T* xb = x + xl.Start(d, i, c0);
      const T* gb = dy + dyl.Start(d, i, c0);
      const T* ab = act + al.Start(d, i, c0);
      T* db = dx + dxl.Start(d, i, c0);
      for (int64_t k = 0; k < d.s * kGroup; k += kGroup)
        for (int64_t l = 0; l < kGroup; ++l)
          db[k + l] = fa[l] * Dz<kRelu>(ab[k + l], gb[k + l]) + fk[l] * xb[k + l] + fb[l];
    }
    for (int64_t i = 0; !all_blocked && i < d.n; ++i)
      for (int64_t k0 = 0; k0 < d.s; k0 += width) {
        const int64_t n = std::min(width, d.s - k0);
        load(i, k0, n);
        for (int64_t k = 0; k < n; ++k)
          for (int64_t l = 0; l < kGroup; ++l) tx[k][l] = fa[l] * tg[k][l] + fk[l] * tx[k][l] + fb[l];
        for (int64_t t = 0; t < n; t += kGroup) StoreTile(d, dxl, dx, i, c0, k0 + t, std::min(kGroup, n - t), tx + t);
      }
  });
}

// x: (N, C, S), gamma: (C), mean: (C), invstd or running var: (C), dy: (N, C, S) [, a: (N, C, S)]
//   -> dx: (N, C, S), dgamma: (C), dbeta: (C)
// With relu = 1, dy is the ReLU's da and a its output: dz = relu_grad(a, da) is read for dy
// (Note [Batch norm with ReLU]).
void BatchNormGradCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_grad", [&](auto tag) {
    using T = decltype(tag);
    const bool relu = op.attrs.Int("relu", 0) != 0;
    LOOM_CHECK(!relu || (op.inputs.size() == 6 && op.inputs[5].shape() == op.inputs[0].shape()), ShapeError,
               "[batch_norm_grad] relu = 1 needs the ReLU's output (", ToString(op.inputs[0].shape()),
               ") as a sixth input");
    WithRelu(relu, [&](auto fused) { BatchNormGrad<T, decltype(fused)::value>(op); });
  });
}

// x: (R, D), gamma, beta: (D) -> y: (R, D), mean, invstd: (R)
void LayerNormCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const RowDims d = MakeRowDims(op.inputs[0].shape(), op.inputs[1].shape());
    const double eps = op.attrs.Float("eps");
    const T* x = op.inputs[0].data<T>();
    const T* gamma = op.inputs[1].data<T>();
    const T* beta = op.inputs[2].data<T>();
    T* y = op.outputs[0].data<T>();
    T* mean_out = op.outputs[1].data<T>();
    T* invstd_out = op.outputs[2].data<T>();
    ForRows(d, [&](int64_t r) {
      const T* xr = x + r * d.d;
      T* yr = y + r * d.d;
      double mean, sq;
      MeanAndSquares(xr, 1, d.d, d.d, mean, sq);
      const double invstd = 1.0 / std::sqrt(sq / double(d.d) + eps);
      const T tm = T(mean), ti = T(invstd);
      for (int64_t j = 0; j < d.d; ++j) yr[j] = (xr[j] - tm) * ti * gamma[j] + beta[j];
      mean_out[r] = tm;
      invstd_out[r] = ti;
    });
  });
}

// x: (R, D), gamma: (D), mean, invstd: (R), dy: (R, D) -> dx: (R, D), dgamma, dbeta: (D)
// dx by rows; dgamma and dbeta by columns, each summed in row order.
void LayerNormGradCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "layer_norm_grad", [&](auto tag) {
    using T = decltype(tag);
    const RowDims d = MakeRowDims(op.inputs[0].shape(), op.inputs[1].shape());
    const T* x = op.inputs[0].data<T>();
    const T* gamma = op.inputs[1].data<T>();
    const T* mean = op.inputs[2].data<T>();
    const T* invstd = op.inputs[3].data<T>();
    const T* dy = op.inputs[4].data<T>();
    T* dx = op.outputs[0].data<T>();
    T* dgamma = op.outputs[1].data<T>();
    T* dbeta = op.outputs[2].data<T>();
    ForRows(d, [&](int64_t r) {
      const T* xr = x + r * d.d;
      const T* gr = dy + r * d.d;
      T* dr = dx + r * d.d;
      const double mu = double(mean[r]), is = double(invstd[r]);
      double s1 = 0, s2 = 0;  // sum(dxhat), sum(dxhat * xhat) with dxhat = dy * gamma
      for (int64_t j = 0; j < d.d; ++j) {
        const double g = double(gr[j]) * double(gamma[j]);
        s1 += g;
        s2 += g * (double(xr[j]) - mu) * is;
      }
      const double a = s1 / double(d.d), b = s2 / double(d.d);
      for (int64_t j = 0; j < d.d; ++j) {
        const double xhat = (double(xr[j]) - mu) * is;
        dr[j] = T(is * (double(gr[j]) * double(gamma[j]) - a - xhat * b));
      }
    });
    ParallelFor(d.d, std::max<int64_t>(1, kGrain / std::max<int64_t>(d.r, 1)), [&](int64_t j0, int64_t j1) {
      std::vector<double> sg(size_t(j1 - j0), 0.0), sb(size_t(j1 - j0), 0.0);
      for (int64_t r = 0; r < d.r; ++r) {
        const T* xr = x + r * d.d;
        const T* gr = dy + r * d.d;
        const double mu = double(mean[r]), is = double(invstd[r]);
        for (int64_t j = j0; j < j1; ++j) {
          sg[size_t(j - j0)] += double(gr[j]) * (double(xr[j]) - mu) * is;
          sb[size_t(j - j0)] += double(gr[j]);
        }
      }
      for (int64_t j = j0; j < j1; ++j) {
        dgamma[j] = T(sg[size_t(j - j0)]);
        dbeta[j] = T(sb[size_t(j - j0)]);
      }
    });
  });
}

// Note [What a kernel supports]: every NCHW record; a blocked one for (N, C, H, W), C a
// multiple of 16; relu = 1 (Note [Batch norm with ReLU]) with, for the gradient, the ReLU's
// output as a sixth input of x's shape.
bool BatchNormSupports(const OpRecord& op) {
  // The layout attributes each op declares (Note [Declared attributes] in core/attrs.h).
  static const char* const kTrain[] = {"x_blocked", "y_blocked"};
  static const char* const kGrad[] = {"x_blocked", "dy_blocked", "dx_blocked", "a_blocked"};
  bool blocked = false;
  if (op.def == &op_kind::batch_norm_grad)
    for (const char* a : kGrad) blocked |= op.attrs.Int(a, 0) != 0;
  else
    for (const char* a : kTrain) blocked |= op.attrs.Int(a, 0) != 0;
  const Shape& x = op.inputs[0].shape();
  return !blocked || (x.size() == 4 && x[1] % kGroup == 0);
}
bool BatchNormGradSupports(const OpRecord& op) {
  const bool relu = op.attrs.Int("relu", 0) != 0;
  if (relu && (op.inputs.size() != 6 || op.inputs[5].shape() != op.inputs[0].shape() ||
               op.inputs[5].dtype() != op.inputs[0].dtype()))
    return false;
  return BatchNormSupports(op);
}

}  // namespace

LOOM_KERNEL(batch_norm_train, kCPU, BatchNormTrainCpu);
LOOM_KERNEL_SUPPORTS(batch_norm_train, kCPU, BatchNormSupports);
LOOM_KERNEL_SUPPORTS(batch_norm_grad, kCPU, BatchNormGradSupports);
LOOM_KERNEL(batch_norm_infer, kCPU, BatchNormInferCpu);
LOOM_KERNEL(batch_norm_grad, kCPU, BatchNormGradCpu);
LOOM_KERNEL(layer_norm, kCPU, LayerNormCpu);
LOOM_KERNEL(layer_norm_grad, kCPU, LayerNormGradCpu);

}  // namespace cpu
}  // namespace loom
