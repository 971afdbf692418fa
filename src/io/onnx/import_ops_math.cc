// ONNX handlers for element-wise math, activations, comparisons, logic, variadic ops and
// reductions (Note [ONNX handlers] in import_graph.h). Integer inputs to arithmetic, which loom's
// kernels take as float only, are computed in float64 and cast back: exact below 2^53.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops.h"
#include "core/ops/math.h"
#include "io/onnx/import_graph.h"
#include "io/onnx/tensor_proto.h"

namespace loom {
namespace io {
namespace onnx {
namespace {

bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }
bool IsInt(DType t) { return t == DType::kInt32 || t == DType::kInt64; }
bool IsOrdered(DType t) { return IsFloat(t) || IsInt(t) || t == DType::kUInt8; }

Tensor Scalar(double v, const Tensor& like) { return ops::Full({}, v, like.dtype(), like.device_ptr()); }

// Runs a float-only binary op on any numeric pair: float directly, integers through float64.
template <typename F>
Tensor Numeric2(const Tensor& a, const Tensor& b, F f) {
  if (IsFloat(a.dtype())) return f(a, b);
  return ops::Cast(f(ops::Cast(a, DType::kFloat64), ops::Cast(b, DType::kFloat64)), a.dtype());
}

// Input dtypes: every given one float or (with `ints`) int32/int64, and all the same.
std::vector<DType> NumericSame(const InferArgs& a, bool ints) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a.node.HasInput(i)) continue;
    if (!IsFloat(a[i]) && !(ints && IsInt(a[i])))
      Fail(a.node, detail::Cat("input ", i, " '", a.node.inputs[i], "' is ", Name(a[i]), "; loom runs ",
                               a.node.op_type, " on float32, float64", ints ? ", int32 and int64" : " only"));
    CheckSameDType(a, 0, i);
  }
  return {a[0]};
}
std::vector<DType> NumericInts(const InferArgs& a) { return NumericSame(a, true); }

// Selections (Min, Max, Clip): any ordered dtype, uint8 too (no arithmetic that could wrap).
std::vector<DType> OrderedSame(const InferArgs& a) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a.node.HasInput(i)) continue;
    if (!IsOrdered(a[i]))
      Fail(a.node, detail::Cat("input ", i, " '", a.node.inputs[i], "' is ", Name(a[i]), "; loom runs ",
                               a.node.op_type, " on float32, float64, int32, int64 and uint8"));
    CheckSameDType(a, 0, i);
  }
  return {a[0]};
}

// A float-only unary op on integers too, through float64 (Neg, Abs, Sign).
template <Tensor (*F)(const Tensor&)>
Tensor Numeric1(const Tensor& x) {
  if (IsFloat(x.dtype())) return F(x);
  return ops::Cast(F(ops::Cast(x, DType::kFloat64)), x.dtype());
}

Tensor Min2(const Tensor& a, const Tensor& b) { return ops::Where(ops::Less(b, a), b, a); }
Tensor Max2(const Tensor& a, const Tensor& b) { return ops::Where(ops::Greater(b, a), b, a); }

// ---- binary arithmetic ----

std::vector<Value> RunAdd(RunContext& c) { return {V(Numeric2(c.T(0), c.T(1), ops::Add))}; }
std::vector<Value> RunSub(RunContext& c) { return {V(Numeric2(c.T(0), c.T(1), ops::Sub))}; }
std::vector<Value> RunMul(RunContext& c) { return {V(Numeric2(c.T(0), c.T(1), ops::Mul))}; }
std::vector<Value> RunDiv(RunContext& c) { return {V(ops::Div(c.T(0), c.T(1)))}; }

std::vector<DType> InferPow(const InferArgs& a) {
  if (!IsFloat(a[0]) && !IsInt(a[0]))
    Fail(a.node, detail::Cat("base is ", Name(a[0]), "; loom takes a float or int32/int64 base"));
  if (!IsFloat(a[1]) && !IsInt(a[1]))
    Fail(a.node, detail::Cat("exponent is ", Name(a[1]), "; loom takes a float or int32/int64 exponent"));
  return {a[0]};
}
std::vector<Value> RunPow(RunContext& c) {
  const Tensor& x = c.T(0);
  if (!IsFloat(x.dtype())) {
    Tensor xf = ops::Cast(x, DType::kFloat64);
    return {V(ops::Cast(ops::Pow(xf, ops::Cast(c.T(1), DType::kFloat64)), x.dtype()))};
  }
  return {V(ops::Pow(x, ops::Cast(c.T(1), x.dtype())))};
}

