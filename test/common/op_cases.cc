// The op-case table (Note [The op-case table] in op_cases.h). Rows are grouped by op family;
// each family writes its rows for every dtype it covers. A row's label is "<op> <variant>
// <dtype>"; the variant names what differs between rows of an op (shapes, attributes, ranges).
#include "common/op_cases.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "common/harness.h"
#include "common/op_case_table.h"
#include "core/ops/external.h"
#include "nn/schedule.h"

namespace loom {
namespace test {

InputSpec Uniform(Shape shape, double lo, double hi) {
  InputSpec s;
  s.shape = std::move(shape);
  s.lo = lo;
  s.hi = hi;
  return s;
}

InputSpec Grid(Shape shape, double lo, double hi) {
  InputSpec s = Uniform(std::move(shape), lo, hi);
  s.kind = InputSpec::Kind::kGrid;
  return s;
}

InputSpec Values(Shape shape, std::vector<double> values, std::optional<DType> dtype) {
  InputSpec s;
  s.kind = InputSpec::Kind::kValues;
  s.shape = std::move(shape);
  s.values = std::move(values);
  s.dtype = dtype;
  return s;
}

InputSpec Derived(std::function<Tensor(const std::vector<Tensor>&)> derive) {
  InputSpec s;
  s.kind = InputSpec::Kind::kDerived;
  s.derive = std::move(derive);
  s.constant = true;
  return s;
}

InputSpec Float64(double v) { return Values({}, {v}, DType::kFloat64).Constant(); }

bool OpCase::ChecksGradient(std::string* why) const {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (!GetOp(op).backward) return no("the op has no backward");
  if (dtype != DType::kFloat64) return no("finite differences run in float64");
  if (!no_grad.empty()) return no(no_grad);
  if (outputs != Outputs::kNew) return no("the op writes into given tensors, without autograd");
  int64_t elements = 0, differentiable = 0;
  for (const InputSpec& s : inputs)
    if (!s.constant && s.kind != InputSpec::Kind::kDerived && s.dtype.value_or(dtype) == DType::kFloat64) {
      elements += NumElements(s.shape);
      ++differentiable;
    }
  if (differentiable == 0) return no("no float64 input to differentiate");
  if (elements > kSmallGradElements && !force_grad) return no("large: the row is there for the kernels' paths");
  return true;
}

namespace table {
namespace {

// ---------------------------------------------------------------- element-wise

using Fn1 = double (*)(double, const Attrs&);
using Fn2 = double (*)(double, double, const Attrs&);

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double Softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
// The tanh approximation of GELU and its derivative.
constexpr double kGeluC = 0.7978845608028654, kGeluA = 0.044715;  // sqrt(2 / pi)
double Gelu(double x) { return 0.5 * x * (1 + std::tanh(kGeluC * (x + kGeluA * x * x * x))); }
double GeluGrad(double x) {
  double t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kGeluC * (1 + 3 * kGeluA * x * x);
}

const std::map<std::string, Fn1>& UnaryForms() {
  static const std::map<std::string, Fn1> forms = {
      {"neg", [](double x, const Attrs&) { return -x; }},
      {"exp", [](double x, const Attrs&) { return std::exp(x); }},
      {"log", [](double x, const Attrs&) { return std::log(x); }},
      {"sqrt", [](double x, const Attrs&) { return std::sqrt(x); }},
      {"abs", [](double x, const Attrs&) { return std::fabs(x); }},
      {"erf", [](double x, const Attrs&) { return std::erf(x); }},
      {"clamp", [](double x, const Attrs& a) { return std::min(a.Float("hi"), std::max(a.Float("lo"), x)); }},
      {"add_scalar", [](double x, const Attrs& a) { return x + a.Float("s"); }},
      {"mul_scalar", [](double x, const Attrs& a) { return x * a.Float("s"); }},
      {"rsub_scalar", [](double x, const Attrs& a) { return a.Float("s") - x; }},
      {"rdiv_scalar", [](double x, const Attrs& a) { return a.Float("s") / x; }},
      {"pow_scalar", [](double x, const Attrs& a) { return std::pow(x, a.Float("s")); }},
      {"relu", [](double x, const Attrs&) { return x > 0 ? x : 0.0; }},
      {"leaky_relu", [](double x, const Attrs& a) { return x > 0 ? x : a.Float("slope") * x; }},
      {"sigmoid", [](double x, const Attrs&) { return Sigmoid(x); }},
      {"tanh", [](double x, const Attrs&) { return std::tanh(x); }},
      {"gelu", [](double x, const Attrs&) { return Gelu(x); }},
      {"gelu_erf", [](double x, const Attrs&) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {"softplus", [](double x, const Attrs&) { return Softplus(x); }},
  };
  return forms;
}

// Binary ops, and the gradient ops of activations: (saved input or output, dy) -> dx.
const std::map<std::string, Fn2>& BinaryForms() {
  static const std::map<std::string, Fn2> forms = {
      {"add", [](double a, double b, const Attrs&) { return a + b; }},
      {"sub", [](double a, double b, const Attrs&) { return a - b; }},
      {"mul", [](double a, double b, const Attrs&) { return a * b; }},
      {"div", [](double a, double b, const Attrs&) { return a / b; }},
      {"pow", [](double a, double b, const Attrs&) { return std::pow(a, b); }},
      {"equal", [](double a, double b, const Attrs&) { return a == b ? 1.0 : 0.0; }},
      {"not_equal", [](double a, double b, const Attrs&) { return a != b ? 1.0 : 0.0; }},
      {"greater", [](double a, double b, const Attrs&) { return a > b ? 1.0 : 0.0; }},
      {"less", [](double a, double b, const Attrs&) { return a < b ? 1.0 : 0.0; }},
      {"greater_equal", [](double a, double b, const Attrs&) { return a >= b ? 1.0 : 0.0; }},
      {"less_equal", [](double a, double b, const Attrs&) { return a <= b ? 1.0 : 0.0; }},
      {"abs_grad", [](double x, double dy, const Attrs&) { return x > 0 ? dy : x < 0 ? -dy : 0.0; }},
      {"erf_grad", [](double x, double dy, const Attrs&) { return dy * 2 / std::sqrt(M_PI) * std::exp(-x * x); }},
      {"clamp_grad",
       [](double x, double dy, const Attrs& a) { return x >= a.Float("lo") && x <= a.Float("hi") ? dy : 0.0; }},
      {"relu_grad", [](double y, double dy, const Attrs&) { return y > 0 ? dy : 0.0; }},
      {"leaky_relu_grad", [](double x, double dy, const Attrs& a) { return x > 0 ? dy : a.Float("slope") * dy; }},
      {"sigmoid_grad", [](double y, double dy, const Attrs&) { return dy * y * (1 - y); }},
      {"tanh_grad", [](double y, double dy, const Attrs&) { return dy * (1 - y * y); }},
      {"gelu_grad", [](double x, double dy, const Attrs&) { return dy * GeluGrad(x); }},
      {"gelu_erf_grad",
       [](double x, double dy, const Attrs&) {
         return dy * (0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-x * x / 2) / std::sqrt(2 * M_PI));
       }},
      {"softplus_grad", [](double x, double dy, const Attrs&) { return dy * Sigmoid(x); }},
  };
  return forms;
}

void AddElementwise(Table& t) {
  struct Unary {
    std::string op;
    Shape shape;
    double lo, hi;
    Attrs attrs;
  };
  const std::vector<Unary> unary = {
      // small: forward and gradient
      {"neg", {3, 5}, -2, 2, {}},
      {"exp", {3, 5}, -2, 2, {}},
      {"log", {3, 5}, 0.2, 3, {}},
      {"sqrt", {3, 5}, 0.2, 3, {}},
      {"abs", {3, 5}, -2, 2, {}},
      {"erf", {3, 5}, -2, 2, {}},
      {"clamp", {3, 5}, -2, 2, {{"lo", -0.5}, {"hi", 0.7}}},
      {"add_scalar", {3, 5}, -2, 2, {{"s", 1.5}}},
      {"mul_scalar", {3, 5}, -2, 2, {{"s", -3.0}}},
      {"rsub_scalar", {3, 5}, -2, 2, {{"s", 2.0}}},
      {"rdiv_scalar", {3, 5}, 0.3, 2, {{"s", 2.0}}},
      {"pow_scalar", {3, 5}, -2, 2, {{"s", 3.0}}},
      {"pow_scalar", {3, 5}, -2, 2, {{"s", 2.0}}},
      {"pow_scalar", {3, 5}, 0.2, 2, {{"s", 1.5}}},
      {"relu", {3, 5}, -2, 2, {}},
      {"leaky_relu", {3, 5}, -2, 2, {{"slope", 0.1}}},
      {"sigmoid", {3, 5}, -2, 2, {}},
      {"tanh", {3, 5}, -2, 2, {}},
      {"gelu", {3, 5}, -2, 2, {}},
      {"gelu_erf", {3, 5}, -2, 2, {}},
      {"softplus", {3, 5}, -2, 2, {}},
      // the kernels' vector loops and tails, wide ranges
      {"add_scalar", {6, 5}, -1, 1, {{"s", 1.75}}},
      {"mul_scalar", {6, 5}, -1, 1, {{"s", 1.75}}},
      {"rsub_scalar", {6, 5}, -1, 1, {{"s", 1.75}}},
      {"rdiv_scalar", {6, 5}, 0.5, 2, {{"s", -3.0}}},
      {"pow_scalar", {6, 5}, -2, 2, {{"s", 2.0}}},
      {"pow_scalar", {6, 5}, 0.1, 2, {{"s", 1.5}}},
      {"neg", {1000}, -6, 6, {}},
      {"exp", {1000}, -6, 6, {}},
      {"abs", {1000}, -6, 6, {}},
      {"erf", {1000}, -4, 4, {}},
      {"relu", {1000}, -6, 6, {}},
      {"sigmoid", {1000}, -6, 6, {}},
      {"sigmoid", {1000}, -40, 40, {}},
      {"tanh", {1000}, -6, 6, {}},
      {"gelu", {1000}, -6, 6, {}},
      {"gelu_erf", {1000}, -6, 6, {}},
      {"softplus", {1000}, -30, 30, {}},
      {"log", {100}, 0.01, 5, {}},
      {"sqrt", {100}, 0.01, 5, {}},
      {"clamp", {100}, -2, 2, {{"lo", -0.5}, {"hi", 0.75}}},
      {"leaky_relu", {100}, -2, 2, {{"slope", 0.1}}},
  };
  for (const Unary& u : unary)
    for (DType dt : kFloats) {
      OpCase& c = t.Add(u.op, WithAttrs(S(u.shape) + " " + Range(u.lo, u.hi), u.attrs), dt,
                        ref::Unary(UnaryForms().at(u.op)))
                      .In(Uniform(u.shape, u.lo, u.hi));
      c.attrs = u.attrs;
      // The kernels take softplus(x) = x above 20 and exp(x) below -20 (PyTorch's threshold):
      // float64 keeps about 1e-9 of the value there.
      if (u.op == "softplus" && dt == kF64) c.Tol(2e-9, 1e-12);
    }

  // Binary ops with numpy broadcasting: same shapes, vectors against matrices, scalars and
  // one-element tensors on either side, and general broadcasts on both sides.
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}},    {{3}, {2, 3}}, {{2, 1, 4}, {3, 1}}, {{2, 3}, {}},       {{}, {2, 3}},
      {{4, 1}, {1, 5}}, {{5, 7}, {5, 7}}, {{5, 7}, {}},  {{1}, {5, 7}},     {{4, 3, 7}, {7}},   {{3, 4}, {4, 1, 1}}};
  struct Ranges {
    double alo, ahi, blo, bhi;
  };
  const std::map<std::string, Ranges> ranges = {{"add", {-2, 2, -2, 2}},
                                                {"sub", {-2, 2, -2, 2}},
                                                {"mul", {-2, 2, -2, 2}},
                                                {"div", {-2, 2, 0.5, 2}},
                                                {"pow", {0.5, 2, -2, 2}}};
  for (const auto& [op, r] : ranges)
    for (const auto& [sa, sb] : shapes)
      for (DType dt : kFloats)
        t.Add(op, S(sa) + " " + S(sb), dt, ref::Binary(BinaryForms().at(op)))
            .In(Uniform(sa, r.alo, r.ahi))
            .In(Uniform(sb, r.blo, r.bhi));

