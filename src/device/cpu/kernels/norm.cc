// CPU normalisation kernels. Batch norm sees x as (N, C, S) (S: the spatial axes, flattened)
// and works channel by channel; layer norm sees x as (R, D) and works row by row. Sums are
// taken in double, two passes (mean, then squared deviations), in a fixed order (Note [Sums in
// lanes]): results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "device/cpu/kernels/common.h"

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

// Batch norm's y = x * scale + shift over channel c, with scale = gamma invstd and
// shift = beta - mean gamma invstd.
template <typename T>
void ScaleChannel(const ChannelDims& d, int64_t c, const T* x, T* y, double gamma, double beta, double mean,
                  double invstd) {
  const T scale = T(gamma * invstd);
  const T shift = T(beta - mean * gamma * invstd);
  for (int64_t i = 0; i < d.n; ++i) {
    const T* xr = x + (i * d.c + c) * d.s;
    T* yr = y + (i * d.c + c) * d.s;
    for (int64_t k = 0; k < d.s; ++k) yr[k] = xr[k] * scale + shift;
  }
}

// x: (N, C, S), gamma, beta, running_mean, running_var: (C)
//   -> y: (N, C, S), mean, invstd: (C); running_mean, running_var updated in place
void BatchNormTrainCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_train", [&](auto tag) {
    using T = decltype(tag);
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
    ForChannels(d, [&](int64_t c) {
      double mean, sq;
      MeanAndSquares(x + c * d.s, d.n, d.s, d.c * d.s, mean, sq);
      const double var = sq / m;
      const double invstd = 1.0 / std::sqrt(var + eps);
      ScaleChannel(d, c, x, y, double(gamma[c]), double(beta[c]), mean, invstd);
      mean_out[c] = T(mean);
      invstd_out[c] = T(invstd);
      rmean[c] = T((1 - momentum) * double(rmean[c]) + momentum * mean);
      rvar[c] = T((1 - momentum) * double(rvar[c]) + momentum * sq / (m - 1));
    });
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

// x: (N, C, S), gamma: (C), mean: (C), invstd or running var: (C), dy: (N, C, S)
//   -> dx: (N, C, S), dgamma: (C), dbeta: (C)
void BatchNormGradCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_grad", [&](auto tag) {
    using T = decltype(tag);
    const ChannelDims d = MakeChannelDims(op.inputs[0].shape());
    const bool training = op.attrs.Int("training") != 0;
    const double eps = op.attrs.Float("eps");
    const T* x = op.inputs[0].data<T>();
    const T* gamma = op.inputs[1].data<T>();
    const T* mean_in = op.inputs[2].data<T>();
    const T* stat = op.inputs[3].data<T>();
    const T* dy = op.inputs[4].data<T>();
    T* dx = op.outputs[0].data<T>();
    T* dgamma = op.outputs[1].data<T>();
    T* dbeta = op.outputs[2].data<T>();
    const double m = double(d.n * d.s);
    ForChannels(d, [&](int64_t c) {
      const double mean = double(mean_in[c]);
      const double invstd = training ? double(stat[c]) : 1.0 / std::sqrt(double(stat[c]) + eps);
      LaneSums sum_dy, sum_dyx;  // sum(dy), sum(dy * (x - mean)) (Note [Sums in lanes])
      for (int64_t i = 0; i < d.n; ++i) {
        const T* xr = x + (i * d.c + c) * d.s;
        const T* gr = dy + (i * d.c + c) * d.s;
        AddRun(sum_dy, d.s, [&](int64_t k) { return double(gr[k]); });
        AddRun(sum_dyx, d.s, [&](int64_t k) { return double(gr[k]) * (double(xr[k]) - mean); });
      }
      const double sdy = sum_dy.Total(), sdyx = sum_dyx.Total() * invstd;  // sdyx: sum(dy * xhat)
      dgamma[c] = T(sdyx);
      dbeta[c] = T(sdy);
      const double gi = double(gamma[c]) * invstd;
      // training: dx = gamma invstd (dy - sum(dy)/M - xhat sum(dy xhat)/M)
      const T a = T(gi);
      const T b = training ? T(-gi * sdy / m + gi * sdyx * invstd * mean / m) : T(0);
      const T k_x = training ? T(-gi * sdyx * invstd / m) : T(0);
      for (int64_t i = 0; i < d.n; ++i) {
        const T* xr = x + (i * d.c + c) * d.s;
        const T* gr = dy + (i * d.c + c) * d.s;
        T* dr = dx + (i * d.c + c) * d.s;
        for (int64_t k = 0; k < d.s; ++k) dr[k] = a * gr[k] + k_x * xr[k] + b;
      }
    });
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

}  // namespace

LOOM_KERNEL(batch_norm_train, kCPU, BatchNormTrainCpu);
LOOM_KERNEL(batch_norm_infer, kCPU, BatchNormInferCpu);
LOOM_KERNEL(batch_norm_grad, kCPU, BatchNormGradCpu);
LOOM_KERNEL(layer_norm, kCPU, LayerNormCpu);
LOOM_KERNEL(layer_norm_grad, kCPU, LayerNormGradCpu);

}  // namespace cpu
}  // namespace loom
