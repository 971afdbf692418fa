// CPU normalisation kernels. Batch norm sees x as (N, C, S) (S: the spatial axes, flattened)
// and works channel by channel; layer norm sees x as (R, D) and works row by row. Sums are
// taken in double, two passes (mean, then squared deviations), in a fixed order (Note [Sums in
// lanes]): results do not depend on the thread count.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "device/cpu/kernels/common.h"
#include "core/elementwise_formulas.h"

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

// A bfloat16 element read as the float it holds: batch norm's x may be the bfloat16 output of
// a convolution (Note [Convolution outputs kept in bfloat16] in graph/bf16_conv_outputs.cc). The
// NCHW kernels below, instantiated for it, compute from the same float values the float32 ones
// read from the widened tensor, in the same order: the same bits.
struct Bf16Value {
  uint16_t bits;
  operator float() const { return BFloat16ToFloat(bits); }
};
static_assert(sizeof(Bf16Value) == 2, "a bfloat16 tensor's elements");

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

// What fuse_bn_relu folds into batch norm (Note [Batch norm with its ReLU] in
// graph/fuse_bn_relu.cc): y = relu(y + residual), each step rounded to T as the add and relu
// kernels round it; relu_f's formula (core/elementwise_formulas.h) written as v <= 0 ? 0 : v,
// the same for every value (NaN stays NaN, -0 becomes +0), which the compiler vectorises.
template <typename T>
struct BnEpilogue {
  const T* residual = nullptr;  // in y's layout
  bool relu = false;
  bool none() const { return !residual && !relu; }
  static T Relu(T v) { return v <= T(0) ? T(0) : v; }
  // y[0, n) in place, the residual's elements from `at`: a second pass over values still in
  // cache, one loop per case.
  void Apply(T* y, int64_t at, int64_t n) const {
    if (residual && relu) {
      for (int64_t k = 0; k < n; ++k) y[k] = Relu(y[k] + residual[at + k]);
    } else if (residual) {
      for (int64_t k = 0; k < n; ++k) y[k] = y[k] + residual[at + k];
    } else if (relu) {
      for (int64_t k = 0; k < n; ++k) y[k] = Relu(y[k]);
    }
  }
};
template <typename T>
BnEpilogue<T> EpilogueOf(const OpRecord& op) {
  return BnEpilogue<T>{op.inputs.size() > 5 ? op.inputs[5].data<T>() : nullptr, op.attrs.Int("relu", 0) != 0};
}

// Batch norm's per-channel scale = gamma invstd and shift = beta - mean gamma invstd, in double
// from the statistics given. Training batch norm gives them as it saves them, rounded to T (Note
// [Batch norm applied from its saved statistics] in core/ops/norm.cc): batch_norm_apply, given
// the saved ones, computes the same scale and shift.
template <typename T>
void BnScaleShift(double gamma, double beta, double mean, double invstd, T& scale, T& shift) {
  scale = T(gamma * invstd);
  shift = T(beta - mean * gamma * invstd);
}

// Batch norm's y = x * scale + shift over channel c; then the epilogue, if any.
template <typename T, typename X>
void ScaleChannel(const ChannelDims& d, int64_t c, const X* x, T* y, T scale, T shift, const BnEpilogue<T>& epi = {}) {
  for (int64_t i = 0; i < d.n; ++i) {
    const X* xr = x + (i * d.c + c) * d.s;
    T* yr = y + (i * d.c + c) * d.s;
    for (int64_t k = 0; k < d.s; ++k) yr[k] = T(xr[k]) * scale + shift;
    epi.Apply(yr, (i * d.c + c) * d.s, d.s);
  }
}

// ---- batch norm over an nChw16c x (Note [Activation layouts] in graph/layouts.cc) ----
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

