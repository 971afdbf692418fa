// CPU pooling kernels. Every (n, c) plane is independent: work is split by plane, and the
// gradients write each plane of dx from that plane of dy only, so they need no atomics and
// give the same bits for any thread count.
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {
namespace {

template <typename F>
void ForPlanes(const PoolDims& d, int64_t work_per_plane, F f) {
  ParallelFor(d.planes, std::max<int64_t>(1, kGrain / std::max<int64_t>(work_per_plane, 1)),
              [&](int64_t p0, int64_t p1) {
                for (int64_t p = p0; p < p1; ++p) f(p);
              });
}

// Plane p = (n, c) of an (N, C, H, W) tensor: where it starts and the step between its pixels,
// in NCHW or, with the attribute a graph sets (Note [Activation layouts] in graph/layouts.cc), in
// oneDNN's nChw16c (C a multiple of 16: pixel k of channel c at ((n C/16 + c/16) H W + k) 16 +
// c % 16).
struct Planes {
  int64_t c, hw;
  bool blocked;
  int64_t Start(int64_t p) const {
    return blocked ? ((p / c) * (c / 16) + (p % c) / 16) * hw * 16 + p % 16 : p * hw;
  }
  int64_t Step() const { return blocked ? 16 : 1; }
};
// The layout of operand t by the record's attribute; checked.
Planes PlanesOf(const OpRecord& op, const Tensor& t, const char* attr, const char* opname) {
  const bool blocked = op.attrs.Int(attr, 0) != 0;
  const Shape& s = t.shape();
  LOOM_CHECK(!blocked || (s.size() == 4 && s[1] % 16 == 0), ValueError, "[", opname, "] ", attr,
             ": the blocked layout needs (N, C, H, W) with C a multiple of 16, got ", ToString(s));
  return Planes{s[1], s[2] * s[3], blocked};
}

// Note [Max pooling in vectors]
// WindowArgMax scans a window comparing each pixel with the running maximum. On activations
// that comparison is a coin toss, and as a branch it mispredicts about every other pixel: the
// small CNN's first pool ((32, 32, 32, 32), 2x2) took 4.3 ms on one thread, five times the
// convolution before it. For float32 with stride 1 or 2, 16 (or 8, on narrow rows)
// neighbouring outputs of a row whose windows lie inside the plane are scanned together in
// vector registers: window position by window position in WindowArgMax's order, its test as a
// lane mask, selects instead of branches. Same comparisons in the same order, so the same
// maximum, the same first argmax and NaN winning: bitwise WindowArgMax's result
// (0.3 ms on that pool, one thread, on a shared machine). Border windows that padding clips,
// float64 and other strides keep WindowArgMax. The op-case rows "with ties" and "NaN wins"
// cover the vector path.

// L float32 or int32 lanes (L = 8 or 16: 256- or 512-bit vectors, or what the compiler makes
// of them without AVX).
template <int L>
struct Lanes {
  typedef float F __attribute__((vector_size(4 * L)));
  typedef int32_t I __attribute__((vector_size(4 * L)));
};

// The L values at p[0], p[SW], p[2 SW], ... (SW 1 or 2; reads p[0 .. SW L)).
template <int L, int SW>
inline typename Lanes<L>::F LoadLanes(const float* p) {
  using F = typename Lanes<L>::F;
  using I = typename Lanes<L>::I;
  F a;
  std::memcpy(&a, p, sizeof a);
  if (SW == 1) return a;
  F b;
  std::memcpy(&b, p + L, sizeof b);
  I even;
  for (int l = 0; l < L; ++l) even[l] = 2 * l;
  return __builtin_shuffle(a, b, even);
}

// L neighbouring outputs of one row, every window inside plane xp (width w), the first window's
// top left at `start`: maxima into y, first argmax into arg.
template <int L, int SW>
void MaxPoolLanes(const float* xp, int32_t start, int32_t w, int32_t kh, int32_t kw, float* y, int32_t* arg) {
  using F = typename Lanes<L>::F;
  using I = typename Lanes<L>::I;
  I lane;
  for (int l = 0; l < L; ++l) lane[l] = l * SW;
  F m = LoadLanes<L, SW>(xp + start);
  I best = start + lane;
  for (int32_t ki = 0; ki < kh; ++ki)
    for (int32_t kj = 0; kj < kw; ++kj) {
      const int32_t at = start + ki * w + kj;
      const F v = LoadLanes<L, SW>(xp + at);
      const I take = (v > m) | ((v != v) & (m == m));  // WindowArgMax's test, lane by lane
      m = take ? v : m;
      best = take ? at + lane : best;
    }
  std::memcpy(y, &m, sizeof m);
  std::memcpy(arg, &best, sizeof best);
}

// The vector path of one output row (Note [Max pooling in vectors]): outputs [oj0, oj1) in
// groups of `lanes`, the last group moved left to end at oj1 (it recomputes a few outputs of
// the group before, to the same values); or none (lanes 0).
struct VectorRun {
  int64_t oj0 = 0, oj1 = 0;
  int lanes = 0;
};
VectorRun MaxPoolVectorRun(const PoolDims& d, int64_t oi) {
  const int64_t r0 = oi * d.sh - d.ph;
  if ((d.sw != 1 && d.sw != 2) || r0 < 0 || r0 + d.kh > d.h) return {};
  const int64_t oj0 = (d.pw + d.sw - 1) / d.sw;  // the first window starting inside the row
  const int64_t whole = d.w + d.pw >= d.kw ? std::min(d.ow, (d.w + d.pw - d.kw) / d.sw + 1) : 0;
  // A group starting at output oj reads up to (bottom row) + oj sw - pw + kw - 1 + sw lanes.
  auto fits = [&](int64_t oj, int lanes) {
    return (r0 + d.kh - 1) * d.w + oj * d.sw - d.pw + d.kw - 1 + d.sw * lanes <= d.h * d.w;
  };
  for (int lanes : {16, 8}) {
    int64_t oj1 = whole;
    while (oj1 - oj0 >= lanes && !fits(oj1 - lanes, lanes)) --oj1;
    if (oj1 - oj0 >= lanes) return {oj0, oj1, lanes};
  }
  return {};
}

template <int L>
void MaxPoolRun(const float* xp, const PoolDims& d, int64_t oi, const VectorRun& run, float* yr, int32_t* ar) {
  const int32_t w = int32_t(d.w), kh = int32_t(d.kh), kw = int32_t(d.kw);
  for (int64_t at = run.oj0; at < run.oj1; at += L) {
    const int64_t oj = std::min<int64_t>(at, run.oj1 - L);
    const int32_t start = int32_t((oi * d.sh - d.ph) * d.w + oj * d.sw - d.pw);
    if (d.sw == 1)
      MaxPoolLanes<L, 1>(xp, start, w, kh, kw, yr + oj, ar + oj);
    else
      MaxPoolLanes<L, 2>(xp, start, w, kh, kw, yr + oj, ar + oj);
  }
}

// One plane of max pooling: xp (H, W) -> yp (OH, OW), ap (OH, OW); runs[oi]: the vector path
// of row oi (MaxPoolVectorRun, float only; none for double).
template <typename T>
void MaxPoolPlane(const PoolDims& d, const std::vector<VectorRun>& runs, const T* xp, T* yp, int32_t* ap) {
  auto scalar = [&](int64_t oi, int64_t oj0, int64_t oj1) {
    for (int64_t oj = oj0; oj < oj1; ++oj) {
      T m;
      const int64_t best = WindowArgMax(xp, d.w, RowSpan(d, oi), ColSpan(d, oj), m);
      yp[oi * d.ow + oj] = m;
      ap[oi * d.ow + oj] = int32_t(best);
    }
  };
  for (int64_t oi = 0; oi < d.oh; ++oi) {
    const VectorRun& run = runs[size_t(oi)];
    scalar(oi, 0, run.oj0);
    const float* xf = reinterpret_cast<const float*>(xp);  // read only when T is float
    float* yf = reinterpret_cast<float*>(yp + oi * d.ow);
    if (run.lanes == 16) MaxPoolRun<16>(xf, d, oi, run, yf, ap + oi * d.ow);
    if (run.lanes == 8) MaxPoolRun<8>(xf, d, oi, run, yf, ap + oi * d.ow);
    scalar(oi, run.oj1, d.ow);
  }
}

// The vector paths of every output row (none for double).
template <typename T>
std::vector<VectorRun> MaxPoolVectorRuns(const PoolDims& d) {
  std::vector<VectorRun> runs(size_t(d.oh));
  if (std::is_same<T, float>::value)
    for (int64_t oi = 0; oi < d.oh; ++oi) runs[size_t(oi)] = MaxPoolVectorRun(d, oi);
  return runs;
}

// ---- max pooling over nChw16c operands ----
// Note [Blocked max pooling]
// A graph keeps max pooling's operands in oneDNN's nChw16c layout when the regions they belong
// to are blocked (Note [Activation layouts] in graph/layouts.cc). Each operand says its own
// layout (x_blocked, y_blocked, argmax_blocked; argmax_blocked, dy_blocked, dx_blocked): x, y
// and the argmax lie in different regions, and so do dy and dx, so any mix occurs (the small
// CNN's last pooling reads a blocked x and writes the NCHW y that a flatten reads; its gradient
// reads that flatten's NCHW dy). The argmax holds the NCHW kernel's values (the index of the
// maximum in its plane) in either layout, only placed differently, so the gradient routes dy as
// the NCHW kernel does whatever the forward's layouts were. Blocked, the argmax is written and
// read as one stream: kept NCHW (16 runs a plane apart per tile), it made the blocked forward
// about 1.5 times as slow as the NCHW kernel on the small CNN's first pooling ((32, 32, 32, 32),
// one thread, a shared machine), and the gradient slower still.
// Work is split by group: 16 channels of one image, whose pixels in a blocked tensor are
// 16-value vectors (one cache line each). Over a blocked x, every output pixel scans its
// window, clipped to the image (RowSpan, ColSpan), position by position in WindowArgMax's order
// with its test as a lane mask: each channel gets WindowArgMax's maximum and first argmax, NaN
// winning. Outputs go in tiles of 16 consecutive output pixels ([pixel] = the group's 16
// channels), stored as they are into a blocked operand and through Transpose16x16 into NCHW
// runs. An NCHW x (a region the graph could not block, a graph input) goes through MaxPoolPlane
// per channel, and the tiles of its blocked outputs are transposed from the planes. The
// gradient adds each output pixel's dy, in output order, into the pixels of its window whose
// lanes hold the argmax there (a blocked dx: a masked vector add per window position; an NCHW
// dx: the NCHW kernel's scatter), so every element of dx sums the same dy in the NCHW kernel's
// order. x float32 only (the layout pass blocks nothing else). Results are bitwise those of the
// NCHW kernels (test/graph/layout_test.cc, every mix, with ties, padding and NaN).

using F16 = Lanes<16>::F;
using I16 = Lanes<16>::I;
static_assert(sizeof(F16) == 16 * sizeof(float) && sizeof(I16) == 16 * sizeof(int32_t), "16 lanes");

// A tile (V: F16 or I16; tile[k] = pixel k0 + k of the group's 16 channels, n <= 16 pixels)
// to or from 16 NCHW runs of n values, channel c's at p + c * stride; lanes of pixels past n
// are zero.
template <typename V, typename T>
void RunsToTile(const T* p, int64_t stride, int64_t n, V* tile) {
  static_assert(sizeof(V) == 16 * sizeof(T), "16 lanes of T");
  for (int c = 0; c < 16; ++c) {
    tile[c] = V{};
    if (n == 16)  // a fixed size: one vector move, not a string copy
      std::memcpy(&tile[c], p + c * stride, sizeof(V));
    else
      std::memcpy(&tile[c], p + c * stride, size_t(n) * sizeof(T));
  }
  Transpose16x16(tile);
}
template <typename V, typename T>
void TileToRuns(V* tile, T* p, int64_t stride, int64_t n) {  // transposes tile in place
  static_assert(sizeof(V) == 16 * sizeof(T), "16 lanes of T");
  Transpose16x16(tile);
  for (int c = 0; c < 16; ++c) {
    if (n == 16)
      std::memcpy(p + c * stride, &tile[c], sizeof(V));
    else
      std::memcpy(p + c * stride, &tile[c], size_t(n) * sizeof(T));
  }
}
// The same between a tile and the n pixels from k0 of the group whose first plane is p0, in an
// operand of layout l.
template <typename V, typename T>
void LoadTile(const Planes& l, const T* t, int64_t p0, int64_t k0, int64_t n, V* tile) {
  if (l.blocked) {
    std::memcpy(tile, t + l.Start(p0) + k0 * 16, size_t(n) * sizeof(V));
    for (int64_t k = n; k < 16; ++k) tile[k] = V{};
  } else {
    RunsToTile(t + l.Start(p0) + k0, l.hw, n, tile);
  }
}
template <typename V, typename T>
void StoreTile(const Planes& l, T* t, int64_t p0, int64_t k0, int64_t n, V* tile) {
  if (l.blocked)
    std::memcpy(t + l.Start(p0) + k0 * 16, tile, size_t(n) * sizeof(V));
  else
    TileToRuns(tile, t + l.Start(p0) + k0, l.hw, n);
}

// f(p0) for the first plane of every group of 16 channels (N C / 16 groups), split across the
// pool; work: per group.
template <typename F>
void ForGroups(const PoolDims& d, int64_t work, F f) {
  ParallelFor(d.planes / 16, std::max<int64_t>(1, kGrain / std::max<int64_t>(work, 1)), [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) f(g * 16);
  });
}

// Output pixels [k0, k0 + n) of the group over a blocked x (xb: the group's H W pixels of 16
// values): maxima into m, first argmax into best.
void MaxPoolBlockedTile(const PoolDims& d, const float* xb, int64_t k0, int64_t n, F16* m, I16* best) {
  // Each pixel's window: its top left (clipped), and whether padding clips any of the 16.
  int32_t at0[16];
  bool whole = n == 16;
  int64_t oi = k0 / d.ow, oj = k0 % d.ow;  // output pixel k0 + k, walked without dividing
  for (int64_t k = 0; k < n; ++k, oj = oj + 1 == d.ow ? 0 : oj + 1, oi += oj == 0) {
    const Span rows = RowSpan(d, oi), cols = ColSpan(d, oj);
    at0[k] = int32_t(rows.lo * d.w + cols.lo);
    whole = whole && rows.hi - rows.lo == d.kh && cols.hi - cols.lo == d.kw;
    std::memcpy(&m[k], xb + int64_t(at0[k]) * 16, sizeof m[k]);
    best[k] = I16{} + at0[k];
  }
  auto scan = [&](int64_t k, int32_t at) {
    F16 v;
    std::memcpy(&v, xb + int64_t(at) * 16, sizeof v);
    const I16 take = (v > m[k]) | ((v != v) & (m[k] == m[k]));  // WindowArgMax's test, lane by lane
    m[k] = take ? v : m[k];
    best[k] = take ? I16{} + at : best[k];
  };
  if (whole) {
    // Window position by position, the 16 pixels at each: 16 independent chains of comparisons
    // rather than one pixel's after another's. Each pixel still sees its window's positions in
    // WindowArgMax's order.
    for (int64_t i = 0; i < d.kh; ++i)
      for (int64_t j = 0; j < d.kw; ++j) {
        const int32_t off = int32_t(i * d.w + j);
#pragma GCC unroll 16
        for (int64_t k = 0; k < 16; ++k) scan(k, at0[k] + off);
      }
    return;
  }
  oi = k0 / d.ow, oj = k0 % d.ow;
  for (int64_t k = 0; k < n; ++k, oj = oj + 1 == d.ow ? 0 : oj + 1, oi += oj == 0) {
    const Span rows = RowSpan(d, oi), cols = ColSpan(d, oj);
    for (int64_t i = rows.lo; i < rows.hi; ++i)
      for (int64_t j = cols.lo; j < cols.hi; ++j) scan(k, int32_t(i * d.w + j));
  }
  for (int64_t k = n; k < 16; ++k) {
    m[k] = F16{};
    best[k] = I16{};
  }
}

// max_pool2d with any of x, y and the argmax blocked; Note [Blocked max pooling].
void MaxPool2dBlockedCpu(const OpRecord& op, const PoolDims& d, const Planes& xl, const Planes& yl,
                         const Planes& al) {
  LOOM_CHECK(op.inputs[0].dtype() == DType::kFloat32, DTypeError,
             "[max_pool2d] the blocked layout is float32 only, x is ", Name(op.inputs[0].dtype()));
  const float* x = op.inputs[0].data<float>();
  float* y = op.outputs[0].data<float>();
  int32_t* arg = op.outputs[1].data<int32_t>();
  const int64_t hw = d.h * d.w, ohw = d.oh * d.ow;
  const std::vector<VectorRun> runs = xl.blocked ? std::vector<VectorRun>() : MaxPoolVectorRuns<float>(d);
  ForGroups(d, 16 * ohw * d.kh * d.kw, [&](int64_t p0) {
    F16 m[16];
    I16 best[16];
    if (xl.blocked) {
      for (int64_t k0 = 0; k0 < ohw; k0 += 16) {
        const int64_t n = std::min<int64_t>(16, ohw - k0);
        MaxPoolBlockedTile(d, x + xl.Start(p0), k0, n, m, best);
        StoreTile(yl, y, p0, k0, n, m);
        StoreTile(al, arg, p0, k0, n, best);
      }
      return;
    }
    // An NCHW x: the NCHW kernel's planes, each blocked output staged in the group's 16 NCHW
    // planes of this thread's buffers.
    thread_local std::vector<float> ystage;
    thread_local std::vector<int32_t> astage;
    float* yp = y + p0 * ohw;
    int32_t* ap = arg + p0 * ohw;
    if (yl.blocked) ystage.resize(size_t(16 * ohw)), yp = ystage.data();
    if (al.blocked) astage.resize(size_t(16 * ohw)), ap = astage.data();
    for (int64_t c = 0; c < 16; ++c) MaxPoolPlane(d, runs, x + (p0 + c) * hw, yp + c * ohw, ap + c * ohw);
    for (int64_t k0 = 0; k0 < ohw; k0 += 16) {
      const int64_t n = std::min<int64_t>(16, ohw - k0);
      if (yl.blocked) RunsToTile(yp + k0, ohw, n, m), StoreTile(yl, y, p0, k0, n, m);
      if (al.blocked) RunsToTile(ap + k0, ohw, n, best), StoreTile(al, arg, p0, k0, n, best);
    }
  });
}

// max_pool2d_grad with any of the argmax, dy and dx blocked; Note [Blocked max pooling].
void MaxPool2dGradBlockedCpu(const OpRecord& op, const PoolDims& d, const Planes& al, const Planes& dyl,
                             const Planes& dxl) {
  LOOM_CHECK(op.outputs[0].dtype() == DType::kFloat32, DTypeError,
             "[max_pool2d_grad] the blocked layout is float32 only, dx is ", Name(op.outputs[0].dtype()));
  const int32_t* arg = op.inputs[0].data<int32_t>();
  const float* dy = op.inputs[1].data<float>();
  float* dx = op.outputs[0].data<float>();
  const int64_t hw = d.h * d.w, ohw = d.oh * d.ow;
  // Disjoint windows (stride at least the kernel: the usual pooling): each pixel of dx lies in
  // at most one window and is written once, 0 + dy or 0 (as the NCHW kernel's fill and scatter
  // leave it), without reading it back.
  const bool disjoint = d.sh >= d.kh && d.sw >= d.kw;
  ForGroups(d, 16 * (hw + ohw * d.kh * d.kw), [&](int64_t p0) {
    float* dxb = dx + dxl.Start(p0);
    // dx rows [0, zeroed) of the group are zeroed (and may hold sums): each row is zeroed just
    // before the first window reaching it, so that it is still in cache when dy is added (a
    // string store of whole lines, which does not read them first).
    int64_t zeroed = 0;
    auto zero_to = [&](int64_t r) {
      if (r <= zeroed) return;
      for (int64_t c = 0; c < (dxl.blocked ? 1 : 16); ++c) {  // blocked: the group's rows are one run
        float* row0 = dxb + (dxl.blocked ? zeroed * d.w * 16 : c * hw + zeroed * d.w);
        std::fill(row0, row0 + (r - zeroed) * d.w * (dxl.blocked ? 16 : 1), 0.0f);
      }
      zeroed = r;
    };
    F16 gt[16];
    I16 at[16];
    for (int64_t k0 = 0; k0 < ohw; k0 += 16) {
      const int64_t n = std::min<int64_t>(16, ohw - k0);
      // The tile's dy and argmax: read in place where blocked, else transposed into gt, at.
      const float* gs = reinterpret_cast<const float*>(gt);
      const int32_t* as = reinterpret_cast<const int32_t*>(at);
      if (dyl.blocked)
        gs = dy + dyl.Start(p0) + k0 * 16;
      else
        LoadTile(dyl, dy, p0, k0, n, gt);
      if (al.blocked)
        as = arg + al.Start(p0) + k0 * 16;
      else
        LoadTile(al, arg, p0, k0, n, at);
      zero_to(RowSpan(d, (k0 + n - 1) / d.ow).hi);
      if (!dxl.blocked) {  // an NCHW dx: the NCHW kernel's scatter, channel by channel
        for (int c = 0; c < 16; ++c)  // channel by channel: 16 planes a page apart thrash a cache set
          for (int64_t k = 0; k < n; ++k) dxb[c * hw + as[k * 16 + c]] += gs[k * 16 + c];
        continue;
      }
      // A blocked dx: every pixel of the window takes dy in the lanes whose argmax it is.
      int64_t oi = k0 / d.ow, oj = k0 % d.ow;
      for (int64_t k = 0; k < n; ++k, oj = oj + 1 == d.ow ? 0 : oj + 1, oi += oj == 0) {
        F16 g;
        I16 a;
        std::memcpy(&g, gs + k * 16, sizeof g);
        std::memcpy(&a, as + k * 16, sizeof a);
        const Span rows = RowSpan(d, oi), cols = ColSpan(d, oj);
        for (int64_t i = rows.lo; i < rows.hi; ++i)
          for (int64_t j = cols.lo; j < cols.hi; ++j) {
            const int32_t here = int32_t(i * d.w + j);
            float* p = dxb + int64_t(here) * 16;
            F16 v = F16{};
            if (!disjoint) std::memcpy(&v, p, sizeof v);
            v = a == here ? v + g : v;
            std::memcpy(p, &v, sizeof v);
          }
      }
    }
    zero_to(d.h);  // rows no window reaches
  });
}

// x: (N, C, H, W) -> y: (N, C, OH, OW), argmax: int32 (N, C, OH, OW); each NCHW or nChw16c
void MaxPool2dCpu(const OpRecord& op, const KernelContext&) {
  const PoolDims d = MakePoolDims(op.attrs, op.inputs[0].shape(), op.outputs[0].shape());
  const Planes xl = PlanesOf(op, op.inputs[0], "x_blocked", "max_pool2d");
  const Planes yl = PlanesOf(op, op.outputs[0], "y_blocked", "max_pool2d");
  const Planes al = PlanesOf(op, op.outputs[1], "argmax_blocked", "max_pool2d");
  if (xl.blocked || yl.blocked || al.blocked) return MaxPool2dBlockedCpu(op, d, xl, yl, al);
  FloatDispatch(op.inputs[0].dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const T* x = op.inputs[0].data<T>();
    T* y = op.outputs[0].data<T>();
    int32_t* arg = op.outputs[1].data<int32_t>();
    const std::vector<VectorRun> runs = MaxPoolVectorRuns<T>(d);
    ForPlanes(d, d.oh * d.ow * d.kh * d.kw, [&](int64_t p) {
      MaxPoolPlane(d, runs, x + p * d.h * d.w, y + p * d.oh * d.ow, arg + p * d.oh * d.ow);
    });
  });
}

