// ONNX handlers that move data rather than compute it: reshapes, transposes, concatenation and
// splitting, slicing and gathering, padding and tiling, and the ops that make constants and
// shapes (Note [ONNX handlers] in import_graph.h). They keep Value::host, the integer values known
// on the host, where a shape computation (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as
// PyTorch writes `x.view(x.size(0), -1)`) needs them, so such a graph also runs inside a capture.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/ops.h"
#include "core/ops_cnn.h"
#include "io/onnx/import_graph.h"
#include "io/onnx/tensor_proto.h"

namespace loom {
namespace io {
namespace onnx {

// The elements of x at positions `idx` (int64, any shape I) along `axis`: shape
// x.shape[:axis] + I + x.shape[axis+1:]. Built from Embedding (a gather of rows), which wants a
// float table: other dtypes go through float64 (exact for integers below 2^53).
Tensor Take(const Tensor& x0, int64_t axis, const Tensor& idx) {
  const DType dt = x0.dtype();
  const bool f = dt == DType::kFloat32 || dt == DType::kFloat64;
  Tensor x = f ? x0 : ops::Cast(x0, DType::kFloat64);
  const int64_t r = x.ndim(), k = idx.ndim();
  std::vector<int64_t> perm{axis};
  Shape others;
  for (int64_t i = 0; i < r; ++i)
    if (i != axis) {
      perm.push_back(i);
      others.push_back(x.shape()[size_t(i)]);
    }
  const int64_t rest = NumElements(others);
  Tensor table = ops::Reshape(ops::Permute(x, perm), {x.shape()[size_t(axis)], rest});
  Tensor e = ops::Embedding(table, idx);  // (I..., rest)
  Shape es(idx.shape());
  es.insert(es.end(), others.begin(), others.end());
  e = ops::Reshape(e, es);  // (I..., others...)
  std::vector<int64_t> back;
  for (int64_t i = 0; i < axis; ++i) back.push_back(k + i);
  for (int64_t i = 0; i < k; ++i) back.push_back(i);
  for (int64_t i = axis; i < r - 1; ++i) back.push_back(k + i);
  e = ops::Permute(e, back).Contiguous();
  return f ? e : ops::Cast(e, dt);
}

Tensor TakeHost(const Tensor& x, int64_t axis, const std::vector<int64_t>& idx) {
  if (idx.empty()) return ops::Slice(x, axis, 0, 0);
  return Take(x, axis, ops::FromVector<int64_t>(idx, {int64_t(idx.size())}, x.device_ptr()));
}


namespace {

bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

std::shared_ptr<const std::vector<int64_t>> Host(std::vector<int64_t> v) {
  return std::make_shared<const std::vector<int64_t>>(std::move(v));
}

Shape Unsqueezed(const RunContext& c, const Shape& s, std::vector<int64_t> axes) {
  const int64_t r = int64_t(s.size() + axes.size());
  for (auto& a : axes) a = Axis(c, a, r, "axis");
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) Fail(c, "repeated axes");
  Shape out;
  size_t j = 0, k = 0;
  for (int64_t i = 0; i < r; ++i) {
    if (k < axes.size() && axes[k] == i) {
      out.push_back(1);
      ++k;
    } else {
      out.push_back(s[j++]);
    }
  }
  return out;
}

// Input 1 when given (opset 13 forms), else the attribute.
std::vector<int64_t> AxesOf(const RunContext& c, const char* key, bool* given) {
  *given = true;
  if (c.Has(1)) return c.Ints(1, key);
  *given = c.node.Has(key);
  return c.node.Ints(key, {});
}

// ---- reshaping ----

std::vector<Value> RunReshape(RunContext& c) {
  const Tensor& x = c.T(0);
  std::vector<int64_t> s = c.Ints(1, "shape");
  const bool allowzero = c.node.Int("allowzero", 0) != 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == 0 && !allowzero) {
      if (int64_t(i) >= x.ndim()) Fail(c, detail::Cat("shape[", i, "] is 0 (copy) but the input has rank ", x.ndim()));
      s[i] = x.shape()[i];
    } else if (s[i] < -1) {
      Fail(c, detail::Cat("shape[", i, "] is ", s[i]));
    }
  }
  return {Value{ops::Reshape(x, Shape(s.begin(), s.end())), c.V(0).host}};
}

std::vector<Value> RunSqueeze(RunContext& c) {
  const Tensor& x = c.T(0);
  bool given;
  std::vector<int64_t> axes = AxesOf(c, "axes", &given);
  for (auto& a : axes) a = Axis(c, a, x.ndim(), "axis");
  Shape out;
  for (int64_t i = 0; i < x.ndim(); ++i) {
    const bool listed = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (listed && x.shape()[size_t(i)] != 1)
      Fail(c, detail::Cat("axis ", i, " of ", x.Describe(), " is not 1 and cannot be squeezed"));
    if (listed || (!given && x.shape()[size_t(i)] == 1)) continue;
    out.push_back(x.shape()[size_t(i)]);
  }
  return {Value{ops::Reshape(x, out), c.V(0).host}};
}

std::vector<Value> RunUnsqueeze(RunContext& c) {
  const Tensor& x = c.T(0);
  bool given;
  std::vector<int64_t> axes = AxesOf(c, "axes", &given);
  if (!given) Fail(c, "axes are required");
  return {Value{ops::Reshape(x, Unsqueezed(c, x.shape(), axes)), c.V(0).host}};
}

std::vector<Value> RunTranspose(RunContext& c) {
  const Tensor& x = c.T(0);
  std::vector<int64_t> perm = c.node.Ints("perm", {});
  if (perm.empty())
    for (int64_t i = x.ndim() - 1; i >= 0; --i) perm.push_back(i);
  if (int64_t(perm.size()) != x.ndim()) Fail(c, detail::Cat("perm has ", perm.size(), " values for rank ", x.ndim()));
  return {V(ops::Permute(x, perm).Contiguous())};
}

std::vector<Value> RunConcat(RunContext& c) {
  std::vector<Tensor> xs;
  std::vector<int64_t> host;
  bool all_host = true;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!c.Has(i)) continue;
    xs.push_back(c.T(i));
    if (c.V(i).host) host.insert(host.end(), c.V(i).host->begin(), c.V(i).host->end());
    else all_host = false;
  }
  if (xs.empty()) Fail(c, "no inputs");
  const int64_t axis = Axis(c, c.node.Int("axis", 0), xs[0].ndim(), "axis");
  Tensor y = ops::Concat(xs, axis);
  return {Value{y, all_host && y.ndim() == 1 ? Host(host) : nullptr}};
}

