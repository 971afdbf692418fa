// CPU scaled-dot-product attention (Note [Attention keeps no score matrix] in
// core/ops_transformer.h): a block of query rows against blocks of keys, each block's scores one
// GEMM, an online softmax across blocks, the probabilities times v a second GEMM. Backward
// recomputes each block's probabilities from the saved log-sum-exp. attention and attention_qkv
// differ only in where the rows are (AttentionDims in device/kernel_shapes.h).
//
// Note [Attention from a bfloat16 qkv]
// The bf16 policy (Note [Precision policy] in core/autocast.h) lowers attention_qkv and its
// gradient to a bfloat16 qkv with float32 results. The kernels below run every block product
// on oneDNN's bf16 matmul (two bfloat16 operands, float32 sums; blocks of 64 query rows, so the
// pool splits the work by blocks as in float32) and everything else in float32: the scores,
// the online softmax and its row sums, lse, D = rowsum(dy y). What enters a product is rounded to
// bfloat16 as FlashAttention's bf16 kernels round it: the probabilities before P v and P^T dy, dy
// before dy v^T and P^T dy, and scale dS before dS k and dS^T q. A block product oneDNN does not
// take runs on its operands widened to float32 (exact), so only the sums' order differs. The
// results y and dqkv are rounded to bfloat16 once they are summed, as cuDNN's fused attention
// writes them (Note [Attention on cuDNN] in device/cuda/cudnn_attention.h), and stored as
// bfloat16 or as those values in float32 (Note [Attention results kept in bfloat16] in
// graph/bf16_attention.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/elementwise_formulas.h"
#include "core/half.h"
#include "device/cpu/blas.h"
#include "device/cpu/dnnl_gemm.h"
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

// One row of a block of scores sr (nk of them, the first lim visible) into the online softmax:
// the row's running maximum m and sum l, its output row yr (dv wide) rescaled to the new
// maximum, sr replaced by the exponentials (0 beyond lim) for the block's product with v.
template <typename T>
void OnlineSoftmaxRow(T* sr, int64_t lim, int64_t nk, T& m, T& l, T* yr, int64_t dv) {
  if (lim == 0) {
    std::fill(sr, sr + nk, T(0));
    return;
  }
  T mx = sr[0];
  for (int64_t j = 1; j < lim; ++j) mx = std::max(mx, sr[j]);
  const T mnew = std::max(m, mx);
  for (int64_t j = 0; j < lim; ++j) sr[j] = ew::ExpOf(sr[j] - mnew);  // vectorised
  T sum = 0;
  for (int64_t j = 0; j < lim; ++j) sum += sr[j];
  std::fill(sr + lim, sr + nk, T(0));
  const T alpha = m == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(m - mnew);
  if (alpha != T(1))
    for (int64_t c = 0; c < dv; ++c) yr[c] *= alpha;
  l = l * alpha + sum;
  m = mnew;
}

// The block's rows divided by their sums; lse = m + log l.
template <typename T>
void FinishRows(T* yb, int64_t ldy, int64_t dv, int64_t nq, const T* m, const T* l, T* lse) {
  for (int64_t i = 0; i < nq; ++i) {
    T* yr = yb + i * ldy;
    const T inv = T(1) / l[i];
    for (int64_t c = 0; c < dv; ++c) yr[c] *= inv;
    lse[i] = m[i] + std::log(l[i]);
  }
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
    for (int64_t i = 0; i < nq; ++i)
      OnlineSoftmaxRow(s + i * kBk, Visible(g, i0, i, j0, nk), nk, m[i], l[i], yb + i * ldy, g.dv);
    Gemm(false, false, nq, g.dv, nk, T(1), s, kBk, r.v + j0 * r.ldv, r.ldv, T(1), yb, ldy);
  }
  FinishRows(yb, ldy, g.dv, nq, m, l, lse + i0);
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

// A row of recomputed scores (times `scale` here when the product did not apply it) into
// probabilities exp(s - lse), 0 beyond the lim visible keys. A recomputed score minus its row's
// log-sum-exp is at most 0 but for rounding.
template <typename T>
void ProbabilityRow(T* pr, int64_t lim, int64_t nk, T scale, T lse) {
  for (int64_t j = 0; j < lim; ++j) pr[j] = ew::ExpOf(std::min(pr[j] * scale - lse, T(0)));
  std::fill(pr + lim, pr + nk, T(0));
}