// ---- unary math and activations ----

#define LOOM_ONNX_UNARY(fn, expr)                 \
  std::vector<Value> fn(RunContext& c) {          \
    const Tensor& x = c.T(0);                     \
    (void)x;                                      \
    return {V(expr)};                             \
  }
LOOM_ONNX_UNARY(RunSqrt, ops::Sqrt(x))
LOOM_ONNX_UNARY(RunExp, ops::Exp(x))
LOOM_ONNX_UNARY(RunLog, ops::Log(x))
LOOM_ONNX_UNARY(RunAbs, Numeric1<ops::Abs>(x))
LOOM_ONNX_UNARY(RunNeg, Numeric1<ops::Neg>(x))
LOOM_ONNX_UNARY(RunReciprocal, ops::RDivScalar(x, 1.0))
LOOM_ONNX_UNARY(RunErf, ops::Erf(x))
LOOM_ONNX_UNARY(RunRelu, ops::Relu(x))
LOOM_ONNX_UNARY(RunSigmoid, ops::Sigmoid(x))
LOOM_ONNX_UNARY(RunTanh, ops::Tanh(x))
LOOM_ONNX_UNARY(RunSoftplus, ops::Softplus(x))
LOOM_ONNX_UNARY(RunSoftsign, ops::Div(x, ops::AddScalar(ops::Abs(x), 1.0)))
LOOM_ONNX_UNARY(RunIdentity, x)
LOOM_ONNX_UNARY(RunLeakyRelu, ops::LeakyRelu(x, c.node.Float("alpha", 0.01)))
LOOM_ONNX_UNARY(RunHardSigmoid,
                ops::Clamp(ops::AddScalar(ops::MulScalar(x, c.node.Float("alpha", 0.2)), c.node.Float("beta", 0.5)), 0, 1))
LOOM_ONNX_UNARY(RunHardSwish, ops::Mul(x, ops::Clamp(ops::AddScalar(ops::MulScalar(x, 1.0 / 6), 0.5), 0, 1)))
LOOM_ONNX_UNARY(RunIsNaN, ops::NotEqual(x, x))
std::vector<Value> RunIsInf(RunContext& c) {
  const Tensor& x = c.T(0);
  const double inf = std::numeric_limits<double>::infinity();
  Tensor pos = ops::Equal(x, Scalar(inf, x)), neg = ops::Equal(x, Scalar(-inf, x));
  const bool p = c.node.Int("detect_positive", 1) != 0, n = c.node.Int("detect_negative", 1) != 0;
  if (p && n) return {V(ops::NotEqual(pos, neg))};  // never both: either one
  if (p) return {V(pos)};
  if (n) return {V(neg)};
  return {V(ops::Cast(ops::Zeros(x.shape(), DType::kFloat32, x.device_ptr()), DType::kBool))};  // neither: all false
}
LOOM_ONNX_UNARY(RunSin, ops::Sin(x))
LOOM_ONNX_UNARY(RunCos, ops::Cos(x))
LOOM_ONNX_UNARY(RunTan, ops::Tan(x))
LOOM_ONNX_UNARY(RunAsin, ops::Asin(x))
LOOM_ONNX_UNARY(RunAcos, ops::Acos(x))
LOOM_ONNX_UNARY(RunAtan, ops::Atan(x))
LOOM_ONNX_UNARY(RunSinh, ops::Sinh(x))
LOOM_ONNX_UNARY(RunCosh, ops::Cosh(x))
LOOM_ONNX_UNARY(RunAsinh, ops::Asinh(x))
LOOM_ONNX_UNARY(RunAcosh, ops::Acosh(x))
LOOM_ONNX_UNARY(RunAtanh, ops::Atanh(x))
#undef LOOM_ONNX_UNARY

