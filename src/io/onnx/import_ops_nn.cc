// ONNX handlers for the network layers: Conv, pooling, normalisation, Gemm/MatMul, Dropout and
// Flatten (Note [ONNX handlers] in import_graph.h). loom's convolution and pooling are 2-D and
// pad each axis's two ends by their own amounts (Note [Asymmetric padding] in core/ops_cnn.h);
// pooling paddings beyond half the kernel and ceil_mode's extra are applied first as an explicit
// Pad (PadConstant).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops.h"
#include "core/ops_cnn.h"
#include "io/onnx/import_graph.h"

namespace loom {
namespace io {
namespace onnx {
namespace {

// Note [1-D as 2-D]
// A 1-D Conv or pool, on (N, C, L), runs as the 2-D op on (N, C, 1, L) with a
// unit first spatial axis: its kernel, stride and dilation get a leading 1 and its pads a 0.
bool Is1D(const RunContext& c) { return c.T(0).ndim() == 3; }
std::vector<int64_t> Widen(std::vector<int64_t> v, int64_t lead, size_t per_side) {
  if (per_side == 1) v.insert(v.begin(), lead);
  else if (v.size() == 2) v = {0, v[0], 0, v[1]};
  return v;
}

// The spatial padding of Conv and the pools: (begin_h, begin_w, end_h, end_w) from `pads` or
// `auto_pad`, given the input size, kernel, stride and dilation.
std::vector<int64_t> SpatialPads(const RunContext& c, const Tensor& x, const std::vector<int64_t>& k,
                                 const std::vector<int64_t>& s, const std::vector<int64_t>& d) {
  const std::string auto_pad = c.node.Str("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> p = c.node.Ints("pads", {0, 0, 0, 0});
    if (Is1D(c) && p.size() == 2) p = Widen(p, 0, 2);
    if (p.size() != 4) Fail(c, detail::Cat("pads has ", p.size(), " values, a 2-D op wants 4"));
    for (int64_t v : p)
      if (v < 0) Fail(c, "negative pads");
    return p;
  }
  if (auto_pad == "VALID") return {0, 0, 0, 0};
  std::vector<int64_t> p(4);
  for (size_t i = 0; i < 2; ++i) {
    const int64_t in = x.shape()[2 + i], out = (in + s[i] - 1) / s[i];
    const int64_t total = std::max<int64_t>(0, (out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in);
    const int64_t small = total / 2, big = total - small;
    p[i] = auto_pad == "SAME_UPPER" ? small : big;
    p[i + 2] = auto_pad == "SAME_UPPER" ? big : small;
  }
  return p;
}

std::vector<int64_t> Pair(const RunContext& c, const char* key, int64_t dflt) {
  std::vector<int64_t> v = c.node.Ints(key, Is1D(c) ? std::vector<int64_t>{dflt} : std::vector<int64_t>{dflt, dflt});
  if (Is1D(c) && v.size() == 1) v.insert(v.begin(), 1);
  if (v.size() != 2) Fail(c, detail::Cat(key, " has ", v.size(), " values; loom imports 2-D ", c.node.op_type, " only"));
  for (int64_t e : v)
    if (e < 1) Fail(c, detail::Cat(key, " must be positive"));
  return v;
}

void CheckAutoPad(const InferArgs& a) {
  const std::string ap = a.node.Str("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "VALID" && ap != "SAME_UPPER" && ap != "SAME_LOWER")
    Fail(a.node, "auto_pad '" + ap + "' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER");
  if (a.node.Has("pads") && ap != "NOTSET") Fail(a.node, "pads and auto_pad are both given");
}

// The input as (N, C, H, W) (Note [1-D as 2-D]).
Tensor As4D(const RunContext& c, const Tensor& x) {
  if (x.ndim() == 3) return ops::Reshape(x, {x.shape()[0], x.shape()[1], 1, x.shape()[2]});
  if (x.ndim() != 4)
    Fail(c, detail::Cat("input is ", x.Describe(), "; loom imports the 1-D and 2-D forms, (N, C, L) and (N, C, H, W)"));
  return x;
}
Tensor Back(const Tensor& x0, const Tensor& y) {
  return x0.ndim() == 3 ? ops::Reshape(y, {y.shape()[0], y.shape()[1], y.shape()[3]}) : y;
}

// kernel_shape, when given, says the spatial rank: 1 or 2 (checked at import).
void CheckSpatialRank(const InferArgs& a) {
  if (a.node.Has("kernel_shape")) {
    const size_t k = a.node.Ints("kernel_shape", {}).size();
    if (k != 1 && k != 2) Fail(a.node, detail::Cat(k, "-D ", a.node.op_type, " is not supported (loom imports 1-D and 2-D)"));
  }
}

// ---- Conv ----

std::vector<DType> InferConv(const InferArgs& a) {
  CheckAutoPad(a);
  CheckSpatialRank(a);
  std::vector<DType> d = FloatAllSame(a);
  return d;
}
std::vector<Value> RunConv(RunContext& c) {
  const Tensor& x0 = c.T(0);
  Tensor x = As4D(c, x0);
  Tensor w = c.T(1);
  if (x0.ndim() == 3 && w.ndim() == 3) w = ops::Reshape(w, {w.shape()[0], w.shape()[1], 1, w.shape()[2]});
  if (w.ndim() != 4) Fail(c, detail::Cat("weight is ", w.Describe(), ", expected (O, C/group, KH, KW)"));
  std::vector<int64_t> k = c.node.Ints("kernel_shape", {w.shape()[2], w.shape()[3]});
  if (x0.ndim() == 3 && k.size() == 1) k.insert(k.begin(), 1);
  if (k.size() != 2 || k[0] != w.shape()[2] || k[1] != w.shape()[3])
    Fail(c, "kernel_shape disagrees with the weight's shape " + ToString(w.shape()));
  ops::Conv2dOptions o;
  o.stride = Pair(c, "strides", 1);
  o.dilation = Pair(c, "dilations", 1);
  o.groups = c.node.Int("group", 1);
  std::vector<int64_t> p = SpatialPads(c, x, k, o.stride, o.dilation);
  o.padding = {p[0], p[1]};
  o.padding_end = {p[2], p[3]};
  return {V(Back(x0, ops::Conv2d(x, w, c.Has(2) ? c.T(2) : Tensor(), o)))};
}

// ---- pooling ----

std::vector<DType> InferPool(const InferArgs& a) {
  CheckAutoPad(a);
  CheckSpatialRank(a);
  if (a.node.Int("storage_order", 0) != 0) Fail(a.node, "storage_order 1 (column-major indices) is not supported");
  if (a.node.outputs.size() > 1 && !a.node.outputs[1].empty())
    Fail(a.node, "the Indices output of MaxPool is not supported");
  for (int64_t d : a.node.Ints("dilations", {1, 1}))
    if (d != 1) Fail(a.node, "dilated pooling is not supported");
  return FloatUnary(a);
}

template <bool kMax>
std::vector<Value> RunPool(RunContext& c) {
  const Tensor& x0 = c.T(0);
  Tensor x = As4D(c, x0);
  std::vector<int64_t> k = c.node.Ints("kernel_shape", {});
  if (x0.ndim() == 3 && k.size() == 1) k.insert(k.begin(), 1);
  if (k.size() != 2) Fail(c, "kernel_shape does not match the input's spatial rank");
  ops::Pool2dOptions o;
  o.kernel = k;
  o.stride = Pair(c, "strides", 1);
  const std::vector<int64_t> p = SpatialPads(c, x, k, o.stride, {1, 1});
  // ceil_mode: more end padding, so that the last partial window exists. It is never counted
  // (AveragePool divides by the window's elements inside the input and the explicit pads).
  std::vector<int64_t> extra{0, 0};
  if (c.node.Int("ceil_mode", 0) != 0) {
    for (size_t i = 0; i < 2; ++i) {
      const int64_t span = x.shape()[2 + i] + p[i] + p[i + 2] - k[i];
      const int64_t rem = span % o.stride[i];
      // ONNX (as PyTorch) drops a last window that would start inside the end padding.
      if (span >= 0 && rem != 0 && span / o.stride[i] * o.stride[i] + o.stride[i] < x.shape()[2 + i] + p[i])
        extra[i] = o.stride[i] - rem;
    }
  }
  const bool include_pad = c.node.Int("count_include_pad", 0) != 0;
  bool plain = !extra[0] && !extra[1];
  for (size_t i = 0; i < 4; ++i) plain = plain && 2 * p[i] <= k[i % 2];  // the pooling ops' limit
  if (plain) {
    o.padding = {p[0], p[1]};
    o.padding_end = {p[2], p[3]};
    o.count_include_pad = include_pad;
    return {V(Back(x0, kMax ? ops::MaxPool2d(x, o) : ops::AvgPool2d(x, o)))};
  }
  o.padding = {0, 0};
  const std::vector<int64_t> b{0, 0, p[0], p[1]}, e{0, 0, p[2], p[3]}, ex{0, 0, extra[0], extra[1]};
  if (kMax) {
    const double lowest = -std::numeric_limits<double>::infinity();
    return {V(Back(x0, ops::MaxPool2d(PadConstant(PadConstant(x, b, e, lowest), {0, 0, 0, 0}, ex, lowest), o)))};
  }
  // The mean over the counted elements: pool(x, zero-padded) / pool(1 where counted, else 0).
  Tensor xs = PadConstant(PadConstant(x, b, e, 0.0), {0, 0, 0, 0}, ex, 0.0);
  Tensor ones = ops::Ones({1, 1, x.shape()[2], x.shape()[3]}, x.dtype(), x.device_ptr());
  Tensor mask = PadConstant(PadConstant(ones, b, e, include_pad ? 1.0 : 0.0), {0, 0, 0, 0}, ex, 0.0);
  return {V(Back(x0, ops::Div(ops::AvgPool2d(xs, o), ops::AvgPool2d(mask, o))))};
}

std::vector<int64_t> SpatialAxes(const Tensor& x) {
  std::vector<int64_t> axes;
  for (int64_t i = 2; i < x.ndim(); ++i) axes.push_back(i);
  return axes;
}
std::vector<Value> RunGlobalAveragePool(RunContext& c) {
  const Tensor& x = c.T(0);
  if (x.ndim() < 3) Fail(c, "input must be (N, C, spatial...)");
  return {V(ops::Mean(x, SpatialAxes(x), true))};
}
std::vector<Value> RunGlobalMaxPool(RunContext& c) {
  const Tensor& x = c.T(0);
  if (x.ndim() < 3) Fail(c, "input must be (N, C, spatial...)");
  return {V(ops::Max(x, SpatialAxes(x), true))};
}

// ---- normalisation ----

std::vector<DType> InferBatchNorm(const InferArgs& a) {
  if (a.node.Int("training_mode", 0) != 0) Fail(a.node, "training_mode 1 is not supported (inference only)");
  if (a.node.outputs.size() > 1) Fail(a.node, "the running-statistics outputs are not supported (inference only)");
  return FloatAllSame(a);
}
std::vector<Value> RunBatchNorm(RunContext& c) {
  const Tensor& x = c.T(0);
  if (x.ndim() < 2) Fail(c, "input must be (N, C, ...)");
  return {V(ops::BatchNorm(x, c.T(1), c.T(2), c.T(3), c.T(4), false, 0.1, c.node.Float("epsilon", 1e-5)))};
}

std::vector<Value> RunInstanceNorm(RunContext& c) {
  const Tensor& x = c.T(0);
  if (x.ndim() < 3) Fail(c, "input must be (N, C, spatial...)");
  const std::vector<int64_t> axes = SpatialAxes(x);
  Tensor m = ops::Mean(x, axes, true);
  Tensor xc = ops::Sub(x, m);
  Tensor var = ops::Mean(ops::Mul(xc, xc), axes, true);
  Tensor y = ops::Div(xc, ops::Sqrt(ops::AddScalar(var, c.node.Float("epsilon", 1e-5))));
  Shape cs(size_t(x.ndim()), 1);
  cs[1] = x.shape()[1];
  return {V(ops::Add(ops::Mul(y, ops::Reshape(c.T(1), cs)), ops::Reshape(c.T(2), cs)))};
}

std::vector<DType> InferLayerNorm(const InferArgs& a) {
  if (a.node.Int("stash_type", 1) != 1) Fail(a.node, "stash_type other than 1 (float32) is not supported");
  std::vector<DType> t = FloatAllSame(a);
  return {t[0], t[0], t[0]};
}
std::vector<Value> RunLayerNorm(RunContext& c) {
  const Tensor& x = c.T(0);
  const int64_t axis = Axis(c, c.node.Int("axis", -1), x.ndim(), "axis");
  Shape norm(x.shape().begin() + axis, x.shape().end());
  Tensor gamma = c.T(1), beta = c.Has(2) ? c.T(2) : ops::Zeros(norm, x.dtype(), x.device_ptr());
  if (gamma.shape() != norm) gamma = ops::BroadcastTo(gamma, norm);
  if (beta.shape() != norm) beta = ops::BroadcastTo(beta, norm);
  const double eps = c.node.Float("epsilon", 1e-5);
  const bool stats = c.node.outputs.size() > 1;
  if (!stats) return {V(ops::LayerNorm(x, gamma, beta, eps))};
  // Mean and InvStdDev wanted too: the same normalisation, spelled out.
  std::vector<int64_t> axes;
  for (int64_t i = axis; i < x.ndim(); ++i) axes.push_back(i);
  Tensor m = ops::Mean(x, axes, true), xc = ops::Sub(x, m);
  Tensor inv = ops::RDivScalar(ops::Sqrt(ops::AddScalar(ops::Mean(ops::Mul(xc, xc), axes, true), eps)), 1.0);
  return {V(ops::Add(ops::Mul(ops::Mul(xc, inv), gamma), beta)), V(m), V(inv)};
}

// LRN: x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels)^beta, the channel
// sum as an average pool over (N, 1, C, spatial) with the window's zero padding.
std::vector<Value> RunLrn(RunContext& c) {
  const Tensor& x = c.T(0);
  if (x.ndim() < 3) Fail(c, "input must be (N, C, spatial...)");
  const int64_t size = c.node.Int("size", 0);
  if (size < 1) Fail(c, "size must be positive");
  const int64_t n = x.shape()[0], ch = x.shape()[1], rest = x.numel() / std::max<int64_t>(1, n * ch);
  Tensor sq = ops::Reshape(ops::Mul(x, x), {n, 1, ch, rest});
  sq = PadConstant(sq, {0, 0, (size - 1) / 2, 0}, {0, 0, size / 2, 0}, 0.0);
  ops::Pool2dOptions o;
  o.kernel = {size, 1};
  o.stride = {1, 1};
  o.padding = {0, 0};
  Tensor mean = ops::Reshape(ops::AvgPool2d(sq, o), x.shape());
  Tensor den = ops::PowScalar(ops::AddScalar(ops::MulScalar(mean, c.node.Float("alpha", 1e-4)), c.node.Float("bias", 1.0)),
                              c.node.Float("beta", 0.75));
  return {V(ops::Div(x, den))};
}

// ---- dense ----

std::vector<Value> RunMatMul(RunContext& c) {
  Tensor a = c.T(0), b = c.T(1);
  // numpy's 1-D rules: a vector is a row on the left and a column on the right, then squeezed.
  const bool va = a.ndim() == 1, vb = b.ndim() == 1;
  if (va) a = ops::Reshape(a, {1, a.shape()[0]});
  if (vb) b = ops::Reshape(b, {b.shape()[0], 1});
  Tensor y = ops::MatMul(a, b);
  if (va || vb) {
    Shape s = y.shape();
    if (vb) s.pop_back();
    if (va) s.erase(s.end() - (vb ? 1 : 2));
    y = ops::Reshape(y, s);
  }
  return {V(y)};
}

std::vector<Value> RunGemm(RunContext& c) {
  Tensor a = c.T(0), b = c.T(1);
  if (a.ndim() != 2 || b.ndim() != 2) Fail(c, "A and B must be 2-D");
  if (c.node.Int("transA", 0)) a = ops::Transpose(a);
  if (c.node.Int("transB", 0)) b = ops::Transpose(b);
  Tensor y = ops::MatMul(a, b);
  const double alpha = c.node.Float("alpha", 1.0), beta = c.node.Float("beta", 1.0);
  if (alpha != 1.0) y = ops::MulScalar(y, alpha);
  if (c.Has(2)) {
    Tensor bias = c.T(2);
    if (beta != 1.0) bias = ops::MulScalar(bias, beta);
    y = bias.ndim() == 1 && bias.shape()[0] == y.shape()[1] ? ops::AddBias(y, bias) : ops::Add(y, bias);
  }
  return {V(y)};
}

// ---- Dropout (inference: the identity, and an all-true mask) and Flatten ----

std::vector<DType> InferDropout(const InferArgs& a) {
  if (a.node.HasInput(2) && a[2] != DType::kBool) Fail(a.node, "training_mode must be bool");
  if (a.node.HasInput(2) && !a.constant.at(2))
    Fail(a.node, "training_mode given at run time is not supported (an imported graph runs inference; "
                 "a constant false is)");
  CheckFloatInput(a, 0);
  return {a[0], DType::kBool};
}
std::vector<Value> RunDropout(RunContext& c) {
  const Tensor& x = c.T(0);
  if (c.Has(2) && c.Int(2, "training_mode") != 0)
    Fail(c, "training_mode true is not supported (an imported graph runs inference)");
  return {V(x), V(ops::Cast(ops::Ones(x.shape(), DType::kFloat32, x.device_ptr()), DType::kBool))};
}

std::vector<Value> RunFlatten(RunContext& c) {
  const Tensor& x = c.T(0);
  const int64_t r = x.ndim();
  int64_t axis = c.node.Int("axis", 1);
  if (axis < -r || axis > r) Fail(c, detail::Cat("axis ", axis, " is out of range for rank ", r));
  if (axis < 0) axis += r;
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.shape()[size_t(i)];
  int64_t inner = 1;
  for (int64_t i = axis; i < r; ++i) inner *= x.shape()[size_t(i)];
  return {V(ops::Reshape(x, {outer, inner}))};
}

}  // namespace

void AddNnOps(std::vector<OpEntry>* r) {
  r->push_back(MakeOp("Conv", 1, 2, 3, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"},
                      InferConv, RunConv));
  OpEntry maxpool = MakeOp("MaxPool", 1, 1, 1,
                           {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"},
                           InferPool, RunPool<true>);
  maxpool.max_outputs = 2;
  r->push_back(maxpool);
  r->push_back(MakeOp("AveragePool", 1, 1, 1, {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"},
                      InferPool, RunPool<false>));
  r->push_back(MakeOp("GlobalAveragePool", 1, 1, 1, {}, FloatUnary, RunGlobalAveragePool));
  r->push_back(MakeOp("GlobalMaxPool", 1, 1, 1, {}, FloatUnary, RunGlobalMaxPool));
  // Opset 7 removed BatchNormalization's `spatial` and `is_test` attributes.
  OpEntry bn = MakeOp("BatchNormalization", 7, 5, 5, {"epsilon", "momentum", "training_mode"}, InferBatchNorm, RunBatchNorm);
  bn.max_outputs = 5;
  r->push_back(bn);
  r->push_back(MakeOp("LRN", 1, 1, 1, {"alpha", "beta", "bias", "size"}, FloatUnary, RunLrn));
  r->push_back(MakeOp("InstanceNormalization", 6, 3, 3, {"epsilon"}, FloatAllSame, RunInstanceNorm));
  OpEntry ln = MakeOp("LayerNormalization", 17, 2, 3, {"axis", "epsilon", "stash_type"}, InferLayerNorm, RunLayerNorm);
  ln.max_outputs = 3;
  r->push_back(ln);
  r->push_back(MakeOp("MatMul", 1, 2, 2, {}, FloatAllSame, RunMatMul));
  // Opset 7 removed Gemm's `broadcast` attribute.
  r->push_back(MakeOp("Gemm", 7, 2, 3, {"alpha", "beta", "transA", "transB"}, FloatAllSame, RunGemm));
  OpEntry dropout = MakeOp("Dropout", 7, 1, 3, {"ratio", "seed"}, InferDropout, RunDropout);
  dropout.max_outputs = 2;
  r->push_back(dropout);
  r->push_back(MakeOp("Flatten", 1, 1, 1, {"axis"}, Same0, RunFlatten));
}

}  // namespace onnx
}  // namespace io
}  // namespace loom