// Zeroes n rows of w elements, ld apart.
template <typename T>
void ZeroRows(T* p, int64_t n, int64_t w, int64_t ld) {
  for (int64_t i = 0; i < n; ++i) std::fill(p + i * ld, p + i * ld + w, T(0));
}

// The start of one problem's backward: dq, dk, dv zeroed (rows ldq, ldk, ldv apart) and
// drow_i = D_i = rowsum(dy y) - dlse_i.
// y rows ldyy apart, dy rows ldy apart.
template <typename T>
void StartBackward(const AttentionDims& g, int64_t ldq, int64_t ldk, int64_t ldv, const T* y, int64_t ldyy,
                   const T* dy, int64_t ldy, const T* dlse, T* dq, T* dk, T* dv, T* drow) {
  ZeroRows(dq, g.tq, g.d, ldq);
  ZeroRows(dk, g.tk, g.d, ldk);
  ZeroRows(dv, g.tk, g.dv, ldv);
  for (int64_t i = 0; i < g.tq; ++i) {
    T acc = 0;
    for (int64_t c = 0; c < g.dv; ++c) acc += dy[i * ldy + c] * y[i * ldyy + c];
    drow[i] = acc - dlse[i];
  }
}

// One problem's gradients into dq, dk, dv (rows as q, k and v), blocks in a fixed order
// (deterministic: dk and dv sum over query blocks in ascending order whatever the thread count).
// y and dy rows are ldy apart; p, ds: kBq x kBk scratch; drow: tq.
template <typename T>
void BackwardProblem(const AttentionDims& g, const Rows<T>& r, const T* y, const T* dy, int64_t ldy, const T* lse,
                     const T* dlse, T* dq, T* dk, T* dv, T* p, T* ds, T* drow) {
  StartBackward(g, r.ldq, r.ldk, r.ldv, y, ldy, dy, ldy, dlse, dq, dk, dv, drow);
  const T scale = T(g.scale);
  for (int64_t i0 = 0; i0 < g.tq; i0 += kBq) {
    const int64_t nq = std::min(kBq, g.tq - i0);
    const int64_t kend = g.KeyEnd(i0 + nq - 1);
    const T *qi = r.q + i0 * r.ldq, *dyi = dy + i0 * ldy;
    for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
      const int64_t nk = std::min(kBk, kend - j0);
      Gemm(false, true, nq, nk, g.d, scale, qi, r.ldq, r.k + j0 * r.ldk, r.ldk, T(0), p, kBk);
      for (int64_t i = 0; i < nq; ++i) ProbabilityRow(p + i * kBk, Visible(g, i0, i, j0, nk), nk, T(1), lse[i0 + i]);
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

// ---------------------------------------------------------------- Note [Attention from a bfloat16 qkv]

using Bf16 = uint16_t;  // a bfloat16's bits

// C (m x n, float32, beta 0 or 1) = op(A) op(B) of bfloat16 blocks on the calling thread.
void BlockProduct(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Bf16* a, int64_t lda, const Bf16* b,
                  int64_t ldb, float beta, float* c, int64_t ldc) {
  if (DnnlMatmulBf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc)) return;
  auto widen = [](const Bf16* p, int64_t rows, int64_t cols, int64_t ld) {
    std::vector<float> w(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) w[size_t(i * cols + j)] = BFloat16ToFloat(p[i * ld + j]);
    return w;
  };
  const std::vector<float> wa = widen(a, ta ? k : m, ta ? m : k, lda), wb = widen(b, tb ? n : k, tb ? k : n, ldb);
  Gemm(ta, tb, m, n, k, 1.0f, wa.data(), ta ? m : k, wb.data(), tb ? k : n, beta, c, ldc);
}

// rows x cols of float32 (ld apart) rounded to bfloat16 (ldo apart), each times `scale`, by
// Bf16Bits (kernels/cast.h: without a branch, so that the loop vectorises; the scalar
// conversion took as long as the block's products). A float output gets the rounded value
// widened back (x and o may then be the same rows).
template <typename Out>
void RoundRows(const float* x, int64_t ld, int64_t rows, int64_t cols, float scale, Out* o, int64_t ldo) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * ld;
    Out* orow = o + i * ldo;
    for (int64_t j = 0; j < cols; ++j) {
      const uint16_t b = Bf16Bits(xr[j] * scale);
      if constexpr (std::is_same<Out, float>::value) {
        const uint32_t w = uint32_t(b) << 16;
        std::memcpy(orow + j, &w, 4);
      } else {
        orow[j] = b;
      }
    }
  }
}