// The attribute a graph sets on a record whose tensor is nChw16c (graph/layouts.cc); checked.
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
// result is s0[lane][channel], s1[lane][channel] for the group's 16 channels.
typedef double F64x8 __attribute__((vector_size(64)));
typedef float F32x8 __attribute__((vector_size(32)));
static_assert(kSumLanes == 8, "one accumulator per lane, 8 channels per vector");
inline F64x8 Widen8(const float* p) {
  F32x8 v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, F64x8);
}
template <typename F>
void BlockedLaneSums(const ChannelDims& d, const ChannelLayout& l, const float* x, const float* y, int64_t c0,
                     double (*s0)[kGroup], double (*s1)[kGroup], F f) {
  for (int half = 0; half < 2; ++half) {
    F64x8 a0[kSumLanes] = {}, a1[kSumLanes] = {};
    for (int64_t i = 0; i < d.n; ++i) {
      const float* px = x + l.Start(d, i, c0) + half * 8;
      const float* py = y + l.Start(d, i, c0) + half * 8;
      int64_t k = 0;
      for (; k + kSumLanes <= d.s; k += kSumLanes) {
#pragma GCC unroll 8
        for (int j = 0; j < kSumLanes; ++j)
          f(half, Widen8(px + (k + j) * kGroup), Widen8(py + (k + j) * kGroup), a0[j], a1[j]);
      }
      for (int j = 0; k + j < d.s; ++j)
        f(half, Widen8(px + (k + j) * kGroup), Widen8(py + (k + j) * kGroup), a0[j], a1[j]);
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

// y = x scale + shift, then the epilogue, over the 16 channels from c0 of a blocked x or y: in
// place where both are blocked, else in tiles of 16 pixels.
template <typename T>
void ScaleGroup(const ChannelDims& d, const ChannelLayout& xl, const ChannelLayout& yl, const T* x, T* y, int64_t c0,
                const T* scale, const T* shift, const BnEpilogue<T>& epi) {
  for (int64_t i = 0; xl.blocked && yl.blocked && i < d.n; ++i) {
    const T* xb = x + xl.Start(d, i, c0);
    T* yb = y + yl.Start(d, i, c0);
    for (int64_t k = 0; k < d.s * kGroup; k += kGroup)
      for (int64_t l = 0; l < kGroup; ++l) yb[k + l] = xb[k + l] * scale[l] + shift[l];
    epi.Apply(yb, yl.Start(d, i, c0), d.s * kGroup);  // the residual has y's layout
  }
  for (int64_t i = 0; !(xl.blocked && yl.blocked) && i < d.n; ++i)
    for (int64_t k0 = 0; k0 < d.s; k0 += kGroup) {
      const int64_t n = std::min(kGroup, d.s - k0);
      T t[kGroup][kGroup], r[kGroup][kGroup];
      LoadTile(d, xl, x, i, c0, k0, n, t);
      if (epi.residual) LoadTile(d, yl, epi.residual, i, c0, k0, n, r);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t l = 0; l < kGroup; ++l) t[k][l] = t[k][l] * scale[l] + shift[l];
      for (int64_t k = 0; k < n && !epi.none(); ++k)
        BnEpilogue<T>{epi.residual ? r[k] : nullptr, epi.relu}.Apply(t[k], 0, kGroup);
      StoreTile(d, yl, y, i, c0, k0, n, t);
    }
}

// BatchNormTrainCpu's body for one dtype; X: T, or Bf16Value for a bfloat16 x (NCHW only).
template <typename T, typename X = T>
void BatchNormTrain(const OpRecord& op) {
  const ChannelDims d = MakeChannelDims(op.inputs[0].shape());
  const double momentum = op.attrs.Float("momentum"), eps = op.attrs.Float("eps");
  const X* x = static_cast<const X*>(op.inputs[0].raw_data());
  const T* gamma = op.inputs[1].data<T>();
  const T* beta = op.inputs[2].data<T>();
  T* y = op.outputs[0].data<T>();
  T* mean_out = op.outputs[1].data<T>();
  T* invstd_out = op.outputs[2].data<T>();
  T* rmean = op.outputs[3].data<T>();  // == inputs[3] (Note [Running statistics are updated in place])
  T* rvar = op.outputs[4].data<T>();
  const double m = double(d.n * d.s);
  // Channel c's statistics from its mean and squared deviations: outputs, running statistics. y
  // is scaled with the saved (rounded) mean and invstd, as batch_norm_apply scales it.
  auto finish = [&](int64_t c, double mean, double sq) {
    const double var = sq / m;
    const double invstd = 1.0 / std::sqrt(var + eps);
    mean_out[c] = T(mean);
    invstd_out[c] = T(invstd);
    rmean[c] = T((1 - momentum) * double(rmean[c]) + momentum * mean);
    rvar[c] = T((1 - momentum) * double(rvar[c]) + momentum * sq / (m - 1));
  };
  const ChannelLayout xl = LayoutAttr(op, "x_blocked", d, "batch_norm_train");
  const ChannelLayout yl = LayoutAttr(op, "y_blocked", d, "batch_norm_train");
  const BnEpilogue<T> epi = EpilogueOf<T>(op);
  if (!xl.blocked && !yl.blocked) {
    ForChannels(d, [&](int64_t c) {
      double mean, sq;
      MeanAndSquares(x + c * d.s, d.n, d.s, d.c * d.s, mean, sq);
      finish(c, mean, sq);
      T scale, shift;
      BnScaleShift(double(gamma[c]), double(beta[c]), double(mean_out[c]), double(invstd_out[c]), scale, shift);
      ScaleChannel(d, c, x, y, scale, shift, epi);
    });
    return;
  }
  if constexpr (!std::is_same_v<X, T>) {
    throw ValueError("[batch_norm_train] a bfloat16 x takes no blocked layout");  // BatchNormSupports refuses it
  } else ForGroups(d, [&](int64_t c0) {  // as above, 16 channels at once
    LaneSums sums[kGroup], devs[kGroup];
    double mean[kGroup];
    T scale[kGroup], shift[kGroup];
    bool done = false;
    if constexpr (std::is_same_v<T, float>) {
      if (xl.blocked) {  // BlockedSums' sums, vectorised
        double s0[kSumLanes][kGroup], s1[kSumLanes][kGroup];
        BlockedLaneSums(d, xl, x, x, c0, s0, s1, [](int, F64x8 v, F64x8, F64x8& a0, F64x8&) { a0 += v; });
        for (int64_t l = 0; l < kGroup; ++l) {
          for (int64_t j = 0; j < kSumLanes; ++j) sums[l].v[j] = s0[j][l];
          mean[l] = sums[l].Total() / m;
        }
        BlockedLaneSums(d, xl, x, x, c0, s0, s1, [&](int half, F64x8 v, F64x8, F64x8& a0, F64x8&) {
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
      finish(c, mean[l], devs[l].Total());
      BnScaleShift(double(gamma[c]), double(beta[c]), double(mean_out[c]), double(invstd_out[c]), scale[l], shift[l]);
    }
    ScaleGroup(d, xl, yl, x, y, c0, scale, shift, epi);
  });
}

// batch_norm_apply (Note [Batch norm applied from its saved statistics] in core/ops/norm.cc):
// batch_norm_train's y from its saved mean and invstd, in any layout it takes.
template <typename T, typename X = T>
void BatchNormApply(const OpRecord& op) {
  const ChannelDims d = MakeChannelDims(op.inputs[0].shape());
  const X* x = static_cast<const X*>(op.inputs[0].raw_data());
  const T *gamma = op.inputs[1].data<T>(), *beta = op.inputs[2].data<T>();
  const T *mean = op.inputs[3].data<T>(), *invstd = op.inputs[4].data<T>();
  T* y = op.outputs[0].data<T>();
  const ChannelLayout xl = LayoutAttr(op, "x_blocked", d, "batch_norm_apply");
  const ChannelLayout yl = LayoutAttr(op, "y_blocked", d, "batch_norm_apply");
  const BnEpilogue<T> epi = EpilogueOf<T>(op);
  if (!xl.blocked && !yl.blocked) {
    ForChannels(d, [&](int64_t c) {
      T scale, shift;
      BnScaleShift(double(gamma[c]), double(beta[c]), double(mean[c]), double(invstd[c]), scale, shift);
      ScaleChannel(d, c, x, y, scale, shift, epi);
    });
    return;
  }
  if constexpr (!std::is_same_v<X, T>) {
    throw ValueError("[batch_norm_apply] a bfloat16 x takes no blocked layout");  // BatchNormSupports refuses it
  } else ForGroups(d, [&](int64_t c0) {
    T scale[kGroup], shift[kGroup];
    for (int64_t l = 0; l < kGroup; ++l)
      BnScaleShift(double(gamma[c0 + l]), double(beta[c0 + l]), double(mean[c0 + l]), double(invstd[c0 + l]), scale[l],
                   shift[l]);
    ScaleGroup(d, xl, yl, x, y, c0, scale, shift, epi);
  });
}

// x: (N, C, S), gamma, beta, mean, invstd: (C) [, residual] -> y: (N, C, S)
void BatchNormApplyCpu(const OpRecord& op, const KernelContext&) {
  if (op.inputs[0].dtype() == DType::kBFloat16) return BatchNormApply<float, Bf16Value>(op);
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_apply", [&](auto tag) { BatchNormApply<decltype(tag)>(op); });
}

// x: (N, C, S), gamma, beta, running_mean, running_var: (C)
//   -> y: (N, C, S), mean, invstd: (C); running_mean, running_var updated in place
// x may be bfloat16, with float32 for the rest (Note [Convolution outputs kept in bfloat16]).
void BatchNormTrainCpu(const OpRecord& op, const KernelContext&) {
  if (op.inputs[0].dtype() == DType::kBFloat16) return BatchNormTrain<float, Bf16Value>(op);
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_train", [&](auto tag) {
    using T = decltype(tag);
    BatchNormTrain<T>(op);
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
      T scale, shift;
      BnScaleShift(double(gamma[c]), double(beta[c]), double(rmean[c]), 1.0 / std::sqrt(double(rvar[c]) + eps), scale,
                   shift);
      ScaleChannel(d, c, x, y, scale, shift);
    });
  });
}

// BatchNormGradCpu's body for one dtype: per channel from its two sums, dgamma, dbeta and dx's
// coefficients, over NCHW runs (Channel) or, when any operand is in a blocked layout, 16
// channels at once (Group).
template <typename T, typename X = T>  // X: T, or Bf16Value for a bfloat16 x (NCHW only)
class BatchNormGrad {
 public:
  explicit BatchNormGrad(const OpRecord& op)
      : d(MakeChannelDims(op.inputs[0].shape())),
        training(op.attrs.Int("training") != 0),
        eps(op.attrs.Float("eps")),
        x(static_cast<const X*>(op.inputs[0].raw_data())),
        gamma(op.inputs[1].data<T>()),
        mean_in(op.inputs[2].data<T>()),
        stat(op.inputs[3].data<T>()),
        dy(op.inputs[4].data<T>()),
        dx(op.outputs[0].data<T>()),
        dgamma(op.outputs[1].data<T>()),
        dbeta(op.outputs[2].data<T>()),
        m(double(d.n * d.s)),
        // Layouts of x, dy and dx; Note [Activation layouts] in graph/layouts.cc.
        xl(LayoutAttr(op, "x_blocked", d, "batch_norm_grad")),
        dyl(LayoutAttr(op, "dy_blocked", d, "batch_norm_grad")),
        dxl(LayoutAttr(op, "dx_blocked", d, "batch_norm_grad")),
        // x, dy and dx all blocked (a graph's blocked region, Note [Activation layouts]): each
        // pixel's 16 values are side by side in all of them, so the passes read them in place.
        all_blocked(xl.blocked && dyl.blocked && dxl.blocked) {}

  void Run() const {
    if (!xl.blocked && !dyl.blocked && !dxl.blocked)
      ForChannels(d, [&](int64_t c) { Channel(c); });
    else if constexpr (!std::is_same_v<X, T>)
      throw ValueError("[batch_norm_grad] a bfloat16 x takes no blocked layout");  // BatchNormSupports refuses it
    else
      ForGroups(d, [&](int64_t c0) { Group(c0); });
  }

 private:
  struct Coef {
    T a, k_x, b;
  };

  // Channel c from its two sums: dgamma, dbeta, and dx's coefficients a, k_x, b.
  Coef Finish(int64_t c, double invstd, double mean, double sdy, double sdyx) const {
    sdyx *= invstd;  // sum(dy * xhat)
    dgamma[c] = T(sdyx);
    dbeta[c] = T(sdy);
    const double gi = double(gamma[c]) * invstd;
    // training: dx = gamma invstd (dy - sum(dy)/M - xhat sum(dy xhat)/M)
    return Coef{T(gi), training ? T(-gi * sdyx * invstd / m) : T(0),
                training ? T(-gi * sdy / m + gi * sdyx * invstd * mean / m) : T(0)};
  }
  double InvStd(int64_t c) const { return training ? double(stat[c]) : 1.0 / std::sqrt(double(stat[c]) + eps); }

  // Every operand NCHW: channel c's runs.
  void Channel(int64_t c) const {
    const double mean = double(mean_in[c]);
    const double invstd = InvStd(c);
    LaneSums sum_dy, sum_dyx;  // sum(dy), sum(dy * (x - mean)) (Note [Sums in lanes])
    for (int64_t i = 0; i < d.n; ++i) {
      const X* xr = x + (i * d.c + c) * d.s;
      const T* gr = dy + (i * d.c + c) * d.s;
      AddRun(sum_dy, d.s, [&](int64_t k) { return double(gr[k]); });
      AddRun(sum_dyx, d.s, [&](int64_t k) { return double(gr[k]) * (double(xr[k]) - mean); });
    }
    const Coef f = Finish(c, invstd, mean, sum_dy.Total(), sum_dyx.Total());
    for (int64_t i = 0; i < d.n; ++i) {
      const X* xr = x + (i * d.c + c) * d.s;
      const T* gr = dy + (i * d.c + c) * d.s;
      T* dr = dx + (i * d.c + c) * d.s;
      for (int64_t k = 0; k < d.s; ++k) dr[k] = f.a * gr[k] + f.k_x * T(xr[k]) + f.b;
    }
  }

  // Some operand blocked: the 16 channels from c0, in tiles of 16 pixels, the group's 16
  // channels side by side (LoadTile); pixel k0 + k adds into lane k mod kSumLanes (k0 is a
  // multiple of kSumLanes).
  void Group(int64_t c0) const {
    LaneSums sum_dy[kGroup], sum_dyx[kGroup];
    double mean[kGroup], a_dy[kSumLanes][kGroup] = {}, a_dyx[kSumLanes][kGroup] = {};
    T tx[kGroup][kGroup], tg[kGroup][kGroup], fa[kGroup], fk[kGroup], fb[kGroup];
    // The group's pixels [k0, k0 + n) of image i, n <= kGroup: x into tx, dy into tg.
    auto load = [&](int64_t i, int64_t k0, int64_t n) {
      LoadTile(d, xl, x, i, c0, k0, n, tx);
      LoadTile(d, dyl, dy, i, c0, k0, n, tg);
    };
    for (int64_t l = 0; l < kGroup; ++l) mean[l] = double(mean_in[c0 + l]);
    if constexpr (std::is_same_v<T, float>) {
      if (all_blocked)
        BlockedLaneSums(d, xl, dy, x, c0, a_dy, a_dyx, [&](int half, F64x8 g, F64x8 v, F64x8& s1, F64x8& s2) {
          s1 += g;
          s2 += g * (v - Half(mean, half));
        });
    }
    for (int64_t i = 0; all_blocked && !std::is_same_v<T, float> && i < d.n; ++i) {
      const T* xb = x + xl.Start(d, i, c0);
      const T* gb = dy + dyl.Start(d, i, c0);
      for (int64_t k = 0; k < d.s; ++k) {
        const T* xp = xb + k * kGroup;
        const T* gp = gb + k * kGroup;
        double* s1 = a_dy[k % kSumLanes];
        double* s2 = a_dyx[k % kSumLanes];
        for (int64_t l = 0; l < kGroup; ++l) {
          const double g = double(gp[l]);
          s1[l] += g;
          s2[l] += g * (double(xp[l]) - mean[l]);
        }
      }
    }
    for (int64_t i = 0; !all_blocked && i < d.n; ++i)
      for (int64_t k0 = 0; k0 < d.s; k0 += kGroup) {
        const int64_t n = std::min(kGroup, d.s - k0);
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
      const Coef f = Finish(c, InvStd(c), mean[l], sum_dy[l].Total(), sum_dyx[l].Total());
      fa[l] = f.a;
      fk[l] = f.k_x;
      fb[l] = f.b;
    }
    for (int64_t i = 0; all_blocked && i < d.n; ++i) {
      const T* xb = x + xl.Start(d, i, c0);
      const T* gb = dy + dyl.Start(d, i, c0);
      T* db = dx + dxl.Start(d, i, c0);
      for (int64_t k = 0; k < d.s * kGroup; k += kGroup)
        for (int64_t l = 0; l < kGroup; ++l) db[k + l] = fa[l] * gb[k + l] + fk[l] * xb[k + l] + fb[l];
    }
    for (int64_t i = 0; !all_blocked && i < d.n; ++i)
      for (int64_t k0 = 0; k0 < d.s; k0 += kGroup) {
        const int64_t n = std::min(kGroup, d.s - k0);
        load(i, k0, n);
        for (int64_t k = 0; k < n; ++k)
          for (int64_t l = 0; l < kGroup; ++l) tx[k][l] = fa[l] * tg[k][l] + fk[l] * tx[k][l] + fb[l];
        StoreTile(d, dxl, dx, i, c0, k0, n, tx);
      }
  }

  const ChannelDims d;
  const bool training;
  const double eps;
  const X* x;
  const T *gamma, *mean_in, *stat, *dy;
  T *dx, *dgamma, *dbeta;
  const double m;
  const ChannelLayout xl, dyl, dxl;
  const bool all_blocked;
};

// x: (N, C, S), gamma: (C), mean: (C), invstd or running var: (C), dy: (N, C, S)
//   -> dx: (N, C, S), dgamma: (C), dbeta: (C)
// x may be bfloat16, with float32 for the rest (Note [Convolution outputs kept in bfloat16]).
void BatchNormGradCpu(const OpRecord& op, const KernelContext&) {
  if (op.inputs[0].dtype() == DType::kBFloat16) return BatchNormGrad<float, Bf16Value>(op).Run();
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_grad", [&](auto tag) { BatchNormGrad<decltype(tag)>(op).Run(); });
}

// x: (R, D), gamma, beta: (D) -> y: (R, D), mean, invstd: (R)
// y: x's dtype, or bfloat16 or float16 from float32 with out_dtype (Note [Casts fused into their
// producers] in graph/fuse_casts.cc): each tile of the row computed in float32, then rounded.
void LayerNormCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const RowDims d = MakeRowDims(op.inputs[0].shape(), op.inputs[1].shape());
    const double eps = op.attrs.Float("eps");
    const T* x = op.inputs[0].data<T>();
    const T* gamma = op.inputs[1].data<T>();
    const T* beta = op.inputs[2].data<T>();
    const DType out = op.outputs[0].dtype();
    const bool rounded = out != op.inputs[0].dtype();  // T is float then
    T* mean_out = op.outputs[1].data<T>();
    T* invstd_out = op.outputs[2].data<T>();
    ForRows(d, [&](int64_t r) {
      const T* xr = x + r * d.d;
      double mean, sq;
      MeanAndSquares(xr, 1, d.d, d.d, mean, sq);
      const double invstd = 1.0 / std::sqrt(sq / double(d.d) + eps);
      const T tm = T(mean), ti = T(invstd);
      if (rounded) {
        float tile[kStoreTile];
        uint16_t* yr = op.outputs[0].data<uint16_t>() + r * d.d;
        for (int64_t j0 = 0; j0 < d.d; j0 += kStoreTile) {
          const int64_t m = std::min(kStoreTile, d.d - j0);
          for (int64_t j = 0; j < m; ++j) tile[j] = float((xr[j0 + j] - tm) * ti * gamma[j0 + j] + beta[j0 + j]);
          CastFloat32To16(tile, yr + j0, m, out);
        }
      } else {
        T* yr = op.outputs[0].data<T>() + r * d.d;
        for (int64_t j = 0; j < d.d; ++j) yr[j] = (xr[j] - tm) * ti * gamma[j] + beta[j];
      }
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

// Note [What a kernel supports]: every NCHW record; a blocked one for float32 (N, C, H, W), C a
// multiple of 16; a bfloat16 x with float32 for the rest, NCHW. batch_norm_train's relu = 1
// and residual (fuse_bn_relu) with any of these.
bool BatchNormSupports(const OpRecord& op) {
  const bool blocked = AnyBlockedOperand(op);  // device/kernel_dispatch.h
  const Shape& x = op.inputs[0].shape();
  if (op.inputs[0].dtype() == DType::kBFloat16)  // Note [Convolution outputs kept in bfloat16]
    return !blocked && op.inputs[1].dtype() == DType::kFloat32;
  return !blocked || (op.inputs[0].dtype() == DType::kFloat32 && x.size() == 4 && x[1] % kGroup == 0);
}

}  // namespace

LOOM_KERNEL(batch_norm_train, kCPU, BatchNormTrainCpu);
LOOM_KERNEL_SUPPORTS(batch_norm_train, kCPU, BatchNormSupports);
LOOM_KERNEL(batch_norm_apply, kCPU, BatchNormApplyCpu);
LOOM_KERNEL_SUPPORTS(batch_norm_apply, kCPU, BatchNormSupports);
LOOM_KERNEL_SUPPORTS(batch_norm_grad, kCPU, BatchNormSupports);
LOOM_KERNEL(batch_norm_infer, kCPU, BatchNormInferCpu);
LOOM_KERNEL(batch_norm_grad, kCPU, BatchNormGradCpu);
LOOM_KERNEL(layer_norm, kCPU, LayerNormCpu);
LOOM_KERNEL_SUPPORTS(layer_norm, kCPU, FusedCastSupportedCpu);
LOOM_KERNEL(layer_norm_grad, kCPU, LayerNormGradCpu);

}  // namespace cpu
}  // namespace loom