// argmax: int32 (N, C, OH, OW), dy: (N, C, OH, OW) -> dx: (N, C, H, W); each NCHW or nChw16c
void MaxPool2dGradCpu(const OpRecord& op, const KernelContext&) {
  const PoolDims d = MakePoolDims(op.attrs, op.outputs[0].shape(), op.inputs[1].shape());
  const Planes al = PlanesOf(op, op.inputs[0], "argmax_blocked", "max_pool2d_grad");
  const Planes dyl = PlanesOf(op, op.inputs[1], "dy_blocked", "max_pool2d_grad");
  const Planes dxl = PlanesOf(op, op.outputs[0], "dx_blocked", "max_pool2d_grad");
  if (al.blocked || dyl.blocked || dxl.blocked) return MaxPool2dGradBlockedCpu(op, d, al, dyl, dxl);
  FloatDispatch(op.outputs[0].dtype(), "max_pool2d_grad", [&](auto tag) {
    using T = decltype(tag);
    const int32_t* arg = op.inputs[0].data<int32_t>();
    const T* dy = op.inputs[1].data<T>();
    T* dx = op.outputs[0].data<T>();
    ForPlanes(d, d.h * d.w + d.oh * d.ow, [&](int64_t p) {
      T* dxp = dx + p * d.h * d.w;
      const T* dyp = dy + p * d.oh * d.ow;
      const int32_t* ap = arg + p * d.oh * d.ow;
      std::fill(dxp, dxp + d.h * d.w, T(0));
      for (int64_t i = 0; i < d.oh * d.ow; ++i) dxp[ap[i]] += dyp[i];
    });
  });
}