  // where(cond, x, y): the condition bool or uint8, the three broadcast together.
  const std::vector<std::vector<Shape>> where_shapes = {
      {{2, 3}, {2, 3}, {2, 3}}, {{2, 1}, {2, 3}, {3}}, {{3}, {2, 3}, {}}, {{4, 1, 3}, {2, 1}, {1}}, {{}, {5}, {5}}};
  for (const auto& sh : where_shapes)
    for (DType cond : {DType::kBool, DType::kUInt8})
      for (DType dt : kFloats) {
        std::vector<double> c(size_t(NumElements(sh[0])));
        for (size_t i = 0; i < c.size(); ++i) c[i] = (i * 7 + 3) % 3 == 0 ? 1 : 0;  // mixed, not alternating
        if (c.size() == 1) c[0] = 1;
        t.Add("where", S(sh[0]) + " " + S(sh[1]) + " " + S(sh[2]) + " " + Name(cond), dt, ref::Where)
            .In(Values(sh[0], c, cond).Constant())
            .In(Uniform(sh[1]))
            .In(Uniform(sh[2]));
      }

  // Comparisons, to bool, on every comparable dtype (Note [Comparisons] in
  // core/compare_formulas.h): values on a coarse grid, so that both outcomes occur.
  for (const char* op : {"equal", "not_equal", "greater", "less", "greater_equal", "less_equal"})
    for (const auto& [sa, sb] : shapes)
      for (DType dt : {kF32, kF64, DType::kInt32, DType::kInt64, DType::kUInt8, DType::kBool})
        t.Add(op, S(sa) + " " + S(sb), dt, ref::Binary(BinaryForms().at(op)))
            .In(Grid(sa, 0, 1.5))
            .In(Grid(sb, 0, 1.5));

  // The gradient ops of activations: (x or y, dy) -> dx.
  const std::vector<std::pair<std::string, Attrs>> grads = {
      {"abs_grad", {}},     {"relu_grad", {}},     {"sigmoid_grad", {}},     {"erf_grad", {}},
      {"tanh_grad", {}},    {"gelu_grad", {}},     {"gelu_erf_grad", {}},     {"softplus_grad", {}},
      {"clamp_grad", {{"lo", -0.5}, {"hi", 0.75}}}, {"leaky_relu_grad", {{"slope", 0.2}}}};
  for (const auto& [op, attrs] : grads)
    for (DType dt : kFloats)
      t.Add(op, WithAttrs("(300,)", attrs), dt, ref::Binary(BinaryForms().at(op)))
          .In(Uniform({300}, -3, 3))
          .In(Uniform({300}))
          .attrs = attrs;

  // The bf16 policy's GELU records (Note [Precision policy] in core/autocast.h): a bfloat16 x,
  // computed in float32 from it with a float32 result, and the gradient's bfloat16 x with a
  // float32 dy; against the float64 formulas of the same bfloat16 values. (The bfloat16 result a
  // fused cast makes is checked against the cast op's bits: common/fused_casts.h.)
  for (const std::string op : {"gelu", "gelu_erf"}) {
    t.Add(op, "(1000,) in [-6, 6) bfloat16 -> float32", DType::kBFloat16, ref::Unary(UnaryForms().at(op)))
        .In(Uniform({1000}, -6, 6))
        .Attr("out_dtype", int64_t(kF32))
        .Tol(1e-5, 1e-6)
        .NoGrad("a bfloat16 record is not differentiated (Note [Precision policy])");
    t.Add(op + "_grad", "(300,) bfloat16 x, float32 dy", DType::kBFloat16, ref::Binary(BinaryForms().at(op + "_grad")))
        .In(Uniform({300}, -3, 3))
        .In(Uniform({300}).As(kF32))
        .Tol(1e-5, 1e-6)
        .NoGrad("a bfloat16 record is not differentiated (Note [Precision policy])");
  }
  // relu's gradient from the bfloat16 copy of y (Note [ReLU masks from the bfloat16 copy] in
  // graph/bf16_relu_mask.cc), on a grid with zeros: the mask of the same bfloat16 values, exactly.
  t.Add("relu_grad", "(300,) bfloat16 y, float32 dy", DType::kBFloat16, ref::Binary(BinaryForms().at("relu_grad")))
      .In(Grid({300}, -2, 2))
      .In(Uniform({300}).As(kF32))
      .Tol(0, 0)
      .NoGrad("a bfloat16 record is not differentiated (Note [Precision policy])");

