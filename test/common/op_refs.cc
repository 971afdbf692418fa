// Float64 references: element-wise, linear algebra, reductions, softmax and losses, optimizer
// updates, creation and random numbers, shape ops. The convolutional-network ops are in
// op_refs_cnn.cc.
#include "common/op_refs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/harness.h"
#include "core/ops/update_group.h"
#include "device/philox.h"

namespace loom {
namespace test {
namespace ref {
namespace {

int64_t Prod(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < s.size(); ++i) n *= s[i];
  return n;
}

// Row-major multi-index of flat position i in `shape`, and back.
std::vector<int64_t> Unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}
int64_t Ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + idx[d];
  return i;
}

// numpy broadcasting of two shapes (the cases are well-formed: sizes agree or one is 1).
Shape Broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t x = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    int64_t y = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// The flat index in `in` (broadcast to `out`) of the element at out's multi-index `oi`.
int64_t BroadcastSource(const std::vector<int64_t>& oi, const Shape& in, const Shape& out) {
  std::vector<int64_t> ii(in.size());
  size_t off = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) ii[d] = in[d] == 1 ? 0 : oi[d + off];
  return Ravel(ii, in);
}

int64_t AxisOf(int64_t axis, size_t rank) { return axis < 0 ? axis + int64_t(rank) : axis; }

// A tensor seen as (outer, n, inner) around the axes [begin, end).
struct Split {
  int64_t outer, n, inner;
  int64_t at(int64_t o, int64_t k, int64_t i) const { return (o * n + k) * inner + i; }
};
Split SplitAt(const Shape& s, size_t begin, size_t end) {
  return {Prod(s, 0, begin), Prod(s, begin, end), Prod(s, end, s.size())};
}
// The softmax axis of a tensor (a scalar is one line of one element).
Split SoftmaxSplit(const Shape& s, const Attrs& attrs) {
  if (s.empty()) return {1, 1, 1};
  size_t axis = size_t(AxisOf(attrs.Int("axis", -1), s.size()));
  return SplitAt(s, axis, axis + 1);
}

Shape ShapeAttr(const Attrs& a, const char* key) {
  const std::vector<int64_t>& v = a.Ints(key);
  return Shape(v.begin(), v.end());
}

// Word i % 4 of Philox(seed, counter + i / 4): the random word of element i of a random op.
uint32_t PhiloxWord(const RefArgs& a, int64_t i) {
  return Philox4x32(a.rng_seed, a.rng_counter + uint64_t(i / 4)).v[i % 4];
}
double Uniform01(uint32_t w) { return double(w >> 8) / 16777216.0; }  // 24 bits, as for float32

// Softmax or its log along the case's axis, shifted by the maximum (exact for large inputs).
HostTensor SoftmaxOf(const HostTensor& x, const Attrs& attrs, bool log) {
  Split s = SoftmaxSplit(x.shape, attrs);
  HostTensor y(x.shape);
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      double m = -std::numeric_limits<double>::infinity(), z = 0;
      for (int64_t k = 0; k < s.n; ++k) m = std::max(m, x.v[size_t(s.at(o, k, i))]);
      for (int64_t k = 0; k < s.n; ++k) z += std::exp(x.v[size_t(s.at(o, k, i))] - m);
      for (int64_t k = 0; k < s.n; ++k) {
        double d = x.v[size_t(s.at(o, k, i))] - m;
        y.v[size_t(s.at(o, k, i))] = log ? d - std::log(z) : std::exp(d) / z;
      }
    }
  return y;
}

// Class-index labels (N) as one-hot rows, or float labels (N, C) as they are.
std::vector<double> LabelRows(const HostTensor& labels, int64_t n, int64_t c) {
  if (labels.shape.size() == 2) return labels.v;
  std::vector<double> t(size_t(n * c), 0.0);
  for (int64_t i = 0; i < n; ++i) t[size_t(i * c + int64_t(labels.v[size_t(i)]))] = 1;
  return t;
}

// The SGD update of PyTorch's convention (d = g + wd p; buf = momentum buf + (1 - dampening) d;
// p -= lr (nesterov ? d + momentum buf : buf), or p -= lr d without a buffer).
std::vector<HostTensor> Sgd(HostTensor p, const std::vector<double>& g, double lr, const HostTensor* buf_in,
                            const Attrs& at) {
  const double mom = at.Float("momentum", 0), wd = at.Float("weight_decay", 0), damp = at.Float("dampening", 0);
  const bool nesterov = at.Int("nesterov", 0) != 0;
  HostTensor buf = buf_in ? *buf_in : HostTensor();
  for (size_t i = 0; i < p.v.size(); ++i) {
    double d = g[i] + wd * p.v[i];
    if (!buf_in) {
      p.v[i] -= lr * d;
      continue;
    }
    buf.v[i] = mom * buf.v[i] + (1 - damp) * d;
    p.v[i] -= lr * (nesterov ? d + mom * buf.v[i] : buf.v[i]);
  }
  if (!buf_in) return {p};
  return {p, buf};
}

}  // namespace

