// How kernels view their operands, shared by every backend so that the CPU and CUDA kernels of
// an op agree on the layout by construction (docs/style.md: share shape logic, not copies of it).
// Host code, except the LOOM_HD functions, which CUDA kernels call on the device too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/attrs.h"
#include "core/host_device.h"
#include "core/shape.h"

namespace loom {

// ---- broadcasting ----

// Strides of a contiguous `in` broadcast to `out` (numpy rules), in elements: 0 along the
// dimensions `in` repeats.
inline std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  Shape cs = ContiguousStrides(in);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[off + i] = in[i] == 1 ? 0 : cs[i];
  return st;
}

// The offsets, in elements, of entry i of the leading `rank` dimensions of `shape` (row-major)
// in two operands with strides sa and sb (BroadcastStrides).
inline void BroadcastOffsets(const Shape& shape, int64_t rank, const std::vector<int64_t>& sa,
                             const std::vector<int64_t>& sb, int64_t i, int64_t& oa, int64_t& ob) {
  oa = 0;
  ob = 0;
  for (int64_t d = rank - 1; d >= 0; --d) {
    int64_t idx = i % shape[size_t(d)];
    i /= shape[size_t(d)];
    oa += idx * sa[size_t(d)];
    ob += idx * sb[size_t(d)];
  }
}

// ---- reductions and ops along one axis ----

// A reduction over the run of axes [a0, a1): the input seen as (outer, r, inner).
struct ReduceDims {
  int64_t outer = 1, r = 1, inner = 1;
};
inline ReduceDims MakeReduceDims(const Shape& s, int64_t a0, int64_t a1) {
  ReduceDims d;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    if (i < a0) d.outer *= s[size_t(i)];
    else if (i < a1) d.r *= s[size_t(i)];
    else d.inner *= s[size_t(i)];
  }
  return d;
}

// An op along one axis (softmax and friends, concat): the input seen as (outer, n, inner).
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
inline AxisSplit SplitAt(const Shape& s, int64_t axis, const char* op) {
  AxisSplit r;
  if (s.empty()) return r;  // a scalar: one line of length 1
  int64_t a = NormalizeAxis(axis, int64_t(s.size()), op);
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    if (i < a) r.outer *= s[size_t(i)];
    else if (i == a) r.n = s[size_t(i)];
    else r.inner *= s[size_t(i)];
  }
  return r;
}

// slice and slice_grad along attr axis: the unsliced tensor `full` seen as `outer` rows of
// `full_row` elements, of which the slice keeps `slice_row` elements from element `head` on.
struct SliceRows {
  int64_t outer, full_row, slice_row, head;
};
inline SliceRows MakeSliceRows(const Attrs& a, const Shape& full, const char* op) {
  const AxisSplit sp = SplitAt(full, a.Int("axis"), op);
  int64_t s = a.Int("start"), e = a.Int("end");
  if (s < 0) s += sp.n;
  if (e < 0) e += sp.n;
  return SliceRows{sp.outer, sp.n * sp.inner, (e - s) * sp.inner, s * sp.inner};
}

// ---- matmul ----

// a: (..., M, K) or with ta (..., K, M), b: (..., K, N) or with tb (..., N, K)
//   -> c: (broadcast(...), M, N), or with sum_batch (M, N) summed over the batch.
// Every matrix is contiguous row-major: lda and ldb are the stored rows' lengths.
struct MatMulLayout {
  bool ta, tb, sum_batch;
  int64_t m, n, k, lda, ldb;
  Shape ba, bb, batch;                  // batch dimensions of a, of b, and their broadcast
  int64_t nb, nba, nbb;                 // entries of each
  int64_t size_a, size_b, size_c;       // elements of one matrix of a, b, c
  std::vector<int64_t> sta, stb;        // strides of a's and b's batches over `batch`, in matrices

