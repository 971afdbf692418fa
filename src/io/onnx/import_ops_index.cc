// ONNX handlers for index-driven and structured ops: GatherElements, NonZero, CumSum, Trilu,
// EyeLike, Hardmax, windows, nearest-neighbour Upsample and Resize (nearest, linear) (Note [ONNX handlers] in import_graph.h).
// Index patterns that depend only on shapes are built on the host; the data moves with ops.
#include <algorithm>
#include <cmath>

#include "core/ops.h"
#include "io/onnx/import_graph.h"
#include "io/onnx/tensor_proto.h"

namespace loom {
namespace io {
namespace onnx {
namespace {

bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }
Tensor F64(const Tensor& x) { return ops::Cast(x, DType::kFloat64); }

// Row-major strides of a shape.
std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t i = int64_t(s.size()) - 2; i >= 0; --i) st[size_t(i)] = st[size_t(i) + 1] * s[size_t(i) + 1];
  return st;
}

// out[p] = x[p with p[axis] replaced by idx[p]]: a gather of the flattened x at
// base(p) + idx[p] * stride(axis), base(p) the offset of p without its axis coordinate.
std::vector<Value> RunGatherElements(RunContext& c) {
  const Tensor& x = c.T(0);
  const Tensor& idx = c.T(1);
  if (idx.ndim() != x.ndim()) Fail(c, "indices and data must have the same rank");
  const int64_t axis = Axis(c, c.node.Int("axis", 0), x.ndim(), "axis"), dim = x.shape()[size_t(axis)];
  const std::vector<int64_t> xs = Strides(x.shape());
  const Shape& is = idx.shape();
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (d != axis && is[size_t(d)] > x.shape()[size_t(d)])
      Fail(c, detail::Cat("indices ", ToString(is), " exceed data ", ToString(x.shape()), " on axis ", d));
  const int64_t n = NumElements(is);
  std::vector<double> base(size_t(n), 0.0);
  const std::vector<int64_t> ist = Strides(is);
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = 0;
    for (int64_t d = 0; d < x.ndim(); ++d)
      if (d != axis) off += (k / ist[size_t(d)] % is[size_t(d)]) * xs[size_t(d)];
    base[size_t(k)] = double(off);
  }
  if (n == 0) return {V(ops::Reshape(ops::Slice(ops::Reshape(x, {-1}), 0, 0, 0), is))};
  Tensor fi = F64(idx);
  fi = ops::Where(ops::Less(fi, ops::Zeros({}, DType::kFloat64, fi.device_ptr())), ops::AddScalar(fi, double(dim)), fi);
  // An index outside [0, dim) would land on another row: refuse it as Embedding refuses its own.
  Tensor bad = ops::Add(ops::Cast(ops::Less(fi, ops::Zeros({}, DType::kFloat64, fi.device_ptr())), DType::kFloat64),
                        ops::Cast(ops::GreaterEqual(fi, ops::Full({}, double(dim), DType::kFloat64, fi.device_ptr())),
                                  DType::kFloat64));
  fi = ops::Where(ops::Greater(bad, ops::Zeros({}, DType::kFloat64, fi.device_ptr())),
                  ops::Full({}, double(NumElements(x.shape())), DType::kFloat64, fi.device_ptr()), fi);
  Tensor flat = ops::Add(ops::FromVector<double>(base, is, x.device_ptr()), ops::MulScalar(fi, double(xs[size_t(axis)])));
  return {V(Take(ops::Reshape(x, {-1}), 0, ops::Cast(flat, DType::kInt64)))};
}
std::vector<DType> InferGatherElements(const InferArgs& a) {
  if (a[1] != DType::kInt32 && a[1] != DType::kInt64) Fail(a.node, "indices must be int32 or int64");
  return {a[0]};
}