  // Element-wise math (core/ops/math.h) on each function's domain: the forward (and its
  // gradient check) and the gradient op on the same range.
  struct Math {
    const char* op;
    double lo, hi;
    double (*f)(double);
    double (*df)(double);
  };
  const std::vector<Math> math = {
      {"sin", -3, 3, [](double x) { return std::sin(x); }, [](double x) { return std::cos(x); }},
      {"cos", -3, 3, [](double x) { return std::cos(x); }, [](double x) { return -std::sin(x); }},
      {"tan", -1.2, 1.2, [](double x) { return std::tan(x); }, [](double x) { return 1 / std::pow(std::cos(x), 2); }},
      {"asin", -0.9, 0.9, [](double x) { return std::asin(x); }, [](double x) { return 1 / std::sqrt(1 - x * x); }},
      {"acos", -0.9, 0.9, [](double x) { return std::acos(x); }, [](double x) { return -1 / std::sqrt(1 - x * x); }},
      {"atan", -3, 3, [](double x) { return std::atan(x); }, [](double x) { return 1 / (1 + x * x); }},
      {"sinh", -2, 2, [](double x) { return std::sinh(x); }, [](double x) { return std::cosh(x); }},
      {"cosh", -2, 2, [](double x) { return std::cosh(x); }, [](double x) { return std::sinh(x); }},
      {"asinh", -3, 3, [](double x) { return std::asinh(x); }, [](double x) { return 1 / std::sqrt(x * x + 1); }},
      {"acosh", 1.1, 4, [](double x) { return std::acosh(x); }, [](double x) { return 1 / std::sqrt(x * x - 1); }},
      {"atanh", -0.9, 0.9, [](double x) { return std::atanh(x); }, [](double x) { return 1 / (1 - x * x); }},
  };
  for (const Math& m : math)
    for (DType dt : kFloats) {
      auto f = m.f;
      auto df = m.df;
      t.Add(m.op, "(3, 5) " + Range(m.lo, m.hi), dt, ref::Unary([f](double x, const Attrs&) { return f(x); }))
          .In(Uniform({3, 5}, m.lo, m.hi));
      t.Add(std::string(m.op) + "_grad", "(300,) " + Range(m.lo, m.hi), dt,
            ref::Binary([df](double x, double dy, const Attrs&) { return dy * df(x); }))
          .In(Uniform({300}, m.lo, m.hi))
          .In(Uniform({300}));
    }
  // The rounding functions: halves of both signs (where round and rounde differ), and others.
  const std::vector<double> halves = {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.7, 0.3, 1.2, 0.0, -3.6, 2.49};
  const std::vector<std::pair<const char*, double (*)(double)>> rounding = {
      {"ceil", [](double x) { return std::ceil(x); }},
      {"floor", [](double x) { return std::floor(x); }},
      {"round", [](double x) { return std::round(x); }},
      {"rounde", [](double x) { return x - std::floor(x) == 0.5 ? 2 * std::round(x / 2) : std::round(x); }},
      {"sign", [](double x) { return double((x > 0) - (x < 0)); }},
  };
  for (const auto& [op, f] : rounding)
    for (DType dt : kFloats) {
      auto fn = f;
      t.Add(op, "(3, 4) with halves", dt, ref::Unary([fn](double x, const Attrs&) { return fn(x); }))
          .In(Values({3, 4}, halves))
          .Exact();
      t.Add(op, "(200,) " + Range(-5, 5), dt, ref::Unary([fn](double x, const Attrs&) { return fn(x); }))
          .In(Uniform({200}, -5, 5))
          .Exact();
    }
}

// ---------------------------------------------------------------- linear algebra

void AddLinalg(Table& t) {
  struct MatMul {
    Shape a, b;
    bool ta = false, tb = false, sum = false;
    bool grad = false;   // above the small-row size, yet gradient-checked
    double f32_tol = 0;  // 0: the float32 default
  };
  const std::vector<MatMul> cases = {
      // 2-D, K = 1 (an outer product), batched, broadcast batches
      {{3, 4}, {4, 5}}, {{1, 2}, {2, 1}}, {{4, 1}, {1, 3}}, {{7, 5}, {5, 3}},
      {{2, 3, 4}, {2, 4, 5}}, {{2, 2, 3, 4}, {2, 2, 4, 2}}, {{3, 4, 5}, {3, 5, 2}},
      {{2, 3, 4}, {4, 5}},        // a weight shared by the batch: rows folded into one GEMM
      {{2, 3, 3, 4}, {4, 2}},     // two batch dimensions, 2-D rhs
      {{3, 4}, {2, 4, 5}},        // 2-D lhs, batched rhs
      {{2, 1, 3, 4}, {3, 4, 5}},  // both broadcast: output batch (2, 3)
      {{1, 3, 4}, {2, 4, 5}}, {{2, 3, 4}, {1, 4, 5}}, {{3, 4}, {1, 4, 5}},
      {{2, 3, 4, 5}, {5, 6}}, {{4, 5}, {3, 5, 2}}, {{2, 1, 4, 5}, {1, 3, 5, 2}},
      // the transposed operands: lhs stored (.., K, M), rhs (.., N, K)
      {{2, 4, 3}, {4, 5}, true, false}, {{2, 3, 4}, {5, 4}, false, true}, {{2, 4, 3}, {5, 4}, true, true},
      {{2, 4, 3}, {3, 1, 4, 5}, true, false}, {{2, 3, 4}, {3, 1, 5, 4}, false, true},
      {{2, 4, 3}, {3, 1, 5, 4}, true, true}, {{2, 3, 4}, {3, 1, 4, 5}},
      {{5, 7}, {5, 3}, true, false}, {{7, 5}, {3, 5}, false, true}, {{5, 7}, {3, 5}, true, true},
      {{2, 3, 4, 5}, {6, 5}, false, true}, {{3, 5, 4}, {3, 2, 5}, true, true}, {{3, 5, 4}, {5, 2}, true, false},
      // summed over the batch: one GEMM over the folded batch, or the batch loop accumulating
      {{3, 4, 2}, {3, 4, 5}, true, false, true}, {{2, 3, 4}, {2, 5, 4}, false, true, true},
      {{2, 3, 4}, {4, 5}, false, false, true}, {{2, 1, 4, 3}, {3, 4, 5}, true, false, true},
      {{3, 6, 4}, {3, 6, 5}, true, false, true}, {{3, 4, 6}, {3, 6, 5}, false, false, true},
      {{6, 4}, {3, 6, 5}, true, false, true},
      // empty: K = 0 sums nothing, M = 0 has no rows
      {{2, 0}, {0, 3}}, {{4, 0}, {0, 3}}, {{0, 4}, {4, 3}},
      // large GEMMs (batches one after another), many small ones (split by batch), broadcast lhs
      {{2, 70, 80}, {2, 80, 60}},
      {{130, 257}, {257, 129}, false, false, false, false, 1e-5},  // sums of 257 products
      {{300, 8, 8}, {300, 8, 8}}, {{8, 8}, {300, 8, 8}},
      // a small-batch linear layer in float32 takes the skinny kernels (Note [Skinny GEMM]):
      // forward x W (NN), input gradient dy W^T (NT), weight gradient x^T dy (TN)
      {{8, 100}, {100, 40}, false, false, false, true}, {{1, 64}, {64, 33}, false, false, false, true},
      {{2, 5, 70}, {70, 48}, false, false, false, true},
      {{8, 40}, {100, 40}, false, true}, {{1, 33}, {64, 33}, false, true}, {{2, 5, 48}, {70, 48}, false, true},
      {{8, 100}, {8, 40}, true, false}, {{1, 64}, {1, 33}, true, false},
      {{2, 5, 70}, {2, 5, 48}, true, false, true}};
  for (const MatMul& m : cases)
    for (DType dt : kFloats) {
      std::string variant = S(m.a) + (m.ta ? "^T" : "") + " @ " + S(m.b) + (m.tb ? "^T" : "") +
                            (m.sum ? " summed over the batch" : "");
      OpCase& c = t.Add("matmul", variant, dt, ref::MatMul)
                      .In(Uniform(m.a))
                      .In(Uniform(m.b))
                      .Attr("ta", int64_t(m.ta))
                      .Attr("tb", int64_t(m.tb))
                      .Attr("sum_batch", int64_t(m.sum));
      if (dt == kF32 && m.f32_tol > 0) c.Tol(m.f32_tol, m.f32_tol);
      if (m.sum) c.NoGrad("a batch-summed product is itself a gradient: it has no backward");
      if (m.grad && dt == kF64) c.Grad();
    }
  // bfloat16 and float16 operands, a float32 product (Note [Precision policy] in core/autocast.h):
  // against the float64 product of the same (16-bit) values, within float32 summation.
  for (DType half : {DType::kBFloat16, DType::kFloat16})
    for (const MatMul& m : cases) {
      std::string variant = S(m.a) + (m.ta ? "^T" : "") + " @ " + S(m.b) + (m.tb ? "^T" : "") +
                            (m.sum ? " summed over the batch" : "") + " -> float32";
      OpCase& c = t.Add("matmul", variant, half, ref::MatMul)
                      .In(Uniform(m.a))
                      .In(Uniform(m.b))
                      .Attr("ta", int64_t(m.ta))
                      .Attr("tb", int64_t(m.tb))
                      .Attr("sum_batch", int64_t(m.sum))
                      .Attr("out_dtype", int64_t(DType::kFloat32))
                      .NoGrad("a product of 16-bit operands is not differentiated (Note [Precision policy])");
      if (m.f32_tol > 0) c.Tol(m.f32_tol, m.f32_tol);
      else c.Tol(1e-5, 1e-5);
    }

  for (const Shape& x : {Shape{2, 3, 4}, Shape{5}, Shape{6, 4}, Shape{4, 3, 7}})
    for (DType dt : kFloats) t.Add("add_bias", S(x), dt, ref::AddBias).In(Uniform(x)).In(Uniform({x.back()}));
  // Wide (split by columns across threads), tall (one column block, many rows), one column.
  // Positive values where the columns are long: the CPU sums them in the dtype, and cancellation
  // would leave a rounding error above any useful float32 tolerance.
  struct BiasGrad {
    Shape dy;
    double lo;
  };
  for (const BiasGrad& b : {BiasGrad{{3, 40000}, -1}, BiasGrad{{5000, 7}, 0}, BiasGrad{{5000, 3}, 0}, BiasGrad{{2, 3, 5}, -1},
                            BiasGrad{{4, 3, 7}, -1}, BiasGrad{{300, 1}, -1}})
    for (DType dt : kFloats)
      t.Add("bias_grad", S(b.dy) + " " + Range(b.lo, 1), dt, ref::BiasGrad).In(Uniform(b.dy, b.lo, 1));
  // A bfloat16 dy summed in float32 (Note [Attention results kept in bfloat16] in
  // graph/bf16_attention.cc): against the float64 sums of the same bfloat16 values.
  for (const BiasGrad& b : {BiasGrad{{5000, 7}, 0}, BiasGrad{{2, 3, 5}, -1}, BiasGrad{{300, 1}, -1}})
    t.Add("bias_grad", S(b.dy) + " " + Range(b.lo, 1) + " -> float32", DType::kBFloat16, ref::BiasGrad)
        .In(Uniform(b.dy, b.lo, 1))
        .Attr("out_dtype", int64_t(DType::kFloat32))
        .NoGrad("a gradient itself: bias_grad has no backward")
        .Tol(1e-5, 1e-5);

  // The fused dense layer (Note [Dense, bias, activation] in core/ops/dense_bias_act.cc), made
  // by a graph pass: act(x w + b) for every activation; shapes as the linear layers the pass
  // sees: small (gradient-checked), batched rows, the skinny GEMMs of a small batch, a large
  // GEMM, and K = 0 (the bias alone).
  const char* kActs[] = {"none", "relu", "tanh", "sigmoid"};
  struct Dense {
    Shape x, w;
    double f32_tol = 0;
  };
  for (const Dense& d : {Dense{{3, 4}, {4, 5}}, Dense{{2, 3, 4}, {4, 5}}, Dense{{8, 100}, {100, 40}},
                         Dense{{1, 64}, {64, 33}}, Dense{{130, 257}, {257, 129}, 1e-5}, Dense{{2, 0}, {0, 3}}})
    for (int64_t act = 0; act < 4; ++act)
      for (DType dt : kFloats) {
        OpCase& c = t.Add("dense_bias_act", S(d.x) + " @ " + S(d.w) + " " + kActs[act], dt, ref::DenseBiasAct)
                        .In(Uniform(d.x))
                        .In(Uniform(d.w))
                        .In(Uniform({d.w[1]}))
                        .Attr("act", act);
        if (dt == kF32 && d.f32_tol > 0) c.Tol(d.f32_tol, d.f32_tol);
      }
  // Its backward from the output y: (y, dy) -> (dz, db). Wide, tall (positive values: long
  // column sums in float32, as bias_grad's rows), batched.
  for (const BiasGrad& b : {BiasGrad{{6, 50}, -1}, BiasGrad{{2, 3, 5}, -1}, BiasGrad{{3, 40000}, -1},
                            BiasGrad{{5000, 7}, 0}})
    for (int64_t act = 0; act < 4; ++act)
      for (DType dt : kFloats)
        t.Add("bias_act_grad", S(b.dy) + " " + kActs[act], dt, ref::BiasActGrad)
            .In(Uniform(b.dy, act == 2 || act == 3 ? std::max(b.lo, 0.0) : b.lo, 1))
            .In(Uniform(b.dy, b.lo, 1))
            .Attr("act", act);
  // channels = 1: a convolution's output (N, C, H, W), the bias gradient per channel.
  for (const Shape& y : {Shape{2, 3, 4, 5}, Shape{3, 16, 8, 8}, Shape{1, 2, 1, 1}, Shape{2, 3, 7}})
    for (int64_t act : {int64_t(1), int64_t(2)})
      for (DType dt : kFloats)
        t.Add("bias_act_grad", S(y) + " channels " + kActs[act], dt, ref::BiasActGrad)
            .In(Uniform(y, 0, 1))
            .In(Uniform(y))
            .Attr("act", act)
            .Attr("channels", int64_t(1));
  // y a bfloat16 or float16 copy of a float32 output, dy float32 (Note [ReLU masks from the
  // bfloat16 copy] in graph/bf16_relu_mask.cc): dz and db float32, against the float64 reference
  // on the same (16-bit) y values.
  for (DType half : {DType::kBFloat16, DType::kFloat16}) {
    for (const BiasGrad& b : {BiasGrad{{6, 50}, -1}, BiasGrad{{2, 3, 5}, -1}, BiasGrad{{3, 40000}, -1}})
      for (int64_t act : {int64_t(1), int64_t(2)})
        t.Add("bias_act_grad", S(b.dy) + " " + kActs[act] + " from a 16-bit y", half, ref::BiasActGrad)
            .In(Uniform(b.dy, act == 2 ? 0.0 : b.lo, 1))
            .In(Uniform(b.dy, b.lo, 1).As(kF32))
            .Attr("act", act);
    for (const Shape& y : {Shape{2, 3, 4, 5}, Shape{3, 16, 8, 8}})
      t.Add("bias_act_grad", S(y) + " channels relu from a 16-bit y", half, ref::BiasActGrad)
          .In(Uniform(y, -1, 1))
          .In(Uniform(y).As(kF32))
          .Attr("act", int64_t(1))
          .Attr("channels", int64_t(1));
  }
}

// ---------------------------------------------------------------- reductions

void AddReductions(Table& t) {
  struct Reduce {
    Shape x;
    int64_t begin, end, keepdims;
  };
  const std::vector<Reduce> cases = {{{6, 50}, 1, 2, 0},    {{3, 40, 5}, 1, 2, 1},  {{40, 70}, 0, 1, 0},
                                     {{7, 11, 13}, 0, 3, 0}, {{2, 5000}, 1, 2, 0},  {{3, 100, 300}, 1, 2, 0},
                                     {{2, 3, 4}, 1, 3, 1}};
  for (const char* op : {"sum", "max"})
    for (const Reduce& r : cases)
      for (DType dt : kFloats) {
        Attrs a{{"begin", r.begin}, {"end", r.end}, {"keepdims", r.keepdims}};
        t.Add(op, WithAttrs(S(r.x), a), dt, std::string(op) == "sum" ? ref::Sum : ref::Max).In(Uniform(r.x)).attrs = a;
      }
  // max_grad: values on a grid of 0.5, so that lines have ties which share the gradient.
  for (const Reduce& r : {Reduce{{6, 30}, 1, 2, 1}, Reduce{{3, 20, 5}, 1, 2, 1}, Reduce{{4, 9}, 0, 2, 1}})
    for (DType dt : kFloats) {
      Attrs a{{"begin", r.begin}, {"end", r.end}, {"keepdims", r.keepdims}};
      Shape ys = OutShape("max", {{r.x, dt}}, a);
      OpCase& c = t.Add("max_grad", WithAttrs(S(r.x), a), dt, ref::MaxGrad)
                      .In(Grid(r.x))
                      .In(OutputOf("max", {0}, a))
                      .In(Uniform(ys));
      c.attrs = a;
    }
}

// ---------------------------------------------------------------- softmax and losses

void AddSoftmax(Table& t) {
  struct Case {
    Shape x;
    int64_t axis;
    double lo, hi;
  };
  std::vector<Case> cases = {{{2, 3, 4}, -1, -2, 2}, {{2, 3, 4}, 0, -2, 2},  {{2, 3, 4}, 1, -2, 2},
                             {{2, 3, 4}, 2, -2, 2},  {{2, 3, 4}, -2, -2, 2}, {{5}, 0, -2, 2},
                             {{2, 3, 130}, 1, -2, 2},  // inner 130: blocks of 64 + 64 + 2 lines
                             {{3000, 12}, -1, -2, 2},  // many rows: split across threads
                             {{700, 3, 20}, 1, -2, 2}, {{5, 300}, -1, -5, 5}, {{3, 7, 9}, 1, -5, 5},
                             {{1}, -1, -5, 5},
                             // softmax(x + c) = softmax(x): a naive exp() overflows or underflows
                             {{4, 6}, -1, 999, 1001}, {{4, 6}, -1, -1001, -999}};
  for (const char* op : {"softmax", "log_softmax"})
    for (const Case& k : cases)
      for (DType dt : kFloats) {
        bool log = std::string(op) == "log_softmax";
        OpCase& c = t.Add(op, S(k.x) + " axis=" + std::to_string(k.axis) + " " + Range(k.lo, k.hi), dt,
                          log ? ref::LogSoftmax : ref::Softmax)
                        .In(Uniform(k.x, k.lo, k.hi))
                        .Attr("axis", k.axis);
        // float32 inputs near 1000 are a few 1e-5 apart: the log-probabilities keep that
        if (dt == kF32 && std::abs(k.lo) > 100) c.Tol(2e-4, 2e-4);
      }
  // (y, dy) -> dx, y the forward's output.
  for (const char* op : {"softmax", "log_softmax"})
    for (const Case& k : {Case{{5, 30}, -1, -3, 3}, Case{{4, 6, 5}, 1, -3, 3}})
      for (DType dt : kFloats) {
        const std::string grad = std::string(op) + "_grad";
        Attrs a{{"axis", k.axis}};
        auto x = [k, dt] { return UniformTensor(k.x, dt, k.lo, k.hi); };
        t.Add(grad, S(k.x) + " axis=" + std::to_string(k.axis), dt,
              grad == "softmax_grad" ? ref::SoftmaxGrad : ref::LogSoftmaxGrad)
            .In(OpOn(op, x, a))
            .In(Uniform(k.x))
            .attrs = a;
      }
}

void AddLosses(Table& t) {
  const std::vector<double> labels16 = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 8, 7, 0, 0, 3};
  std::vector<double> labels5000(5000);
  for (size_t i = 0; i < labels5000.size(); ++i) labels5000[i] = double((i * 7 + 3) % 10);
  // Float labels: one-hot rows, probabilities (rows sum to 1) and unnormalised weights.
  std::vector<double> onehot(12, 0.0), weights(12), probs(12);
  for (size_t i = 0; i < 3; ++i) onehot[i * 4 + std::vector<size_t>{1, 3, 0}[i]] = 1;
  std::mt19937 gen(23);
  std::uniform_real_distribution<double> u(0.1, 1);
  for (double& w : weights) w = u(gen);
  for (size_t i = 0; i < 3; ++i) {
    double s = weights[i * 4] + weights[i * 4 + 1] + weights[i * 4 + 2] + weights[i * 4 + 3];
    for (size_t j = 0; j < 4; ++j) probs[i * 4 + j] = weights[i * 4 + j] / s;
  }
  struct Sce {
    std::string variant;
    Shape x;
    double lo, hi;
    InputSpec labels;
  };
  for (DType dt : kFloats) {
    const std::vector<Sce> cases = {
        {"int64 labels", {4, 5}, -2, 2, Values({4}, {0, 4, 2, 2}, DType::kInt64)},
        {"int32 labels", {4, 5}, -2, 2, Values({4}, {0, 4, 2, 2}, DType::kInt32)},
        {"one-hot labels", {3, 4}, -2, 2, Values({3, 4}, onehot)},
        {"probability labels", {3, 4}, -2, 2, Values({3, 4}, probs)},
        {"weight labels", {3, 4}, -2, 2, Values({3, 4}, weights)},
        {"logits near 1000", {3, 4}, 999, 1001, Values({3}, {3, 0, 1}, DType::kInt32)},
        {"logits near -1000", {3, 4}, -1001, -999, Values({3}, {3, 0, 1}, DType::kInt32)},
        {"(16, 10) int32 labels", {16, 10}, -4, 4, Values({16}, labels16, DType::kInt32)},
        {"(16, 10) int64 labels", {16, 10}, -4, 4, Values({16}, labels16, DType::kInt64)},
        {"(16, 10) soft labels", {16, 10}, -4, 4,
         OpOn("softmax", [dt] { return UniformTensor({16, 10}, dt, -2, 2); }, Attrs{{"axis", int64_t(-1)}})},
        {"(5000, 10) rows split across threads", {5000, 10}, -3, 3, Values({5000}, labels5000, DType::kInt64)}};
    for (const Sce& k : cases) {
      OpCase& c = t.Add("softmax_cross_entropy", k.variant, dt, ref::SoftmaxCrossEntropy)
                      .In(Uniform(k.x, k.lo, k.hi))
                      .In(k.labels);
      if (dt == kF32 && std::abs(k.lo) > 100) c.Tol(2e-4, 2e-4);  // as softmax near 1000
      // (logits, labels, lse, dy) -> dlogits, lse the forward's
      if (k.x[0] < 10) continue;
      t.Add("softmax_cross_entropy_grad", k.variant, dt, ref::SoftmaxCrossEntropyGrad)
          .In(Uniform(k.x, k.lo, k.hi))
          .In(k.labels)
          .In(OutputOf("softmax_cross_entropy", {0, 1}, {}, 1))
          .In(Values({}, {0.7}));
    }
  }
  for (const Shape& s : {Shape{3, 4}, Shape{7}, Shape{}, Shape{7, 9}, Shape{70000}, Shape{250000}})
    for (DType dt : kFloats) {
      t.Add("mse", S(s), dt, ref::Mse).In(Uniform(s)).In(Uniform(s));
    }
  for (const Shape& s : {Shape{7, 9}, Shape{250000}})
    for (DType dt : kFloats)
      t.Add("mse_grad", S(s), dt, ref::MseGrad).In(Uniform(s)).In(Uniform(s)).In(Values({}, {0.7}));
}

