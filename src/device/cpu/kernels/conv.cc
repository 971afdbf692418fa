// CPU convolution: im2col + OpenBLAS GEMM, one image at a time.
//
// Per image, im2col lays the input patches out as a (C KH KW, OH OW) matrix whose rows are
// ordered (c, kh, kw), so group g's rows are one contiguous block; then per group
//   y_g (O/g, OH OW) = w_g (O/g, C/g KH KW) col_g (C/g KH KW, OH OW).
// The backward passes are the same GEMMs transposed: dcol_g = w_g^T dy_g followed by col2im
// (scatter-add into dx), and dw_g += dy_g col_g^T summed over the images in order.
// A 1x1 convolution with stride 1 and no padding needs no im2col: the image is its own col.
//
// Threads: a GEMM big enough for OpenBLAS to thread runs alone, images one after another, with
// im2col/col2im split across our pool; smaller per-image GEMMs (late, small feature maps, or
// grouped convolutions) are instead split by image across the pool, each part with its own
// scratch. The split is fixed by (N, thread count), never by timing, and weight gradients are
// reduced in part order, so results are deterministic.
//
// Scratch (the col matrices, partial weight gradients) comes from ctx.device->Malloc, so the
// device's memory statistics count it (DESIGN.md invariant 2).
#include <algorithm>
#include <cstring>

#include "device/cpu/blas.h"
#include "device/cpu/kernels/common.h"
#include "device/device.h"

namespace loom {
namespace cpu {
namespace {

// See kSmallGemm in kernels/linalg.cc: below this many multiply-adds OpenBLAS uses one thread.
constexpr int64_t kSmallGemm = 65536 * 4;

// Device memory for the duration of one kernel call, given back even when the kernel throws.
class Scratch {
 public:
  Scratch(Device* d, size_t bytes) : d_(d), p_(bytes ? d->Malloc(bytes) : nullptr) {}
  ~Scratch() {
    if (p_) d_->Free(p_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p_); }