// ---------------------------------------------------------------- element-wise

Reference Unary(std::function<double(double, const Attrs&)> f) {
  return [f](const RefArgs& a) {
    HostTensor y(a.in[0].shape);
    for (size_t i = 0; i < y.v.size(); ++i) y.v[i] = f(a.in[0].v[i], a.attrs);
    return std::vector<HostTensor>{y};
  };
}

Reference Binary(std::function<double(double, double, const Attrs&)> f) {
  return [f](const RefArgs& a) {
    const HostTensor &x = a.in[0], &z = a.in[1];
    HostTensor y(Broadcast(x.shape, z.shape));
    for (int64_t i = 0; i < y.numel(); ++i) {
      std::vector<int64_t> oi = Unravel(i, y.shape);
      y.v[size_t(i)] = f(x.v[size_t(BroadcastSource(oi, x.shape, y.shape))],
                         z.v[size_t(BroadcastSource(oi, z.shape, y.shape))], a.attrs);
    }
    return std::vector<HostTensor>{y};
  };
}

std::vector<HostTensor> Where(const RefArgs& a) {
  const HostTensor &c = a.in[0], &x = a.in[1], &z = a.in[2];
  HostTensor y(Broadcast(Broadcast(c.shape, x.shape), z.shape));
  for (int64_t i = 0; i < y.numel(); ++i) {
    std::vector<int64_t> oi = Unravel(i, y.shape);
    y.v[size_t(i)] = c.v[size_t(BroadcastSource(oi, c.shape, y.shape))] != 0
                         ? x.v[size_t(BroadcastSource(oi, x.shape, y.shape))]
                         : z.v[size_t(BroadcastSource(oi, z.shape, y.shape))];
  }
  return {y};
}

// ---------------------------------------------------------------- linear algebra, reductions

// op(a) op(b) for every batch of the broadcast batch shape; with sum_batch the batches are
// added up into one (M, N) matrix.
std::vector<HostTensor> MatMul(const RefArgs& args) {
  const HostTensor &a = args.in[0], &b = args.in[1];
  const bool ta = args.attrs.Int("ta", 0), tb = args.attrs.Int("tb", 0), sum = args.attrs.Int("sum_batch", 0);
  const size_t ra = a.shape.size(), rb = b.shape.size();
  const int64_t m = ta ? a.shape[ra - 1] : a.shape[ra - 2], k = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  const int64_t n = tb ? b.shape[rb - 2] : b.shape[rb - 1];
  const Shape ba(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  const Shape batch = Broadcast(ba, bb);
  const int64_t nb = NumElements(batch);
  Shape out_shape = sum ? Shape{} : batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  HostTensor c(out_shape);
  for (int64_t bi = 0; bi < nb; ++bi) {
    std::vector<int64_t> idx = Unravel(bi, batch);
    const double* pa = a.v.data() + BroadcastSource(idx, ba, batch) * m * k;
    const double* pb = b.v.data() + BroadcastSource(idx, bb, batch) * k * n;
    double* pc = c.v.data() + (sum ? 0 : bi * m * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) s += (ta ? pa[q * m + i] : pa[i * k + q]) * (tb ? pb[j * k + q] : pb[q * n + j]);
        pc[i * n + j] += s;
      }
  }
  return {c};
}

std::vector<HostTensor> AddBias(const RefArgs& a) {
  HostTensor y = a.in[0];
  for (size_t i = 0; i < y.v.size(); ++i) y.v[i] += a.in[1].v[i % a.in[1].v.size()];
  return {y};
}

std::vector<HostTensor> BiasGrad(const RefArgs& a) {
  const HostTensor& dy = a.in[0];
  HostTensor db(Shape{dy.shape.back()});
  for (size_t i = 0; i < dy.v.size(); ++i) db.v[i % db.v.size()] += dy.v[i];
  return {db};
}

namespace {
// act: 0 none, 1 relu, 2 tanh, 3 sigmoid (the `act` attribute of the fused dense layer)
double ActOf(int64_t act, double z) {
  switch (act) {
    case 1: return z > 0 ? z : 0.0;
    case 2: return std::tanh(z);
    case 3: return 1 / (1 + std::exp(-z));
    default: return z;
  }
}
// d act / dz written with the output y = act(z)
double ActDerivFromOutput(int64_t act, double y) {
  switch (act) {
    case 1: return y > 0 ? 1.0 : 0.0;
    case 2: return 1 - y * y;
    case 3: return y * (1 - y);
    default: return 1.0;
  }
}
}  // namespace