// ---------------------------------------------------------------- optimizer updates

void AddOptimizers(Table& t) {
  // param, grad, lr (a float64 scalar on the device) [, momentum buffer], updated in place
  struct Sgd {
    std::string variant;
    double momentum, weight_decay, dampening;
    int64_t nesterov;
    bool buffer;
  };
  const std::vector<Sgd> sgd = {{"plain", 0, 1e-3, 0, 0, false},
                                {"momentum", 0.9, 1e-3, 0.1, 0, true},
                                {"nesterov", 0.9, 0, 0, 1, true}};
  for (const Sgd& k : sgd) {
    Attrs a{{"momentum", k.momentum}, {"weight_decay", k.weight_decay}, {"nesterov", k.nesterov},
            {"dampening", k.dampening}};
    for (DType dt : kFloats) {
      OpCase& c = t.Add("sgd_update", k.variant, dt, ref::SgdUpdate).In(Uniform({50})).In(Uniform({50})).In(Float64(0.05));
      c.attrs = a;
      if (k.buffer) c.In(Uniform({50})).Into({0, 3});
      else c.Into({0});
    }
    // The fused weight-gradient update (Note [Weight gradient into the update], graph/fuse_weight_grad.cc):
    // param (M, N), a (K, M), b (K, N); float32 only.
    OpCase& c = t.Add("matmul_sgd_update", k.variant, kF32, ref::MatmulSgdUpdate)
                    .In(Uniform({40, 48}))
                    .In(Uniform({8, 40}))
                    .In(Uniform({8, 48}))
                    .In(Float64(0.05));
    c.attrs = a;
    if (k.buffer) c.In(Uniform({40, 48})).Into({0, 4});
    else c.Into({0});
  }
  // param, grad, lr, m, v, step (float64 scalars on the device), updated in place
  for (int64_t decoupled : {int64_t(0), int64_t(1)})
    for (DType dt : kFloats)
      t.Add("adam_update", decoupled ? "decoupled weight decay" : "weight decay in the gradient", dt, ref::AdamUpdate)
          .In(Uniform({50}))
          .In(Uniform({50}))
          .In(Float64(0.05))
          .In(Uniform({50}, -0.1, 0.1))
          .In(Uniform({50}, 0, 0.1))
          .In(Float64(3))
          .Attr("beta1", 0.9)
          .Attr("beta2", 0.999)
          .Attr("eps", 1e-8)
          .Attr("weight_decay", 0.01)
          .Attr("decoupled", decoupled)
          .Into({0, 3, 4});
  t.Add("increment", "", kF64, ref::Increment).In(Float64(41)).Into({0});
  // Note [Small updates grouped] (graph/group_updates.cc): members of unequal sizes, each with its
  // own learning rate (and step count), as their own records compute them.
  for (DType dt : kFloats) {
    OpCase& sgd = t.Add("update_group", "of 3 sgd_update, momentum, gradient scale", dt, ref::UpdateGroup)
                      .Attr("of", std::string("sgd_update")).Attr("members", int64_t(3))
                      .Attr("momentum", 0.9).Attr("weight_decay", 1e-3).Attr("grad_scaled", int64_t(1));
    for (int64_t i = 0; i < 3; ++i)
      sgd.In(Uniform({50 - 20 * i})).In(Uniform({50 - 20 * i}, -3, 3)).In(Float64(0.05 * double(i + 1)))
          .In(Uniform({50 - 20 * i})).In(Float64(0.37 + 0.2 * double(i)));
    sgd.Into({0, 3, 5, 8, 10, 13});
    OpCase& adam = t.Add("update_group", "of 2 adam_update, decoupled weight decay", dt, ref::UpdateGroup)
                       .Attr("of", std::string("adam_update")).Attr("members", int64_t(2))
                       .Attr("beta1", 0.9).Attr("beta2", 0.999).Attr("eps", 1e-8).Attr("weight_decay", 0.01)
                       .Attr("decoupled", int64_t(1));
    for (int64_t i = 0; i < 2; ++i)
      adam.In(Uniform({50 - 43 * i})).In(Uniform({50 - 43 * i})).In(Float64(0.05 / double(i + 1)))
          .In(Uniform({50 - 43 * i}, -0.1, 0.1)).In(Uniform({50 - 43 * i}, 0, 0.1)).In(Float64(double(3 + i)));
    adam.Into({0, 3, 4, 6, 9, 10});
  }
  // Clipping folded into the updates (Note [Clipping folded into the update]): a gradient scale
  // (a float64 scalar, the last input) or a clip value.
  for (DType dt : kFloats) {
    t.Add("sgd_update", "momentum, gradient scale", dt, ref::SgdUpdate)
        .In(Uniform({50})).In(Uniform({50}, -3, 3)).In(Float64(0.05)).In(Uniform({50})).In(Float64(0.37))
        .Attr("momentum", 0.9).Attr("weight_decay", 1e-3).Attr("grad_scaled", int64_t(1))
        .Into({0, 3});
    t.Add("sgd_update", "clip value", dt, ref::SgdUpdate)
        .In(Uniform({50})).In(Uniform({50}, -3, 3)).In(Float64(0.05))
        .Attr("weight_decay", 1e-3).Attr("clip_value", 0.5)
        .Into({0});
    for (const char* how : {"gradient scale", "clip value"}) {
      OpCase& c = t.Add("adam_update", how, dt, ref::AdamUpdate)
                      .In(Uniform({50})).In(Uniform({50}, -3, 3)).In(Float64(0.05))
                      .In(Uniform({50}, -0.1, 0.1)).In(Uniform({50}, 0, 0.1)).In(Float64(3))
                      .Attr("beta1", 0.9).Attr("beta2", 0.999).Attr("eps", 1e-8).Attr("weight_decay", 0.01)
                      .Into({0, 3, 4});
      if (std::string(how) == "clip value") c.Attr("clip_value", 0.5);
      else c.In(Float64(0.37)).Attr("grad_scaled", int64_t(1));
    }
  }
  // The 1/N of data parallelism folded into the updates (Note [Data parallelism folded into the
  // update]): alone, with a gradient scale, with a clip value; and in the fused update.
  for (DType dt : kFloats) {
    t.Add("sgd_update", "momentum, 1/N", dt, ref::SgdUpdate)
        .In(Uniform({50})).In(Uniform({50}, -3, 3)).In(Float64(0.05)).In(Uniform({50}))
        .Attr("momentum", 0.9).Attr("weight_decay", 1e-3).Attr("grad_mult", 1.0 / 3)
        .Into({0, 3});
    t.Add("sgd_update", "1/N, gradient scale", dt, ref::SgdUpdate)
        .In(Uniform({50})).In(Uniform({50}, -3, 3)).In(Float64(0.05)).In(Float64(0.37))
        .Attr("weight_decay", 1e-3).Attr("grad_scaled", int64_t(1)).Attr("grad_mult", 0.25)
        .Into({0});
    t.Add("sgd_update", "1/N, clip value", dt, ref::SgdUpdate)
        .In(Uniform({50})).In(Uniform({50}, -3, 3)).In(Float64(0.05))
        .Attr("weight_decay", 1e-3).Attr("clip_value", 0.5).Attr("grad_mult", 0.5)
        .Into({0});
    t.Add("adam_update", "1/N, gradient scale", dt, ref::AdamUpdate)
        .In(Uniform({50})).In(Uniform({50}, -3, 3)).In(Float64(0.05))
        .In(Uniform({50}, -0.1, 0.1)).In(Uniform({50}, 0, 0.1)).In(Float64(3)).In(Float64(0.37))
        .Attr("beta1", 0.9).Attr("beta2", 0.999).Attr("eps", 1e-8).Attr("weight_decay", 0.01)
        .Attr("grad_scaled", int64_t(1)).Attr("grad_mult", 0.25)
        .Into({0, 3, 4});
  }
  t.Add("matmul_sgd_update", "momentum, 1/N, gradient scale", kF32, ref::MatmulSgdUpdate)
      .In(Uniform({40, 48})).In(Uniform({8, 40})).In(Uniform({8, 48})).In(Float64(0.05))
      .In(Uniform({40, 48})).In(Float64(0.37))
      .Attr("momentum", 0.9).Attr("weight_decay", 1e-3).Attr("grad_scaled", int64_t(1)).Attr("grad_mult", 0.5)
      .Into({0, 4});
  t.Add("matmul_sgd_update", "1/N, clip value", kF32, ref::MatmulSgdUpdate)
      .In(Uniform({40, 48})).In(Uniform({8, 40})).In(Uniform({8, 48})).In(Float64(0.05))
      .Attr("clip_value", 0.05).Attr("grad_mult", 0.5)
      .Into({0});
  // Schedules (Note [Schedules on the device]): the rate for a step counter.
  const nn::Schedule warm_cosine =
      nn::Schedule::Sequential({nn::Schedule::LinearWarmup(0.1, 5, 0.01), nn::Schedule::Cosine(0.1, 20, 0.001)}, {5});
  const nn::Schedule multistep = nn::Schedule::Sequential(
      {nn::Schedule::Exponential(0.2, 0.5, 3, true), nn::Schedule::MultiStep(0.05, {2, 9}, 0.1)}, {10});
  for (double step : {0.0, 3.0, 5.0, 17.0, 40.0}) {
    t.Add("lr_schedule", "warm-up, cosine at " + std::to_string(int(step)), kF64, ref::LrSchedule)
        .In(Float64(step)).attrs = warm_cosine.ToAttrs();
    t.Add("lr_schedule", "staircase, multistep at " + std::to_string(int(step)), kF64, ref::LrSchedule)
        .In(Float64(step)).attrs = multistep.ToAttrs();
  }
  for (DType dt : kFloats)
    t.Add("grad_norm", "three gradients", dt, ref::GradNorm)
        .In(Uniform({50})).In(Uniform({7, 3}, -4, 4)).In(Uniform({70000}));
}