// NonZero's output size depends on the values: they are read on the host (in eager mode; inside a
// capture the read is loom's GraphError, naming the node).
std::vector<Value> RunNonZero(RunContext& c) {
  const Tensor& x = c.T(0);
  const std::vector<double> v = F64(x).Contiguous().ToVector<double>();
  const std::vector<int64_t> st = Strides(x.shape());
  const int64_t r = std::max<int64_t>(x.ndim(), 1);
  // Counted first, then written: r n values, r times x's nonzero count, checked before they are
  // built (a chain of NonZero doubles them at each node; found by fuzz_onnx_ops out of memory).
  // Note [Host-built index arrays].
  int64_t n = 0;
  for (double e : v) n += e != 0;
  std::vector<int64_t> out(HostCount(c, r * n, "NonZero's indices"));
  int64_t j = 0;
  for (size_t k = 0; k < v.size(); ++k) {
    if (v[k] == 0) continue;
    for (int64_t d = 0; d < r; ++d)
      out[size_t(d * n + j)] = x.ndim() == 0 ? 0 : int64_t(k) / st[size_t(d)] % x.shape()[size_t(d)];
    ++j;
  }
  return {HostInts(out, {r, n}, DType::kInt64, c.dev())};
}
std::vector<DType> InferNonZero(const InferArgs& a) {
  if (a[0] == DType::kFloat16 || a[0] == DType::kBFloat16) Fail(a.node, "float16 and bfloat16 are not supported");
  return {DType::kInt64};
}

// x moved by `by` places along `axis` (towards the end, or the start with `back`), zeros filling
// the places it leaves: shape(x) is kept.
Tensor Shifted(const Tensor& x, int64_t axis, int64_t by, bool back) {
  const int64_t n = x.shape()[size_t(axis)];
  Shape zs(x.shape());
  zs[size_t(axis)] = std::min(by, n);
  Tensor zeros = ops::Zeros(zs, x.dtype(), x.device_ptr());
  if (by >= n) return zeros;
  return back ? ops::Concat({ops::Slice(x, axis, by, n), zeros}, axis)
              : ops::Concat({zeros, ops::Slice(x, axis, 0, n - by)}, axis);
}

// CumSum along an axis: a scan in log2(n) shifted additions (each element adds the partial sum
// `step` places before it, step = 1, 2, 4...), so the work and memory stay O(numel log n) for
// any length of the axis (an n x n matrix of ones would not), and it differentiates.
std::vector<Value> RunCumSum(RunContext& c) {
  const Tensor& x0 = c.T(0);
  const std::vector<int64_t> ax = c.Ints(1, "axis");
  if (ax.size() != 1) Fail(c, "axis must hold one value");
  if (x0.ndim() == 0) Fail(c, "input must have rank 1 or more");
  const int64_t axis = Axis(c, ax[0], x0.ndim(), "axis"), n = x0.shape()[size_t(axis)];
  const bool exclusive = c.node.Int("exclusive", 0) != 0, reverse = c.node.Int("reverse", 0) != 0;
  Tensor y = IsFloat(x0.dtype()) ? x0 : F64(x0);
  if (x0.numel() > 0) {
    for (int64_t step = 1; step < n; step *= 2) y = ops::Add(y, Shifted(y, axis, step, reverse));
    if (exclusive) y = Shifted(y, axis, 1, reverse);
  }
  y = y.Contiguous();
  return {V(IsFloat(x0.dtype()) ? y : ops::Cast(y, x0.dtype()))};
}
std::vector<DType> InferCumSum(const InferArgs& a) {
  if (!IsFloat(a[0]) && a[0] != DType::kInt32 && a[0] != DType::kInt64)
    Fail(a.node, detail::Cat("input is ", Name(a[0]), "; loom sums float32, float64, int32 and int64"));
  return {a[0]};
}

// Trilu: x where the host-built triangle mask holds, else 0.
std::vector<Value> RunTrilu(RunContext& c) {
  const Tensor& x = c.T(0);
  if (x.ndim() < 2) Fail(c, "input must have rank 2 or more");
  const int64_t k = c.Has(1) ? c.Int(1, "k") : 0;
  const bool upper = c.node.Int("upper", 1) != 0;
  const int64_t rows = x.shape()[size_t(x.ndim() - 2)], cols = x.shape()[size_t(x.ndim() - 1)];
  std::vector<double> mask(size_t(NumElements({rows, cols}, "Trilu")));
  for (int64_t i = 0; i < (cols > 0 ? rows : 0); ++i)
    for (int64_t j = 0; j < cols; ++j) mask[size_t(i * cols + j)] = (upper ? j - i >= k : j - i <= k) ? 1.0 : 0.0;
  Tensor keep = ops::Cast(ops::FromVector<double>(mask, {rows, cols}, x.device_ptr()), DType::kBool);
  if (IsFloat(x.dtype())) return {V(ops::Where(keep, x, ops::Zeros({}, x.dtype(), x.device_ptr())))};
  Tensor y = ops::Where(keep, F64(x), ops::Zeros({}, DType::kFloat64, x.device_ptr()));
  return {V(ops::Cast(y, x.dtype()))};
}