std::vector<HostTensor> DenseBiasAct(const RefArgs& a) {
  const HostTensor &x = a.in[0], &w = a.in[1], &b = a.in[2];
  const int64_t k = w.shape[0], n = w.shape[1];
  const int64_t act = a.attrs.Int("act", 0);
  Shape ys = x.shape;
  ys.back() = n;
  HostTensor y(ys);
  const int64_t nrows = NumElements(ys) / std::max<int64_t>(n, 1);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double z = b.v[size_t(j)];
      for (int64_t q = 0; q < k; ++q) z += x.v[size_t(r * k + q)] * w.v[size_t(q * n + j)];
      y.v[size_t(r * n + j)] = ActOf(act, z);
    }
  return {y};
}

// channels = 1: y (N, C, ...), db per channel C.
std::vector<HostTensor> BiasActGrad(const RefArgs& a) {
  const HostTensor &y = a.in[0], &dy = a.in[1];
  const int64_t act = a.attrs.Int("act", 0);
  const bool channels = a.attrs.Int("channels", 0) != 0;
  const int64_t c = channels ? y.shape[1] : y.shape.back();
  const int64_t inner = channels ? Prod(y.shape, 2, y.shape.size()) : 1;
  HostTensor dz(y.shape), db(Shape{c});
  for (size_t i = 0; i < y.v.size(); ++i) {
    dz.v[i] = dy.v[i] * ActDerivFromOutput(act, y.v[i]);
    db.v[size_t(int64_t(i) / inner % c)] += dz.v[i];
  }
  return {dz, db};
}

namespace {
// sum or max over the axes [begin, end), with or without the kept unit dimensions.
HostTensor Reduce(const RefArgs& a, bool max) {
  const HostTensor& x = a.in[0];
  const size_t b = size_t(a.attrs.Int("begin")), e = size_t(a.attrs.Int("end"));
  Split s = SplitAt(x.shape, b, e);
  Shape out;
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (d < b || d >= e) out.push_back(x.shape[d]);
    else if (a.attrs.Int("keepdims")) out.push_back(1);
  HostTensor y(out);
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      double r = max ? -std::numeric_limits<double>::infinity() : 0.0;
      for (int64_t k = 0; k < s.n; ++k) {
        double v = x.v[size_t(s.at(o, k, i))];
        r = max ? std::max(r, v) : r + v;
      }
      y.v[size_t(o * s.inner + i)] = r;
    }
  return y;
}
}  // namespace

std::vector<HostTensor> Sum(const RefArgs& a) { return {Reduce(a, false)}; }
std::vector<HostTensor> Max(const RefArgs& a) { return {Reduce(a, true)}; }

// (x, y = max(x) with kept dimensions, dy) -> dx: dy shared equally by the maxima of each line.
std::vector<HostTensor> MaxGrad(const RefArgs& a) {
  const HostTensor &x = a.in[0], &y = a.in[1], &dy = a.in[2];
  Split s = SplitAt(x.shape, size_t(a.attrs.Int("begin")), size_t(a.attrs.Int("end")));
  HostTensor dx(x.shape);
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      const double m = y.v[size_t(o * s.inner + i)];
      int64_t ties = 0;
      for (int64_t k = 0; k < s.n; ++k) ties += x.v[size_t(s.at(o, k, i))] == m;
      for (int64_t k = 0; k < s.n; ++k)
        if (x.v[size_t(s.at(o, k, i))] == m) dx.v[size_t(s.at(o, k, i))] = dy.v[size_t(o * s.inner + i)] / double(ties);
    }
  return {dx};
}

// ---------------------------------------------------------------- softmax and losses

std::vector<HostTensor> Softmax(const RefArgs& a) { return {SoftmaxOf(a.in[0], a.attrs, false)}; }
std::vector<HostTensor> LogSoftmax(const RefArgs& a) { return {SoftmaxOf(a.in[0], a.attrs, true)}; }