// ---------------------------------------------------------------- creation, random numbers

Attrs Creation(const Shape& shape, DType dt) { return Attrs{{"shape", shape}, {"dtype", int64_t(dt)}}; }

void AddRandom(Table& t) {
  for (DType dt : kFloats) {
    t.Add("uniform", "(1001,) [0, 1)", dt, ref::Uniform).Fresh().Random().attrs =
        Creation({1001}, dt).Set("low", 0.0).Set("high", 1.0);
    t.Add("uniform", "(37, 3) [-2, 3)", dt, ref::Uniform).Fresh().Random().attrs =
        Creation({37, 3}, dt).Set("low", -2.0).Set("high", 3.0);
    // A key of 64 bits and a counter well away from 0.
    t.Add("uniform", "(4099,) [-1, 1) at counter 1000", dt, ref::Uniform).Fresh().Random(0xabcdef12345ULL, 1000).attrs =
        Creation({4099}, dt).Set("low", -1.0).Set("high", 1.0);
    t.Add("normal", "(999,) mean=0.5 std=2", dt, ref::Normal).Fresh().Random().attrs =
        Creation({999}, dt).Set("mean", 0.5).Set("std", 2.0);
    t.Add("bernoulli", "(1003,) p=0.3", dt, ref::Bernoulli).Fresh().Random().attrs = Creation({1003}, dt).Set("p", 0.3);
    // dropout: y = x mask / (1 - p) and the mask, which is bernoulli(1 - p) at the same counter
    t.Add("dropout", "(33, 31) p=0.4", dt, ref::Dropout).In(Uniform({33, 31})).Random().Attr("p", 0.4);
    t.Add("dropout", "(50, 40) p=0.3", dt, ref::Dropout).In(Uniform({50, 40}, 0.5, 2)).Random(7, 3).Attr("p", 0.3);
    t.Add("dropout", "(1001,) p=0.25 at counter 5", dt, ref::Dropout).In(Uniform({1001})).Random(77, 5).Attr("p", 0.25);
    t.Add("dropout", "(6, 7) p=0.4", dt, ref::Dropout).In(Uniform({6, 7})).Random(5).Attr("p", 0.4);
    // (mask, dy) -> dy mask / (1 - p): uint8 masks of truncated values in [0, 2)
    t.Add("dropout_grad", "(33, 31) p=0.4", dt, ref::DropoutGrad)
        .In(Uniform({33, 31}, 0, 2).As(DType::kUInt8).Constant())
        .In(Uniform({33, 31}))
        .Attr("p", 0.4);
    t.Add("dropout_grad", "(2, 3) p=0.5", dt, ref::DropoutGrad)  // linear in dy: an exact gradient check
        .In(Values({2, 3}, {1, 0, 1, 1, 0, 1}, DType::kUInt8).Constant())
        .In(Uniform({2, 3}))
        .Attr("p", 0.5);
  }
  for (auto [dt, p] : {std::pair<DType, double>{DType::kUInt8, 0.6}, {DType::kBool, 0.5}, {DType::kUInt8, 0.0},
                       {DType::kUInt8, 1.0}})
    t.Add("bernoulli", "(1001,) p=" + Num(p), dt, ref::Bernoulli).Fresh().Random().attrs =
        Creation({1001}, dt).Set("p", p);
}

