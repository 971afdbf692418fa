// CPU scaled-dot-product attention (Note [Attention keeps no score matrix] in
// core/ops_transformer.h): a block of query rows against blocks of keys, each block's scores one
// GEMM, an online softmax across blocks, the probabilities times v a second GEMM. Backward
// recomputes each block's probabilities from the saved log-sum-exp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "device/cpu/blas.h"
#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {
namespace {

// Query rows and keys per block: a 64 x 64 block of scores (16 KiB in float32) stays in L1
// beside the rows of q, k and v it is made from.
constexpr int64_t kBq = 64, kBk = 64;

// exp(x) for x <= 0 (scores minus their row's maximum) in a form the compiler vectorises:
// x = n ln2 + r with |r| <= ln2 / 2, e^r by Cephes' expf polynomial (within 2 ulp of
// std::exp), times 2^n built in the exponent bits. Below -87.3 (where e^x leaves float's normal
// range) it returns 0.
inline float ExpNonPositive(float x) {
  const bool tiny = x < -87.3f;
  x = tiny ? 0.f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  int32_t bits = (int32_t(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof(two_n));
  return tiny ? 0.f : p * two_n;
}
inline double ExpNonPositive(double x) { return std::exp(x); }

// In a block of scores s (nq rows of stride kBk, keys j0 .. j0 + nk), how many leading keys
// query row i0 + i sees.
inline int64_t Visible(const AttentionDims& g, int64_t i0, int64_t i, int64_t j0, int64_t nk) {
  return std::max<int64_t>(0, std::min(nk, g.KeyEnd(i0 + i) - j0));
}

// Rows [i0, i0 + nq) of one problem: y = softmax(scale q k^T) v, lse = log of each row's sum.
template <typename T>
void ForwardRows(const AttentionDims& g, const T* q, const T* k, const T* v, T* y, T* lse, int64_t i0, T* s) {
  const int64_t nq = std::min(kBq, g.tq - i0);
  const int64_t kend = g.KeyEnd(i0 + nq - 1);
  T m[kBq], l[kBq];
  std::fill(m, m + nq, -std::numeric_limits<T>::infinity());
  std::fill(l, l + nq, T(0));
  T* yb = y + i0 * g.dv;
  std::fill(yb, yb + nq * g.dv, T(0));
  for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
    const int64_t nk = std::min(kBk, kend - j0);
    Gemm(false, true, nq, nk, g.d, T(g.scale), q + i0 * g.d, g.d, k + j0 * g.d, g.d, T(0), s, kBk);
    for (int64_t i = 0; i < nq; ++i) {
      T* sr = s + i * kBk;
      const int64_t lim = Visible(g, i0, i, j0, nk);
      if (lim == 0) {
        std::fill(sr, sr + nk, T(0));
        continue;
      }
      T mx = sr[0];
      for (int64_t j = 1; j < lim; ++j) mx = std::max(mx, sr[j]);
      const T mnew = std::max(m[i], mx);
      T sum = 0;
      for (int64_t j = 0; j < lim; ++j) {
        sr[j] = ExpNonPositive(sr[j] - mnew);
        sum += sr[j];
      }
      std::fill(sr + lim, sr + nk, T(0));
      const T alpha = m[i] == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(m[i] - mnew);
      if (alpha != T(1)) {
        T* yr = yb + i * g.dv;
        for (int64_t c = 0; c < g.dv; ++c) yr[c] *= alpha;
      }
      l[i] = l[i] * alpha + sum;
      m[i] = mnew;
    }
    Gemm(false, false, nq, g.dv, nk, T(1), s, kBk, v + j0 * g.dv, g.dv, T(1), yb, g.dv);
  }
  for (int64_t i = 0; i < nq; ++i) {
    T* yr = yb + i * g.dv;
    const T inv = T(1) / l[i];
    for (int64_t c = 0; c < g.dv; ++c) yr[c] *= inv;
    lse[i0 + i] = m[i] + std::log(l[i]);
  }
}

// q: (..., Tq, D), k: (..., Tk, D), v: (..., Tk, Dv) -> y: (..., Tq, Dv), lse: (..., Tq)
void AttentionCpu(const OpRecord& op, const KernelContext&) {
  const AttentionDims g = MakeAttentionDims(op.attrs, op.inputs[0].shape(), op.inputs[2].shape());
  FloatDispatch(op.inputs[0].dtype(), "attention", [&](auto tag) {
    using T = decltype(tag);
    const T* q = op.inputs[0].data<T>();
    const T* k = op.inputs[1].data<T>();
    const T* v = op.inputs[2].data<T>();
    T* y = op.outputs[0].data<T>();
    T* lse = op.outputs[1].data<T>();
    const int64_t blocks = (g.tq + kBq - 1) / kBq;
    ParallelFor(g.bh * blocks, 1, [&](int64_t t0, int64_t t1) {
      std::vector<T> s(size_t(kBq * kBk));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / blocks, i0 = (t % blocks) * kBq;
        ForwardRows(g, q + b * g.tq * g.d, k + b * g.tk * g.d, v + b * g.tk * g.dv, y + b * g.tq * g.dv,
                    lse + b * g.tq, i0, s.data());
      }
    });
  });
}