namespace {
// (y, dy) -> dx along the axis: y (dy - sum(dy y)) for softmax, dy - exp(y) sum(dy) for its log.
HostTensor SoftmaxGradOf(const RefArgs& a, bool log) {
  const HostTensor &y = a.in[0], &dy = a.in[1];
  Split s = SoftmaxSplit(y.shape, a.attrs);
  HostTensor dx(y.shape);
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      double t = 0;
      for (int64_t k = 0; k < s.n; ++k) {
        size_t at = size_t(s.at(o, k, i));
        t += log ? dy.v[at] : dy.v[at] * y.v[at];
      }
      for (int64_t k = 0; k < s.n; ++k) {
        size_t at = size_t(s.at(o, k, i));
        dx.v[at] = log ? dy.v[at] - std::exp(y.v[at]) * t : y.v[at] * (dy.v[at] - t);
      }
    }
  return dx;
}
}  // namespace

std::vector<HostTensor> SoftmaxGrad(const RefArgs& a) { return {SoftmaxGradOf(a, false)}; }
std::vector<HostTensor> LogSoftmaxGrad(const RefArgs& a) { return {SoftmaxGradOf(a, true)}; }

// loss = -mean over rows of sum_c t_c log softmax(x)_c; the second output is log softmax(x).
std::vector<HostTensor> SoftmaxCrossEntropy(const RefArgs& a) {
  const HostTensor& x = a.in[0];
  const int64_t n = x.shape[0], c = x.shape[1];
  Attrs rows{{"axis", int64_t(-1)}};
  HostTensor logp = SoftmaxOf(x, rows, true);
  std::vector<double> t = LabelRows(a.in[1], n, c);
  double total = 0;
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] != 0) total -= t[i] * logp.v[i];
  HostTensor lse({n});  // log-sum-exp of each row: x - log_softmax(x), any column
  for (int64_t i = 0; i < n; ++i) lse.v[size_t(i)] = x.v[size_t(i * c)] - logp.v[size_t(i * c)];
  return {HostTensor({}, {total / double(n)}), lse};
}

// (logits, labels, lse, dy) -> (softmax sum(labels, row) - labels) dy / N, the softmax this
// file's own (lse is not read)
std::vector<HostTensor> SoftmaxCrossEntropyGrad(const RefArgs& a) {
  const HostTensor logp = SoftmaxOf(a.in[0], Attrs{{"axis", int64_t(-1)}}, true);
  const int64_t n = logp.shape[0], c = logp.shape[1];
  const double dy = a.in[3].v[0];
  std::vector<double> t = LabelRows(a.in[1], n, c);
  HostTensor dx(logp.shape);
  for (int64_t i = 0; i < n; ++i) {
    double row = 0;
    for (int64_t j = 0; j < c; ++j) row += t[size_t(i * c + j)];
    for (int64_t j = 0; j < c; ++j) {
      size_t at = size_t(i * c + j);
      dx.v[at] = (std::exp(logp.v[at]) * row - t[at]) * dy / double(n);
    }
  }
  return {dx};
}

// (h (N, D), w (V, D) or (D, V) with tb 0, labels) -> loss [, dh, dw]: the logits h w^T, their
// cross-entropy, and with grads the gradients of the mean loss, all in double from the whole
// logits (no chunks)
std::vector<HostTensor> LinearCrossEntropy(const RefArgs& a) {
  const HostTensor &h = a.in[0], &w = a.in[1];
  const bool tb = a.attrs.Int("tb", 1) != 0;
  const int64_t n = h.shape[0], d = h.shape[1], v = tb ? w.shape[0] : w.shape[1];
  auto wt = [&](int64_t c, int64_t k) { return w.v[size_t(tb ? c * d + k : k * v + c)]; };  // w^T (D, V) at (k, c)
  HostTensor p({n, v}), dh({n, d}), dw(w.shape);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double mx = -HUGE_VAL;
    for (int64_t c = 0; c < v; ++c) {
      double z = 0;
      for (int64_t k = 0; k < d; ++k) z += h.v[size_t(i * d + k)] * wt(c, k);
      p.v[size_t(i * v + c)] = z;
      mx = std::max(mx, z);
    }
    double sum = 0;
    for (int64_t c = 0; c < v; ++c) sum += std::exp(p.v[size_t(i * v + c)] - mx);
    const double lse = mx + std::log(sum);
    const int64_t label = int64_t(a.in[2].v[size_t(i)]);
    total -= p.v[size_t(i * v + label)] - lse;
    for (int64_t c = 0; c < v; ++c)
      p.v[size_t(i * v + c)] = (std::exp(p.v[size_t(i * v + c)] - lse) - (c == label ? 1 : 0)) / double(n);
  }
  std::vector<HostTensor> out{HostTensor({}, {total / double(n)})};
  if (a.attrs.Int("grads", 0) == 0) return out;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < v; ++c) {
      const double g = p.v[size_t(i * v + c)];
      for (int64_t k = 0; k < d; ++k) {
        dh.v[size_t(i * d + k)] += g * wt(c, k);
        dw.v[size_t(tb ? c * d + k : k * v + c)] += g * h.v[size_t(i * d + k)];
      }
    }
  out.push_back(dh);
  out.push_back(dw);
  return out;
}