// x > 0 ? x : scale * (exp(x / inner) - 1), the shape of Elu, Selu and Celu.
Tensor ExpLinear(const Tensor& x, double scale, double inner) {
  Tensor neg = ops::MulScalar(ops::AddScalar(ops::Exp(ops::MulScalar(x, 1.0 / inner)), -1.0), scale);
  return ops::Where(ops::Greater(x, Scalar(0, x)), x, neg);
}
std::vector<Value> RunElu(RunContext& c) { return {V(ExpLinear(c.T(0), c.node.Float("alpha", 1.0), 1.0))}; }
std::vector<Value> RunCelu(RunContext& c) {
  const double alpha = c.node.Float("alpha", 1.0);
  return {V(ExpLinear(c.T(0), alpha, alpha))};
}
std::vector<Value> RunSelu(RunContext& c) {
  const double alpha = c.node.Float("alpha", 1.6732632423543772848170429916717);
  const double gamma = c.node.Float("gamma", 1.0507009873554804934193349852946);
  return {V(ops::MulScalar(ExpLinear(c.T(0), alpha, 1.0), gamma))};
}
std::vector<Value> RunThresholdedRelu(RunContext& c) {
  const Tensor& x = c.T(0);
  return {V(ops::Where(ops::Greater(x, Scalar(c.node.Float("alpha", 1.0), x)), x, Scalar(0, x)))};
}
std::vector<Value> RunPRelu(RunContext& c) {
  const Tensor &x = c.T(0), &slope = c.T(1);
  return {V(ops::Where(ops::Less(x, Scalar(0, x)), ops::Mul(x, slope), x))};
}

// Rounding: loom's floor and ceil; trunc rounds toward zero (C's fmod needs it).
Tensor Trunc(const Tensor& x) { return ops::Where(ops::Less(x, Scalar(0, x)), ops::Ceil(x), ops::Floor(x)); }
std::vector<Value> RunFloor(RunContext& c) { return {V(ops::Floor(c.T(0)))}; }
std::vector<Value> RunCeil(RunContext& c) { return {V(ops::Ceil(c.T(0)))}; }
std::vector<Value> RunRound(RunContext& c) { return {V(ops::Rounde(c.T(0)))}; }  // halves to even
// Mod: fmod 1 is C's fmod (the dividend's sign), fmod 0 Python's (the divisor's sign).
Tensor CMod(const Tensor& a, const Tensor& b) { return ops::Sub(a, ops::Mul(Trunc(ops::Div(a, b)), b)); }
Tensor PyMod(const Tensor& a, const Tensor& b) { return ops::Sub(a, ops::Mul(ops::Floor(ops::Div(a, b)), b)); }
std::vector<Value> RunMod(RunContext& c) {
  if (c.node.Int("fmod", 0) != 0) return {V(Numeric2(c.T(0), c.T(1), CMod))};
  return {V(Numeric2(c.T(0), c.T(1), PyMod))};
}
std::vector<DType> InferMod(const InferArgs& a) {
  if (a.node.Int("fmod", 0) == 0 && (a[0] == DType::kFloat32 || a[0] == DType::kFloat64))
    Fail(a.node, "fmod 0 on floats is not valid ONNX (fmod must be 1 for floating-point inputs)");
  return NumericSame(a, true);
}
std::vector<Value> RunShrink(RunContext& c) {
  const Tensor& x = c.T(0);
  const double bias = c.node.Float("bias", 0.0), lambd = c.node.Float("lambd", 0.5);
  Tensor y = ops::Where(ops::Less(x, Scalar(-lambd, x)), ops::AddScalar(x, bias),
                        ops::Where(ops::Greater(x, Scalar(lambd, x)), ops::AddScalar(x, -bias), Scalar(0, x)));
  return {V(y)};
}
std::vector<Value> RunMeanVarianceNorm(RunContext& c) {
  const Tensor& x = c.T(0);
  std::vector<int64_t> axes = c.node.Ints("axes", {0, 2, 3});
  for (auto& a : axes) a = Axis(c, a, x.ndim(), "axis");
  Tensor xc = ops::Sub(x, ops::Mean(x, axes, true));
  Tensor var = ops::Mean(ops::Mul(xc, xc), axes, true);
  return {V(ops::Div(xc, ops::Sqrt(ops::AddScalar(var, 1e-9))))};
}
std::vector<Value> RunSign(RunContext& c) { return {V(Numeric1<ops::Sign>(c.T(0)))}; }

