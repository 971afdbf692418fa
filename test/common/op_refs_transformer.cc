// Float64 references of the transformer ops: attention written out from its definition, every
// (Tq, Tk) score kept (the kernels keep none).
#include <algorithm>
#include <cmath>

#include "common/op_refs.h"

namespace loom {
namespace test {
namespace ref {
namespace {

// The problems of an attention record: bh of them, each q (tq, d), k (tk, d), v (tk, dv).
struct Problems {
  int64_t bh, tq, tk, d, dv;
  bool causal;
  double scale;
  Problems(const RefArgs& a) {
    const Shape &q = a.in[0].shape, &v = a.in[2].shape;
    tq = q[q.size() - 2];
    d = q.back();
    tk = v[v.size() - 2];
    dv = v.back();
    bh = NumElements(Shape(q.begin(), q.end() - 2));
    causal = a.attrs.Int("causal", 0) != 0;
    const double s = a.attrs.Float("scale", 0);
    scale = s > 0 ? s : 1 / std::sqrt(double(d));
  }
  bool Visible(int64_t i, int64_t j) const { return !causal || j <= i; }
  // The softmax probabilities of problem b, (tq, tk), and each row's log-sum-exp.
  void Probabilities(const RefArgs& a, int64_t b, std::vector<double>& p, std::vector<double>& lse) const {
    const double* q = a.in[0].v.data() + b * tq * d;
    const double* k = a.in[1].v.data() + b * tk * d;
    p.assign(size_t(tq * tk), 0.0);
    lse.assign(size_t(tq), 0.0);
    for (int64_t i = 0; i < tq; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < tk; ++j) {
        if (!Visible(i, j)) continue;
        double s = 0;
        for (int64_t c = 0; c < d; ++c) s += q[i * d + c] * k[j * d + c];
        p[size_t(i * tk + j)] = s * scale;
        mx = std::max(mx, s * scale);
      }
      double sum = 0;
      for (int64_t j = 0; j < tk; ++j)
        if (Visible(i, j)) sum += std::exp(p[size_t(i * tk + j)] - mx);
      for (int64_t j = 0; j < tk; ++j)
        p[size_t(i * tk + j)] = Visible(i, j) ? std::exp(p[size_t(i * tk + j)] - mx) / sum : 0.0;
      lse[size_t(i)] = mx + std::log(sum);
    }
  }
};

Shape Lead(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

}  // namespace

// (q, k, v) -> y = softmax(scale q k^T, masked) v, lse = log-sum-exp of each row's scores
std::vector<HostTensor> Attention(const RefArgs& a) {
  const Problems g(a);
  Shape ys = Lead(a.in[0].shape);
  ys.push_back(g.dv);
  HostTensor y(ys), lse(Lead(a.in[0].shape));
  std::vector<double> p, l;
  for (int64_t b = 0; b < g.bh; ++b) {
    g.Probabilities(a, b, p, l);
    const double* v = a.in[2].v.data() + b * g.tk * g.dv;
    for (int64_t i = 0; i < g.tq; ++i) {
      lse.v[size_t(b * g.tq + i)] = l[size_t(i)];
      for (int64_t c = 0; c < g.dv; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < g.tk; ++j) acc += p[size_t(i * g.tk + j)] * v[j * g.dv + c];
        y.v[size_t((b * g.tq + i) * g.dv + c)] = acc;
      }
    }
  }
  return {y, lse};
}

// (q, k, v, y, lse, dy, dlse) -> the gradients of sum(dy y) + sum(dlse lse) with respect to q,
// k and v, from this file's own probabilities (y and lse are not read):
// dv = P^T dy, dP = dy v^T, dS = P (dP - rowsum(P dP)) + dlse P, dq = scale dS k, dk = scale dS^T q
std::vector<HostTensor> AttentionGrad(const RefArgs& a) {
  const Problems g(a);
  HostTensor dq(a.in[0].shape), dk(a.in[1].shape), dv(a.in[2].shape);
  std::vector<double> p, l, ds;
  for (int64_t b = 0; b < g.bh; ++b) {
    g.Probabilities(a, b, p, l);
    const double* q = a.in[0].v.data() + b * g.tq * g.d;
    const double* k = a.in[1].v.data() + b * g.tk * g.d;
    const double* v = a.in[2].v.data() + b * g.tk * g.dv;
    const double* dy = a.in[5].v.data() + b * g.tq * g.dv;
    const double* dlse = a.in[6].v.data() + b * g.tq;
    ds.assign(size_t(g.tq * g.tk), 0.0);
    for (int64_t i = 0; i < g.tq; ++i) {
      double row = 0;
      for (int64_t j = 0; j < g.tk; ++j) {
        double dp = 0;
        for (int64_t c = 0; c < g.dv; ++c) dp += dy[i * g.dv + c] * v[j * g.dv + c];
        ds[size_t(i * g.tk + j)] = dp;
        row += p[size_t(i * g.tk + j)] * dp;
      }
      for (int64_t j = 0; j < g.tk; ++j) {
        const double pij = p[size_t(i * g.tk + j)];
        ds[size_t(i * g.tk + j)] = pij * (ds[size_t(i * g.tk + j)] - row) + dlse[i] * pij;
        for (int64_t c = 0; c < g.dv; ++c) dv.v[size_t((b * g.tk + j) * g.dv + c)] += pij * dy[i * g.dv + c];
      }
    }
    for (int64_t i = 0; i < g.tq; ++i)
      for (int64_t j = 0; j < g.tk; ++j) {
        const double s = ds[size_t(i * g.tk + j)] * g.scale;
        for (int64_t c = 0; c < g.d; ++c) {
          dq.v[size_t((b * g.tq + i) * g.d + c)] += s * k[j * g.d + c];
          dk.v[size_t((b * g.tk + j) * g.d + c)] += s * q[i * g.d + c];
        }
      }
  }
  return {dq, dk, dv};
}

namespace {
// The packed layout of attention_qkv: (B, T, 3 D) <-> three (B, heads, T, D / heads).
struct Packed {
  int64_t b, t, dim, heads, hd;
  explicit Packed(const Shape& qkv, const Attrs& a)
      : b(qkv[0]), t(qkv[1]), dim(qkv[2] / 3), heads(a.Int("heads")), hd(qkv[2] / 3 / a.Int("heads")) {}
  // Element (bi, h, ti, c) of part `which` (0 q, 1 k, 2 v) in a (B, T, width) tensor whose rows
  // hold the parts at column which * dim.
  size_t At(int64_t which, int64_t bi, int64_t h, int64_t ti, int64_t c, int64_t width) const {
    return size_t((bi * t + ti) * width + which * dim + h * hd + c);
  }
  HostTensor Split(const HostTensor& x, int64_t which, int64_t width) const {
    HostTensor out({b, heads, t, hd});
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t ti = 0; ti < t; ++ti)
          for (int64_t c = 0; c < hd; ++c)
            out.v[size_t(((bi * heads + h) * t + ti) * hd + c)] = x.v[At(which, bi, h, ti, c, width)];
    return out;
  }
  void Join(const HostTensor& part, int64_t which, int64_t width, HostTensor& x) const {
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t ti = 0; ti < t; ++ti)
          for (int64_t c = 0; c < hd; ++c)
            x.v[At(which, bi, h, ti, c, width)] = part.v[size_t(((bi * heads + h) * t + ti) * hd + c)];
  }
};
}  // namespace