std::vector<HostTensor> Mse(const RefArgs& a) {
  double s = 0;
  for (size_t i = 0; i < a.in[0].v.size(); ++i) s += std::pow(a.in[0].v[i] - a.in[1].v[i], 2);
  return {HostTensor({}, {s / double(a.in[0].v.size())})};
}

// (pred, target, dy) -> 2 (pred - target) dy / numel
std::vector<HostTensor> MseGrad(const RefArgs& a) {
  HostTensor d(a.in[0].shape);
  for (size_t i = 0; i < d.v.size(); ++i)
    d.v[i] = 2 * (a.in[0].v[i] - a.in[1].v[i]) * a.in[2].v[0] / double(d.v.size());
  return {d};
}

// ---------------------------------------------------------------- optimizer updates

// (param, grad, lr [, buf]) -> param [, buf]
// The gradient an update uses (Note [Clipping folded into the update], Note [Data parallelism
// folded into the update]): times grad_mult, then times the scale (the last input, or the one
// before the found_inf flag) with grad_scaled, clamped to [-clip_value, clip_value] with
// clip_value > 0.
bool HasFlag(const RefArgs& a) { return a.attrs.Int("found_inf", 0) != 0; }
std::vector<double> ClippedGradient(const RefArgs& a, std::vector<double> g) {
  const double clip = a.attrs.Float("clip_value", 0);
  for (double& x : g) {
    x *= a.attrs.Float("grad_mult", 1.0);
    if (a.attrs.Int("grad_scaled", 0)) x *= a.in[a.in.size() - (HasFlag(a) ? 2 : 1)].v[0];
    if (clip > 0) x = std::max(-clip, std::min(clip, x));
  }
  return g;
}
size_t ClipInputs(const RefArgs& a) { return (a.attrs.Int("grad_scaled", 0) ? 1 : 0) + (HasFlag(a) ? 1 : 0); }
// Note [Skipped updates]: with the flag set, the update returns its state outputs as they were.
bool Skips(const RefArgs& a) { return HasFlag(a) && a.in.back().v[0] != 0; }

std::vector<HostTensor> SgdUpdate(const RefArgs& a) {
  const bool buffer = a.in.size() - ClipInputs(a) == 4;
  if (Skips(a)) return buffer ? std::vector<HostTensor>{a.in[0], a.in[3]} : std::vector<HostTensor>{a.in[0]};
  return Sgd(a.in[0], ClippedGradient(a, a.in[1].v), a.in[2].v[0], buffer ? &a.in[3] : nullptr, a.attrs);
}

// (param (M, N), a (K, M), b (K, N), lr [, buf] [, scale]) -> the SGD update with grad = a^T b
std::vector<HostTensor> MatmulSgdUpdate(const RefArgs& a) {
  const Attrs transposed_a{{"ta", int64_t(1)}};
  const std::vector<HostTensor> operands{a.in[1], a.in[2]};
  std::vector<HostTensor> g = MatMul(RefArgs{operands, transposed_a});
  const bool buffer = a.in.size() - ClipInputs(a) == 5;
  if (Skips(a)) return buffer ? std::vector<HostTensor>{a.in[0], a.in[4]} : std::vector<HostTensor>{a.in[0]};
  return Sgd(a.in[0], ClippedGradient(a, g[0].v), a.in[3].v[0], buffer ? &a.in[4] : nullptr, a.attrs);
}

// (param, grad, lr, m, v, step) -> param, m, v: Adam with bias correction at `step`; weight
// decay added to the gradient, or (decoupled, AdamW) applied to the parameter first.
std::vector<HostTensor> AdamUpdate(const RefArgs& a) {
  HostTensor p = a.in[0], m = a.in[3], v = a.in[4];
  if (Skips(a)) return {p, m, v};
  const double lr = a.in[2].v[0], step = a.in[5].v[0];
  const double b1 = a.attrs.Float("beta1"), b2 = a.attrs.Float("beta2"), eps = a.attrs.Float("eps");
  const double wd = a.attrs.Float("weight_decay", 0);
  const bool decoupled = a.attrs.Int("decoupled", 0) != 0;
  const std::vector<double> grad = ClippedGradient(a, a.in[1].v);
  for (size_t i = 0; i < p.v.size(); ++i) {
    double g = grad[i];
    if (decoupled) p.v[i] *= 1 - lr * wd;
    else g += wd * p.v[i];
    m.v[i] = b1 * m.v[i] + (1 - b1) * g;
    v.v[i] = b2 * v.v[i] + (1 - b2) * g * g;
    double mhat = m.v[i] / (1 - std::pow(b1, step)), vhat = v.v[i] / (1 - std::pow(b2, step));
    p.v[i] -= lr * mhat / (std::sqrt(vhat) + eps);
  }
  return {p, m, v};
}