void AddCreation(Table& t) {
  // fill: every dtype, values each type rounds or truncates in its own way, scalars, empty and
  // large tensors (the fill splits across threads)
  for (DType dt : kAllDTypes) {
    t.Add("fill", "(9, 5) 3", dt, ref::Fill).Fresh().Exact().attrs = Creation({9, 5}, dt).Set("value", 3.0);
    t.Add("fill", "() 5", dt, ref::Fill).Fresh().Exact().attrs = Creation({}, dt).Set("value", 5.0);
    t.Add("fill", "(3,) 0.1", dt, ref::Fill).Fresh().Exact().attrs = Creation({3}, dt).Set("value", 0.1);
  }
  for (auto [dt, v] : std::vector<std::pair<DType, double>>{{kF32, -2.5},
                                                           {kF32, -1.25},
                                                           {kF64, -1.25},
                                                           {DType::kInt32, -7},
                                                           {DType::kInt64, 4e12},
                                                           {DType::kUInt8, 255},
                                                           {DType::kFloat16, 1.0},
                                                           {DType::kFloat16, 65520},
                                                           {DType::kBFloat16, -2.0},
                                                           {DType::kBool, -3}})
    t.Add("fill", "(7, 3) " + Num(v), dt, ref::Fill).Fresh().Exact().attrs = Creation({7, 3}, dt).Set("value", v);
  t.Add("fill", "(300001,) 1.5", kF32, ref::Fill).Fresh().Exact().attrs = Creation({300001}, kF32).Set("value", 1.5);
  t.Add("fill", "(0, 4) 1", kF32, ref::Fill).Fresh().Exact().attrs = Creation({0, 4}, kF32).Set("value", 1.0);

  // cast between every pair of dtypes, on values each of them holds
  const std::vector<double> small = {0, 1, 2, 3, 100, 7};
  for (DType from : kAllDTypes)
    for (DType to : kAllDTypes) {
      std::vector<double> v = small;
      if (from == DType::kBool) v = {0, 1, 1, 0, 1, 0};
      t.Add("cast", std::string("(2, 3) small values to ") + Name(to), from, ref::Cast)
          .In(Values({2, 3}, v))
          .Attr("dtype", int64_t(to))
          .Exact()
          .NoGrad("exact values across every dtype: the row below checks the gradient");
    }
  // rounding and truncation: float to integers toward zero, float64 to float32 to nearest, and
  // float16/bfloat16 at their special values (ties to even, subnormals, overflow, inf, nan)
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> to_half = {0.0, -0.0, 1.0, -2.5, 65504, 65519, 65520, 1e6, inf, -inf, std::nan(""),
                                       std::ldexp(1.0, -14), std::ldexp(1.0, -24), std::ldexp(1.0, -20),
                                       std::ldexp(1023.0, -24), std::ldexp(1.0, -25), std::ldexp(3.0, -25),
                                       std::ldexp(3.0, -26), std::ldexp(1.0, -26), 1 + std::ldexp(1.0, -11),
                                       1 + std::ldexp(3.0, -11), 1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -20),
                                       0.1, 2049, 2051};
  const std::vector<double> to_bfloat = {0.0, -0.0, 1.0, -2.0, 1 + std::ldexp(1.0, -8), 1 + std::ldexp(3.0, -8),
                                         1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -20), 0.1, inf, -inf,
                                         std::nan(""), 3.4028234663852886e38, 3.3895313892515355e38,
                                         std::ldexp(1.0, -126), std::ldexp(1.0, -133), std::ldexp(3.0, -134),
                                         std::ldexp(1.0, -134), std::ldexp(1.0, -149), 3.0e38};
  struct Cast {
    std::string variant;
    InputSpec x;
    DType from, to;
  };
  const std::vector<Cast> casts = {
      {"truncates toward zero", Values({3}, {2.7, -2.7, 0.5}), kF32, DType::kInt32},
      {"rounds to nearest", Values({2}, {0.1, 1.0 / 3}), kF64, kF32},
      {"special values", Values({int64_t(to_half.size())}, to_half), kF32, DType::kFloat16},
      {"special values", Values({int64_t(to_bfloat.size())}, to_bfloat), kF32, DType::kBFloat16},
      {"special values", Values({int64_t(to_half.size())}, to_half), DType::kFloat16, kF32},
      // just above a tie: one rounding from float64, never two through float32
      {"just above a tie", Values({2}, {1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                                        1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)}),
       kF64, DType::kFloat16},
      {"just above a tie", Values({1}, {1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)}), kF64, DType::kBFloat16},
      // random values: every result within half an ulp, and the kernels' vector loops
      {"(2000,) in [-100, 100)", Uniform({2000}, -100, 100), kF32, DType::kFloat16},
      {"(2000,) in [-100, 100)", Uniform({2000}, -100, 100), kF32, DType::kBFloat16},
      {"(6, 7) in [-300, 300)", Uniform({6, 7}, -300, 300), kF32, kF64},
      {"(6, 7) in [-300, 300)", Uniform({6, 7}, -300, 300), kF32, DType::kInt32},
      {"(6, 7) in [-300, 300)", Uniform({6, 7}, -300, 300), kF32, DType::kInt64},
      {"(6, 7) in [-300, 300)", Uniform({6, 7}, -300, 300), kF32, DType::kBool},
      {"(6, 7) in [0, 200)", Uniform({6, 7}, 0, 200), kF32, DType::kUInt8},
      {"(6, 7) in [-300, 300)", Uniform({6, 7}, -300, 300), DType::kFloat16, kF32},
      {"(6, 7) in [-300, 300)", Uniform({6, 7}, -300, 300), DType::kBFloat16, kF32},
      {"(6, 7) in [-300, 300)", Uniform({6, 7}, -300, 300), DType::kFloat16, DType::kBFloat16},
      {"(6, 7) in [0, 200)", Uniform({6, 7}, 0, 200), DType::kInt32, kF32},
      {"(6, 7) in [0, 200)", Uniform({6, 7}, 0, 200), DType::kInt32, DType::kFloat16},
      {"(6, 7) in [0, 200)", Uniform({6, 7}, 0, 200), DType::kInt64, kF64},
      {"(6, 7) in [0, 200)", Uniform({6, 7}, 0, 200), DType::kUInt8, kF32},
      {"(6, 7) in [-1e-6, 1e-6)", Uniform({6, 7}, -1e-6, 1e-6), kF64, DType::kFloat16},  // subnormals
      {"(6, 7) in [-1e-6, 1e-6)", Uniform({6, 7}, -1e-6, 1e-6), DType::kFloat16, kF64}};
  for (const Cast& k : casts)
    t.Add("cast", k.variant + " to " + Name(k.to), k.from, ref::Cast)
        .In(k.x)
        .Attr("dtype", int64_t(k.to))
        .Exact()
        .NoGrad("exact values: finite differences of 1e-6 vanish in a narrower output");
  // Gradients flow between float types. The output's float32 rounding is below 1e-4 of steps of
  // 1e-3, and the cast is linear: differences of that size are exact enough.
  t.Add("cast", "(3, 4) to float32", kF64, ref::Cast)
      .In(Uniform({3, 4}))
      .Attr("dtype", int64_t(kF32))
      .Tol(1e-7, 0)
      .GradTol(1e-3, 1e-4);

  // copy honours strides: a permuted view, a transposed one, a contiguous tensor, in every
  // element size
  for (DType dt : {kF32, kF64, DType::kFloat16, DType::kUInt8}) {
    const double lo = dt == DType::kUInt8 ? 0 : -1, hi = dt == DType::kUInt8 ? 255 : 1;
    t.Add("copy", "(4, 6, 5) permuted (2, 0, 1)", dt, ref::Copy).In(Uniform({4, 6, 5}, lo, hi).Permuted({2, 0, 1})).Exact();
    t.Add("copy", "(4, 6, 5) transposed (1, 0, 2)", dt, ref::Copy).In(Uniform({4, 6, 5}, lo, hi).Permuted({1, 0, 2})).Exact();
    t.Add("copy", "(2, 3, 4) permuted (2, 0, 1)", dt, ref::Copy).In(Uniform({2, 3, 4}, lo, hi).Permuted({2, 0, 1})).Exact();
    t.Add("copy", "(4, 6, 5) contiguous", dt, ref::Copy).In(Uniform({4, 6, 5}, lo, hi)).Exact();
  }
  t.Add("copy", "(3, 5) transposed", kF64, ref::Copy).In(Uniform({3, 5}).Permuted({1, 0})).Exact();
}

