// CPU scaled-dot-product attention (Note [Attention keeps no score matrix] in
// core/ops_transformer.h): a block of query rows against blocks of keys, each block's scores one
// GEMM, an online softmax across blocks, the probabilities times v a second GEMM. Backward
// recomputes each block's probabilities from the saved log-sum-exp. attention and attention_qkv
// differ only in where the rows are (AttentionDims in device/kernel_shapes.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/elementwise_formulas.h"
#include "device/cpu/blas.h"
#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {
namespace {

// Query rows and keys per block: a 64 x 64 block of scores (16 KiB in float32) stays in L1
// beside the rows of q, k and v it is made from.
constexpr int64_t kBq = 64, kBk = 64;

// Problem p's rows: pointers to its first rows and their strides.
template <typename T>
struct Rows {
  const T *q, *k, *v;
  int64_t ldq, ldk, ldv;
};

template <typename T>
Rows<T> RowsOf(const AttentionDims& g, int64_t p, const T* q, const T* k, const T* v) {
  return Rows<T>{q + g.q.Offset(p, g.heads), k + g.k.Offset(p, g.heads), v + g.v.Offset(p, g.heads), g.q.ld, g.k.ld,
                 g.v.ld};
}

// In a block of scores (keys j0 .. j0 + nk), how many leading keys query row i0 + i sees.
inline int64_t Visible(const AttentionDims& g, int64_t i0, int64_t i, int64_t j0, int64_t nk) {
  return std::max<int64_t>(0, std::min(nk, g.KeyEnd(i0 + i) - j0));
}

// Rows [i0, i0 + nq) of one problem: y = softmax(scale q k^T) v (rows ldy apart), lse = log of
// each row's sum of exponentials (plus the row's maximum).
template <typename T>
void ForwardRows(const AttentionDims& g, const Rows<T>& r, T* y, int64_t ldy, T* lse, int64_t i0, T* s) {
  const int64_t nq = std::min(kBq, g.tq - i0);
  const int64_t kend = g.KeyEnd(i0 + nq - 1);
  T m[kBq], l[kBq];
  std::fill(m, m + nq, -std::numeric_limits<T>::infinity());
  std::fill(l, l + nq, T(0));
  T* yb = y + i0 * ldy;
  for (int64_t i = 0; i < nq; ++i) std::fill(yb + i * ldy, yb + i * ldy + g.dv, T(0));
  for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
    const int64_t nk = std::min(kBk, kend - j0);
    Gemm(false, true, nq, nk, g.d, T(g.scale), r.q + i0 * r.ldq, r.ldq, r.k + j0 * r.ldk, r.ldk, T(0), s, kBk);
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
      for (int64_t j = 0; j < lim; ++j) sr[j] = ew::ExpOf(sr[j] - mnew);  // vectorised
      T sum = 0;
      for (int64_t j = 0; j < lim; ++j) sum += sr[j];
      std::fill(sr + lim, sr + nk, T(0));
      const T alpha = m[i] == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(m[i] - mnew);
      if (alpha != T(1)) {
        T* yr = yb + i * ldy;
        for (int64_t c = 0; c < g.dv; ++c) yr[c] *= alpha;
      }
      l[i] = l[i] * alpha + sum;
      m[i] = mnew;
    }
    Gemm(false, false, nq, g.dv, nk, T(1), s, kBk, r.v + j0 * r.ldv, r.ldv, T(1), yb, ldy);
  }
  for (int64_t i = 0; i < nq; ++i) {
    T* yr = yb + i * ldy;
    const T inv = T(1) / l[i];
    for (int64_t c = 0; c < g.dv; ++c) yr[c] *= inv;
    lse[i0 + i] = m[i] + std::log(l[i]);
  }
}