  // One rhs for every batch: the batches of lhs are consecutive rows of one (nb * M, K) GEMM.
  bool RowsOfOneGemm() const { return !ta && !sum_batch && nbb == 1; }
  // sum_b A_b^T B_b with both unbroadcast: A is (nb * K, M), B is (nb * K, N), one GEMM over nb * K.
  bool SumIsOneGemm() const { return sum_batch && ta && !tb && nba == nb && nbb == nb; }
  // The offsets, in elements, of batch entry i's matrices in a and b.
  void Offsets(int64_t i, int64_t& oa, int64_t& ob) const {
    BroadcastOffsets(batch, int64_t(batch.size()), sta, stb, i, oa, ob);
    oa *= size_a;
    ob *= size_b;
  }
};
inline MatMulLayout MakeMatMulLayout(const Attrs& attrs, const Shape& sa, const Shape& sb) {
  MatMulLayout l;
  l.ta = attrs.Int("ta", 0) != 0;
  l.tb = attrs.Int("tb", 0) != 0;
  l.sum_batch = attrs.Int("sum_batch", 0) != 0;
  const size_t ra = sa.size(), rb = sb.size();
  l.m = l.ta ? sa[ra - 1] : sa[ra - 2];
  l.k = l.ta ? sa[ra - 2] : sa[ra - 1];
  l.n = l.tb ? sb[rb - 2] : sb[rb - 1];
  l.lda = l.ta ? l.m : l.k;
  l.ldb = l.tb ? l.k : l.n;
  l.ba = BatchOf(sa);
  l.bb = BatchOf(sb);
  l.batch = BroadcastShapes(l.ba, l.bb, "matmul");
  l.nb = NumElements(l.batch);
  l.nba = NumElements(l.ba);
  l.nbb = NumElements(l.bb);
  l.size_a = l.m * l.k;
  l.size_b = l.k * l.n;
  l.size_c = l.m * l.n;
  l.sta = BroadcastStrides(l.ba, l.batch);
  l.stb = BroadcastStrides(l.bb, l.batch);
  return l;
}

// ---- linear_cross_entropy (Note [Cross-entropy fused with the head's product] in core/ops/loss.cc) ----

// Rows are taken in chunks of at least this many logits (32 MB in float32) and at least 2 D rows,
// then evened out over the chunks that makes (rounded up to 16 rows). Each chunk adds its part of
// dw into dw (a GEMM that reads and writes dw's V D float32 elements), so c chunks move 2 c V D
// elements beyond the logits' own N V; at 2 D rows a chunk that is at most the logits' traffic
// once more. GPT-2 124M at batch 8 x 1024 (N 8,192, D 768, V 50,304): 6 chunks of 1,376 rows,
// 415 MB of scratch in bf16 instead of 2.5 GB of logits, dw's 155 MB read and written 6 times.
// Measured on a 2-core CPU (docs/benchmarks.md): chunks of 160 rows (the logits bound alone)
// made the step 7% slower than the unfused ops, by that traffic.
constexpr int64_t kLinearCrossEntropyChunkLogits = int64_t(1) << 23;

struct LinearCrossEntropyLayout {
  int64_t n, d, v;  // rows, width, classes
  bool tb;          // w is (V, D) (an embedding table) rather than (D, V)
  int64_t chunk;    // rows per chunk: a function of the shapes (and attribute chunk) alone, so
                    // every device sums alike
  int64_t ldw() const { return tb ? d : v; }
  int64_t chunks() const { return (n + chunk - 1) / chunk; }
  // Scratch: the chunk's logits and one log-sum-exp per row (elem_size: the product's element),
  // then, with 16-bit operands, the logits' gradient rounded to 16 bits; each part 256-aligned.
  size_t LogitsBytes(size_t elem_size) const { return Align(size_t(chunk * v) * elem_size); }
  size_t LseBytes(size_t elem_size) const { return Align(size_t(chunk) * elem_size); }
  size_t Grad16Bytes(bool half) const { return half ? Align(size_t(chunk * v) * 2) : 0; }
  size_t ScratchBytes(size_t elem_size, bool half) const {
    return LogitsBytes(elem_size) + LseBytes(elem_size) + Grad16Bytes(half);
  }
  static size_t Align(size_t b) { return (b + 255) / 256 * 256; }
};
inline LinearCrossEntropyLayout MakeLinearCrossEntropyLayout(const Attrs& attrs, const Shape& h, const Shape& w) {
  LinearCrossEntropyLayout l;
  l.n = h[0];
  l.d = h[1];
  l.tb = attrs.Int("tb", 1) != 0;
  l.v = l.tb ? w[0] : w[1];
  int64_t rows = attrs.Int("chunk", 0);  // 0: the default; tests ask for small chunks
  if (rows <= 0) {
    const int64_t least = std::max(kLinearCrossEntropyChunkLogits / l.v, 2 * l.d);
    const int64_t chunks = (l.n + least - 1) / least;
    rows = ((l.n + chunks - 1) / chunks + 15) / 16 * 16;
  }
  l.chunk = rows < 1 ? 1 : rows < l.n ? rows : l.n;
  return l;
}