// ---------------------------------------------------------------- shape

void AddShape(Table& t) {
  // Every element size; the float rows also check gradients.
  for (DType dt : {kF32, kF64, DType::kFloat16, DType::kUInt8, DType::kInt32}) {
    const double lo = dt == DType::kUInt8 ? 0 : -100, hi = dt == DType::kUInt8 ? 255 : 100;
    auto u = [&](const Shape& s) { return Uniform(s, lo, hi); };
    t.Add("concat", "axis 1 of three", dt, ref::Concat).In(u({3, 2, 4})).In(u({3, 5, 4})).In(u({3, 1, 4})).Attr("axis", int64_t(1)).Exact();
    t.Add("concat", "axis 0", dt, ref::Concat).In(u({2, 4})).In(u({3, 4})).Attr("axis", int64_t(0)).Exact();
    t.Add("concat", "axis 1 of (2, 3, 2) (2, 1, 2) (2, 4, 2)", dt, ref::Concat)
        .In(u({2, 3, 2})).In(u({2, 1, 2})).In(u({2, 4, 2})).Attr("axis", int64_t(1)).Exact();
    t.Add("concat", "axis -1", dt, ref::Concat).In(u({2, 3, 2})).In(u({2, 3, 1})).Attr("axis", int64_t(-1)).Exact();
    t.Add("concat", "one input", dt, ref::Concat).In(u({2, 2})).Attr("axis", int64_t(0)).Exact();
    t.Add("concat", "with empty inputs", dt, ref::Concat).In(u({2, 0})).In(u({2, 2})).In(u({2, 0})).Attr("axis", int64_t(1)).Exact();
    t.Add("concat", "of a transposed view", dt, ref::Concat).In(u({2, 2}).Permuted({1, 0})).In(u({2, 1})).Attr("axis", int64_t(1)).Exact();

    struct Slice {
      Shape x;
      int64_t axis, start, end;
    };
    for (const Slice& k : {Slice{{3, 5, 2}, 1, 1, 4}, Slice{{3, 5, 2}, 0, 0, 3}, Slice{{3, 5, 2}, 2, 1, 2},
                           Slice{{3, 5, 2}, 1, -3, -1}, Slice{{3, 5, 2}, -2, 0, -1}, Slice{{3, 8, 4}, 1, 2, 7}}) {
      Attrs a{{"axis", k.axis}, {"start", k.start}, {"end", k.end}};
      t.Add("slice", WithAttrs(S(k.x), a), dt, ref::Slice).In(u(k.x)).Exact().attrs = a;
    }
    t.Add("slice", "(3, 5, 2) empty", dt, ref::Slice)
        .In(u({3, 5, 2}))
        .Attr("axis", int64_t(1)).Attr("start", int64_t(2)).Attr("end", int64_t(2))
        .Exact()
        .NoGrad("the output is empty");
    t.Add("slice", "of a transposed view", dt, ref::Slice)
        .In(u({3, 5, 2}).Permuted({1, 0, 2}))
        .Attr("axis", int64_t(0)).Attr("start", int64_t(1)).Attr("end", int64_t(3))
        .Exact();
    for (const Slice& k : {Slice{{3, 8, 4}, 1, 2, 7}, Slice{{2, 4}, 1, 1, 3}}) {
      Shape dy = k.x;
      dy[size_t(k.axis)] = k.end - k.start;
      Attrs a{{"axis", k.axis}, {"start", k.start}, {"end", k.end}, {"shape", k.x}};
      t.Add("slice_grad", WithAttrs(S(dy), a), dt, ref::SliceGrad).In(u(dy)).Exact().attrs = a;
    }
    struct Broadcast {
      Shape in, out;
    };
    for (const Broadcast& k : {Broadcast{{3}, {2, 3}}, Broadcast{{2, 1}, {2, 4}}, Broadcast{{1, 3, 1}, {2, 3, 2}},
                               Broadcast{{}, {2, 2}}, Broadcast{{2, 1, 3}, {4, 2, 5, 3}}, Broadcast{{2, 3}, {2, 3}},
                               Broadcast{{3, 1, 4}, {2, 3, 5, 4}}, Broadcast{{}, {3, 2}}})
      t.Add("broadcast_to", S(k.in) + " to " + S(k.out), dt, ref::BroadcastTo).In(u(k.in)).Attr("shape", k.out).Exact();
  }
  // The views: no kernel, the output shares the input's block (shape_test checks the sharing).
  for (DType dt : kFloats) {
    t.Add("reshape", "(2, 3, 4) to (4, -1)", dt, ref::Reshape).In(Uniform({2, 3, 4})).Attr("shape", Shape{4, -1}).Exact();
    t.Add("reshape", "(2, 3, 4) to (24,)", dt, ref::Reshape).In(Uniform({2, 3, 4})).Attr("shape", Shape{24}).Exact();
    t.Add("reshape", "() to (1, 1)", dt, ref::Reshape).In(Uniform({})).Attr("shape", Shape{1, 1}).Exact();
    t.Add("transpose", "(2, 3, 4) axes 0, 2", dt, ref::Transpose)
        .In(Uniform({2, 3, 4})).Attr("a", int64_t(0)).Attr("b", int64_t(2)).Exact();
    t.Add("transpose", "(2, 3, 4) axes -2, -1", dt, ref::Transpose)
        .In(Uniform({2, 3, 4})).Attr("a", int64_t(-2)).Attr("b", int64_t(-1)).Exact();
    t.Add("permute", "(2, 3, 4) (1, 2, 0)", dt, ref::Permute).In(Uniform({2, 3, 4})).Attr("perm", std::vector<int64_t>{1, 2, 0}).Exact();
    t.Add("permute", "(2, 3, 4) (-1, 0, 1)", dt, ref::Permute).In(Uniform({2, 3, 4})).Attr("perm", std::vector<int64_t>{-1, 0, 1}).Exact();
  }
  // Note [External ops]: the host's result y (a constant: no gradient flows into it) comes out
  // as a view; the gradient of x is what the host's function says. This binary's host function
  // says none, which is the true gradient of an output that does not depend on x, so the
  // finite differences agree with it; loom.autograd.Operator's tests check real ones.
  SetExternalBackward([](int64_t, const Tensor&, const std::vector<bool>& needs) {
    return std::vector<Tensor>(needs.size());
  });
  for (DType dt : kFloats)
    t.Add("external", "(2, 3) from (3,) and (2,)", dt, [](const RefArgs& a) { return std::vector<HostTensor>{a.in[0]}; })
        .In(Uniform({2, 3}).Constant()).In(Uniform({3})).In(Uniform({2})).Attr("id", int64_t(1)).Exact();
}

}  // namespace
}  // namespace table