std::vector<HostTensor> UpdateGroup(const RefArgs& a) {
  const size_t n = size_t(a.attrs.Int("members")), k = a.in.size() / n;
  const Attrs member = UpdateGroupMemberAttrs(a.attrs);
  const bool adam = a.attrs.Str("of") == "adam_update";
  std::vector<HostTensor> out;
  for (size_t i = 0; i < n; ++i) {
    const std::vector<HostTensor> in(a.in.begin() + ptrdiff_t(i * k), a.in.begin() + ptrdiff_t((i + 1) * k));
    const std::vector<HostTensor> o = adam ? AdamUpdate(RefArgs{in, member}) : SgdUpdate(RefArgs{in, member});
    out.insert(out.end(), o.begin(), o.end());
  }
  return out;
}

// (counter [, found_inf]) -> counter + 1, or counter when the flag is set
std::vector<HostTensor> Increment(const RefArgs& a) {
  const bool skip = a.in.size() == 2 && a.in[1].v[0] != 0;
  return {HostTensor({}, {a.in[0].v[0] + (skip ? 0 : 1)})};
}

// (g_1 ... g_n, scale, found_inf) -> g_1 ... g_n times the float32 reciprocal of the scale,
// found_inf: 1 when any product is NaN or infinite (Note [Loss scaling] in nn/loss_scale.h).
// The products are those of the kernels' dtype: each rounded to it (float32 or float64).
std::vector<HostTensor> UnscaleGrads(const RefArgs& a, DType dt) {
  const size_t n = a.in.size() - 2;
  const double inv = double(float(1.0 / a.in[n].v[0]));
  std::vector<HostTensor> out(a.in.begin(), a.in.begin() + int64_t(n));
  bool found = false;
  for (HostTensor& g : out)
    for (double& x : g.v) {
      x = dt == DType::kFloat32 ? double(float(x * inv)) : x * inv;
      found = found || !std::isfinite(x);
    }
  out.emplace_back(Shape{}, std::vector<double>{found ? 1.0 : 0.0});
  return out;
}

// (scale, good, skipped, found_inf) -> scale, good, skipped: torch.amp.GradScaler's update,
// written out from its definition (core/ops/loss_scale.cc), in double but for the float32
// range check of a grown scale.
std::vector<HostTensor> UpdateLossScale(const RefArgs& a) {
  double scale = a.in[0].v[0], good = a.in[1].v[0], skipped = a.in[2].v[0];
  if (a.in[3].v[0] != 0) {
    scale *= a.attrs.Float("backoff");
    good = 0;
    skipped += 1;
  } else if (++good >= double(a.attrs.Int("interval"))) {
    const double grown = scale * a.attrs.Float("growth");
    if (grown <= double(std::numeric_limits<float>::max())) scale = grown;
    good = 0;
  }
  return {HostTensor({}, {scale}), HostTensor({}, {good}), HostTensor({}, {skipped})};
}

// (step) -> the rate, for the segment kinds written out here from their definitions (nn/schedule.h).
std::vector<HostTensor> LrSchedule(const RefArgs& a) {
  const double step = a.in[0].v[0];
  const int64_t n = a.attrs.Int("segments");
  const std::vector<int64_t>& all = a.attrs.Ints("milestones");
  int64_t seg = 0, m0 = 0;
  for (int64_t i = 1; i < n; ++i) {
    const std::string k = "s" + std::to_string(i) + ".";
    if (a.attrs.Int(k + "start") <= step) {
      seg = i;
    }
  }
  for (int64_t i = 0; i < seg; ++i) m0 += a.attrs.Int("s" + std::to_string(i) + ".milestones");
  const std::string k = "s" + std::to_string(seg) + ".";
  const std::string kind = a.attrs.Str(k + "kind");
  const double t = step - double(a.attrs.Int(k + "start")), v0 = a.attrs.Float(k + "v0"), v1 = a.attrs.Float(k + "v1");
  const double gamma = a.attrs.Float(k + "gamma"), period = double(a.attrs.Int(k + "period"));
  double lr = v0;
  if (kind == "exponential") {
    lr = v0 * std::pow(gamma, a.attrs.Int(k + "staircase") ? std::floor(t / period) : t / period);
  } else if (kind == "multistep") {
    int passed = 0;
    for (int64_t i = 0; i < a.attrs.Int(k + "milestones"); ++i) passed += double(all[size_t(m0 + i)]) <= t;
    lr = v0 * std::pow(gamma, passed);
  } else if (kind == "cosine") {
    lr = v1 + (v0 - v1) * (1 + std::cos(M_PI * std::min(t, period) / period)) / 2;
  } else if (kind == "linear") {
    lr = period == 0 ? v1 : v0 + (v1 - v0) * std::min(t, period) / period;
  }
  return {HostTensor({}, {lr})};
}

