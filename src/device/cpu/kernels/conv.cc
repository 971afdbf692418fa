// CPU convolution. float32 goes to oneDNN when loom is built with it (Note [oneDNN convolution]
// in conv_dnnl.h); everything else, and everything without oneDNN, runs here: im2col + OpenBLAS
// GEMM over chunks of images.
//
// im2col lays the input patches of a chunk of B images out as a (C KH KW, B OH OW) matrix: rows
// ordered (c, kh, kw), so group g's rows are one contiguous block, and image b's patches in
// columns [b OH OW, (b + 1) OH OW). Then per group
//   y_g (O/g, B OH OW) = w_g (O/g, C/g KH KW) col_g (C/g KH KW, B OH OW).
// The backward passes are the same GEMMs transposed: dcol_g = w_g^T dy_g followed by col2im
// (scatter-add into dx), and dw_g += dy_g col_g^T over the chunks in order.
//
// Chunks: one image when its feature map is large (the GEMM writes straight into y, reads dy in
// place); several when it is small, so that the GEMM is wide enough to run near peak (a late
// 8x8 layer would otherwise be 64 columns wide). With B > 1, the outputs go through a
// (O, B OH OW) scratch matrix, and dy is gathered into one. A 1x1 convolution with stride 1 and
// no padding, one image per chunk, needs no im2col: the image is its own col matrix.
//
// Threads: a GEMM big enough for OpenBLAS to thread runs alone, chunks one after another, with
// im2col/col2im split across our pool; smaller ones (grouped convolutions, tiny layers) are
// split by chunk across the pool instead, each part with its own scratch. The split is fixed by
// (N, thread count), never by timing, and weight gradients are reduced in part order, so
// results are deterministic.
//
// Scratch (col matrices, gathered dy, outputs, partial weight gradients) comes from
// ctx.device->Malloc, so the device's memory statistics count it (docs/design.md invariant 2).
#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>

#include "device/cpu/blas.h"
#include "core/half.h"
#include "device/cpu/kernels/common.h"
#include "core/bias_act_formulas.h"
#include "device/cpu/kernels/conv_dnnl.h"
#include "core/device.h"
#include "device/kernel_report.h"