// One problem's gradients, blocks in a fixed order (deterministic: dk and dv sum over query
// blocks in ascending order whatever the thread count).
template <typename T>
void BackwardProblem(const AttentionDims& g, const T* q, const T* k, const T* v, const T* y, const T* lse, const T* dy,
                     const T* dlse, T* dq, T* dk, T* dv, T* p, T* ds, T* drow) {
  std::fill(dq, dq + g.tq * g.d, T(0));
  std::fill(dk, dk + g.tk * g.d, T(0));
  std::fill(dv, dv + g.tk * g.dv, T(0));
  for (int64_t i = 0; i < g.tq; ++i) {  // D_i = rowsum(dy y) - dlse_i
    T acc = 0;
    for (int64_t c = 0; c < g.dv; ++c) acc += dy[i * g.dv + c] * y[i * g.dv + c];
    drow[i] = acc - dlse[i];
  }
  const T scale = T(g.scale);
  for (int64_t i0 = 0; i0 < g.tq; i0 += kBq) {
    const int64_t nq = std::min(kBq, g.tq - i0);
    const int64_t kend = g.KeyEnd(i0 + nq - 1);
    const T *qi = q + i0 * g.d, *dyi = dy + i0 * g.dv;
    for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
      const int64_t nk = std::min(kBk, kend - j0);
      Gemm(false, true, nq, nk, g.d, scale, qi, g.d, k + j0 * g.d, g.d, T(0), p, kBk);
      for (int64_t i = 0; i < nq; ++i) {
        T* pr = p + i * kBk;
        const int64_t lim = Visible(g, i0, i, j0, nk);
        const T l = lse[i0 + i];
        for (int64_t j = 0; j < lim; ++j) pr[j] = ExpNonPositive(std::min(pr[j] - l, T(0)));
        std::fill(pr + lim, pr + nk, T(0));
      }
      Gemm(true, false, nk, g.dv, nq, T(1), p, kBk, dyi, g.dv, T(1), dv + j0 * g.dv, g.dv);
      Gemm(false, true, nq, nk, g.dv, T(1), dyi, g.dv, v + j0 * g.dv, g.dv, T(0), ds, kBk);
      for (int64_t i = 0; i < nq; ++i) {
        const T di = drow[i0 + i];
        T* dr = ds + i * kBk;
        const T* pr = p + i * kBk;
        for (int64_t j = 0; j < nk; ++j) dr[j] = pr[j] * (dr[j] - di);
      }
      Gemm(false, false, nq, g.d, nk, scale, ds, kBk, k + j0 * g.d, g.d, T(1), dq + i0 * g.d, g.d);
      Gemm(true, false, nk, g.d, nq, scale, ds, kBk, qi, g.d, T(1), dk + j0 * g.d, g.d);
    }
  }
}

// (q, k, v, y, lse, dy, dlse) -> dq, dk, dv
void AttentionGradCpu(const OpRecord& op, const KernelContext&) {
  const AttentionDims g = MakeAttentionDims(op.attrs, op.inputs[0].shape(), op.inputs[2].shape());
  FloatDispatch(op.inputs[0].dtype(), "attention_grad", [&](auto tag) {
    using T = decltype(tag);
    const T* in[7];
    for (size_t i = 0; i < 7; ++i) in[i] = op.inputs[i].data<T>();
    T* dq = op.outputs[0].data<T>();
    T* dk = op.outputs[1].data<T>();
    T* dv = op.outputs[2].data<T>();
    ParallelFor(g.bh, 1, [&](int64_t b0, int64_t b1) {
      std::vector<T> p(size_t(kBq * kBk)), ds(size_t(kBq * kBk)), drow(size_t(g.tq));
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t oq = b * g.tq * g.d, ok = b * g.tk * g.d, ov = b * g.tk * g.dv, oy = b * g.tq * g.dv;
        BackwardProblem(g, in[0] + oq, in[1] + ok, in[2] + ov, in[3] + oy, in[4] + b * g.tq, in[5] + oy,
                        in[6] + b * g.tq, dq + oq, dk + ok, dv + ov, p.data(), ds.data(), drow.data());
      }
    });
  });
}

}  // namespace

LOOM_KERNEL(attention, kCPU, AttentionCpu);
LOOM_KERNEL(attention_grad, kCPU, AttentionGradCpu);

}  // namespace cpu
}  // namespace loom