template <typename T>
void Forward(const AttentionDims& g, const T* q, const T* k, const T* v, T* y, T* lse) {
  const int64_t blocks = (g.tq + kBq - 1) / kBq;
  ParallelFor(g.bh * blocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> s(size_t(kBq * kBk));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p = t / blocks;
      ForwardRows(g, RowsOf(g, p, q, k, v), y + g.y.Offset(p, g.heads), g.y.ld, lse + p * g.tq, (t % blocks) * kBq,
                  s.data());
    }
  });
}

// Zeroes n rows of w elements, ld apart.
template <typename T>
void ZeroRows(T* p, int64_t n, int64_t w, int64_t ld) {
  for (int64_t i = 0; i < n; ++i) std::fill(p + i * ld, p + i * ld + w, T(0));
}

// One problem's gradients into dq, dk, dv (rows as q, k and v), blocks in a fixed order
// (deterministic: dk and dv sum over query blocks in ascending order whatever the thread count).
// y and dy rows are ldy apart; p, ds: kBq x kBk scratch; drow: tq.
template <typename T>
void BackwardProblem(const AttentionDims& g, const Rows<T>& r, const T* y, const T* dy, int64_t ldy, const T* lse,
                     const T* dlse, T* dq, T* dk, T* dv, T* p, T* ds, T* drow) {
  ZeroRows(dq, g.tq, g.d, r.ldq);
  ZeroRows(dk, g.tk, g.d, r.ldk);
  ZeroRows(dv, g.tk, g.dv, r.ldv);
  for (int64_t i = 0; i < g.tq; ++i) {  // D_i = rowsum(dy y) - dlse_i
    T acc = 0;
    for (int64_t c = 0; c < g.dv; ++c) acc += dy[i * ldy + c] * y[i * ldy + c];
    drow[i] = acc - dlse[i];
  }
  const T scale = T(g.scale);
  for (int64_t i0 = 0; i0 < g.tq; i0 += kBq) {
    const int64_t nq = std::min(kBq, g.tq - i0);
    const int64_t kend = g.KeyEnd(i0 + nq - 1);
    const T *qi = r.q + i0 * r.ldq, *dyi = dy + i0 * ldy;
    for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
      const int64_t nk = std::min(kBk, kend - j0);
      Gemm(false, true, nq, nk, g.d, scale, qi, r.ldq, r.k + j0 * r.ldk, r.ldk, T(0), p, kBk);
      for (int64_t i = 0; i < nq; ++i) {
        T* pr = p + i * kBk;
        const int64_t lim = Visible(g, i0, i, j0, nk);
        const T l = lse[i0 + i];
        for (int64_t j = 0; j < lim; ++j) pr[j] = ew::ExpOf(std::min(pr[j] - l, T(0)));
        std::fill(pr + lim, pr + nk, T(0));
      }
      Gemm(true, false, nk, g.dv, nq, T(1), p, kBk, dyi, ldy, T(1), dv + j0 * r.ldv, r.ldv);
      Gemm(false, true, nq, nk, g.dv, T(1), dyi, ldy, r.v + j0 * r.ldv, r.ldv, T(0), ds, kBk);
      for (int64_t i = 0; i < nq; ++i) {
        const T di = drow[i0 + i];
        T* dr = ds + i * kBk;
        const T* pr = p + i * kBk;
        for (int64_t j = 0; j < nk; ++j) dr[j] = pr[j] * (dr[j] - di);
      }
      Gemm(false, false, nq, g.d, nk, scale, ds, kBk, r.k + j0 * r.ldk, r.ldk, T(1), dq + i0 * r.ldq, r.ldq);
      Gemm(true, false, nk, g.d, nq, scale, ds, kBk, qi, r.ldq, T(1), dk + j0 * r.ldk, r.ldk);
    }
  }
}