std::vector<Value> RunSplit(RunContext& c) {
  const Tensor& x = c.T(0);
  const int64_t axis = Axis(c, c.node.Int("axis", 0), x.ndim(), "axis");
  const int64_t n = int64_t(c.node.outputs.size()), dim = x.shape()[size_t(axis)];
  std::vector<int64_t> sizes = c.Has(1) ? c.Ints(1, "split") : c.node.Ints("split", {});
  if (sizes.empty()) {
    if (dim % n != 0) Fail(c, detail::Cat("axis ", axis, " of size ", dim, " does not split into ", n, " equal parts"));
    sizes.assign(size_t(n), dim / n);
  }
  if (int64_t(sizes.size()) != n) Fail(c, detail::Cat(sizes.size(), " split sizes for ", n, " outputs"));
  if (std::accumulate(sizes.begin(), sizes.end(), int64_t(0)) != dim)
    Fail(c, detail::Cat("split sizes do not add up to ", dim));
  std::vector<Value> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    if (s < 0) Fail(c, "negative split size");
    out.push_back(V(ops::Slice(x, axis, at, at + s).Contiguous()));
    at += s;
  }
  return out;
}

// ---- slicing and gathering ----

std::vector<Value> RunSlice(RunContext& c) {
  Tensor x = c.T(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.node.opset < 10) {
    starts = c.node.Ints("starts", {});
    ends = c.node.Ints("ends", {});
    axes = c.node.Ints("axes", {});
  } else {
    starts = c.Ints(1, "starts");
    ends = c.Ints(2, "ends");
    if (c.Has(3)) axes = c.Ints(3, "axes");
    if (c.Has(4)) steps = c.Ints(4, "steps");
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    Fail(c, "starts, ends, axes and steps differ in length");
  const std::shared_ptr<const std::vector<int64_t>> host = c.V(0).host;
  std::vector<int64_t> hv = host ? *host : std::vector<int64_t>();
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = Axis(c, axes[i], x.ndim(), "axis"), dim = x.shape()[size_t(axis)], step = steps[i];
    if (step == 0) Fail(c, "a step is 0");
    auto clamp = [](int64_t v, int64_t lo, int64_t hi) { return std::min(std::max(v, lo), hi); };
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (starts[i] < 0 && s < 0 && starts[i] < -dim) s = step > 0 ? 0 : -1;
    if (step > 0) {
      s = clamp(s, 0, dim);
      e = clamp(e, 0, dim);
    } else {
      s = clamp(s, -1, dim - 1);
      e = clamp(e, -1, dim - 1);
    }
    std::vector<int64_t> idx;
    for (int64_t j = s; step > 0 ? j < e : j > e; j += step) idx.push_back(j);
    if (host && x.ndim() == 1) {
      std::vector<int64_t> nv;
      for (int64_t j : idx) nv.push_back(hv[size_t(j)]);
      hv = nv;
    }
    if (step == 1) x = ops::Slice(x, axis, s, std::max(s, e)).Contiguous();
    else x = TakeHost(x, axis, idx);
  }
  return {Value{x, host && x.ndim() == 1 ? Host(hv) : nullptr}};
}