// x: (N, C, H, W) -> y: (N, C, OH, OW)
void AvgPool2dCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.inputs[0].shape(), op.outputs[0].shape());
    const bool include_pad = op.attrs.Int("count_include_pad", 1) != 0;
    const T* x = op.inputs[0].data<T>();
    T* y = op.outputs[0].data<T>();
    ForPlanes(d, d.oh * d.ow * d.kh * d.kw, [&](int64_t p) {
      const T* xp = x + p * d.h * d.w;
      T* yp = y + p * d.oh * d.ow;
      for (int64_t oi = 0; oi < d.oh; ++oi) {
        const Span rows = RowSpan(d, oi);
        for (int64_t oj = 0; oj < d.ow; ++oj) {
          const Span cols = ColSpan(d, oj);
          T s = 0;
          for (int64_t i = rows.lo; i < rows.hi; ++i)
            for (int64_t j = cols.lo; j < cols.hi; ++j) s += xp[i * d.w + j];
          yp[oi * d.ow + oj] = s / T(AvgCount(d, include_pad, oi, oj));
        }
      }
    });
  });
}

// dy: (N, C, OH, OW) -> dx: (N, C, H, W)
void AvgPool2dGradCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "avg_pool2d_grad", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.outputs[0].shape(), op.inputs[0].shape());
    const bool include_pad = op.attrs.Int("count_include_pad", 1) != 0;
    const T* dy = op.inputs[0].data<T>();
    T* dx = op.outputs[0].data<T>();
    ForPlanes(d, d.h * d.w + d.oh * d.ow * d.kh * d.kw, [&](int64_t p) {
      T* dxp = dx + p * d.h * d.w;
      const T* dyp = dy + p * d.oh * d.ow;
      std::fill(dxp, dxp + d.h * d.w, T(0));
      for (int64_t oi = 0; oi < d.oh; ++oi) {
        const Span rows = RowSpan(d, oi);
        for (int64_t oj = 0; oj < d.ow; ++oj) {
          const Span cols = ColSpan(d, oj);
          const T g = dyp[oi * d.ow + oj] / T(AvgCount(d, include_pad, oi, oj));
          for (int64_t i = rows.lo; i < rows.hi; ++i)
            for (int64_t j = cols.lo; j < cols.hi; ++j) dxp[i * d.w + j] += g;
        }
      }
    });
  });
}