// Note [Attention results kept in bfloat16] (graph/bf16_attention.cc): the bf16 kernels' y and
// dqkv are rounded to bfloat16 as cuDNN's are, stored as bfloat16 or as their float32 values.
struct Bf16Out {
  void* p;
  bool bf16;
  void Store(const float* x, int64_t ld, int64_t rows, int64_t cols, int64_t offset, int64_t ldo) const {
    if (bf16) RoundRows(x, ld, rows, cols, 1.0f, static_cast<Bf16*>(p) + offset, ldo);
    else RoundRows(x, ld, rows, cols, 1.0f, static_cast<float*>(p) + offset, ldo);
  }
};

// Per-thread blocks: scores or probabilities (float32) and their bfloat16 copy.
struct Bf16Scratch {
  std::vector<float> s = std::vector<float>(size_t(kBq * kBk)), ds = std::vector<float>(size_t(kBq * kBk));
  std::vector<Bf16> s16 = std::vector<Bf16>(size_t(kBq * kBk)), ds16 = std::vector<Bf16>(size_t(kBq * kBk));
  std::vector<Bf16> dy16;
};

// Rows [i0, i0 + nq) of one problem into yb (nq rows, ldy apart), lse + i0.
void ForwardRowsBf16(const AttentionDims& g, const Rows<Bf16>& r, float* yb, int64_t ldy, float* lse, int64_t i0,
                     Bf16Scratch& w) {
  const int64_t nq = std::min(kBq, g.tq - i0);
  const int64_t kend = g.KeyEnd(i0 + nq - 1);
  const float scale = float(g.scale);
  float m[kBq], l[kBq];
  std::fill(m, m + nq, -std::numeric_limits<float>::infinity());
  std::fill(l, l + nq, 0.0f);
  ZeroRows(yb, nq, g.dv, ldy);
  for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
    const int64_t nk = std::min(kBk, kend - j0);
    BlockProduct(false, true, nq, nk, g.d, r.q + i0 * r.ldq, r.ldq, r.k + j0 * r.ldk, r.ldk, 0.0f, w.s.data(), kBk);
    for (int64_t i = 0; i < nq; ++i) {
      float* sr = w.s.data() + i * kBk;
      for (int64_t j = 0; j < nk; ++j) sr[j] *= scale;
      OnlineSoftmaxRow(sr, Visible(g, i0, i, j0, nk), nk, m[i], l[i], yb + i * ldy, g.dv);
    }
    RoundRows(w.s.data(), kBk, nq, nk, 1.0f, w.s16.data(), kBk);
    BlockProduct(false, false, nq, g.dv, nk, w.s16.data(), kBk, r.v + j0 * r.ldv, r.ldv, 1.0f, yb, ldy);
  }
  FinishRows(yb, ldy, g.dv, nq, m, l, lse + i0);
}

// y: bfloat16, or float32 holding bfloat16 values (Bf16Out).
void ForwardBf16(const AttentionDims& g, const Bf16* q, const Bf16* k, const Bf16* v, const Bf16Out& y, float* lse) {
  const int64_t blocks = (g.tq + kBq - 1) / kBq;
  ParallelFor(g.bh * blocks, 1, [&](int64_t t0, int64_t t1) {
    Bf16Scratch w;
    std::vector<float> rows(size_t(kBq * g.dv));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p = t / blocks, i0 = (t % blocks) * kBq;
      ForwardRowsBf16(g, RowsOf(g, p, q, k, v), rows.data(), g.dv, lse + p * g.tq, i0, w);
      y.Store(rows.data(), g.dv, std::min(kBq, g.tq - i0), g.dv, g.y.Offset(p, g.heads) + i0 * g.y.ld, g.y.ld);
    }
  });
}