std::vector<DType> InferGather(const InferArgs& a) {
  if (a[1] != DType::kInt32 && a[1] != DType::kInt64) Fail(a.node, "indices must be int32 or int64");
  return {a[0]};
}
std::vector<Value> RunGather(RunContext& c) {
  const Tensor& x = c.T(0);
  if (x.ndim() == 0) Fail(c, "data must have rank 1 or more");
  const int64_t axis = Axis(c, c.node.Int("axis", 0), x.ndim(), "axis"), dim = x.shape()[size_t(axis)];
  const Value& vi = c.V(1);
  if (vi.host) {
    // Known indices: checked and wrapped on the host (and the result too, for 1-D known data).
    std::vector<int64_t> idx = *vi.host;
    for (auto& j : idx) {
      if (j < -dim || j >= dim) Fail(c, detail::Cat("index ", j, " is out of range for axis ", axis, " of size ", dim));
      if (j < 0) j += dim;
    }
    Tensor it = ops::FromVector<int64_t>(idx, vi.t.shape(), x.device_ptr());
    std::shared_ptr<const std::vector<int64_t>> host;
    if (c.V(0).host && x.ndim() == 1) {
      std::vector<int64_t> hv;
      for (int64_t j : idx) hv.push_back((*c.V(0).host)[size_t(j)]);
      host = Host(hv);
    }
    return {Value{idx.empty() ? ops::Reshape(ops::Slice(x, axis, 0, 0), vi.t.shape()) : Take(x, axis, it), host}};
  }
  // Computed indices: negative ones wrapped with ops (float64 holds them exactly).
  Tensor f = ops::Cast(vi.t, DType::kFloat64);
  f = ops::Where(ops::Less(f, ops::Zeros({}, DType::kFloat64, f.device_ptr())), ops::AddScalar(f, double(dim)), f);
  return {V(Take(x, axis, ops::Cast(f, DType::kInt64)))};
}

// ---- padding, tiling, expanding ----

}  // namespace