// x: (N, C, H, W) -> y: (N, C); each plane summed in pixel order in either layout
void GlobalAvgPoolCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.inputs[0].dtype(), "global_avg_pool", [&](auto tag) {
    using T = decltype(tag);
    const Shape& s = op.inputs[0].shape();
    const int64_t planes = s[0] * s[1], hw = s[2] * s[3];
    const Planes pl = PlanesOf(op, op.inputs[0], "x_blocked", "global_avg_pool");
    const T* x = op.inputs[0].data<T>();
    T* y = op.outputs[0].data<T>();
    ParallelFor(planes, std::max<int64_t>(1, kGrain / hw), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const T* xp = x + pl.Start(p);
        const int64_t step = pl.Step();
        double acc = 0;
        for (int64_t i = 0; i < hw; ++i) acc += double(xp[i * step]);
        y[p] = T(acc / double(hw));
      }
    });
  });
}

// dy: (N, C) -> dx: (N, C, H, W)
void GlobalAvgPoolGradCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "global_avg_pool_grad", [&](auto tag) {
    using T = decltype(tag);
    const Shape& s = op.outputs[0].shape();
    const int64_t planes = s[0] * s[1], hw = s[2] * s[3];
    const Planes pl = PlanesOf(op, op.outputs[0], "dx_blocked", "global_avg_pool_grad");
    const T* dy = op.inputs[0].data<T>();
    T* dx = op.outputs[0].data<T>();
    ParallelFor(planes, std::max<int64_t>(1, kGrain / std::max<int64_t>(hw, 1)), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        T* dp = dx + pl.Start(p);
        const T v = T(dy[p] / T(hw));
        for (int64_t i = 0; i < hw; ++i) dp[i * pl.Step()] = v;
      }
    });
  });
}