namespace table {
namespace {

// ---------------------------------------------------------------- scatter / gather along an axis
// References for Note [Element scatter and gather] (src/core/ops/scatter.cc), from coordinates:
// entry p of the indices (row-major) names x's element at p's coordinates with the axis one
// replaced by the index; later entries overwrite earlier ones.

int64_t XOffset(const Shape& x, const Shape& e, int64_t axis, int64_t p, double index) {
  int64_t off = 0, stride = 1;
  for (int64_t d = int64_t(x.size()) - 1; d >= 0; --d) {
    int64_t c = p % e[size_t(d)];
    p /= e[size_t(d)];
    if (d == axis) c = index < 0 ? int64_t(index) + x[size_t(d)] : int64_t(index);
    off += c * stride;
    stride *= x[size_t(d)];
  }
  return off;
}

int64_t RefAxis(const RefArgs& a) {
  const int64_t axis = a.attrs.Int("axis"), rank = int64_t(a.in[0].shape.size());
  return axis < 0 ? axis + rank : axis;
}

std::vector<HostTensor> ScatterElementsRef(const RefArgs& a) {
  HostTensor y = a.in[0];
  const HostTensor &idx = a.in[1], &upd = a.in[2];
  for (int64_t p = 0; p < idx.numel(); ++p)
    y.v[size_t(XOffset(y.shape, idx.shape, RefAxis(a), p, idx.v[size_t(p)]))] = upd.v[size_t(p)];
  return {y};
}

std::vector<HostTensor> GatherElementsRef(const RefArgs& a) {
  const HostTensor &x = a.in[0], &idx = a.in[1];
  HostTensor y(idx.shape);
  for (int64_t p = 0; p < idx.numel(); ++p)
    y.v[size_t(p)] = x.v[size_t(XOffset(x.shape, idx.shape, RefAxis(a), p, idx.v[size_t(p)]))];
  return {y};
}

void AddScatterGather(Table& t) {
  for (DType dt : kFloats)
    for (DType it : {DType::kInt64, DType::kInt32}) {
      const std::string i = std::string(" ") + Name(it);
      // distinct positions along the axis in every line, so that the gradient is exact
      t.Add("scatter_elements", "(3, 3) axis 0" + i, dt, ScatterElementsRef)
          .In(Uniform({3, 3}))
          .In(Values({2, 3}, {1, 0, 2, 0, 2, 1}, it))
          .In(Uniform({2, 3}))
          .Attr("axis", int64_t(0))
          .Exact();
      t.Add("scatter_elements", "(2, 4) axis -1 negative indices" + i, dt, ScatterElementsRef)
          .In(Uniform({2, 4}))
          .In(Values({2, 2}, {-1, 0, 2, -3}, it))
          .In(Uniform({2, 2}))
          .Attr("axis", int64_t(-1))
          .Exact();
      t.Add("scatter_elements", "(2, 4, 3) axis 1 by (2, 2, 2)" + i, dt, ScatterElementsRef)
          .In(Uniform({2, 4, 3}))
          .In(Values({2, 2, 2}, {3, 0, 1, 2, 0, 3, 2, 1}, it))
          .In(Uniform({2, 2, 2}))
          .Attr("axis", int64_t(1))
          .Exact();
      t.Add("gather_elements", "(3, 4) axis 1 by (3, 2), repeats" + i, dt, GatherElementsRef)
          .In(Uniform({3, 4}))
          .In(Values({3, 2}, {3, 3, 0, -1, 2, 1}, it))
          .Attr("axis", int64_t(1))
          .Exact();
    }
  // repeated positions: the last update wins on every backend (no gradient: ONNX leaves them undefined)
  t.Add("scatter_elements", "(4,) repeats, last wins", kF32, ScatterElementsRef)
      .In(Uniform({4}))
      .In(Values({5}, {1, 3, 1, 1, 3}, DType::kInt64))
      .In(Uniform({5}))
      .Attr("axis", int64_t(0))
      .Exact();
  // many lines: the scatter splits across threads
  t.Add("scatter_elements", "(3, 40000) axis 0 by (1, 40000)", kF32, ScatterElementsRef)
      .In(Uniform({3, 40000}))
      .In(Derived([](const std::vector<Tensor>& in) {
        std::vector<int64_t> v(40000);
        for (size_t j = 0; j < v.size(); ++j) v[j] = int64_t(j % 3);
        return ops::FromVector(v, {1, 40000}, in[0].device_ptr());
      }))
      .In(Uniform({1, 40000}))
      .Attr("axis", int64_t(0))
      .Exact();
  // constant_of_shape: the shape tensor's values are the recorded shape
  for (DType dt : kFloats)
    for (DType it : {DType::kInt64, DType::kInt32}) {
      const std::string i = std::string(" ") + Name(it);
      t.Add("constant_of_shape", "(2, 3) 1.5" + i, dt, ref::Fill).In(Values({2}, {2, 3}, it)).Exact().attrs =
          Creation({2, 3}, dt).Set("value", 1.5);
      t.Add("constant_of_shape", "(4,) -2" + i, dt, ref::Fill).In(Values({1}, {4}, it)).Exact().attrs =
          Creation({4}, dt).Set("value", -2.0);
    }
}

}  // namespace
}  // namespace table

const std::vector<OpCase>& AllOpCases() {
  static const std::vector<OpCase> rows = [] {
    using namespace table;
    Table t;
    AddElementwise(t);
    AddLinalg(t);
    AddReductions(t);
    AddSoftmax(t);
    AddLosses(t);
    AddOptimizers(t);
    AddLossScaleCases(t);
    AddRandom(t);
    AddCreation(t);
    AddShape(t);
    AddScatterGather(t);
    AddCnnCases(t);
    AddCollectiveCases(t);
    AddTransformerCases(t);
    return t.Take();
  }();
  return rows;
}

std::vector<const OpCase*> CasesOf(const std::string& op) {
  std::vector<const OpCase*> out;
  for (const OpCase& c : AllOpCases())
    if (c.op == op) out.push_back(&c);
  return out;
}

std::vector<std::string> OpsWithCases() {
  std::set<std::string> ops;
  for (const OpCase& c : AllOpCases()) ops.insert(c.op);
  return std::vector<std::string>(ops.begin(), ops.end());
}

const std::vector<std::pair<std::string, std::string>>& OpsWithoutCases() {
  static const std::vector<std::pair<std::string, std::string>> without{};
  return without;
}

}  // namespace test
}  // namespace loom