 private:
  Device* d_;
  void* p_;
};

struct Geom {
  int64_t n, c, h, w;        // input
  int64_t o, kh, kw;         // weight (O, C/g, KH, KW)
  int64_t oh, ow;            // output
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int64_t cg() const { return c / groups; }
  int64_t og() const { return o / groups; }
  int64_t kk() const { return kh * kw; }
  int64_t hw() const { return h * w; }
  int64_t ohw() const { return oh * ow; }
  int64_t rows() const { return c * kk(); }         // rows of col
  int64_t col_size() const { return rows() * ohw(); }
  bool direct() const {  // 1x1, stride 1, no padding: col is the image itself
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0;
  }
  int64_t gemm_work() const { return og() * ohw() * cg() * kk(); }  // multiply-adds per group GEMM
};

Geom MakeGeom(const Attrs& a, const Shape& x, const Shape& w, const Shape& y) {
  const std::vector<int64_t>& s = a.Ints("stride");
  const std::vector<int64_t>& p = a.Ints("padding");
  const std::vector<int64_t>& d = a.Ints("dilation");
  return Geom{x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], s[0], s[1], p[0], p[1], d[0], d[1],
              a.Int("groups")};
}

// The range [lo, hi) of output positions o in [0, out) whose input position o*s - p + k*d lies
// in [0, in).
inline void ValidRange(int64_t in, int64_t out, int64_t s, int64_t p, int64_t kd, int64_t& lo, int64_t& hi) {
  int64_t first = p - kd;  // o*s >= first
  lo = first <= 0 ? 0 : (first + s - 1) / s;
  int64_t last = in - 1 + p - kd;  // o*s <= last
  hi = last < 0 ? 0 : std::min(out, last / s + 1);
  if (hi < lo) hi = lo;
}

// x: (C, H, W) -> col: (C KH KW, OH OW), rows [r0, r1)
template <typename T>
void Im2ColRows(const T* x, T* col, const Geom& g, int64_t r0, int64_t r1) {
  const int64_t ohw = g.ohw();
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t c = r / g.kk(), ki = (r / g.kw) % g.kh, kj = r % g.kw;
    const T* xc = x + c * g.hw();
    T* cr = col + r * ohw;
    int64_t ow0, ow1, oh0, oh1;
    ValidRange(g.w, g.ow, g.sw, g.pw, kj * g.dw, ow0, ow1);
    ValidRange(g.h, g.oh, g.sh, g.ph, ki * g.dh, oh0, oh1);
    std::fill(cr, cr + oh0 * g.ow, T(0));
    for (int64_t oi = oh0; oi < oh1; ++oi) {
      T* dst = cr + oi * g.ow;
      const T* src = xc + (oi * g.sh - g.ph + ki * g.dh) * g.w - g.pw + kj * g.dw;  // src[oj * sw] for oj in range
      std::fill(dst, dst + ow0, T(0));
      if (g.sw == 1) {
        std::memcpy(dst + ow0, src + ow0, size_t(ow1 - ow0) * sizeof(T));
      } else {
        for (int64_t oj = ow0; oj < ow1; ++oj) dst[oj] = src[oj * g.sw];
      }
      std::fill(dst + ow1, dst + g.ow, T(0));
    }
    std::fill(cr + oh1 * g.ow, cr + ohw, T(0));
  }
}

// col: (C KH KW, OH OW) -> dx: (C, H, W) = the sum of every patch entry into its pixel,
// channels [c0, c1) (their rows touch only their own planes).
template <typename T>
void Col2ImChannels(const T* col, T* dx, const Geom& g, int64_t c0, int64_t c1) {
  const int64_t ohw = g.ohw();
  for (int64_t c = c0; c < c1; ++c) {
    T* xc = dx + c * g.hw();
    std::fill(xc, xc + g.hw(), T(0));
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const T* cr = col + ((c * g.kh + ki) * g.kw + kj) * ohw;
        int64_t ow0, ow1, oh0, oh1;
        ValidRange(g.w, g.ow, g.sw, g.pw, kj * g.dw, ow0, ow1);
        ValidRange(g.h, g.oh, g.sh, g.ph, ki * g.dh, oh0, oh1);
        for (int64_t oi = oh0; oi < oh1; ++oi) {
          const T* src = cr + oi * g.ow;
          T* dst = xc + (oi * g.sh - g.ph + ki * g.dh) * g.w - g.pw + kj * g.dw;
          if (g.sw == 1) {
            for (int64_t oj = ow0; oj < ow1; ++oj) dst[oj] += src[oj];
          } else {
            for (int64_t oj = ow0; oj < ow1; ++oj) dst[oj * g.sw] += src[oj];
          }
        }
      }
  }
}

template <typename T>
void Im2Col(const T* x, T* col, const Geom& g) {
  ParallelFor(g.rows(), std::max<int64_t>(1, kGrain / std::max<int64_t>(g.ohw(), 1)),
              [&](int64_t r0, int64_t r1) { Im2ColRows(x, col, g, r0, r1); });
}

template <typename T>
void Col2Im(const T* col, T* dx, const Geom& g) {
  ParallelFor(g.c, std::max<int64_t>(1, kGrain / std::max<int64_t>(g.kk() * g.ohw(), 1)),
              [&](int64_t c0, int64_t c1) { Col2ImChannels(col, dx, g, c0, c1); });
}

// How the images are spread: `parts` parts of consecutive images, each with its own scratch.
// One part (images in order, OpenBLAS threading each GEMM) unless the GEMMs are small.
int64_t ImageParts(const Geom& g) {
  if (g.gemm_work() * g.groups >= kSmallGemm || g.n < 2) return 1;
  const int64_t chunk = (g.n + NumThreads() - 1) / NumThreads();
  return (g.n + chunk - 1) / chunk;  // no empty part
}

// Calls f(part, n0, n1) for each part's images [n0, n1), the parts spread across the pool.
template <typename F>
void ForEachPart(int64_t n, int64_t parts, F f) {
  const int64_t chunk = (n + parts - 1) / parts;
  ParallelFor(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) f(p, p * chunk, std::min(n, (p + 1) * chunk));
  });
}