std::vector<DType> InferEyeLike(const InferArgs& a) {
  if (a.node.Has("dtype")) return {DTypeFromOnnx(int32_t(a.node.Int("dtype", 1)), a.node.Where() + " attribute 'dtype'")};
  return {a[0]};
}
std::vector<Value> RunEyeLike(RunContext& c) {
  const Tensor& x = c.T(0);
  if (x.ndim() != 2) Fail(c, "input must be 2-D");
  const DType dt = c.node.Has("dtype") ? DTypeFromOnnx(int32_t(c.node.Int("dtype", 1)), c.Where()) : x.dtype();
  const int64_t rows = x.shape()[0], cols = x.shape()[1], k = c.node.Int("k", 0);
  std::vector<double> eye(size_t(NumElements({rows, cols}, "EyeLike")), 0.0);
  // Only the rows the diagonal crosses: rows i with 0 <= i + k < cols (none when cols is 0).
  int64_t first = 0, last = 0;
  if (k > -rows && k < cols) first = std::max<int64_t>(0, -k), last = std::min(rows, cols - k);
  for (int64_t i = first; i < last; ++i) eye[size_t(i * cols + i + k)] = 1.0;
  return {V(ops::Cast(ops::FromVector<double>(eye, {rows, cols}, c.dev()), dt))};
}

// Hardmax: 1 at the first maximum along the axis, 0 elsewhere (before opset 13 the input is
// seen as 2-D, (prod(:axis), prod(axis:)), like Softmax).
std::vector<Value> RunHardmax(RunContext& c) {
  const Tensor& x0 = c.T(0);
  Tensor x = x0;
  int64_t axis;
  if (c.node.opset >= 13) {
    axis = Axis(c, c.node.Int("axis", -1), x.ndim(), "axis");
  } else {
    const int64_t a = Axis(c, c.node.Int("axis", 1), x.ndim(), "axis");
    int64_t outer = 1;
    for (int64_t i = 0; i < a; ++i) outer *= x.shape()[size_t(i)];
    x = ops::Reshape(x, {outer, -1});
    axis = 1;
  }
  const int64_t n = x.shape()[size_t(axis)];
  if (x.numel() == 0) return {V(ops::ZerosLike(x0))};
  Tensor hit = ops::Equal(x, ops::Max(x, {axis}, true));
  std::vector<double> iv(HostCount(c, n, "the axis"), 0.0);
  for (int64_t i = 0; i < n; ++i) iv[size_t(i)] = double(i);
  Shape is(size_t(x.ndim()), 1);
  is[size_t(axis)] = n;
  Tensor iota = ops::BroadcastTo(ops::FromVector<double>(iv, is, x.device_ptr()), x.shape());
  Tensor cand = ops::Where(hit, iota, ops::Full({}, double(n), DType::kFloat64, x.device_ptr()));
  Tensor first = ops::Neg(ops::Max(ops::Neg(cand), {axis}, true));
  Tensor y = ops::Cast(ops::Equal(iota, first), x.dtype());
  return {V(ops::Reshape(y, x0.shape()))};
}

// Upsample (opsets 7 to 9), nearest mode: output index i reads input floor(i / scale).
std::vector<DType> InferUpsample(const InferArgs& a) {
  const std::string mode = a.node.Str("mode", "nearest");
  if (mode != "nearest") Fail(a.node, "mode '" + mode + "' is not supported (nearest is)");
  return {a[0]};
}
std::vector<Value> RunUpsample(RunContext& c) {
  Tensor x = c.T(0);
  const std::vector<double> scales =
      c.node.Has("scales") ? c.node.Floats("scales", {}) : (c.Has(1) ? c.Doubles(1, "scales") : std::vector<double>());
  if (int64_t(scales.size()) != x.ndim()) Fail(c, detail::Cat(scales.size(), " scales for rank ", x.ndim()));
  for (int64_t a = 0; a < x.ndim(); ++a) {
    const double s = scales[size_t(a)];
    if (!(s >= 1.0) || !std::isfinite(s)) Fail(c, "scales must be finite and at least 1");
    if (s == 1.0) continue;
    const int64_t in = x.shape()[size_t(a)];
    // Checked as a double first: a huge scale would overflow the conversion to int64.
    const double scaled = std::floor(double(in) * s);
    if (scaled > double(int64_t(1) << 24)) Fail(c, "the output is too large");
    const int64_t out = int64_t(scaled);
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < out; ++i) idx.push_back(std::min(in - 1, int64_t(std::floor(double(i) / s))));
    x = TakeHost(x, a, idx);
  }
  return {V(x)};
}