// (g_1, ..., g_k) -> sqrt of the sum of all their squared elements
std::vector<HostTensor> GradNorm(const RefArgs& a) {
  double s = 0;
  for (const HostTensor& g : a.in)
    for (double x : g.v) s += x * x;
  return {HostTensor({}, {std::sqrt(s)})};
}

// ---------------------------------------------------------------- creation, random numbers

std::vector<HostTensor> Fill(const RefArgs& a) {
  HostTensor y(ShapeAttr(a.attrs, "shape"));
  std::fill(y.v.begin(), y.v.end(), RoundTo(DType(a.attrs.Int("dtype")), a.attrs.Float("value")));
  return {y};
}

// lo + (hi - lo) u, u = the top 24 bits of the element's word / 2^24
std::vector<HostTensor> Uniform(const RefArgs& a) {
  HostTensor y(ShapeAttr(a.attrs, "shape"));
  const double lo = a.attrs.Float("low"), hi = a.attrs.Float("high");
  for (int64_t i = 0; i < y.numel(); ++i) y.v[size_t(i)] = lo + (hi - lo) * Uniform01(PhiloxWord(a, i));
  return {y};
}

// Box-Muller on the word pairs (0, 1) and (2, 3) of each counter: u1 in (0, 1] from the first
// word, u2 in [0, 1) from the second; the even element takes the cosine, the odd one the sine.
std::vector<HostTensor> Normal(const RefArgs& a) {
  HostTensor y(ShapeAttr(a.attrs, "shape"));
  const double mean = a.attrs.Float("mean"), sd = a.attrs.Float("std");
  for (int64_t i = 0; i < y.numel(); ++i) {
    Philox4 r = Philox4x32(a.rng_seed, a.rng_counter + uint64_t(i / 4));
    int pair = int(i % 4) & ~1;
    double u1 = (double(r.v[pair] >> 8) + 1) / 16777217.0, u2 = double(r.v[pair + 1] >> 8) / 16777216.0;
    double rad = std::sqrt(-2 * std::log(u1)), angle = 2 * M_PI * u2;
    y.v[size_t(i)] = mean + sd * (i % 2 ? rad * std::sin(angle) : rad * std::cos(angle));
  }
  return {y};
}

std::vector<HostTensor> Bernoulli(const RefArgs& a) {
  HostTensor y(ShapeAttr(a.attrs, "shape"));
  const double p = a.attrs.Float("p");
  for (int64_t i = 0; i < y.numel(); ++i) y.v[size_t(i)] = Uniform01(PhiloxWord(a, i)) < p ? 1 : 0;
  return {y};
}

// x -> (x mask / (1 - p), mask) with mask = bernoulli(1 - p) at the device's counter
std::vector<HostTensor> Dropout(const RefArgs& a) {
  const HostTensor& x = a.in[0];
  const double p = a.attrs.Float("p");
  HostTensor y(x.shape), mask(x.shape);
  for (int64_t i = 0; i < x.numel(); ++i) {
    mask.v[size_t(i)] = Uniform01(PhiloxWord(a, i)) < 1 - p ? 1 : 0;
    y.v[size_t(i)] = mask.v[size_t(i)] * x.v[size_t(i)] / (1 - p);
  }
  return {y, mask};
}

// (mask, dy) -> dy mask / (1 - p)
std::vector<HostTensor> DropoutGrad(const RefArgs& a) {
  HostTensor dx(a.in[1].shape);
  for (size_t i = 0; i < dx.v.size(); ++i) dx.v[i] = a.in[0].v[i] * a.in[1].v[i] / (1 - a.attrs.Float("p"));
  return {dx};
}

std::vector<HostTensor> Copy(const RefArgs& a) { return {a.in[0]}; }

std::vector<HostTensor> Cast(const RefArgs& a) {
  HostTensor y = a.in[0];
  for (double& v : y.v) v = RoundTo(DType(a.attrs.Int("dtype")), v);
  return {y};
}

// ---------------------------------------------------------------- shape