template <typename T>
void Conv2dTyped(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& tx = op.inputs[0];
  const Tensor& tw = op.inputs[1];
  const Tensor& ty = op.outputs[0];
  const Geom g = MakeGeom(op.attrs, tx.shape(), tw.shape(), ty.shape());
  const T* x = tx.data<T>();
  const T* w = tw.data<T>();
  const T* bias = op.inputs.size() == 3 ? op.inputs[2].data<T>() : nullptr;
  T* y = ty.data<T>();
  if (ty.numel() == 0) return;
  const int64_t parts = ImageParts(g);
  const int64_t col_size = g.direct() ? 0 : g.col_size();
  Scratch scratch(ctx.device, size_t(parts * col_size) * sizeof(T));
  const int64_t wsize = g.og() * g.cg() * g.kk();
  ForEachPart(g.n, parts, [&](int64_t p, int64_t n0, int64_t n1) {
    T* col = scratch.as<T>() + p * col_size;
    for (int64_t n = n0; n < n1; ++n) {
      const T* xn = x + n * g.c * g.hw();
      T* yn = y + n * g.o * g.ohw();
      const T* cn = xn;
      if (!g.direct()) {
        Im2Col(xn, col, g);
        cn = col;
      }
      for (int64_t gi = 0; gi < g.groups; ++gi)
        Gemm(false, false, g.og(), g.ohw(), g.cg() * g.kk(), T(1), w + gi * wsize, g.cg() * g.kk(),
             cn + gi * g.cg() * g.kk() * g.ohw(), g.ohw(), T(0), yn + gi * g.og() * g.ohw(), g.ohw());
      if (bias)
        for (int64_t o = 0; o < g.o; ++o) {
          T* row = yn + o * g.ohw();
          const T b = bias[o];
          for (int64_t i = 0; i < g.ohw(); ++i) row[i] += b;
        }
    }
  });
}

template <typename T>
void Conv2dGradInputTyped(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& tw = op.inputs[0];
  const Tensor& tdy = op.inputs[1];
  const Tensor& tdx = op.outputs[0];
  const Geom g = MakeGeom(op.attrs, tdx.shape(), tw.shape(), tdy.shape());
  const T* w = tw.data<T>();
  const T* dy = tdy.data<T>();
  T* dx = tdx.data<T>();
  if (tdx.numel() == 0) return;
  const int64_t parts = ImageParts(g);
  const int64_t col_size = g.direct() ? 0 : g.col_size();
  Scratch scratch(ctx.device, size_t(parts * col_size) * sizeof(T));
  const int64_t wsize = g.og() * g.cg() * g.kk();
  ForEachPart(g.n, parts, [&](int64_t p, int64_t n0, int64_t n1) {
    T* col = scratch.as<T>() + p * col_size;
    for (int64_t n = n0; n < n1; ++n) {
      const T* dyn = dy + n * g.o * g.ohw();
      T* dxn = dx + n * g.c * g.hw();
      T* cn = g.direct() ? dxn : col;  // direct: dx_n is dcol itself
      for (int64_t gi = 0; gi < g.groups; ++gi)
        Gemm(true, false, g.cg() * g.kk(), g.ohw(), g.og(), T(1), w + gi * wsize, g.cg() * g.kk(),
             dyn + gi * g.og() * g.ohw(), g.ohw(), T(0), cn + gi * g.cg() * g.kk() * g.ohw(), g.ohw());
      if (!g.direct()) Col2Im(col, dxn, g);
    }
  });
}