// The nChw16c layout holds exactly the NCHW tensor's bytes: float32 (N, C, H, W), C a multiple of 16.
bool BlockableNchw(const Tensor& t) { return t.dtype() == DType::kFloat32 && t.ndim() == 4 && t.shape()[1] % 16 == 0; }

// Note [What a kernel supports]: every NCHW record; one with blocked operands (any mix) for
// float32 with C a multiple of 16.
bool MaxPoolSupports(const OpRecord& op, const Tensor& t, std::initializer_list<const char*> attrs) {
  bool blocked = false;
  for (const char* a : attrs) blocked |= op.attrs.Int(a, 0) != 0;
  return !blocked || BlockableNchw(t);
}
bool MaxPool2dSupports(const OpRecord& op) {
  return MaxPoolSupports(op, op.inputs[0], {"x_blocked", "y_blocked", "argmax_blocked"});
}
bool MaxPool2dGradSupports(const OpRecord& op) {
  return MaxPoolSupports(op, op.outputs[0], {"argmax_blocked", "dy_blocked", "dx_blocked"});
}

// Note [What a kernel supports]: every NCHW record; a blocked one for float32 (N, C, H, W) with
// C a multiple of 16.
bool GlobalAvgPoolSupports(const OpRecord& op) {
  return op.attrs.Int("x_blocked", 0) == 0 || BlockableNchw(op.inputs[0]);
}
bool GlobalAvgPoolGradSupports(const OpRecord& op) {
  return op.attrs.Int("dx_blocked", 0) == 0 || BlockableNchw(op.outputs[0]);
}

}  // namespace

LOOM_KERNEL(max_pool2d, kCPU, MaxPool2dCpu);
LOOM_KERNEL(max_pool2d_grad, kCPU, MaxPool2dGradCpu);
LOOM_KERNEL_SUPPORTS(max_pool2d, kCPU, MaxPool2dSupports);
LOOM_KERNEL_SUPPORTS(max_pool2d_grad, kCPU, MaxPool2dGradSupports);
LOOM_KERNEL(avg_pool2d, kCPU, AvgPool2dCpu);
LOOM_KERNEL(avg_pool2d_grad, kCPU, AvgPool2dGradCpu);
LOOM_KERNEL(global_avg_pool, kCPU, GlobalAvgPoolCpu);
LOOM_KERNEL(global_avg_pool_grad, kCPU, GlobalAvgPoolGradCpu);
LOOM_KERNEL_SUPPORTS(global_avg_pool, kCPU, GlobalAvgPoolSupports);
LOOM_KERNEL_SUPPORTS(global_avg_pool_grad, kCPU, GlobalAvgPoolGradSupports);

}  // namespace cpu
}  // namespace loom