Tensor PadConstant(const Tensor& x0, const std::vector<int64_t>& begin, const std::vector<int64_t>& end, double value) {
  Tensor x = x0;
  for (int64_t a = 0; a < x.ndim(); ++a) {
    const int64_t b = begin[size_t(a)], e = end[size_t(a)];
    const int64_t dim = x.shape()[size_t(a)];
    if (b < 0 || e < 0) x = ops::Slice(x, a, std::max<int64_t>(0, -b), std::max<int64_t>(0, dim + std::min<int64_t>(0, e)));
    std::vector<Tensor> parts;
    Shape s = x.shape();
    if (b > 0) {
      s[size_t(a)] = b;
      parts.push_back(ops::Full(s, value, x.dtype(), x.device_ptr()));
    }
    parts.push_back(x);
    if (e > 0) {
      s[size_t(a)] = e;
      parts.push_back(ops::Full(s, value, x.dtype(), x.device_ptr()));
    }
    if (parts.size() > 1) x = ops::Concat(parts, a);
  }
  return x;
}

namespace {

std::vector<DType> InferPad(const InferArgs& a) {
  const std::string mode = a.node.Str("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    Fail(a.node, "mode '" + mode + "' is not one of constant, reflect, edge");
  if (a.node.HasInput(3)) Fail(a.node, "the axes input (opset 18) is not supported");
  return {a[0]};
}
std::vector<Value> RunPad(RunContext& c) {
  Tensor x = c.T(0);
  const int64_t r = x.ndim();
  std::vector<int64_t> pads = c.node.opset < 11 ? c.node.Ints("pads", {}) : c.Ints(1, "pads");
  if (int64_t(pads.size()) != 2 * r) Fail(c, detail::Cat("pads has ", pads.size(), " values for rank ", r));
  const std::string mode = c.node.Str("mode", "constant");
  std::vector<int64_t> b(pads.begin(), pads.begin() + r), e(pads.begin() + r, pads.end());
  if (mode == "constant") {
    double v = c.node.opset < 11 ? c.node.Float("value", 0.0) : (c.Has(2) ? c.Double(2, "constant_value") : 0.0);
    return {V(PadConstant(x, b, e, v))};
  }
  // edge and reflect: a gather of positions along each padded axis.
  for (int64_t a = 0; a < r; ++a) {
    const int64_t dim = x.shape()[size_t(a)];
    if (b[size_t(a)] == 0 && e[size_t(a)] == 0) continue;
    if (b[size_t(a)] < 0 || e[size_t(a)] < 0) Fail(c, "negative pads are supported in constant mode only");
    if (dim == 0 || (mode == "reflect" && (b[size_t(a)] >= dim || e[size_t(a)] >= dim)))
      Fail(c, detail::Cat("axis ", a, " of size ", dim, " is too small for ", mode, " padding"));
    std::vector<int64_t> idx;
    for (int64_t j = -b[size_t(a)]; j < dim + e[size_t(a)]; ++j) {
      int64_t p = j;
      if (mode == "edge") p = std::min(std::max<int64_t>(j, 0), dim - 1);
      else if (j < 0) p = -j;
      else if (j >= dim) p = 2 * (dim - 1) - j;
      idx.push_back(p);
    }
    x = TakeHost(x, a, idx);
  }
  return {V(x)};
}

std::vector<Value> RunTile(RunContext& c) {
  const Tensor& x = c.T(0);
  const std::vector<int64_t> reps = c.Ints(1, "repeats");
  if (int64_t(reps.size()) != x.ndim()) Fail(c, detail::Cat(reps.size(), " repeats for rank ", x.ndim()));
  Shape inter, wide, out;
  for (int64_t i = 0; i < x.ndim(); ++i) {
    if (reps[size_t(i)] < 0) Fail(c, "negative repeats");
    inter.push_back(1);
    inter.push_back(x.shape()[size_t(i)]);
    wide.push_back(reps[size_t(i)]);
    wide.push_back(x.shape()[size_t(i)]);
    out.push_back(reps[size_t(i)] * x.shape()[size_t(i)]);
  }
  return {V(ops::Reshape(ops::BroadcastTo(ops::Reshape(x, inter), wide), out))};
}

std::vector<Value> RunExpand(RunContext& c) {
  const Tensor& x = c.T(0);
  const std::vector<int64_t> s = c.Ints(1, "shape");
  const size_t r = std::max(s.size(), x.shape().size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t a = i + x.shape().size() >= r ? x.shape()[i + x.shape().size() - r] : 1;
    const int64_t b = i + s.size() >= r ? s[i + s.size() - r] : 1;
    if (a != b && a != 1 && b != 1) Fail(c, detail::Cat("shape ", ToString(x.shape()), " does not broadcast to the given shape"));
    out[i] = a == 1 ? b : a;
  }
  return {V(ops::BroadcastTo(x, out))};
}

// ---- constants and shapes ----

std::vector<DType> InferShape(const InferArgs&) { return {DType::kInt64}; }
std::vector<Value> RunShape(RunContext& c) {
  const Tensor& x = c.T(0);
  const int64_t r = x.ndim();
  auto clampi = [r](int64_t v) { return std::min(std::max(v < 0 ? v + r : v, int64_t(0)), r); };
  const int64_t s = clampi(c.node.Int("start", 0)), e = clampi(c.node.Int("end", r));
  std::vector<int64_t> dims;
  for (int64_t i = s; i < e; ++i) dims.push_back(x.shape()[size_t(i)]);
  return {HostInts(dims, {int64_t(dims.size())}, DType::kInt64, c.dev())};
}
std::vector<Value> RunSize(RunContext& c) { return {HostInts({c.T(0).numel()}, {}, DType::kInt64, c.dev())}; }

std::vector<DType> InferConstant(const InferArgs& a) {
  const NodeSpec& n = a.node;
  if (n.attrs.size() != 1) Fail(n, "exactly one value attribute is required");
  const std::string& k = n.attrs.begin()->first;
  if (k == "value") {
    if (n.Get("value").kind != Attr::kTensor) Fail(n, "value must be a TENSOR");
    return {n.Get("value").t.dtype()};
  }
  if (k == "value_float" || k == "value_floats") return {DType::kFloat32};
  if (k == "value_int" || k == "value_ints") return {DType::kInt64};
  Fail(n, "attribute '" + k + "' is not supported");
}
std::vector<Value> RunConstant(RunContext& c) {
  const NodeSpec& n = c.node;
  const std::string& k = n.attrs.begin()->first;
  if (k == "value") return {Value{n.Get("value").t, n.Get("value").t_ints}};
  if (k == "value_float") return {V(ops::Full({}, n.Float(k, 0), DType::kFloat32, c.dev()))};
  if (k == "value_int") return {HostInts({n.Int(k, 0)}, {}, DType::kInt64, c.dev())};
  if (k == "value_ints") {
    std::vector<int64_t> v = n.Ints(k, {});
    return {HostInts(v, {int64_t(v.size())}, DType::kInt64, c.dev())};
  }
  std::vector<double> f = n.Floats(k, {});
  return {V(ops::Cast(ops::FromVector<double>(f, {int64_t(f.size())}, c.dev()), DType::kFloat32))};
}

std::vector<DType> InferConstantOfShape(const InferArgs& a) {
  if (a[0] != DType::kInt64) Fail(a.node, "the shape input must be int64");
  if (!a.node.Has("value")) return {DType::kFloat32};
  const Attr& v = a.node.Get("value");
  if (v.kind != Attr::kTensor || v.t.numel() != 1) Fail(a.node, "value must be a one-element TENSOR");
  return {v.t.dtype()};
}
std::vector<Value> RunConstantOfShape(RunContext& c) {
  const std::vector<int64_t> s = c.Ints(0, "shape");
  for (int64_t d : s)
    if (d < 0) Fail(c, "negative dimension");
  Shape shape(s.begin(), s.end());
  if (!c.node.Has("value")) return {V(ops::Zeros(shape, DType::kFloat32, c.dev()))};
  const Attr& v = c.node.Get("value");
  if (v.t_ints) {
    const int64_t n = NumElements(shape);
    if (n <= (1 << 16))
      return {HostInts(std::vector<int64_t>(size_t(n), v.t_ints->at(0)), shape, v.t.dtype(), c.dev())};
    return {V(ops::Cast(ops::Full(shape, double(v.t_ints->at(0)), DType::kInt64, c.dev()), v.t.dtype()))};
  }
  const double val = ops::Cast(v.t, DType::kFloat64).ToVector<double>().at(0);
  return {V(ops::Full(shape, val, v.t.dtype(), c.dev()))};
}

std::vector<DType> InferRange(const InferArgs& a) {
  CheckSameDType(a, 0, 1);
  CheckSameDType(a, 0, 2);
  if (!IsFloat(a[0]) && a[0] != DType::kInt32 && a[0] != DType::kInt64) Fail(a.node, "inputs must be float or int");
  return {a[0]};
}
std::vector<Value> RunRange(RunContext& c) {
  const double start = c.Double(0, "start"), limit = c.Double(1, "limit"), delta = c.Double(2, "delta");
  if (!std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
    Fail(c, detail::Cat("start ", start, ", limit ", limit, " and delta ", delta, " must be finite"));
  if (delta == 0) Fail(c, "delta is 0");
  // The count in double first: a cast of 1e30 to int64 is undefined (it came out as 0 elements).
  const double count = std::max(0.0, std::ceil((limit - start) / delta));
  if (!(count <= double(OnnxHostValueLimit())))  // Note [Host-built index arrays]
    Fail(c, detail::Cat("range(", start, ", ", limit, ", ", delta, ") has ", count, " elements, more than the ",
                        OnnxHostValueLimit(), " loom builds"));
  const int64_t n = int64_t(count);
  const DType dt = c.T(0).dtype();
  if (!IsFloat(dt)) {
    std::vector<int64_t> v(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int64_t(start) + i * int64_t(delta);
    return {HostInts(v, {n}, dt, c.dev())};
  }
  std::vector<double> v(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = start + double(i) * delta;
  return {V(ops::Cast(ops::FromVector<double>(v, {n}, c.dev()), dt))};
}

// ---- depth <-> space ----

// a * b for a block size and a dimension; an attribute large enough to overflow is the node's error.
int64_t BlockProduct(const RunContext& c, int64_t a, int64_t b) {
  int64_t p = 0;
  if (__builtin_mul_overflow(a, b, &p)) Fail(c, detail::Cat("blocksize ", a, " times ", b, " overflows int64"));
  return p;
}

std::vector<Value> RunDepthToSpace(RunContext& c) {
  const Tensor& x = c.T(0);
  if (x.ndim() != 4) Fail(c, "input must be (N, C, H, W)");
  const int64_t b = c.node.Int("blocksize", 0), N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  if (b < 1) Fail(c, detail::Cat("blocksize ", b, " is not positive"));
  const int64_t bb = BlockProduct(c, b, b);
  if (C % bb != 0) Fail(c, detail::Cat("blocksize ", b, " does not divide ", C, " channels into squares"));
  const int64_t Hb = BlockProduct(c, H, b), Wb = BlockProduct(c, W, b);
  const std::string mode = c.node.Str("mode", "DCR");
  Tensor y;
  if (mode == "DCR") y = ops::Permute(ops::Reshape(x, {N, b, b, C / bb, H, W}), {0, 3, 4, 1, 5, 2});
  else if (mode == "CRD") y = ops::Permute(ops::Reshape(x, {N, C / bb, b, b, H, W}), {0, 1, 4, 2, 5, 3});
  else Fail(c, "mode '" + mode + "' is not DCR or CRD");
  return {V(ops::Reshape(y.Contiguous(), {N, C / bb, Hb, Wb}))};
}

std::vector<Value> RunSpaceToDepth(RunContext& c) {
  const Tensor& x = c.T(0);
  if (x.ndim() != 4) Fail(c, "input must be (N, C, H, W)");
  const int64_t b = c.node.Int("blocksize", 0), N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  if (b < 1 || H % b != 0 || W % b != 0) Fail(c, detail::Cat("blocksize ", b, " does not divide ", H, "x", W));
  const int64_t Cbb = BlockProduct(c, BlockProduct(c, C, b), b);
  Tensor y = ops::Permute(ops::Reshape(x, {N, C, H / b, b, W / b, b}), {0, 3, 5, 1, 2, 4});
  return {V(ops::Reshape(y.Contiguous(), {N, Cbb, H / b, W / b}))};
}

std::vector<DType> InferOneHot(const InferArgs& a) { return {a[2]}; }
std::vector<Value> RunOneHot(RunContext& c) {
  Tensor idx = ops::Cast(c.T(0), DType::kFloat64);
  const int64_t depth = c.Int(1, "depth");
  if (depth < 1) Fail(c, "depth must be positive");
  const Tensor& values = c.T(2);
  if (values.numel() != 2) Fail(c, "values must hold [off, on]");
  const int64_t r = idx.ndim() + 1, axis = Axis(c, c.node.Int("axis", -1), r, "axis");
  idx = ops::Where(ops::Less(idx, ops::Zeros({}, DType::kFloat64, idx.device_ptr())), ops::AddScalar(idx, double(depth)), idx);
  idx = ops::Reshape(idx, Unsqueezed(c, idx.shape(), {axis}));
  std::vector<double> iv(HostCount(c, depth, "depth"), 0.0);
  for (int64_t i = 0; i < depth; ++i) iv[size_t(i)] = double(i);
  Shape is(size_t(r), 1);
  is[size_t(axis)] = depth;
  Tensor hit = ops::Equal(idx, ops::FromVector<double>(iv, is, idx.device_ptr()));
  Tensor vf = ops::Reshape(ops::Cast(values, DType::kFloat64), {2});
  Tensor y = ops::Where(hit, ops::Slice(vf, 0, 1, 2).Reshape({}), ops::Slice(vf, 0, 0, 1).Reshape({}));
  return {V(ops::Cast(y, values.dtype()))};
}

}  // namespace

void AddShapeOps(std::vector<OpEntry>* r) {
  r->push_back(MakeOp("Reshape", 5, 2, 2, {"allowzero"}, Same0, RunReshape));
  r->push_back(MakeOp("Squeeze", 1, 1, 2, {"axes"}, Same0, RunSqueeze));
  r->push_back(MakeOp("Unsqueeze", 1, 1, 2, {"axes"}, Same0, RunUnsqueeze));
  r->push_back(MakeOp("Transpose", 1, 1, 1, {"perm"}, Same0, RunTranspose));
  r->push_back(MakeOp("Concat", 4, 1, -1, {"axis"}, Same0, RunConcat));
  OpEntry split = MakeOp("Split", 2, 1, 2, {"axis", "split"}, Same0, RunSplit);
  split.max_outputs = 1 << 16;
  r->push_back(split);
  r->push_back(MakeOp("Slice", 1, 1, 5, {"axes", "ends", "starts"}, Same0, RunSlice));
  r->push_back(MakeOp("Gather", 1, 2, 2, {"axis"}, InferGather, RunGather));
  r->push_back(MakeOp("Pad", 2, 1, 4, {"mode", "pads", "value"}, InferPad, RunPad));
  r->push_back(MakeOp("Tile", 6, 2, 2, {}, Same0, RunTile));
  r->push_back(MakeOp("Expand", 8, 2, 2, {}, Same0, RunExpand));
  r->push_back(MakeOp("Shape", 1, 1, 1, {"end", "start"}, InferShape, RunShape));
  r->push_back(MakeOp("Size", 1, 1, 1, {}, InferShape, RunSize));
  r->push_back(MakeOp("Constant", 1, 0, 0, {"value", "value_float", "value_floats", "value_int", "value_ints"},
                      InferConstant, RunConstant));
  r->push_back(MakeOp("ConstantOfShape", 9, 1, 1, {"value"}, InferConstantOfShape, RunConstantOfShape));
  r->push_back(MakeOp("Range", 11, 3, 3, {}, InferRange, RunRange));
  r->push_back(MakeOp("DepthToSpace", 1, 1, 1, {"blocksize", "mode"}, Same0, RunDepthToSpace));
  r->push_back(MakeOp("SpaceToDepth", 1, 1, 1, {"blocksize"}, Same0, RunSpaceToDepth));
  r->push_back(MakeOp("OneHot", 9, 3, 3, {"axis"}, InferOneHot, RunOneHot));
}

}  // namespace onnx
}  // namespace io
}  // namespace loom