template <typename T>
void Conv2dGradWeightTyped(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& tx = op.inputs[0];
  const Tensor& tdy = op.inputs[1];
  const Tensor& tdw = op.outputs[0];
  const Geom g = MakeGeom(op.attrs, tx.shape(), tdw.shape(), tdy.shape());
  const T* x = tx.data<T>();
  const T* dy = tdy.data<T>();
  T* dw = tdw.data<T>();
  const int64_t wtotal = tdw.numel();
  if (wtotal == 0) return;
  if (g.n == 0 || g.ohw() == 0) {
    std::fill(dw, dw + wtotal, T(0));
    return;
  }
  const int64_t parts = ImageParts(g);
  const int64_t col_size = g.direct() ? 0 : g.col_size();
  // Each part but the first accumulates into its own partial gradient, added in part order.
  const int64_t partial = parts > 1 ? wtotal : 0;
  Scratch scratch(ctx.device, size_t(parts * (col_size + partial)) * sizeof(T));
  const int64_t wsize = g.og() * g.cg() * g.kk();
  ForEachPart(g.n, parts, [&](int64_t p, int64_t n0, int64_t n1) {
    T* col = scratch.as<T>() + p * col_size;
    T* acc = p == 0 ? dw : scratch.as<T>() + parts * col_size + p * partial;
    for (int64_t n = n0; n < n1; ++n) {
      const T* xn = x + n * g.c * g.hw();
      const T* dyn = dy + n * g.o * g.ohw();
      const T* cn = xn;
      if (!g.direct()) {
        Im2Col(xn, col, g);
        cn = col;
      }
      for (int64_t gi = 0; gi < g.groups; ++gi)
        Gemm(false, true, g.og(), g.cg() * g.kk(), g.ohw(), T(1), dyn + gi * g.og() * g.ohw(), g.ohw(),
             cn + gi * g.cg() * g.kk() * g.ohw(), g.ohw(), T(n == n0 ? 0 : 1), acc + gi * wsize, g.cg() * g.kk());
    }
  });
  for (int64_t p = 1; p < parts; ++p) {
    const T* part = scratch.as<T>() + parts * col_size + p * partial;
    for (int64_t i = 0; i < wtotal; ++i) dw[i] += part[i];
  }
}

// x: (N, C, H, W), w: (O, C/g, KH, KW) [, bias: (O)] -> y: (N, O, OH, OW)
void Conv2dCpu(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "conv2d", [&](auto tag) { Conv2dTyped<decltype(tag)>(op, ctx); });
}

// w: (O, C/g, KH, KW), dy: (N, O, OH, OW) -> dx: (N, C, H, W)
void Conv2dGradInputCpu(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "conv2d_grad_input",
                [&](auto tag) { Conv2dGradInputTyped<decltype(tag)>(op, ctx); });
}

// x: (N, C, H, W), dy: (N, O, OH, OW) -> dw: (O, C/g, KH, KW)
void Conv2dGradWeightCpu(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "conv2d_grad_weight",
                [&](auto tag) { Conv2dGradWeightTyped<decltype(tag)>(op, ctx); });
}

// dy: (N, O, OH, OW) -> db: (O); split by channel, each summed in (n, pixel) order
void Conv2dGradBiasCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "conv2d_grad_bias", [&](auto tag) {
    using T = decltype(tag);
    const Shape& s = op.inputs[0].shape();
    const int64_t n = s[0], o = s[1], hw = s[2] * s[3];
    const T* dy = op.inputs[0].data<T>();
    T* db = op.outputs[0].data<T>();
    ParallelFor(o, std::max<int64_t>(1, kGrain / std::max<int64_t>(n * hw, 1)), [&](int64_t o0, int64_t o1) {
      for (int64_t c = o0; c < o1; ++c) {
        double acc = 0;
        for (int64_t i = 0; i < n; ++i) {
          const T* row = dy + (i * o + c) * hw;
          double part = 0;
          for (int64_t k = 0; k < hw; ++k) part += double(row[k]);
          acc += part;
        }
        db[c] = T(acc);
      }
    });
  });
}

}  // namespace

LOOM_KERNEL(conv2d, kCPU, Conv2dCpu);
LOOM_KERNEL(conv2d_grad_input, kCPU, Conv2dGradInputCpu);
LOOM_KERNEL(conv2d_grad_weight, kCPU, Conv2dGradWeightCpu);
LOOM_KERNEL(conv2d_grad_bias, kCPU, Conv2dGradBiasCpu);

}  // namespace cpu
}  // namespace loom
