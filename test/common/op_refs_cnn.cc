// Float64 references of the convolutional-network ops: convolution and its three gradients,
// pooling, normalisation, embedding. Images are NCHW.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/harness.h"
#include "common/op_refs.h"

namespace loom {
namespace test {
namespace ref {
namespace {

std::vector<int64_t> Pair(const Attrs& a, const char* key, std::vector<int64_t> dflt) {
  return a.Has(key) ? a.Ints(key) : dflt;
}
Shape ShapeAttr(const Attrs& a, const char* key) {
  const std::vector<int64_t>& v = a.Ints(key);
  return Shape(v.begin(), v.end());
}

// A convolution's geometry: x (N, C, H, W), w (O, C/groups, KH, KW) -> y (N, O, OH, OW).
struct Conv {
  Shape x, w, y;
  std::vector<int64_t> stride, pad, pad_end, dil;
  int64_t groups;
  Conv(const Attrs& a, Shape xs, Shape ws)
      : x(std::move(xs)), w(std::move(ws)), stride(Pair(a, "stride", {1, 1})), pad(Pair(a, "padding", {0, 0})),
        pad_end(Pair(a, "padding_end", pad)), dil(Pair(a, "dilation", {1, 1})), groups(a.Int("groups", 1)) {
    int64_t oh = (x[2] + pad[0] + pad_end[0] - dil[0] * (w[2] - 1) - 1) / stride[0] + 1;
    int64_t ow = (x[3] + pad[1] + pad_end[1] - dil[1] * (w[3] - 1) - 1) / stride[1] + 1;
    y = {x[0], w[0], oh, ow};
  }
  // f(x index, w index, y index) for every product of the definition
  //   y[n, o, i, j] = sum over the group's channels c and taps (p, q) of
  //                   x[n, c, i sh - ph + p dh, j sw - pw + q dw] w[o, c - group start, p, q]
  // whose x position is inside the image (zero padding contributes nothing).
  template <typename F>
  void ForEachProduct(F f) const {
    const int64_t cg = w[1], og = w[0] / groups;
    for (int64_t n = 0; n < y[0]; ++n)
      for (int64_t o = 0; o < y[1]; ++o)
        for (int64_t i = 0; i < y[2]; ++i)
          for (int64_t j = 0; j < y[3]; ++j)
            for (int64_t ic = 0; ic < cg; ++ic)
              for (int64_t p = 0; p < w[2]; ++p)
                for (int64_t q = 0; q < w[3]; ++q) {
                  int64_t yy = i * stride[0] - pad[0] + p * dil[0], xx = j * stride[1] - pad[1] + q * dil[1];
                  if (yy < 0 || yy >= x[2] || xx < 0 || xx >= x[3]) continue;
                  int64_t c = o / og * cg + ic;
                  f(((n * x[1] + c) * x[2] + yy) * x[3] + xx, ((o * cg + ic) * w[2] + p) * w[3] + q,
                    ((n * y[1] + o) * y[2] + i) * y[3] + j);
                }
  }
};

// A pooling geometry: x (N, C, H, W) -> y (N, C, OH, OW), windows of kernel (kh, kw).
struct Pool {
  Shape x, y;
  int64_t kh, kw, sh, sw, ph, pw, peh, pew;
  Pool(const Attrs& a, Shape xs) : x(std::move(xs)) {
    std::vector<int64_t> k = a.Ints("kernel"), s = Pair(a, "stride", k), p = Pair(a, "padding", {0, 0});
    std::vector<int64_t> pe = Pair(a, "padding_end", p);
    kh = k[0], kw = k[1], sh = s[0], sw = s[1], ph = p[0], pw = p[1], peh = pe[0], pew = pe[1];
    y = {x[0], x[1], (x[2] + ph + peh - kh) / sh + 1, (x[3] + pw + pew - kw) / sw + 1};
  }
  // The positions of the window of output (i, j) inside the padded image, padding included.
  int64_t PaddedWindow(int64_t i, int64_t j) const {
    int64_t count = 0;
    for (int64_t a = 0; a < kh; ++a)
      for (int64_t b = 0; b < kw; ++b) {
        int64_t yy = i * sh - ph + a, xx = j * sw - pw + b;
        count += yy >= -ph && yy < x[2] + peh && xx >= -pw && xx < x[3] + pew;
      }
    return count;
  }
  // f(plane, output index in the plane, the window's pixel indices in the plane, row-major)
  template <typename F>
  void ForEachWindow(F f) const {
    std::vector<int64_t> pixels;
    for (int64_t plane = 0; plane < x[0] * x[1]; ++plane)
      for (int64_t i = 0; i < y[2]; ++i)
        for (int64_t j = 0; j < y[3]; ++j) {
          pixels.clear();
          for (int64_t a = 0; a < kh; ++a)
            for (int64_t b = 0; b < kw; ++b) {
              int64_t yy = i * sh - ph + a, xx = j * sw - pw + b;
              if (yy >= 0 && yy < x[2] && xx >= 0 && xx < x[3]) pixels.push_back(yy * x[3] + xx);
            }
          f(plane, i * y[3] + j, pixels);
        }
  }
  int64_t PlaneIn() const { return x[2] * x[3]; }
  int64_t PlaneOut() const { return y[2] * y[3]; }
};

// Per-channel statistics of x (N, C, S...) over N and S: mean and biased variance.
struct ChannelStats {
  int64_t n, c, s;
  std::vector<double> mean, var;
  explicit ChannelStats(const HostTensor& x) : n(x.shape[0]), c(x.shape[1]), s(x.numel() / (n * c)) {
    for (int64_t ch = 0; ch < c; ++ch) {
      double sum = 0, sq = 0;
      ForChannel(ch, [&](size_t at) { sum += x.v[at]; });
      double m = sum / double(n * s);
      ForChannel(ch, [&](size_t at) { sq += (x.v[at] - m) * (x.v[at] - m); });
      mean.push_back(m);
      var.push_back(sq / double(n * s));
    }
  }
  template <typename F>
  void ForChannel(int64_t ch, F f) const {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) f(size_t((i * c + ch) * s + k));
  }
  int64_t count() const { return n * s; }
};

// y = (x - mean) invstd gamma + beta per channel.
HostTensor Normalize(const HostTensor& x, const ChannelStats& st, const std::vector<double>& mean,
                     const std::vector<double>& invstd, const HostTensor& gamma, const HostTensor& beta) {
  HostTensor y(x.shape);
  for (int64_t ch = 0; ch < st.c; ++ch)
    st.ForChannel(ch, [&](size_t at) {
      y.v[at] = (x.v[at] - mean[size_t(ch)]) * invstd[size_t(ch)] * gamma.v[size_t(ch)] + beta.v[size_t(ch)];
    });
  return y;
}

}  // namespace

// ---------------------------------------------------------------- convolution

std::vector<HostTensor> Conv2d(const RefArgs& a) {
  Conv g(a.attrs, a.in[0].shape, a.in[1].shape);
  HostTensor y(g.y);
  if (a.in.size() == 3)
    for (int64_t k = 0; k < y.numel(); ++k) y.v[size_t(k)] = a.in[2].v[size_t(k / (g.y[2] * g.y[3]) % g.y[1])];
  g.ForEachProduct([&](int64_t xi, int64_t wi, int64_t yi) { y.v[size_t(yi)] += a.in[0].v[size_t(xi)] * a.in[1].v[size_t(wi)]; });
  return {y};
}

// The bf16 policy's conv2d (bfloat16 x and w): the convolution rounded to bfloat16, then the
// float32 bias added (Note [bfloat16 convolutions on cuDNN] in device/cuda/cudnn.cc).
std::vector<HostTensor> Conv2dBf16(const RefArgs& a) {
  const std::vector<HostTensor> xw(a.in.begin(), a.in.begin() + 2);
  std::vector<HostTensor> y = Conv2d(RefArgs{xw, a.attrs, a.rng_seed, a.rng_counter});
  const Shape& s = y[0].shape;
  const int64_t plane = s[2] * s[3];
  for (size_t i = 0; i < y[0].v.size(); ++i) {
    double& v = y[0].v[i];
    v = double(float(RoundTo(DType::kBFloat16, v)));
    if (a.in.size() == 3) v += a.in[2].v[size_t((int64_t(i) / plane) % s[1])];
  }
  return y;
}

std::vector<HostTensor> Conv2dRelu(const RefArgs& a) {
  std::vector<HostTensor> y = Conv2d(a);
  for (double& v : y[0].v) v = v > 0 ? v : 0.0;
  return y;
}

// (w, dy) -> dx of x_shape: the adjoint of the convolution in x
std::vector<HostTensor> Conv2dGradInput(const RefArgs& a) {
  Conv g(a.attrs, ShapeAttr(a.attrs, "x_shape"), a.in[0].shape);
  HostTensor dx(g.x);
  g.ForEachProduct([&](int64_t xi, int64_t wi, int64_t yi) { dx.v[size_t(xi)] += a.in[0].v[size_t(wi)] * a.in[1].v[size_t(yi)]; });
  return {dx};
}

// (x, dy) -> dw of w_shape: the adjoint of the convolution in w
std::vector<HostTensor> Conv2dGradWeight(const RefArgs& a) {
  Conv g(a.attrs, a.in[0].shape, ShapeAttr(a.attrs, "w_shape"));
  HostTensor dw(g.w);
  g.ForEachProduct([&](int64_t xi, int64_t wi, int64_t yi) { dw.v[size_t(wi)] += a.in[0].v[size_t(xi)] * a.in[1].v[size_t(yi)]; });
  return {dw};
}

// dy (N, O, OH, OW) -> db (O): the sum over N, OH and OW
std::vector<HostTensor> Conv2dGradBias(const RefArgs& a) {
  const HostTensor& dy = a.in[0];
  HostTensor db(Shape{dy.shape[1]});
  const int64_t plane = dy.shape[2] * dy.shape[3];
  for (int64_t k = 0; k < dy.numel(); ++k) db.v[size_t(k / plane % dy.shape[1])] += dy.v[size_t(k)];
  return {db};
}

// w (O, C, KH, KW): blocked = 1: OIHW -> OIhw16i16o, 0: back. In OIhw16i16o, the value of
// (o, c, kh, kw) sits at [o/16][c/16][kh][kw][c%16][o%16] (oneDNN's definition of the tag).
std::vector<HostTensor> ConvWeightLayout(const RefArgs& a) {
  const HostTensor& w = a.in[0];
  const int64_t o = w.shape[0], c = w.shape[1], kh = w.shape[2], kw = w.shape[3];
  const bool to_blocked = a.attrs.Int("blocked") != 0;
  HostTensor out(w.shape);
  for (int64_t i = 0; i < o; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t y = 0; y < kh; ++y)
        for (int64_t x = 0; x < kw; ++x) {
          const int64_t plain = ((i * c + j) * kh + y) * kw + x;
          const int64_t blocked = ((((i / 16 * (c / 16) + j / 16) * kh + y) * kw + x) * 16 + j % 16) * 16 + i % 16;
          if (to_blocked) out.v[size_t(blocked)] = w.v[size_t(plain)];
          else out.v[size_t(plain)] = w.v[size_t(blocked)];
        }
  return {out};
}

// ---------------------------------------------------------------- pooling

// -> (y, argmax): the first maximum of each window (padding never wins), and its index in the plane
std::vector<HostTensor> MaxPool2d(const RefArgs& a) {
  Pool g(a.attrs, a.in[0].shape);
  HostTensor y(g.y), arg(g.y);
  g.ForEachWindow([&](int64_t plane, int64_t out, const std::vector<int64_t>& pixels) {
    const double* xp = a.in[0].v.data() + plane * g.PlaneIn();
    int64_t best = pixels[0];  // the first maximum; the first NaN wins over numbers
    for (int64_t p : pixels)
      if (xp[p] > xp[best] || (std::isnan(xp[p]) && !std::isnan(xp[best]))) best = p;
    y.v[size_t(plane * g.PlaneOut() + out)] = xp[best];
    arg.v[size_t(plane * g.PlaneOut() + out)] = double(best);
  });
  return {y, arg};
}

// (argmax, dy) -> dx of x_shape: each dy added at its window's argmax
std::vector<HostTensor> MaxPool2dGrad(const RefArgs& a) {
  Pool g(a.attrs, ShapeAttr(a.attrs, "x_shape"));
  HostTensor dx(g.x);
  for (int64_t k = 0; k < a.in[1].numel(); ++k)
    dx.v[size_t(k / g.PlaneOut() * g.PlaneIn() + int64_t(a.in[0].v[size_t(k)]))] += a.in[1].v[size_t(k)];
  return {dx};
}

namespace {
// The divisor of window `out`: with count_include_pad its positions inside the padded image,
// else its pixels inside the image.
double WindowCount(const Attrs& a, const Pool& g, int64_t out, const std::vector<int64_t>& pixels) {
  return a.Int("count_include_pad", 1) ? double(g.PaddedWindow(out / g.y[3], out % g.y[3])) : double(pixels.size());
}
}  // namespace

std::vector<HostTensor> AvgPool2d(const RefArgs& a) {
  Pool g(a.attrs, a.in[0].shape);
  HostTensor y(g.y);
  g.ForEachWindow([&](int64_t plane, int64_t out, const std::vector<int64_t>& pixels) {
    double s = 0;
    for (int64_t p : pixels) s += a.in[0].v[size_t(plane * g.PlaneIn() + p)];
    y.v[size_t(plane * g.PlaneOut() + out)] = s / WindowCount(a.attrs, g, out, pixels);
  });
  return {y};
}

// dy -> dx of x_shape: each window's dy spread evenly over its pixels (the adjoint)
std::vector<HostTensor> AvgPool2dGrad(const RefArgs& a) {
  Pool g(a.attrs, ShapeAttr(a.attrs, "x_shape"));
  HostTensor dx(g.x);
  g.ForEachWindow([&](int64_t plane, int64_t out, const std::vector<int64_t>& pixels) {
    double share = a.in[0].v[size_t(plane * g.PlaneOut() + out)] / WindowCount(a.attrs, g, out, pixels);
    for (int64_t p : pixels) dx.v[size_t(plane * g.PlaneIn() + p)] += share;
  });
  return {dx};
}

std::vector<HostTensor> GlobalAvgPool(const RefArgs& a) {
  const HostTensor& x = a.in[0];
  HostTensor y(Shape{x.shape[0], x.shape[1]});
  const int64_t plane = x.shape[2] * x.shape[3];
  for (int64_t k = 0; k < x.numel(); ++k) y.v[size_t(k / plane)] += x.v[size_t(k)] / double(plane);
  return {y};
}

std::vector<HostTensor> GlobalAvgPoolGrad(const RefArgs& a) {
  HostTensor dx(ShapeAttr(a.attrs, "x_shape"));
  const int64_t plane = dx.shape[2] * dx.shape[3];
  for (int64_t k = 0; k < dx.numel(); ++k) dx.v[size_t(k)] = a.in[0].v[size_t(k / plane)] / double(plane);
  return {dx};
}

// ---------------------------------------------------------------- normalisation

// relu = 1 (graph/fuse_bn_relu.cc): relu(y [+ residual, input 5]); else y.
HostTensor FusedReluOf(const RefArgs& a, HostTensor y) {
  if (a.attrs.Int("relu", 0))
    for (size_t k = 0; k < y.v.size(); ++k) {
      const double v = y.v[k] + (a.in.size() > 5 ? a.in[5].v[k] : 0.0);
      y.v[k] = v > 0 || v != v ? v : 0.0;
    }
  return y;
}

// (x, gamma, beta, running_mean, running_var) -> y, batch mean, batch invstd, and the running
// statistics moved by momentum towards the batch mean and the unbiased batch variance
std::vector<HostTensor> BatchNormTrain(const RefArgs& a) {
  const HostTensor& x = a.in[0];
  const double eps = a.attrs.Float("eps"), mom = a.attrs.Float("momentum");
  ChannelStats st(x);
  HostTensor mean(Shape{st.c}, st.mean), invstd(Shape{st.c}), rm = a.in[3], rv = a.in[4];
  for (int64_t ch = 0; ch < st.c; ++ch) {
    size_t c = size_t(ch);
    invstd.v[c] = 1 / std::sqrt(st.var[c] + eps);
    rm.v[c] = (1 - mom) * rm.v[c] + mom * st.mean[c];
    rv.v[c] = (1 - mom) * rv.v[c] + mom * st.var[c] * double(st.count()) / double(st.count() - 1);
  }
  return {FusedReluOf(a, Normalize(x, st, st.mean, invstd.v, a.in[1], a.in[2])), mean, invstd, rm, rv};
}

// (x, gamma, beta, mean, invstd [, residual]) -> y, normalised with the given statistics
std::vector<HostTensor> BatchNormApply(const RefArgs& a) {
  return {FusedReluOf(a, Normalize(a.in[0], ChannelStats(a.in[0]), a.in[3].v, a.in[4].v, a.in[1], a.in[2]))};
}

std::vector<HostTensor> BatchNormInfer(const RefArgs& a) {
  ChannelStats st(a.in[0]);
  std::vector<double> invstd;
  for (double v : a.in[4].v) invstd.push_back(1 / std::sqrt(v + a.attrs.Float("eps")));
  return {Normalize(a.in[0], st, a.in[3].v, invstd, a.in[1], a.in[2])};
}

// (x, gamma, mean, s, dy) -> dx, dgamma, dbeta. training: s is the batch invstd and dx goes
// through the batch statistics too; otherwise s is the running variance, a constant.
std::vector<HostTensor> BatchNormGrad(const RefArgs& a) {
  const HostTensor &x = a.in[0], &gamma = a.in[1], &mean = a.in[2], &s = a.in[3], &dy = a.in[4];
  const bool training = a.attrs.Int("training") != 0;
  ChannelStats st(x);
  HostTensor dx(x.shape), dg(gamma.shape), db(gamma.shape);
  for (int64_t ch = 0; ch < st.c; ++ch) {
    const size_t c = size_t(ch);
    const double invstd = training ? s.v[c] : 1 / std::sqrt(s.v[c] + a.attrs.Float("eps"));
    st.ForChannel(ch, [&](size_t at) {
      db.v[c] += dy.v[at];
      dg.v[c] += dy.v[at] * (x.v[at] - mean.v[c]) * invstd;
    });
    const double m = double(st.count());
    st.ForChannel(ch, [&](size_t at) {
      double xhat = (x.v[at] - mean.v[c]) * invstd;
      dx.v[at] = gamma.v[c] * invstd * (training ? dy.v[at] - db.v[c] / m - xhat * dg.v[c] / m : dy.v[at]);
    });
  }
  return {dx, dg, db};
}

namespace {
// x (..., D...) normalised over its last gamma.rank axes: R rows of D values.
struct Rows {
  int64_t r, d;
  Shape lead;
  Rows(const HostTensor& x, const HostTensor& gamma)
      : r(x.numel() / gamma.numel()), d(gamma.numel()), lead(x.shape.begin(), x.shape.end() - gamma.shape.size()) {}
};
}  // namespace

// (x, gamma, beta) -> y, mean, invstd (one per row)
std::vector<HostTensor> LayerNorm(const RefArgs& a) {
  const HostTensor &x = a.in[0], &g = a.in[1], &b = a.in[2];
  Rows rows(x, g);
  HostTensor y(x.shape), mean(rows.lead), invstd(rows.lead);
  for (int64_t r = 0; r < rows.r; ++r) {
    const double* xr = x.v.data() + r * rows.d;
    double m = 0, var = 0;
    for (int64_t j = 0; j < rows.d; ++j) m += xr[j] / double(rows.d);
    for (int64_t j = 0; j < rows.d; ++j) var += (xr[j] - m) * (xr[j] - m) / double(rows.d);
    mean.v[size_t(r)] = m;
    invstd.v[size_t(r)] = 1 / std::sqrt(var + a.attrs.Float("eps"));
    for (int64_t j = 0; j < rows.d; ++j)
      y.v[size_t(r * rows.d + j)] = (xr[j] - m) * invstd.v[size_t(r)] * g.v[size_t(j)] + b.v[size_t(j)];
  }
  return {y, mean, invstd};
}

// (x, gamma, mean, invstd, dy) -> dx = invstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) with
// dxhat = dy gamma, dgamma = sum over rows of dy xhat, dbeta = sum over rows of dy
std::vector<HostTensor> LayerNormGrad(const RefArgs& a) {
  const HostTensor &x = a.in[0], &g = a.in[1], &mean = a.in[2], &invstd = a.in[3], &dy = a.in[4];
  Rows rows(x, g);
  HostTensor dx(x.shape), dg(g.shape), db(g.shape);
  for (int64_t r = 0; r < rows.r; ++r) {
    const double m = mean.v[size_t(r)], is = invstd.v[size_t(r)];
    double s1 = 0, s2 = 0;
    for (int64_t j = 0; j < rows.d; ++j) {
      size_t at = size_t(r * rows.d + j);
      double xhat = (x.v[at] - m) * is, dxhat = dy.v[at] * g.v[size_t(j)];
      s1 += dxhat;
      s2 += dxhat * xhat;
      dg.v[size_t(j)] += dy.v[at] * xhat;
      db.v[size_t(j)] += dy.v[at];
    }
    for (int64_t j = 0; j < rows.d; ++j) {
      size_t at = size_t(r * rows.d + j);
      double xhat = (x.v[at] - m) * is;
      dx.v[at] = is * (dy.v[at] * g.v[size_t(j)] - s1 / double(rows.d) - xhat * s2 / double(rows.d));
    }
  }
  return {dx, dg, db};
}

// ---------------------------------------------------------------- embedding

// (table (V, D), indices (...)) -> (..., D): the indexed rows
std::vector<HostTensor> Embedding(const RefArgs& a) {
  const HostTensor &table = a.in[0], &idx = a.in[1];
  const int64_t d = table.shape[1];
  Shape out = idx.shape;
  out.push_back(d);
  HostTensor y(out);
  for (int64_t k = 0; k < idx.numel(); ++k)
    for (int64_t j = 0; j < d; ++j) y.v[size_t(k * d + j)] = table.v[size_t(int64_t(idx.v[size_t(k)]) * d + j)];
  return {y};
}

// (indices (...), dy (..., D)) -> (num_rows, D): dy's rows added into the indexed rows
std::vector<HostTensor> EmbeddingGrad(const RefArgs& a) {
  const HostTensor &idx = a.in[0], &dy = a.in[1];
  const int64_t d = dy.shape.back();
  HostTensor dt(Shape{a.attrs.Int("num_rows"), d});
  for (int64_t k = 0; k < idx.numel(); ++k)
    for (int64_t j = 0; j < d; ++j) dt.v[size_t(int64_t(idx.v[size_t(k)]) * d + j)] += dy.v[size_t(k * d + j)];
  return {dt};
}

}  // namespace ref
}  // namespace test
}  // namespace loom