// Hann, Hamming and Blackman windows (opset 17): cosine sums computed on the host.
template <int kKind>
std::vector<Value> RunWindow(RunContext& c) {
  const int64_t size = c.Int(0, "size");
  if (size < 0 || size > (int64_t(1) << 24)) Fail(c, detail::Cat("size ", size, " is out of range"));
  const DType dt = DTypeFromOnnx(int32_t(c.node.Int("output_datatype", 1)), c.Where());
  const double n = double(c.node.Int("periodic", 1) != 0 ? size : size - 1), pi = 3.14159265358979323846;
  std::vector<double> w(static_cast<size_t>(size), 0.0);
  for (int64_t i = 0; i < size; ++i) {
    const double t = 2 * pi * double(i) / n;
    if (kKind == 0) w[size_t(i)] = 0.5 - 0.5 * std::cos(t);
    if (kKind == 1) w[size_t(i)] = 25.0 / 46 - (1 - 25.0 / 46) * std::cos(t);
    if (kKind == 2) w[size_t(i)] = 0.42 - 0.5 * std::cos(t) + 0.08 * std::cos(2 * t);
  }
  return {V(ops::Cast(ops::FromVector<double>(w, {size}, c.dev()), dt))};
}
std::vector<DType> InferWindow(const InferArgs& a) {
  if (a[0] != DType::kInt32 && a[0] != DType::kInt64) Fail(a.node, "size must be an integer");
  return {DTypeFromOnnx(int32_t(a.node.Int("output_datatype", 1)), a.node.Where() + " attribute 'output_datatype'")};
}