// ---- column sums ----

// Note [Column sums by slabs]
// A CUDA column sum over r rows (bias_grad, bias_act_grad, sum over a leading axis) runs in
// blocks of 32 columns x 8 thread rows, each thread row adding every 8th row, 8 loads ahead
// (kLoadsAhead in cuda/common.cuh). With one block per 32 columns, GPT-2's bias gradients
// (8,192 x 768) had 24 blocks for 132 SMs, each thread walking 1,024 rows. So the rows are cut
// into slabs (ColumnSlabsOf: about kTargetBlocks blocks in all, to fill a GPU; slabs of at
// least kMinSlabRows rows, each a multiple of 64), a block per (32 columns, slab) writes its
// slab's sum to the device's workspace, and ColumnSlabsTotalKernel (cuda/common.cuh) adds each
// column's slabs in order. The slabs depend on the shape alone, so eager and replayed steps add
// in one order (docs/design.md invariant 5); one slab is the unsliced sum, written directly.
struct ColumnSlabs {
  int64_t slabs = 1, rows = 0;  // rows per slab (the last may have fewer)
};
// r rows, blocks_per_slab = blocks of 32 columns (times the outer count) each slab takes.
inline ColumnSlabs ColumnSlabsOf(int64_t r, int64_t blocks_per_slab) {
  constexpr int64_t kTargetBlocks = 512, kMinSlabRows = 256, kStep = 8 * 8;  // 8 thread rows x 8 loads ahead
  ColumnSlabs c;
  int64_t s = (kTargetBlocks + std::max<int64_t>(blocks_per_slab, 1) - 1) / std::max<int64_t>(blocks_per_slab, 1);
  s = std::max<int64_t>(1, std::min({s, r / kMinSlabRows, int64_t(65535)}));
  c.rows = ((r + s - 1) / s + kStep - 1) / kStep * kStep;
  c.slabs = c.rows > 0 ? (r + c.rows - 1) / c.rows : 1;
  if (c.slabs <= 1) c = ColumnSlabs{1, r};
  return c;
}

// ---- normalisation ----

// Batch norm: x (N, C, ...) seen as (N, C, S), S the spatial axes flattened.
struct ChannelDims {
  int64_t n, c, s;
};
inline ChannelDims MakeChannelDims(const Shape& x) {
  int64_t s = 1;
  for (size_t i = 2; i < x.size(); ++i) s *= x[i];
  return ChannelDims{x[0], x[1], s};
}

// Layer norm: x (..., D...) with gamma (D...) seen as (R, D).
struct RowDims {
  int64_t r, d;
};
inline RowDims MakeRowDims(const Shape& x, const Shape& gamma) {
  int64_t d = NumElements(gamma);
  return RowDims{d ? NumElements(x) / d : 0, d};
}

// ---- attention ----

// Where problem p's rows of one operand of attention are: (p / heads) * batch + (p % heads) *
// head elements from the operand's start, rows ld apart, each row's elements contiguous.
struct AttentionOperand {
  int64_t batch, head, ld;
  LOOM_HD int64_t Offset(int64_t p, int64_t heads) const { return (p / heads) * batch + (p % heads) * head; }
};