// Softmax and LogSoftmax: before opset 13 the input is seen as 2-D, (prod(:axis), prod(axis:)).
template <Tensor (*F)(const Tensor&, int64_t)>
std::vector<Value> RunSoftmaxLike(RunContext& c) {
  const Tensor& x = c.T(0);
  if (c.node.opset >= 13) return {V(F(x, Axis(c, c.node.Int("axis", -1), x.ndim(), "axis")))};
  const int64_t axis = x.ndim() == 0 ? 0 : Axis(c, c.node.Int("axis", 1), x.ndim(), "axis");
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.shape()[size_t(i)];
  Tensor y = F(ops::Reshape(x, {outer, -1}), -1);
  return {V(ops::Reshape(y, x.shape()))};
}

// ---- comparisons and logic ----

std::vector<DType> InferCompare(const InferArgs& a) {
  CheckSameDType(a, 0, 1);
  if (a[0] == DType::kFloat16 || a[0] == DType::kBFloat16)
    Fail(a.node, detail::Cat("inputs are ", Name(a[0]), "; loom compares float32, float64, integers and bools"));
  return {DType::kBool};
}
std::vector<Value> RunEqual(RunContext& c) { return {V(ops::Equal(c.T(0), c.T(1)))}; }
std::vector<Value> RunLess(RunContext& c) { return {V(ops::Less(c.T(0), c.T(1)))}; }
std::vector<Value> RunGreater(RunContext& c) { return {V(ops::Greater(c.T(0), c.T(1)))}; }
std::vector<Value> RunLessOrEqual(RunContext& c) { return {V(ops::LessEqual(c.T(0), c.T(1)))}; }
std::vector<Value> RunGreaterOrEqual(RunContext& c) { return {V(ops::GreaterEqual(c.T(0), c.T(1)))}; }

std::vector<DType> InferLogic(const InferArgs& a) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != DType::kBool) Fail(a.node, detail::Cat("input ", i, " is ", Name(a[i]), ", ONNX wants bool"));
  return {DType::kBool};
}
Tensor AsFloat(const Tensor& b) { return ops::Cast(b, DType::kFloat32); }
std::vector<Value> RunAnd(RunContext& c) {
  Tensor p = ops::Mul(AsFloat(c.T(0)), AsFloat(c.T(1)));
  return {V(ops::Greater(p, Scalar(0, p)))};
}
std::vector<Value> RunOr(RunContext& c) {
  Tensor s = ops::Add(AsFloat(c.T(0)), AsFloat(c.T(1)));
  return {V(ops::Greater(s, Scalar(0, s)))};
}
std::vector<Value> RunXor(RunContext& c) { return {V(ops::NotEqual(c.T(0), c.T(1)))}; }
std::vector<Value> RunNot(RunContext& c) {
  const Tensor& x = c.T(0);
  return {V(ops::Equal(x, ops::Cast(ops::Zeros({}, DType::kFloat32, x.device_ptr()), DType::kBool)))};
}

std::vector<DType> InferWhere(const InferArgs& a) {
  if (a[0] != DType::kBool) Fail(a.node, detail::Cat("the condition is ", Name(a[0]), ", ONNX wants bool"));
  CheckSameDType(a, 1, 2);
  if (a[1] == DType::kFloat16 || a[1] == DType::kBFloat16)
    Fail(a.node, detail::Cat("x and y are ", Name(a[1]), "; loom selects float32, float64, integers and bools"));
  return {a[1]};
}
std::vector<Value> RunWhere(RunContext& c) {
  const Tensor &x = c.T(1), &y = c.T(2);
  if (IsFloat(x.dtype())) return {V(ops::Where(c.T(0), x, y))};
  Tensor r = ops::Where(c.T(0), ops::Cast(x, DType::kFloat64), ops::Cast(y, DType::kFloat64));
  return {V(ops::Cast(r, x.dtype()))};
}

// ---- variadic ----

template <Tensor (*F)(const Tensor&, const Tensor&)>
Tensor Fold(const RunContext& c) {
  Tensor acc = c.T(0);
  for (size_t i = 1; i < c.size(); ++i) acc = Numeric2(acc, c.T(i), F);
  return acc;
}
std::vector<Value> RunMin(RunContext& c) { return {V(Fold<Min2>(c))}; }
std::vector<Value> RunMax(RunContext& c) { return {V(Fold<Max2>(c))}; }
std::vector<Value> RunSum(RunContext& c) { return {V(Fold<ops::Add>(c))}; }
std::vector<Value> RunMean(RunContext& c) { return {V(ops::DivScalar(Fold<ops::Add>(c), double(c.size())))}; }