// BackwardProblem with a bfloat16 q, k and v (Note [Attention from a bfloat16 qkv]); dq, dk and
// dv float32, rows ldd apart; y rows ldyy apart.
void BackwardProblemBf16(const AttentionDims& g, const Rows<Bf16>& r, const float* y, int64_t ldyy, const float* dy,
                         int64_t ldy, const float* lse, const float* dlse, float* dq, float* dk, float* dv,
                         int64_t ldd, Bf16Scratch& w, float* drow) {
  StartBackward(g, ldd, ldd, ldd, y, ldyy, dy, ldy, dlse, dq, dk, dv, drow);
  const float scale = float(g.scale);
  w.dy16.resize(size_t(kBq * g.dv));
  float *p = w.s.data(), *ds = w.ds.data();
  Bf16 *p16 = w.s16.data(), *ds16 = w.ds16.data(), *dy16 = w.dy16.data();
  for (int64_t i0 = 0; i0 < g.tq; i0 += kBq) {
    const int64_t nq = std::min(kBq, g.tq - i0);
    const int64_t kend = g.KeyEnd(i0 + nq - 1);
    const Bf16* qi = r.q + i0 * r.ldq;
    RoundRows(dy + i0 * ldy, ldy, nq, g.dv, 1.0f, dy16, g.dv);
    for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
      const int64_t nk = std::min(kBk, kend - j0);
      BlockProduct(false, true, nq, nk, g.d, qi, r.ldq, r.k + j0 * r.ldk, r.ldk, 0.0f, p, kBk);
      for (int64_t i = 0; i < nq; ++i) ProbabilityRow(p + i * kBk, Visible(g, i0, i, j0, nk), nk, scale, lse[i0 + i]);
      RoundRows(p, kBk, nq, nk, 1.0f, p16, kBk);
      BlockProduct(true, false, nk, g.dv, nq, p16, kBk, dy16, g.dv, 1.0f, dv + j0 * ldd, ldd);
      BlockProduct(false, true, nq, nk, g.dv, dy16, g.dv, r.v + j0 * r.ldv, r.ldv, 0.0f, ds, kBk);
      for (int64_t i = 0; i < nq; ++i) {
        const float di = drow[i0 + i];
        float* dr = ds + i * kBk;
        const float* pr = p + i * kBk;
        for (int64_t j = 0; j < nk; ++j) dr[j] = pr[j] * (dr[j] - di);
      }
      RoundRows(ds, kBk, nq, nk, scale, ds16, kBk);
      BlockProduct(false, false, nq, g.d, nk, ds16, kBk, r.k + j0 * r.ldk, r.ldk, 1.0f, dq + i0 * ldd, ldd);
      BlockProduct(true, false, nk, g.d, nq, ds16, kBk, qi, r.ldq, 1.0f, dk + j0 * ldd, ldd);
    }
  }
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

// qkv: (B, T, 3 D) -> y: (B, T, D), lse: (B, heads, T); a bfloat16 qkv gives a float32 lse and
// y in bfloat16 or float32 (Note [Attention from a bfloat16 qkv], Note [Attention results kept in
// bfloat16]).
void AttentionQkvCpu(const OpRecord& op, const KernelContext&) {
  const AttentionDims g = MakeAttentionQkvDims(op.attrs, op.inputs[0].shape());
  if (op.inputs[0].dtype() == DType::kBFloat16) {
    const Bf16* qkv = static_cast<const Bf16*>(op.inputs[0].raw_data());
    const int64_t dim = g.d * g.heads;
    const Bf16Out y{op.outputs[0].raw_data(), op.outputs[0].dtype() == DType::kBFloat16};
    ForwardBf16(g, qkv, qkv + dim, qkv + 2 * dim, y, op.outputs[1].data<float>());
    return;
  }
  FloatDispatch(op.inputs[0].dtype(), "attention_qkv", [&](auto tag) {
    using T = decltype(tag);
    const T* qkv = op.inputs[0].data<T>();
    const int64_t dim = g.d * g.heads;
    Forward(g, qkv, qkv + dim, qkv + 2 * dim, op.outputs[0].data<T>(), op.outputs[1].data<T>());
  });
}