namespace loom {
namespace cpu {
namespace {

// See kSmallGemm in kernels/linalg.cc: below this many multiply-adds OpenBLAS uses one thread.
constexpr int64_t kSmallGemm = 65536 * 4;
// Chunks hold enough images for this many GEMM columns (B OH OW) ...
constexpr int64_t kTargetColumns = 1024;
// ... as long as their col matrix stays under this many elements.
constexpr int64_t kMaxColElements = int64_t(4) << 20;

// The forward convolution's geometry (ConvDims, shared with the oneDNN path) and the sizes the
// im2col kernels derive from it.
struct Geom : ConvDims {
  int64_t cg() const { return c / groups; }
  int64_t og() const { return o / groups; }
  int64_t kk() const { return kh * kw; }
  int64_t hw() const { return h * w; }
  int64_t ohw() const { return oh * ow; }
  int64_t rows() const { return c * kk(); }      // rows of col
  int64_t grows() const { return cg() * kk(); }  // rows of one group's block of col
  // 1x1, stride 1, no padding: im2col would copy the image. The output size says whether the
  // end is padded (Note [Asymmetric padding] in core/ops_cnn.h).
  bool one_by_one() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && oh == h && ow == w;
  }
};

Geom MakeGeom(const Attrs& a, const Shape& x, const Shape& w, const Shape& y) {
  const std::vector<int64_t>& s = a.Ints("stride");
  const std::vector<int64_t>& p = a.Ints("padding");
  const std::vector<int64_t>& d = a.Ints("dilation");
  return Geom{{x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], s[0], s[1], p[0], p[1], d[0], d[1],
               a.Int("groups"), false}};
}

// The oneDNN plan for this call, or null: im2col runs it (Note [oneDNN convolution]).
// Which operands of a call are in oneDNN's blocked layouts: the attributes a graph sets. y: the
// (N, O, OH, OW) operand (y or dy, ConvDims::blocked); x: the (N, C, H, W) one (x or dx,
// ConvDims::x_blocked), both nChw16c (Note [Activation layouts] in graph/layouts.cc); w: the
// weights (w or dw, ConvDims::w_blocked), OIhw16i16o (Note [Weights kept blocked] in
// cpu/passes/weight_layout.cc).
struct Layouts {
  bool y = false, x = false, w = false;
  bool any() const { return y || x || w; }
};

// bf16: bfloat16 x and w, float32 bias and y (ConvDims::bf16; dtype is the output's).
const DnnlConvPlan* DnnlFor(ConvPass pass, const Geom& g, bool bias, DType dtype, bool relu = false,
                            Layouts blocked = {}, bool bf16 = false) {
  if (g.n == 0 || g.ohw() == 0 || g.c == 0 || g.o == 0) return nullptr;
  ConvDims d = g;
  d.bias = bias;
  d.relu = relu;
  d.blocked = blocked.y;
  d.x_blocked = blocked.x;
  d.w_blocked = blocked.w;
  d.bf16 = bf16;
  return FindDnnlConv(pass, d, dtype);
}

// Whether a record's operands are bfloat16 (a conv2d the bf16 policy lowered).
bool Bf16Operands(const OpRecord& op) { return op.inputs[0].dtype() == DType::kBFloat16; }

// The record's layouts: y_blocked or dy_blocked, x_blocked or dx_blocked, w_blocked or
// dw_blocked.
Layouts Blocked(const OpRecord& op, ConvPass pass) {
  Layouts l;
  l.y = op.attrs.Int(pass == ConvPass::kForward ? "y_blocked" : "dy_blocked", 0) != 0;
  l.x = op.attrs.Int(pass == ConvPass::kGradInput ? "dx_blocked" : "x_blocked", 0) != 0;
  l.w = op.attrs.Int(pass == ConvPass::kGradWeight ? "dw_blocked" : "w_blocked", 0) != 0;
  return l;
}

static const char* const kPass[] = {"forward", "grad input", "grad weight"};

// Runs the call through oneDNN when it has a plan for it; false when im2col must.
template <typename T>
bool TryDnnl(ConvPass pass, const Geom& g, const KernelContext& ctx, const T* a, const T* b, const T* bias, T* out,
             bool relu = false, Layouts blocked = {}) {
  if constexpr (std::is_same_v<T, float>) {
    if (const DnnlConvPlan* plan = DnnlFor(pass, g, bias != nullptr, DType::kFloat32, relu, blocked)) {
      Scratch scratch(ctx, DnnlConvScratchBytes(*plan));
      RunDnnlConv(*plan, a, b, bias, out, scratch.as<void>());
      return true;
    }
  }
  // Only oneDNN reads and writes the blocked layout (Conv2dSupports said so at capture; the
  // implementation was switched to im2col since).
  LOOM_CHECK(!blocked.any(), ValueError, "[conv2d ", kPass[int(pass)], "] an operand of this captured graph is in oneDNN's blocked layout, and oneDNN cannot run this call now (im2col was "
             "selected after capture?); capture the graph again");
  ReportKernel(std::string("conv2d ") + kPass[int(pass)] + " " + (sizeof(T) == 4 ? "f32" : "f64"),
               "im2col + loom's GEMM (kind 'gemm')");
  return false;
}

// How the images are processed: chunks of `batch` images, the chunks split into `parts`
// consecutive runs that run in parallel, each with its own scratch.
struct Plan {
  int64_t batch = 1, chunks = 1, parts = 1;
  bool direct = false;  // 1x1 and one image per chunk: no col matrix at all
};

Plan MakePlan(const Geom& g) {
  Plan p;
  const int64_t ohw = std::max<int64_t>(g.ohw(), 1);
  p.batch = std::max<int64_t>(1, std::min(g.n, kTargetColumns / ohw));
  p.batch = std::max<int64_t>(1, std::min(p.batch, kMaxColElements / std::max<int64_t>(g.rows() * ohw, 1)));
  p.chunks = (g.n + p.batch - 1) / p.batch;
  p.batch = (g.n + p.chunks - 1) / p.chunks;  // even chunks
  p.direct = p.batch == 1 && g.one_by_one();
  const int64_t work = g.og() * p.batch * g.ohw() * g.grows() * g.groups;  // multiply-adds per chunk
  if (work < kSmallGemm && p.chunks > 1) {
    const int64_t per = (p.chunks + NumThreads() - 1) / NumThreads();
    p.parts = (p.chunks + per - 1) / per;  // no empty part
  }
  return p;
}

// The scratch of one part, in elements, laid out in this order: a col matrix (unless direct),
// the gathered output or dy (several images per chunk), and for the weight gradient a partial
// sum (parts after the first). The parts' scratch lies back to back. One layout for the kernels
// and for the planner (Note [Planned scratch]).
struct PartScratch {
  int64_t col, mat, partial;
  int64_t total() const { return col + mat + partial; }
};
PartScratch ScratchOfPart(const Geom& g, const Plan& p, ConvPass kind, int64_t wtotal) {
  const int64_t cols = p.batch * g.ohw();
  return PartScratch{p.direct ? 0 : g.rows() * cols, p.batch > 1 ? g.o * cols : 0,
                     kind == ConvPass::kGradWeight && p.parts > 1 ? wtotal : 0};
}
int64_t ScratchElements(const Geom& g, const Plan& p, ConvPass kind, int64_t wtotal) {
  return p.parts * ScratchOfPart(g, p, kind, wtotal).total();
}

// Calls f(part, n0, n1) for every chunk of images [n0, n1), the parts spread across the pool.
template <typename F>
void ForEachChunk(const Geom& g, const Plan& p, F f) {
  const int64_t per = (p.chunks + p.parts - 1) / p.parts;
  ParallelFor(p.parts, 1, [&](int64_t q0, int64_t q1) {
    // Parts run in parallel: the im2col/col2im inside them must not fan out again. Pool tasks
    // are serial already, but Pool::Run lets the calling thread take leftover parts after
    // restoring its own flag, so say it explicitly.
    std::unique_ptr<SerialRegion> serial(p.parts > 1 ? new SerialRegion : nullptr);
    for (int64_t q = q0; q < q1; ++q)
      for (int64_t k = q * per; k < std::min(p.chunks, (q + 1) * per); ++k)
        f(q, k * p.batch, std::min(g.n, (k + 1) * p.batch));
  });
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

// x: (C, H, W) -> col rows [r0, r1) of (C KH KW, OH OW), row r at col + r * ld
template <typename T>
void Im2ColRows(const T* x, T* col, int64_t ld, const Geom& g, int64_t r0, int64_t r1) {
  const int64_t ohw = g.ohw();
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t c = r / g.kk(), ki = (r / g.kw) % g.kh, kj = r % g.kw;
    const T* xc = x + c * g.hw();
    T* cr = col + r * ld;
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

// col (C KH KW, OH OW), row r at col + r * ld -> dx: (C, H, W), the sum of every patch entry
// into its pixel, channels [c0, c1) (their rows touch only their own planes).
template <typename T>
void Col2ImChannels(const T* col, int64_t ld, T* dx, const Geom& g, int64_t c0, int64_t c1) {
  for (int64_t c = c0; c < c1; ++c) {
    T* xc = dx + c * g.hw();
    std::fill(xc, xc + g.hw(), T(0));
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const T* cr = col + ((c * g.kh + ki) * g.kw + kj) * ld;
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

// Images [n0, n1) of x -> col (C KH KW, (n1 - n0) OH OW), split by (image, row) across the pool.
template <typename T>
void Im2Col(const T* x, T* col, const Geom& g, int64_t n0, int64_t n1) {
  const int64_t ld = (n1 - n0) * g.ohw(), rows = g.rows();
  ParallelFor((n1 - n0) * rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(g.ohw(), 1)),
              [&](int64_t i0, int64_t i1) {
                for (int64_t i = i0; i < i1;) {
                  const int64_t b = i / rows, r0 = i % rows, r1 = std::min(rows, r0 + (i1 - i));
                  Im2ColRows(x + (n0 + b) * g.c * g.hw(), col + b * g.ohw(), ld, g, r0, r1);
                  i += r1 - r0;
                }
              });
}

// col (C KH KW, (n1 - n0) OH OW) -> images [n0, n1) of dx, split by (image, channel).
template <typename T>
void Col2Im(const T* col, T* dx, const Geom& g, int64_t n0, int64_t n1) {
  const int64_t ld = (n1 - n0) * g.ohw();
  ParallelFor((n1 - n0) * g.c, std::max<int64_t>(1, kGrain / std::max<int64_t>(g.kk() * g.ohw(), 1)),
              [&](int64_t i0, int64_t i1) {
                for (int64_t i = i0; i < i1;) {
                  const int64_t b = i / g.c, c0 = i % g.c, c1 = std::min(g.c, c0 + (i1 - i));
                  Col2ImChannels(col + b * g.ohw(), ld, dx + (n0 + b) * g.c * g.hw(), g, c0, c1);
                  i += c1 - c0;
                }
              });
}

// (n1 - n0, O, OH OW) images of t <-> (O, (n1 - n0) OH OW) matrix m
template <typename T>
void GatherImages(const T* t, T* m, const Geom& g, int64_t n0, int64_t n1) {
  const int64_t nb = n1 - n0, ohw = g.ohw();
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t o = 0; o < g.o; ++o)
      std::memcpy(m + o * nb * ohw + b * ohw, t + ((n0 + b) * g.o + o) * ohw, size_t(ohw) * sizeof(T));
}

// The col matrix of images [n0, n1) of x: the image itself when direct, else im2col into col.
template <typename T>
const T* ColMatrix(const T* x, T* col, const Geom& g, const Plan& p, int64_t n0, int64_t n1) {
  if (p.direct) return x + n0 * g.c * g.hw();
  Im2Col(x, col, g, n0, n1);
  return col;
}

// Images [n0, n1) of dy as an (O, (n1 - n0) OH OW) matrix: dy itself for one image, else
// gathered into m.
template <typename T>
const T* DyMatrix(const T* dy, T* m, const Geom& g, int64_t n0, int64_t n1) {
  if (n1 - n0 == 1) return dy + n0 * g.o * g.ohw();
  GatherImages(dy, m, g, n0, n1);
  return m;
}

// relu: conv2d_relu (Note [Fusing bias and activation] in graph/fuse_bias_act.cc): ReLU on each
// output with the relu op's formula, after oneDNN stores a part (ConvDims::relu) or here right
// after the bias.
template <typename T>
void Conv2dTyped(const OpRecord& op, const KernelContext& ctx, bool relu) {
  const Tensor& tx = op.inputs[0];
  const Tensor& tw = op.inputs[1];
  const Tensor& ty = op.outputs[0];
  const Geom g = MakeGeom(op.attrs, tx.shape(), tw.shape(), ty.shape());
  const T* x = tx.data<T>();
  const T* w = tw.data<T>();
  const T* bias = op.inputs.size() == 3 ? op.inputs[2].data<T>() : nullptr;
  T* y = ty.data<T>();
  if (ty.numel() == 0) return;
  if (TryDnnl(ConvPass::kForward, g, ctx, x, w, bias, y, relu, Blocked(op, ConvPass::kForward))) return;
  const Plan p = MakePlan(g);
  const PartScratch ps = ScratchOfPart(g, p, ConvPass::kForward, 0);
  Scratch scratch(ctx, size_t(ScratchElements(g, p, ConvPass::kForward, 0)) * sizeof(T));
  const int64_t wsize = g.og() * g.grows();
  ForEachChunk(g, p, [&](int64_t part, int64_t n0, int64_t n1) {
    T* col = scratch.as<T>() + part * ps.total();
    T* out = col + ps.col;
    const int64_t nc = (n1 - n0) * g.ohw();
    const T* cm = ColMatrix(x, col, g, p, n0, n1);
    T* ym = n1 - n0 == 1 ? y + n0 * g.o * g.ohw() : out;
    for (int64_t gi = 0; gi < g.groups; ++gi)
      Gemm(false, false, g.og(), nc, g.grows(), T(1), w + gi * wsize, g.grows(), cm + gi * g.grows() * nc, nc, T(0),
           ym + gi * g.og() * nc, nc);
    for (int64_t b = 0; b < n1 - n0; ++b)
      for (int64_t o = 0; o < g.o; ++o) {
        T* dst = y + ((n0 + b) * g.o + o) * g.ohw();
        if (ym == out) std::memcpy(dst, out + o * nc + b * g.ohw(), size_t(g.ohw()) * sizeof(T));
        if (bias) {
          const T bo = bias[o];
          for (int64_t i = 0; i < g.ohw(); ++i) dst[i] += bo;
        }
        if (relu)
          for (int64_t i = 0; i < g.ohw(); ++i) dst[i] = ew::ApplyAct(BiasAct::kRelu, dst[i]);
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
  if (TryDnnl(ConvPass::kGradInput, g, ctx, w, dy, static_cast<const T*>(nullptr), dx, false,
              Blocked(op, ConvPass::kGradInput)))
    return;
  const Plan p = MakePlan(g);
  const PartScratch ps = ScratchOfPart(g, p, ConvPass::kGradInput, 0);
  Scratch scratch(ctx, size_t(ScratchElements(g, p, ConvPass::kGradInput, 0)) * sizeof(T));
  const int64_t wsize = g.og() * g.grows();
  ForEachChunk(g, p, [&](int64_t part, int64_t n0, int64_t n1) {
    T* col = scratch.as<T>() + part * ps.total();
    const int64_t nc = (n1 - n0) * g.ohw();
    const T* dm = DyMatrix(dy, col + ps.col, g, n0, n1);
    T* cm = p.direct ? dx + n0 * g.c * g.hw() : col;  // direct: dx_n is dcol itself
    for (int64_t gi = 0; gi < g.groups; ++gi)
      Gemm(true, false, g.grows(), nc, g.og(), T(1), w + gi * wsize, g.grows(), dm + gi * g.og() * nc, nc, T(0),
           cm + gi * g.grows() * nc, nc);
    if (!p.direct) Col2Im(col, dx, g, n0, n1);
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
  if (TryDnnl(ConvPass::kGradWeight, g, ctx, x, dy, static_cast<const T*>(nullptr), dw, false,
              Blocked(op, ConvPass::kGradWeight)))
    return;
  const Plan p = MakePlan(g);
  // Each part but the first accumulates into its own partial gradient, added in part order.
  const PartScratch ps = ScratchOfPart(g, p, ConvPass::kGradWeight, wtotal);
  Scratch scratch(ctx, size_t(ScratchElements(g, p, ConvPass::kGradWeight, wtotal)) * sizeof(T));
  const int64_t wsize = g.og() * g.grows();
  std::vector<char> started(size_t(p.parts), 0);
  ForEachChunk(g, p, [&](int64_t part, int64_t n0, int64_t n1) {
    T* col = scratch.as<T>() + part * ps.total();
    T* acc = part == 0 ? dw : col + ps.col + ps.mat;
    const int64_t nc = (n1 - n0) * g.ohw();
    const T* cm = ColMatrix(x, col, g, p, n0, n1);
    const T* dm = DyMatrix(dy, col + ps.col, g, n0, n1);
    const T beta = started[size_t(part)] ? T(1) : T(0);
    started[size_t(part)] = 1;
    for (int64_t gi = 0; gi < g.groups; ++gi)
      Gemm(false, true, g.og(), g.grows(), nc, T(1), dm + gi * g.og() * nc, nc, cm + gi * g.grows() * nc, nc, beta,
           acc + gi * wsize, g.grows());
  });
  for (int64_t q = 1; q < p.parts; ++q) {
    const T* part = scratch.as<T>() + q * ps.total() + ps.col + ps.mat;
    for (int64_t i = 0; i < wtotal; ++i) dw[i] += part[i];
  }
}

}  // namespace
Geom GeomOf(const OpRecord& op, ConvPass kind);  // the pass's geometry from a record (below)
namespace {

// Two bfloat16 inputs, a float32 result (Note [Precision policy] in core/autocast.h): the
// forward convolution (x, w [, float32 bias] -> y), its input gradient (w, dy -> dx) or its
// weight gradient (x, dy -> dw) on oneDNN's bf16 kernels, products and sums in float32.
// ConvSupports admits such a record only where oneDNN has a plan, so the policy never lowers a
// convolution it cannot run. The forward result is rounded to bfloat16 before the bias is added,
// as cuDNN's bfloat16 convolution writes it (Note [bfloat16 convolutions on cuDNN] in
// device/cuda/cudnn.cc), so that both devices compute one function and a graph may keep it in
// bfloat16 bit for bit (Note [Convolution outputs kept in bfloat16] in
// graph/bf16_conv_outputs.cc): a bfloat16 y (out_dtype bfloat16, no bias) takes that rounding
// itself, the float32 result staged in the scratch after oneDNN's.
bool Bf16ResultStaged(const OpRecord& op, ConvPass kind) {
  return kind == ConvPass::kForward && op.outputs[0].dtype() == DType::kBFloat16;
}
size_t StagedBytes(const OpRecord& op) { return (size_t(op.outputs[0].numel()) * sizeof(float) + 63) / 64 * 64; }

void ConvBf16(const OpRecord& op, const KernelContext& ctx, ConvPass kind) {
  const Tensor &ta = op.inputs[0], &tb = op.inputs[1], &out = op.outputs[0];
  if (out.numel() == 0) return;
  const Geom g = GeomOf(op, kind);
  if (kind == ConvPass::kGradWeight && (g.n == 0 || g.ohw() == 0)) {
    std::memset(out.raw_data(), 0, out.nbytes());  // no positions: a zero gradient
    return;
  }
  const DnnlConvPlan* plan = DnnlFor(kind, g, /*bias=*/false, DType::kFloat32, false, Blocked(op, kind), /*bf16=*/true);
  LOOM_CHECK(plan, DTypeError, "[", op.name(), "] bfloat16 inputs ", ta.Describe(), " and ", tb.Describe(),
             ": oneDNN has no bf16 convolution for them here (built without oneDNN, im2col selected, a blocked ",
             "layout, or no kernel for the geometry); compute in float32");
  const bool staged = Bf16ResultStaged(op, kind);
  const size_t dnnl_bytes = DnnlConvScratchBytes(*plan);
  Scratch scratch(ctx, dnnl_bytes + (staged ? StagedBytes(op) : 0));
  float* y = staged ? reinterpret_cast<float*>(scratch.as<char>() + dnnl_bytes) : out.data<float>();
  RunDnnlConv(*plan, ta.raw_data(), tb.raw_data(), nullptr, y, scratch.as<void>());
  if (kind != ConvPass::kForward) return;
  // The forward result rounded to bfloat16 (kept, or widened and the bias added).
  const float* bias = op.inputs.size() == 3 ? op.inputs[2].data<float>() : nullptr;
  const int64_t plane = g.ohw(), channels = g.o;
  uint16_t* y16 = staged ? out.data<uint16_t>() : nullptr;
  ParallelFor(out.numel() / plane, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      float* row = y + p * plane;
      if (y16) {
        CastFloat32To16(row, y16 + p * plane, plane, DType::kBFloat16);
        continue;
      }
      const float add = bias ? bias[p % channels] : 0.0f;
      for (int64_t k = 0; k < plane; ++k) row[k] = BFloat16ToFloat(FloatToBFloat16(row[k])) + add;
    }
  });
}

// x: (N, C, H, W), w: (O, C/g, KH, KW) [, bias: (O)] -> y: (N, O, OH, OW); x, w bfloat16 with a
// float32 y (out_dtype) as well
void Conv2dCpu(const OpRecord& op, const KernelContext& ctx) {
  if (Bf16Operands(op)) return ConvBf16(op, ctx, ConvPass::kForward);
  FloatDispatch(op.outputs[0].dtype(), "conv2d", [&](auto tag) { Conv2dTyped<decltype(tag)>(op, ctx, false); });
}

// conv2d's operands -> y = relu(conv2d(x, w[, bias]))
void Conv2dReluCpu(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "conv2d_relu", [&](auto tag) { Conv2dTyped<decltype(tag)>(op, ctx, true); });
}

// w: (O, C/g, KH, KW), dy: (N, O, OH, OW) -> dx: (N, C, H, W); w, dy bfloat16 with a float32 dx
// as well
void Conv2dGradInputCpu(const OpRecord& op, const KernelContext& ctx) {
  if (Bf16Operands(op)) return ConvBf16(op, ctx, ConvPass::kGradInput);
  FloatDispatch(op.outputs[0].dtype(), "conv2d_grad_input",
                [&](auto tag) { Conv2dGradInputTyped<decltype(tag)>(op, ctx); });
}

// x: (N, C, H, W), dy: (N, O, OH, OW) -> dw: (O, C/g, KH, KW); x, dy bfloat16 with a float32 dw
// as well
void Conv2dGradWeightCpu(const OpRecord& op, const KernelContext& ctx) {
  if (Bf16Operands(op)) return ConvBf16(op, ctx, ConvPass::kGradWeight);
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

// w: (O, C, KH, KW) -> the same values in oneDNN's OIhw16i16o (blocked = 1) or back to OIHW
// (0); O and C multiples of 16 (conv_weight_layout, Note [Weights kept blocked] in
// cpu/passes/weight_layout.cc). The output may be the input itself: the input is copied to scratch
// first. Element (o, c, k) of OIHW (k a position of the KH x KW kernel) lies at
// ((o C + c) KHKW + k); in OIhw16i16o, at (((o/16 C/16 + c/16) KHKW + k) 16 + c%16) 16 + o%16.
void ConvWeightLayoutCpu(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& tw = op.inputs[0];
  const Shape& s = tw.shape();
  const int64_t o = s[0], c = s[1], kk = s[2] * s[3], n = tw.numel(), cb = c / 16;
  if (n == 0) return;
  const bool to_blocked = op.attrs.Int("blocked") != 0;
  Scratch scratch(ctx, size_t(n) * sizeof(float));
  const float* src = scratch.as<float>();
  std::memcpy(scratch.as<float>(), tw.data<float>(), size_t(n) * sizeof(float));
  float* dst = op.outputs[0].data<float>();
  ParallelFor(o / 16, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t ob = b0; ob < b1; ++ob)
      for (int64_t ib = 0; ib < cb; ++ib)
        for (int64_t k = 0; k < kk; ++k) {
          const int64_t blocked = ((ob * cb + ib) * kk + k) * 256;
          for (int64_t ci = 0; ci < 16; ++ci)
            for (int64_t oi = 0; oi < 16; ++oi) {
              const int64_t plain = ((ob * 16 + oi) * c + ib * 16 + ci) * kk + k;
              if (to_blocked) dst[blocked + ci * 16 + oi] = src[plain];
              else dst[plain] = src[blocked + ci * 16 + oi];
            }
        }
  });
}
size_t ConvWeightLayoutScratch(const OpRecord& op) { return size_t(op.inputs[0].numel()) * sizeof(float); }

}  // namespace

Geom GeomOf(const OpRecord& op, ConvPass kind) {
  const Tensor& out = op.outputs[0];
  switch (kind) {
    case ConvPass::kForward: return MakeGeom(op.attrs, op.inputs[0].shape(), op.inputs[1].shape(), out.shape());
    case ConvPass::kGradInput: return MakeGeom(op.attrs, out.shape(), op.inputs[0].shape(), op.inputs[1].shape());
    case ConvPass::kGradWeight: return MakeGeom(op.attrs, op.inputs[0].shape(), out.shape(), op.inputs[1].shape());
  }
  return Geom{};
}

// Scratch bytes each kernel call will ask for (0 where the kernel returns early).
size_t ConvScratchBytes(const OpRecord& op, ConvPass kind, bool relu = false) {
  const Tensor& out = op.outputs[0];
  const bool bf16 = Bf16Operands(op);
  const bool staged = bf16 && Bf16ResultStaged(op, kind);
  if (out.numel() == 0 || (out.dtype() != DType::kFloat32 && out.dtype() != DType::kFloat64 && !staged)) return 0;
  const Geom g = GeomOf(op, kind);
  if (kind == ConvPass::kGradWeight && (g.n == 0 || g.ohw() == 0)) return 0;
  const bool bias = kind == ConvPass::kForward && op.inputs.size() == 3 && !bf16;  // ConvBf16 adds its own
  if (const DnnlConvPlan* plan = DnnlFor(kind, g, bias, bf16 ? DType::kFloat32 : out.dtype(), relu, Blocked(op, kind), bf16))
    return DnnlConvScratchBytes(*plan) + (staged ? StagedBytes(op) : 0);
  if (bf16) return 0;  // no plan: the kernel refuses the record
  return size_t(ScratchElements(g, MakePlan(g), kind, out.numel())) * SizeOf(out.dtype());
}

// Note [What a kernel supports]: every plain float record; a blocked one (Note [Activation
// layouts] in graph/layouts.cc) when oneDNN has a plan for it; bfloat16 operands (conv2d and
// its gradients, plain, no ReLU, a float32 result, or a bfloat16 one for a bias-free forward)
// when oneDNN has a bf16 plan for them.
bool ConvSupports(const OpRecord& op, ConvPass kind, bool relu = false) {
  const Layouts l = Blocked(op, kind);
  if (Bf16Operands(op)) {  // a float32 result, or a bias-free forward's bfloat16 one (ConvBf16)
    const DType out = op.outputs[0].dtype();
    const bool low = out == DType::kBFloat16 && kind == ConvPass::kForward && op.inputs.size() == 2;
    return !relu && !l.any() && op.inputs[1].dtype() == DType::kBFloat16 && (out == DType::kFloat32 || low) &&
           DnnlFor(kind, GeomOf(op, kind), false, DType::kFloat32, false, l, /*bf16=*/true) != nullptr;
  }
  if (!l.any()) return true;
  const Geom g = GeomOf(op, kind);
  const bool bias = kind == ConvPass::kForward && op.inputs.size() == 3;
  // Blocked operands hold exactly their plain layout's bytes: activations (nChw16c) with their
  // channels, weights (OIhw16i16o) with both O and C, in whole groups of 16.
  return op.outputs[0].dtype() == DType::kFloat32 && (!l.y || g.o % 16 == 0) && (!l.x || g.c % 16 == 0) &&
         (!l.w || (g.o % 16 == 0 && g.c % 16 == 0)) && DnnlFor(kind, g, bias, DType::kFloat32, false, l) != nullptr;
}
bool Conv2dSupports(const OpRecord& op) { return ConvSupports(op, ConvPass::kForward); }
bool Conv2dReluSupports(const OpRecord& op) { return ConvSupports(op, ConvPass::kForward, /*relu=*/true); }
bool Conv2dGradInputSupports(const OpRecord& op) { return ConvSupports(op, ConvPass::kGradInput); }
bool Conv2dGradWeightSupports(const OpRecord& op) { return ConvSupports(op, ConvPass::kGradWeight); }
size_t Conv2dScratch(const OpRecord& op) { return ConvScratchBytes(op, ConvPass::kForward); }
size_t Conv2dReluScratch(const OpRecord& op) { return ConvScratchBytes(op, ConvPass::kForward, /*relu=*/true); }
size_t Conv2dGradInputScratch(const OpRecord& op) { return ConvScratchBytes(op, ConvPass::kGradInput); }
size_t Conv2dGradWeightScratch(const OpRecord& op) { return ConvScratchBytes(op, ConvPass::kGradWeight); }

LOOM_KERNEL(conv2d, kCPU, Conv2dCpu);
LOOM_KERNEL_SCRATCH(conv2d, kCPU, Conv2dScratch);
LOOM_KERNEL(conv2d_relu, kCPU, Conv2dReluCpu);
LOOM_KERNEL_SCRATCH(conv2d_relu, kCPU, Conv2dReluScratch);
LOOM_KERNEL_SCRATCH(conv2d_grad_input, kCPU, Conv2dGradInputScratch);
LOOM_KERNEL_SCRATCH(conv2d_grad_weight, kCPU, Conv2dGradWeightScratch);
LOOM_KERNEL(conv2d_grad_input, kCPU, Conv2dGradInputCpu);
LOOM_KERNEL(conv2d_grad_weight, kCPU, Conv2dGradWeightCpu);
LOOM_KERNEL(conv2d_grad_bias, kCPU, Conv2dGradBiasCpu);
LOOM_KERNEL(conv_weight_layout, kCPU, ConvWeightLayoutCpu);
LOOM_KERNEL_SCRATCH(conv_weight_layout, kCPU, ConvWeightLayoutScratch);
LOOM_KERNEL_SUPPORTS(conv2d, kCPU, Conv2dSupports);
LOOM_KERNEL_SUPPORTS(conv2d_relu, kCPU, Conv2dReluSupports);  // conv2d's operands and layouts, float only
LOOM_KERNEL_SUPPORTS(conv2d_grad_input, kCPU, Conv2dGradInputSupports);
LOOM_KERNEL_SUPPORTS(conv2d_grad_weight, kCPU, Conv2dGradWeightSupports);

}  // namespace cpu
}  // namespace loom