std::vector<Value> RunClip(RunContext& c) {
  Tensor x = c.T(0);
  const bool f = IsFloat(x.dtype());
  Tensor y = f ? x : ops::Cast(x, DType::kFloat64);
  if (c.node.opset < 11) {
    const double inf = std::numeric_limits<double>::infinity();
    return {V(ops::Clamp(y, c.node.Float("min", -inf), c.node.Float("max", inf)))};
  }
  if (c.Has(1)) y = Max2(y, ops::Cast(c.T(1), y.dtype()));
  if (c.Has(2)) y = Min2(y, ops::Cast(c.T(2), y.dtype()));
  return {V(f ? y : ops::Cast(y, x.dtype()))};
}

// ---- reductions ----

// The reduced axes: the `axes` attribute, or (ReduceSum from opset 13) the optional input 1.
// None given: all axes, or no reduction at all with noop_with_empty_axes.
bool ReduceAxes(const RunContext& c, std::vector<int64_t>* axes) {
  const int64_t rank = c.T(0).ndim();
  std::vector<int64_t> a = c.node.Ints("axes", {});
  if (c.Has(1)) a = c.Ints(1, "axes");
  if (a.empty()) {
    if (c.node.Int("noop_with_empty_axes", 0) != 0) return false;
    for (int64_t i = 0; i < rank; ++i) a.push_back(i);
  }
  for (auto& ax : a) ax = Axis(c, ax, rank, "axis");
  *axes = a;
  return true;
}

enum class Reduce { kSum, kMean, kMax, kMin, kSumSquare, kL1, kL2, kLogSum, kLogSumExp, kProd };

template <Reduce R>
std::vector<Value> RunReduce(RunContext& c) {
  const Tensor& x = c.T(0);
  std::vector<int64_t> axes;
  if (!ReduceAxes(c, &axes)) return {V(x)};
  const bool keep = c.node.Int("keepdims", 1) != 0;
  if (x.ndim() == 0) return {V(x)};
  switch (R) {
    case Reduce::kSum: return {V(ops::Sum(x, axes, keep))};
    case Reduce::kMean: return {V(ops::Mean(x, axes, keep))};
    case Reduce::kMax: return {V(ops::Max(x, axes, keep))};
    case Reduce::kMin: return {V(ops::Neg(ops::Max(ops::Neg(x), axes, keep)))};
    case Reduce::kSumSquare: return {V(ops::Sum(ops::Mul(x, x), axes, keep))};
    case Reduce::kL1: return {V(ops::Sum(ops::Abs(x), axes, keep))};
    case Reduce::kL2: return {V(ops::Sqrt(ops::Sum(ops::Mul(x, x), axes, keep)))};
    case Reduce::kLogSum: return {V(ops::Log(ops::Sum(x, axes, keep)))};
    case Reduce::kLogSumExp: {
      // log sum exp(x) = m + log sum exp(x - m), m the maximum: no overflow.
      Tensor m = ops::Max(x, axes, true);
      Tensor s = ops::Log(ops::Sum(ops::Exp(ops::Sub(x, m)), axes, true));
      Tensor y = ops::Add(s, m);
      if (keep) return {V(y)};
      Shape out;
      for (int64_t i = 0; i < x.ndim(); ++i)
        if (std::find(axes.begin(), axes.end(), i) == axes.end()) out.push_back(x.shape()[size_t(i)]);
      return {V(ops::Reshape(y, out))};
    }
    case Reduce::kProd: {
      // |prod| = exp(sum log|x|) (a zero gives exp(-inf) = 0), the sign from the negatives' parity.
      Tensor mag = ops::Exp(ops::Sum(ops::Log(ops::Abs(x)), axes, keep));
      Tensor negs = ops::Sum(ops::Cast(ops::Less(x, Scalar(0, x)), x.dtype()), axes, keep);
      Tensor odd = ops::NotEqual(ops::Floor(ops::MulScalar(negs, 0.5)), ops::MulScalar(negs, 0.5));
      return {V(ops::Where(odd, ops::Neg(mag), mag))};
    }
  }
  Fail(c, "reduction not implemented");
}