// The bfloat16 qkv's gradient: y bfloat16 or float32, the rest float32, dqkv bfloat16 or float32
// (Note [Attention from a bfloat16 qkv], Note [Attention results kept in bfloat16]). Each problem
// sums its gradients in float32 (in place, or for a bfloat16 dqkv in a scratch of its own rows,
// dq | dk | dv side by side) and rounds them once it is done; a bfloat16 y is widened first.
void AttentionQkvGradBf16(const OpRecord& op, const AttentionDims& g) {
  const Bf16* qkv = static_cast<const Bf16*>(op.inputs[0].raw_data());
  const Bf16Out d{op.outputs[0].raw_data(), op.outputs[0].dtype() == DType::kBFloat16};
  const bool y16 = op.inputs[1].dtype() == DType::kBFloat16;
  const int64_t dim = g.d * g.heads, ld = 3 * dim, wide = 3 * g.d;  // dqkv's rows, the scratch's
  const float *lse = op.inputs[2].data<float>(), *dy = op.inputs[3].data<float>(), *dlse = op.inputs[4].data<float>();
  ParallelFor(g.bh, 1, [&](int64_t p0, int64_t p1) {
    Bf16Scratch w;
    std::vector<float> drow(size_t(g.tq)), ywide(y16 ? size_t(g.tq * g.dv) : 0), dwide(d.bf16 ? size_t(g.tq * wide) : 0);
    for (int64_t b = p0; b < p1; ++b) {
      const int64_t oy = g.y.Offset(b, g.heads);
      const int64_t o[3] = {g.q.Offset(b, g.heads), dim + g.k.Offset(b, g.heads), 2 * dim + g.v.Offset(b, g.heads)};
      const float* y = y16 ? ywide.data() : op.inputs[1].data<float>() + oy;
      const int64_t ldyy = y16 ? g.dv : g.y.ld;
      if (y16) {
        const Bf16* ys = static_cast<const Bf16*>(op.inputs[1].raw_data()) + oy;
        for (int64_t i = 0; i < g.tq; ++i)
          for (int64_t c = 0; c < g.dv; ++c) ywide[size_t(i * g.dv + c)] = BFloat16ToFloat(ys[i * g.y.ld + c]);
      }
      // Where the sums go: dqkv itself at o[0..2], or the scratch's thirds.
      auto at = [&](int t) { return d.bf16 ? dwide.data() + t * g.d : static_cast<float*>(d.p) + o[t]; };
      const int64_t ldd = d.bf16 ? wide : ld;
      BackwardProblemBf16(g, RowsOf(g, b, qkv, qkv + dim, qkv + 2 * dim), y, ldyy, dy + oy, g.y.ld, lse + b * g.tq,
                          dlse + b * g.tq, at(0), at(1), at(2), ldd, w, drow.data());
      for (int t = 0; t < 3; ++t) d.Store(at(t), ldd, g.tq, g.d, o[t], ld);
    }
  });
}

// (qkv, y, lse, dy, dlse) -> dqkv: (B, T, 3 D)
void AttentionQkvGradCpu(const OpRecord& op, const KernelContext&) {
  const AttentionDims g = MakeAttentionQkvDims(op.attrs, op.inputs[0].shape());
  if (op.inputs[0].dtype() == DType::kBFloat16) return AttentionQkvGradBf16(op, g);
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
// Note [What a kernel supports]: a float qkv with results of its dtype, or a bfloat16 qkv with
// float32 results where oneDNN is built in (the bf16 policy lowers attention only where its
// products have oneDNN's bf16 kernels; without them it would widen every block).
// A bfloat16 y or dqkv: Note [Attention results kept in bfloat16].
bool AttentionQkvSupports(const OpRecord& op) {
  const DType q = op.inputs[0].dtype(), out = op.outputs[0].dtype();
  if (q == DType::kBFloat16) return (out == DType::kFloat32 || out == DType::kBFloat16) && HaveDnnlGemm();
  return q == out;
}
LOOM_KERNEL_SUPPORTS(attention_qkv, kCPU, AttentionQkvSupports);
LOOM_KERNEL_SUPPORTS(attention_qkv_grad, kCPU, AttentionQkvSupports);

}  // namespace cpu
}  // namespace loom