// attention as bh problems, each q (tq, d), k (tk, d), v (tk, dv) -> y (tq, dv), with the scale
// resolved (0: 1 / sqrt(d)) (Note [Attention keeps no score matrix] in core/ops_transformer.h).
// attention: q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv), y (..., Tq, Dv), each contiguous.
// attention_qkv: q, k and v are the thirds of each row of qkv (B, T, 3 D), head h its columns
// [h Dh, (h + 1) Dh), and y is (B, T, D) the same way: the layout of the projections around it,
// so nothing is permuted or copied. lse is (bh, tq) either way.
struct AttentionDims {
  int64_t bh, tq, tk, d, dv, heads = 1;
  bool causal;
  double scale;
  AttentionOperand q, k, v, y;
  // Keys [0, KeyEnd(i)) are visible to query row i (top-left causal alignment).
  LOOM_HD int64_t KeyEnd(int64_t i) const { return causal ? (i + 1 < tk ? i + 1 : tk) : tk; }
};
inline void ReadAttentionAttrs(const Attrs& a, AttentionDims& g) {
  g.causal = a.Int("causal", 0) != 0;
  const double s = a.Float("scale", 0);
  g.scale = s > 0 ? s : 1 / std::sqrt(double(g.d));
}
inline AttentionDims MakeAttentionDims(const Attrs& a, const Shape& q, const Shape& v) {
  AttentionDims g;
  g.tq = q[q.size() - 2];
  g.d = q.back();
  g.tk = v[v.size() - 2];
  g.dv = v.back();
  g.bh = NumElements(Shape(q.begin(), q.end() - 2));
  g.q = {g.tq * g.d, 0, g.d};
  g.k = {g.tk * g.d, 0, g.d};
  g.v = {g.tk * g.dv, 0, g.dv};
  g.y = {g.tq * g.dv, 0, g.dv};
  ReadAttentionAttrs(a, g);
  return g;
}
// qkv: (B, T, 3 D) with attribute heads; q, k and v start 0, D and 2 D elements into it.
inline AttentionDims MakeAttentionQkvDims(const Attrs& a, const Shape& qkv) {
  AttentionDims g;
  g.heads = a.Int("heads");
  const int64_t dim = qkv[2] / 3;
  g.tq = g.tk = qkv[1];
  g.d = g.dv = dim / g.heads;
  g.bh = qkv[0] * g.heads;
  g.q = g.k = g.v = {g.tq * 3 * dim, g.d, 3 * dim};
  g.y = {g.tq * dim, g.d, dim};
  ReadAttentionAttrs(a, g);
  return g;
}

// ---- pooling ----

// 2-D pooling: x (N, C, H, W) -> y (N, C, OH, OW) as planes = N * C images.
struct PoolDims {
  int64_t planes, h, w, oh, ow;
  int64_t kh, kw, sh, sw, ph, pw;
};
inline PoolDims MakePoolDims(const Attrs& a, const Shape& x, const Shape& y) {
  const std::vector<int64_t>& k = a.Ints("kernel");
  const std::vector<int64_t>& s = a.Ints("stride");
  const std::vector<int64_t>& p = a.Ints("padding");
  return PoolDims{x[0] * x[1], x[2], x[3], y[2], y[3], k[0], k[1], s[0], s[1], p[0], p[1]};
}

// The input positions [lo, hi) that the window of output position o covers along one axis
// (kernel k, stride s, padding p, input size n), clipped to the input.
struct Span {
  int64_t lo, hi;
};
LOOM_HD Span WindowSpan(int64_t o, int64_t k, int64_t s, int64_t p, int64_t n) {
  const int64_t first = o * s - p, end = o * s - p + k;
  return Span{first < 0 ? 0 : first, end < n ? end : n};
}
LOOM_HD Span RowSpan(const PoolDims& d, int64_t oi) { return WindowSpan(oi, d.kh, d.sh, d.ph, d.h); }
LOOM_HD Span ColSpan(const PoolDims& d, int64_t oj) { return WindowSpan(oj, d.kw, d.sw, d.pw, d.w); }

// avg_pool2d's divisor of output (oi, oj): kh * kw, or with count_include_pad = 0 the pixels
// inside the image.
LOOM_HD int64_t AvgCount(const PoolDims& d, bool include_pad, int64_t oi, int64_t oj) {
  if (include_pad) return d.kh * d.kw;
  const Span r = RowSpan(d, oi), c = ColSpan(d, oj);
  return (r.hi - r.lo) * (c.hi - c.lo);
}

// The larger of a and b, NaN if either is NaN (std::max keeps `a` when b is NaN): max, and the
// maximum subtracted by softmax, propagate NaN on every backend, as in numpy and PyTorch.
template <typename T>
LOOM_HD T MaxNaN(T a, T b) {
  return (b > a || (b != b && a == a)) ? b : a;
}

// max_pool2d of one window of plane xp (width w): its value in m, and the index in the plane of
// its first maximum, scanned row by row; NaN wins, as in PyTorch. The window always holds a
// pixel (padding is at most half the kernel). Pixel k of the plane is xp[k * step] (step: 1 in
// NCHW, the channel count in NHWC).
template <typename T>
LOOM_HD int64_t WindowArgMax(const T* xp, int64_t w, Span rows, Span cols, T& m, int64_t step = 1) {
  int64_t best = rows.lo * w + cols.lo;
  m = xp[best * step];
  for (int64_t i = rows.lo; i < rows.hi; ++i)
    for (int64_t j = cols.lo; j < cols.hi; ++j) {
      const T v = xp[(i * w + j) * step];
      if (v > m || (v != v && m == m)) {
        m = v;
        best = i * w + j;
      }
    }
  return best;
}

}  // namespace loom