// ArgMax/ArgMin from ops: the positions holding the extreme value, then the first (or last) of
// them as the minimum (maximum) of their indices.
template <bool kMax>
std::vector<Value> RunArg(RunContext& c) {
  Tensor x = c.T(0);
  if (!IsFloat(x.dtype())) x = ops::Cast(x, DType::kFloat64);
  const int64_t axis = Axis(c, c.node.Int("axis", 0), x.ndim(), "axis");
  const bool keep = c.node.Int("keepdims", 1) != 0, last = c.node.Int("select_last_index", 0) != 0;
  Tensor ext = kMax ? ops::Max(x, {axis}, true) : ops::Neg(ops::Max(ops::Neg(x), {axis}, true));
  Tensor hit = ops::Equal(x, ext);
  const int64_t n = x.shape()[size_t(axis)];
  std::vector<double> idx(HostCount(c, n, "the axis"), 0.0);
  for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = double(i);
  Shape ishape(size_t(x.ndim()), 1);
  ishape[size_t(axis)] = n;
  Tensor iota = ops::FromVector<double>(idx, ishape, x.device_ptr());
  Tensor none = ops::Full({}, last ? -1.0 : double(n), DType::kFloat64, x.device_ptr());
  Tensor cand = ops::Where(hit, ops::BroadcastTo(iota, x.shape()), none);
  Tensor pick = last ? ops::Max(cand, {axis}, keep) : ops::Neg(ops::Max(ops::Neg(cand), {axis}, keep));
  return {V(ops::Cast(pick.Detach(), DType::kInt64))};
}
std::vector<DType> InferArg(const InferArgs& a) {
  NumericSame(a, true);
  return {DType::kInt64};
}

std::vector<DType> InferReduceSum(const InferArgs& a) {
  CheckFloatInput(a, 0);
  if (a.node.HasInput(1) && a[1] != DType::kInt64) Fail(a.node, "axes must be int64");
  return {a[0]};
}

std::vector<DType> InferCast(const InferArgs& a) {
  const DType to = DTypeFromOnnx(int32_t(a.node.Int("to", -1)), a.node.Where() + " attribute 'to'");
  (void)a[0];
  return {to};
}
std::vector<Value> RunCast(RunContext& c) {
  const DType to = DTypeFromOnnx(int32_t(c.node.Int("to", -1)), c.Where());
  const Value& v = c.V(0);
  return {Value{ops::Cast(c.T(0), to), (to == DType::kInt64 || to == DType::kInt32) ? v.host : nullptr}};
}

std::vector<DType> InferCastLike(const InferArgs& a) { return {a[1]}; }
std::vector<Value> RunCastLike(RunContext& c) {
  const DType to = c.T(1).dtype();
  const Value& v = c.V(0);
  return {Value{ops::Cast(c.T(0), to), (to == DType::kInt64 || to == DType::kInt32) ? v.host : nullptr}};
}

std::vector<DType> InferBoolOut(const InferArgs& a) {
  CheckFloatInput(a, 0);
  return {DType::kBool};
}

}  // namespace