// qkv (B, T, 3 D) -> y (B, T, D), lse (B, heads, T): attention of the unpacked heads
std::vector<HostTensor> AttentionQkv(const RefArgs& a) {
  const Packed k(a.in[0].shape, a.attrs);
  const std::vector<HostTensor> qkv = {k.Split(a.in[0], 0, 3 * k.dim), k.Split(a.in[0], 1, 3 * k.dim),
                                       k.Split(a.in[0], 2, 3 * k.dim)};
  std::vector<HostTensor> out = Attention(RefArgs{qkv, a.attrs});
  HostTensor y({k.b, k.t, k.dim});
  k.Join(out[0], 0, k.dim, y);
  return {y, out[1]};
}

// (qkv, y, lse, dy, dlse) -> dqkv: AttentionGrad of the unpacked heads, packed back
std::vector<HostTensor> AttentionQkvGrad(const RefArgs& a) {
  const Packed k(a.in[0].shape, a.attrs);
  const int64_t w = 3 * k.dim;
  const HostTensor unused;
  const std::vector<HostTensor> in = {k.Split(a.in[0], 0, w), k.Split(a.in[0], 1, w), k.Split(a.in[0], 2, w),
                                      unused, unused, k.Split(a.in[3], 0, k.dim), a.in[4]};
  const std::vector<HostTensor> g = AttentionGrad(RefArgs{in, a.attrs});
  HostTensor d(a.in[0].shape);
  for (int64_t which = 0; which < 3; ++which) k.Join(g[size_t(which)], which, w, d);
  return {d};
}

}  // namespace ref
}  // namespace test
}  // namespace loom