// Resize (opsets 11 to 17), nearest and linear modes, one axis at a time: each output position i
// maps to an input coordinate x by the coordinate transformation mode; nearest takes the input
// at round(x) (by nearest_mode), linear blends floor(x) and floor(x) + 1 (indices clamped to the
// edge, as ONNX's reference does).
std::vector<DType> InferResize(const InferArgs& a) {
  const NodeSpec& n = a.node;
  const std::string mode = n.Str("mode", "nearest"), ct = n.Str("coordinate_transformation_mode", "half_pixel"),
                    nm = n.Str("nearest_mode", "round_prefer_floor");
  if (mode != "nearest" && mode != "linear") Fail(n, "mode '" + mode + "' is not supported (nearest and linear are)");
  if (ct != "half_pixel" && ct != "pytorch_half_pixel" && ct != "align_corners" && ct != "asymmetric" &&
      ct != "tf_half_pixel_for_nn")
    Fail(n, "coordinate_transformation_mode '" + ct + "' is not supported");
  if (nm != "round_prefer_floor" && nm != "round_prefer_ceil" && nm != "floor" && nm != "ceil")
    Fail(n, "nearest_mode '" + nm + "' is not one of round_prefer_floor, round_prefer_ceil, floor, ceil");
  if (n.Int("exclude_outside", 0) != 0) Fail(n, "exclude_outside 1 is not supported");
  CheckFloatInput(a, 0);
  return {a[0]};
}
std::vector<Value> RunResize(RunContext& c) {
  Tensor x = c.T(0);
  const NodeSpec& n = c.node;
  const std::string mode = n.Str("mode", "nearest"), ct = n.Str("coordinate_transformation_mode", "half_pixel"),
                    nm = n.Str("nearest_mode", "round_prefer_floor");
  std::vector<double> scales = c.Has(2) ? c.Doubles(2, "scales") : std::vector<double>();
  std::vector<int64_t> sizes = c.Has(3) ? c.Ints(3, "sizes") : std::vector<int64_t>();
  const int64_t r = x.ndim();
  if (scales.empty() == sizes.empty()) Fail(c, "exactly one of scales and sizes must be given");
  if (int64_t(scales.size() + sizes.size()) != r) Fail(c, detail::Cat("scales or sizes must have ", r, " values"));
  for (int64_t a = 0; a < r; ++a) {
    const int64_t in = x.shape()[size_t(a)];
    const int64_t out = sizes.empty() ? int64_t(std::floor(double(in) * scales[size_t(a)])) : sizes[size_t(a)];
    const double scale = sizes.empty() ? scales[size_t(a)] : double(out) / double(in);
    if (!(scale > 0) || !std::isfinite(scale) || out < 0 || out > (int64_t(1) << 24) || in == 0)
      Fail(c, detail::Cat("axis ", a, ": cannot resize ", in, " to ", out));
    if (out == in && scale == 1.0) continue;
    std::vector<int64_t> i0(static_cast<size_t>(out), 0), i1(static_cast<size_t>(out), 0);
    std::vector<double> w(static_cast<size_t>(out), 0.0);
    for (int64_t i = 0; i < out; ++i) {
      // ONNX measures the resized length as in * scale, unrounded (it is `out` when sizes are given).
      const double len = double(in) * scale;
      double xo;
      if (ct == "half_pixel") xo = (double(i) + 0.5) / scale - 0.5;
      else if (ct == "pytorch_half_pixel") xo = len > 1 ? (double(i) + 0.5) / scale - 0.5 : 0.0;
      else if (ct == "align_corners") xo = len == 1 ? 0.0 : double(i) * double(in - 1) / (len - 1);
      else if (ct == "asymmetric") xo = double(i) / scale;
      else xo = (double(i) + 0.5) / scale;  // tf_half_pixel_for_nn
      auto clampi = [in](int64_t v) { return std::min(std::max<int64_t>(v, 0), in - 1); };
      if (mode == "nearest") {
        double k;
        const double fl = std::floor(xo);
        if (nm == "floor") k = fl;
        else if (nm == "ceil") k = std::ceil(xo);
        else if (xo - fl == 0.5) k = nm == "round_prefer_floor" ? fl : fl + 1;
        else k = std::round(xo);
        i0[size_t(i)] = clampi(int64_t(k));
      } else {
        const double fl = std::floor(xo);
        i0[size_t(i)] = clampi(int64_t(fl));
        i1[size_t(i)] = clampi(int64_t(fl) + 1);
        w[size_t(i)] = xo - fl;
      }
    }
    if (mode == "nearest") {
      x = TakeHost(x, a, i0);
      continue;
    }
    Shape ws(size_t(r), 1);
    ws[size_t(a)] = out;
    Tensor wt = ops::Cast(ops::FromVector<double>(w, ws, x.device_ptr()), x.dtype());
    Tensor lo = TakeHost(x, a, i0), hi = TakeHost(x, a, i1);
    x = ops::Add(lo, ops::Mul(ops::Sub(hi, lo), wt));
  }
  return {V(x)};
}

}  // namespace

void AddIndexOps(std::vector<OpEntry>* r) {
  r->push_back(MakeOp("GatherElements", 11, 2, 2, {"axis"}, InferGatherElements, RunGatherElements));
  r->push_back(MakeOp("NonZero", 9, 1, 1, {}, InferNonZero, RunNonZero));
  r->push_back(MakeOp("CumSum", 11, 2, 2, {"exclusive", "reverse"}, InferCumSum, RunCumSum));
  r->push_back(MakeOp("Trilu", 14, 1, 2, {"upper"}, Same0, RunTrilu));
  r->push_back(MakeOp("EyeLike", 9, 1, 1, {"dtype", "k"}, InferEyeLike, RunEyeLike));
  r->push_back(MakeOp("Hardmax", 1, 1, 1, {"axis"}, FloatUnary, RunHardmax));
  for (auto w : {std::make_pair("HannWindow", RunWindow<0>), std::make_pair("HammingWindow", RunWindow<1>),
                 std::make_pair("BlackmanWindow", RunWindow<2>)})
    r->push_back(MakeOp(w.first, 17, 1, 1, {"output_datatype", "periodic"}, InferWindow, w.second));
  r->push_back(MakeOp("Resize", 11, 1, 4,
                      {"coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside", "extrapolation_value",
                       "mode", "nearest_mode"},
                      InferResize, RunResize));
  OpEntry up = MakeOp("Upsample", 7, 1, 2, {"mode", "scales"}, InferUpsample, RunUpsample);
  up.until = 9;
  r->push_back(up);
}

}  // namespace onnx
}  // namespace io
}  // namespace loom