void AddMathOps(std::vector<OpEntry>* r) {
  // Opset 7 made the binary ops broadcast like numpy (earlier: the `broadcast` attribute).
  r->push_back(MakeOp("Add", 7, 2, 2, {}, NumericInts, RunAdd));
  r->push_back(MakeOp("Sub", 7, 2, 2, {}, NumericInts, RunSub));
  r->push_back(MakeOp("Mul", 7, 2, 2, {}, NumericInts, RunMul));
  r->push_back(MakeOp("Div", 7, 2, 2, {}, FloatAllSame, RunDiv));
  r->push_back(MakeOp("Pow", 7, 2, 2, {}, InferPow, RunPow));
  // Opset 6 dropped `consumed_inputs` from the unary ops.
  r->push_back(MakeOp("Sqrt", 6, 1, 1, {}, FloatUnary, RunSqrt));
  r->push_back(MakeOp("Exp", 6, 1, 1, {}, FloatUnary, RunExp));
  r->push_back(MakeOp("Log", 6, 1, 1, {}, FloatUnary, RunLog));
  r->push_back(MakeOp("Abs", 6, 1, 1, {}, NumericInts, RunAbs));
  r->push_back(MakeOp("Neg", 6, 1, 1, {}, NumericInts, RunNeg));
  r->push_back(MakeOp("Reciprocal", 6, 1, 1, {}, FloatUnary, RunReciprocal));
  r->push_back(MakeOp("Floor", 6, 1, 1, {}, FloatUnary, RunFloor));
  r->push_back(MakeOp("Round", 11, 1, 1, {}, FloatUnary, RunRound));
  r->push_back(MakeOp("Mod", 10, 2, 2, {"fmod"}, InferMod, RunMod));
  r->push_back(MakeOp("Shrink", 9, 1, 1, {"bias", "lambd"}, FloatUnary, RunShrink));
  r->push_back(MakeOp("MeanVarianceNormalization", 9, 1, 1, {"axes"}, FloatUnary, RunMeanVarianceNorm));
  r->push_back(MakeOp("Ceil", 6, 1, 1, {}, FloatUnary, RunCeil));
  r->push_back(MakeOp("Sign", 9, 1, 1, {}, NumericInts, RunSign));
  r->push_back(MakeOp("Erf", 9, 1, 1, {}, FloatUnary, RunErf));
  r->push_back(MakeOp("Sin", 7, 1, 1, {}, FloatUnary, RunSin));
  r->push_back(MakeOp("Cos", 7, 1, 1, {}, FloatUnary, RunCos));
  r->push_back(MakeOp("Tan", 7, 1, 1, {}, FloatUnary, RunTan));
  r->push_back(MakeOp("Asin", 7, 1, 1, {}, FloatUnary, RunAsin));
  r->push_back(MakeOp("Acos", 7, 1, 1, {}, FloatUnary, RunAcos));
  r->push_back(MakeOp("Atan", 7, 1, 1, {}, FloatUnary, RunAtan));
  r->push_back(MakeOp("Sinh", 9, 1, 1, {}, FloatUnary, RunSinh));
  r->push_back(MakeOp("Cosh", 9, 1, 1, {}, FloatUnary, RunCosh));
  r->push_back(MakeOp("Asinh", 9, 1, 1, {}, FloatUnary, RunAsinh));
  r->push_back(MakeOp("Acosh", 9, 1, 1, {}, FloatUnary, RunAcosh));
  r->push_back(MakeOp("Atanh", 9, 1, 1, {}, FloatUnary, RunAtanh));
  r->push_back(MakeOp("IsInf", 10, 1, 1, {"detect_negative", "detect_positive"}, InferBoolOut, RunIsInf));
  r->push_back(MakeOp("IsNaN", 9, 1, 1, {}, InferBoolOut, RunIsNaN));
  r->push_back(MakeOp("Relu", 6, 1, 1, {}, FloatUnary, RunRelu));
  r->push_back(MakeOp("Sigmoid", 6, 1, 1, {}, FloatUnary, RunSigmoid));
  r->push_back(MakeOp("Tanh", 6, 1, 1, {}, FloatUnary, RunTanh));
  r->push_back(MakeOp("Softplus", 1, 1, 1, {}, FloatUnary, RunSoftplus));
  r->push_back(MakeOp("Softsign", 1, 1, 1, {}, FloatUnary, RunSoftsign));
  r->push_back(MakeOp("LeakyRelu", 6, 1, 1, {"alpha"}, FloatUnary, RunLeakyRelu));
  r->push_back(MakeOp("Elu", 6, 1, 1, {"alpha"}, FloatUnary, RunElu));
  r->push_back(MakeOp("Selu", 6, 1, 1, {"alpha", "gamma"}, FloatUnary, RunSelu));
  r->push_back(MakeOp("Celu", 12, 1, 1, {"alpha"}, FloatUnary, RunCelu));
  r->push_back(MakeOp("HardSigmoid", 6, 1, 1, {"alpha", "beta"}, FloatUnary, RunHardSigmoid));
  r->push_back(MakeOp("HardSwish", 14, 1, 1, {}, FloatUnary, RunHardSwish));
  r->push_back(MakeOp("ThresholdedRelu", 10, 1, 1, {"alpha"}, FloatUnary, RunThresholdedRelu));
  r->push_back(MakeOp("PRelu", 7, 2, 2, {}, FloatAllSame, RunPRelu));
  r->push_back(MakeOp("Softmax", 1, 1, 1, {"axis"}, FloatUnary, RunSoftmaxLike<ops::Softmax>));
  r->push_back(MakeOp("LogSoftmax", 1, 1, 1, {"axis"}, FloatUnary, RunSoftmaxLike<ops::LogSoftmax>));
  r->push_back(MakeOp("Equal", 7, 2, 2, {}, InferCompare, RunEqual));
  r->push_back(MakeOp("Less", 7, 2, 2, {}, InferCompare, RunLess));
  r->push_back(MakeOp("Greater", 7, 2, 2, {}, InferCompare, RunGreater));
  r->push_back(MakeOp("LessOrEqual", 12, 2, 2, {}, InferCompare, RunLessOrEqual));
  r->push_back(MakeOp("GreaterOrEqual", 12, 2, 2, {}, InferCompare, RunGreaterOrEqual));
  r->push_back(MakeOp("And", 7, 2, 2, {}, InferLogic, RunAnd));
  r->push_back(MakeOp("Or", 7, 2, 2, {}, InferLogic, RunOr));
  r->push_back(MakeOp("Xor", 7, 2, 2, {}, InferLogic, RunXor));
  r->push_back(MakeOp("Not", 1, 1, 1, {}, InferLogic, RunNot));
  r->push_back(MakeOp("Where", 9, 3, 3, {}, InferWhere, RunWhere));
  // Opset 8 made the variadic ops broadcast.
  r->push_back(MakeOp("Min", 8, 1, -1, {}, OrderedSame, RunMin));
  r->push_back(MakeOp("Max", 8, 1, -1, {}, OrderedSame, RunMax));
  r->push_back(MakeOp("Sum", 8, 1, -1, {}, FloatAllSame, RunSum));
  r->push_back(MakeOp("Mean", 8, 1, -1, {}, FloatAllSame, RunMean));
  r->push_back(MakeOp("Clip", 6, 1, 3, {"min", "max"}, OrderedSame, RunClip));
  r->push_back(MakeOp("Cast", 6, 1, 1, {"to"}, InferCast, RunCast));
  r->push_back(MakeOp("Identity", 1, 1, 1, {}, Same0, RunIdentity));
  // ReduceSum takes its axes as an input from opset 13; the others until opset 18.
  r->push_back(MakeOp("ReduceSum", 1, 1, 2, {"axes", "keepdims", "noop_with_empty_axes"}, InferReduceSum,
                 RunReduce<Reduce::kSum>));
  r->push_back(MakeOp("ReduceMean", 1, 1, 1, {"axes", "keepdims"}, FloatUnary, RunReduce<Reduce::kMean>));
  r->push_back(MakeOp("ReduceMax", 1, 1, 1, {"axes", "keepdims"}, FloatUnary, RunReduce<Reduce::kMax>));
  r->push_back(MakeOp("ReduceMin", 1, 1, 1, {"axes", "keepdims"}, FloatUnary, RunReduce<Reduce::kMin>));
  r->push_back(MakeOp("ReduceSumSquare", 1, 1, 1, {"axes", "keepdims"}, FloatUnary, RunReduce<Reduce::kSumSquare>));
  r->push_back(MakeOp("ReduceL1", 1, 1, 1, {"axes", "keepdims"}, FloatUnary, RunReduce<Reduce::kL1>));
  r->push_back(MakeOp("ReduceL2", 1, 1, 1, {"axes", "keepdims"}, FloatUnary, RunReduce<Reduce::kL2>));
  r->push_back(MakeOp("ReduceLogSum", 1, 1, 1, {"axes", "keepdims"}, FloatUnary, RunReduce<Reduce::kLogSum>));
  r->push_back(MakeOp("ReduceLogSumExp", 1, 1, 1, {"axes", "keepdims"}, FloatUnary, RunReduce<Reduce::kLogSumExp>));
  r->push_back(MakeOp("ReduceProd", 1, 1, 1, {"axes", "keepdims"}, FloatUnary, RunReduce<Reduce::kProd>));
  r->push_back(MakeOp("CastLike", 15, 2, 2, {}, InferCastLike, RunCastLike));
  r->push_back(MakeOp("ArgMax", 1, 1, 1, {"axis", "keepdims", "select_last_index"}, InferArg, RunArg<true>));
  r->push_back(MakeOp("ArgMin", 1, 1, 1, {"axis", "keepdims", "select_last_index"}, InferArg, RunArg<false>));
}

}  // namespace onnx
}  // namespace io
}  // namespace loom