std::vector<HostTensor> Concat(const RefArgs& a) {
  const size_t axis = size_t(AxisOf(a.attrs.Int("axis"), a.in[0].shape.size()));
  Shape out = a.in[0].shape;
  out[axis] = 0;
  for (const HostTensor& t : a.in) out[axis] += t.shape[axis];
  HostTensor y(out);
  for (int64_t k = 0; k < y.numel(); ++k) {
    std::vector<int64_t> idx = Unravel(k, out);
    size_t which = 0;
    while (idx[axis] >= a.in[which].shape[axis]) idx[axis] -= a.in[which++].shape[axis];
    y.v[size_t(k)] = a.in[which].v[size_t(Ravel(idx, a.in[which].shape))];
  }
  return {y};
}

namespace {
// The slice [start, end) of `axis` (negative positions count from the end) of a `full` shape.
struct SliceOf {
  size_t axis;
  int64_t start, end;
  SliceOf(const Attrs& a, const Shape& full) : axis(size_t(AxisOf(a.Int("axis"), full.size()))) {
    int64_t n = full[axis];
    start = a.Int("start") < 0 ? a.Int("start") + n : a.Int("start");
    end = a.Int("end") < 0 ? a.Int("end") + n : a.Int("end");
  }
  Shape Part(const Shape& full) const {
    Shape s = full;
    s[axis] = end - start;
    return s;
  }
};
}  // namespace

std::vector<HostTensor> Slice(const RefArgs& a) {
  const HostTensor& x = a.in[0];
  SliceOf s(a.attrs, x.shape);
  HostTensor y(s.Part(x.shape));
  for (int64_t k = 0; k < y.numel(); ++k) {
    std::vector<int64_t> idx = Unravel(k, y.shape);
    idx[s.axis] += s.start;
    y.v[size_t(k)] = x.v[size_t(Ravel(idx, x.shape))];
  }
  return {y};
}

// dy -> zeros of the attribute shape with dy at [start, end) of the axis
std::vector<HostTensor> SliceGrad(const RefArgs& a) {
  const HostTensor& dy = a.in[0];
  HostTensor dx(ShapeAttr(a.attrs, "shape"));
  SliceOf s(a.attrs, dx.shape);
  for (int64_t k = 0; k < dy.numel(); ++k) {
    std::vector<int64_t> idx = Unravel(k, dy.shape);
    idx[s.axis] += s.start;
    dx.v[size_t(Ravel(idx, dx.shape))] = dy.v[size_t(k)];
  }
  return {dx};
}

std::vector<HostTensor> BroadcastTo(const RefArgs& a) {
  const HostTensor& x = a.in[0];
  HostTensor y(ShapeAttr(a.attrs, "shape"));
  for (int64_t k = 0; k < y.numel(); ++k) y.v[size_t(k)] = x.v[size_t(BroadcastSource(Unravel(k, y.shape), x.shape, y.shape))];
  return {y};
}

std::vector<HostTensor> Reshape(const RefArgs& a) {
  Shape s = ShapeAttr(a.attrs, "shape");
  int64_t known = 1;
  for (int64_t d : s)
    if (d >= 0) known *= d;
  for (int64_t& d : s)
    if (d < 0) d = a.in[0].numel() / known;
  return {HostTensor(s, a.in[0].v)};
}

namespace {
// out axis d is input axis perm[d]
HostTensor PermuteOf(const HostTensor& x, const std::vector<int64_t>& perm) {
  Shape out(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) out[d] = x.shape[size_t(perm[d])];
  HostTensor y(out);
  for (int64_t k = 0; k < y.numel(); ++k) {
    std::vector<int64_t> oi = Unravel(k, out), ii(x.shape.size());
    for (size_t d = 0; d < perm.size(); ++d) ii[size_t(perm[d])] = oi[d];
    y.v[size_t(k)] = x.v[size_t(Ravel(ii, x.shape))];
  }
  return y;
}
}  // namespace

std::vector<HostTensor> Transpose(const RefArgs& a) {
  const size_t r = a.in[0].shape.size();
  std::vector<int64_t> perm(r);
  for (size_t d = 0; d < r; ++d) perm[d] = int64_t(d);
  std::swap(perm[size_t(AxisOf(a.attrs.Int("a"), r))], perm[size_t(AxisOf(a.attrs.Int("b"), r))]);
  return {PermuteOf(a.in[0], perm)};
}

std::vector<HostTensor> Permute(const RefArgs& a) {
  std::vector<int64_t> perm = a.attrs.Ints("perm");
  for (int64_t& p : perm) p = AxisOf(p, perm.size());
  return {PermuteOf(a.in[0], perm)};
}

}  // namespace ref
}  // namespace test
}  // namespace loom