// dq, dk, dv: where the gradients go, laid out as q, k and v.
template <typename T>
void Backward(const AttentionDims& g, const T* q, const T* k, const T* v, const T* y, const T* lse, const T* dy,
              const T* dlse, T* dq, T* dk, T* dv) {
  ParallelFor(g.bh, 1, [&](int64_t p0, int64_t p1) {
    std::vector<T> p(size_t(kBq * kBk)), ds(size_t(kBq * kBk)), drow(size_t(g.tq));
    for (int64_t b = p0; b < p1; ++b) {
      const int64_t oq = g.q.Offset(b, g.heads), ok = g.k.Offset(b, g.heads), ov = g.v.Offset(b, g.heads);
      const int64_t oy = g.y.Offset(b, g.heads);
      BackwardProblem(g, RowsOf(g, b, q, k, v), y + oy, dy + oy, g.y.ld, lse + b * g.tq, dlse + b * g.tq, dq + oq,
                      dk + ok, dv + ov, p.data(), ds.data(), drow.data());
    }
  });
}

// q: (..., Tq, D), k: (..., Tk, D), v: (..., Tk, Dv) -> y: (..., Tq, Dv), lse: (..., Tq)
void AttentionCpu(const OpRecord& op, const KernelContext&) {
  const AttentionDims g = MakeAttentionDims(op.attrs, op.inputs[0].shape(), op.inputs[2].shape());
  FloatDispatch(op.inputs[0].dtype(), "attention", [&](auto tag) {
    using T = decltype(tag);
    Forward(g, op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.inputs[2].data<T>(), op.outputs[0].data<T>(),
            op.outputs[1].data<T>());
  });
}

// (q, k, v, y, lse, dy, dlse) -> dq, dk, dv
void AttentionGradCpu(const OpRecord& op, const KernelContext&) {
  const AttentionDims g = MakeAttentionDims(op.attrs, op.inputs[0].shape(), op.inputs[2].shape());
  FloatDispatch(op.inputs[0].dtype(), "attention_grad", [&](auto tag) {
    using T = decltype(tag);
    const T* in[7];
    for (size_t i = 0; i < 7; ++i) in[i] = op.inputs[i].data<T>();
    Backward(g, in[0], in[1], in[2], in[3], in[4], in[5], in[6], op.outputs[0].data<T>(), op.outputs[1].data<T>(),
             op.outputs[2].data<T>());
  });
}

// qkv: (B, T, 3 D) -> y: (B, T, D), lse: (B, heads, T)
void AttentionQkvCpu(const OpRecord& op, const KernelContext&) {
  const AttentionDims g = MakeAttentionQkvDims(op.attrs, op.inputs[0].shape());
  FloatDispatch(op.inputs[0].dtype(), "attention_qkv", [&](auto tag) {
    using T = decltype(tag);
    const T* qkv = op.inputs[0].data<T>();
    const int64_t dim = g.d * g.heads;
    Forward(g, qkv, qkv + dim, qkv + 2 * dim, op.outputs[0].data<T>(), op.outputs[1].data<T>());
  });
}

// (qkv, y, lse, dy, dlse) -> dqkv: (B, T, 3 D)
void AttentionQkvGradCpu(const OpRecord& op, const KernelContext&) {
  const AttentionDims g = MakeAttentionQkvDims(op.attrs, op.inputs[0].shape());
  FloatDispatch(op.inputs[0].dtype(), "attention_qkv_grad", [&](auto tag) {
    using T = decltype(tag);
    const T* qkv = op.inputs[0].data<T>();
    T* d = op.outputs[0].data<T>();
    const int64_t dim = g.d * g.heads;
    Backward(g, qkv, qkv + dim, qkv + 2 * dim, op.inputs[1].data<T>(), op.inputs[2].data<T>(), op.inputs[3].data<T>(),
             op.inputs[4].data<T>(), d, d + dim, d + 2 * dim);
  });
}

}  // namespace

LOOM_KERNEL(attention, kCPU, AttentionCpu);
LOOM_KERNEL(attention_grad, kCPU, AttentionGradCpu);
LOOM_KERNEL(attention_qkv, kCPU, AttentionQkvCpu);
LOOM_KERNEL(attention_qkv_grad, kCPU, AttentionQkvGradCpu);

}  // namespace cpu
}  // namespace loom
