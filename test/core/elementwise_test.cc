// Element-wise ops and activations: forward against double-precision formulas, gradients by
// finite differences, broadcasting, and the errors.
#include <cmath>

#include "common/harness.h"

namespace loom {
namespace test {
namespace {

using D1 = std::function<double(double)>;
using D2 = std::function<double(double, double)>;

void CheckUnary(const std::string& name, const std::function<Tensor(const Tensor&)>& f, const D1& ref, double lo = -2,
                double hi = 2) {
  Tensor x = RandomTensor({3, 5}, DType::kFloat64, 7, lo, hi);
  std::vector<double> want;
  for (double v : x.ToVector<double>()) want.push_back(ref(v));
  CheckForward32([&](const std::vector<Tensor>& in) { return f(in[0]); }, {x}, want, 1e-5, 1e-6, name);
  GradCheck([&](const std::vector<Tensor>& in) { return f(in[0]); }, {x}, 1e-6, 1e-6, name);
}

TEST(Elementwise, UnaryMath) {
  CheckUnary("neg", ops::Neg, [](double x) { return -x; });
  CheckUnary("exp", ops::Exp, [](double x) { return std::exp(x); });
  CheckUnary("log", ops::Log, [](double x) { return std::log(x); }, 0.2, 3);
  CheckUnary("sqrt", ops::Sqrt, [](double x) { return std::sqrt(x); }, 0.2, 3);
  CheckUnary("abs", ops::Abs, [](double x) { return std::abs(x); });
  CheckUnary("clamp", [](const Tensor& x) { return ops::Clamp(x, -0.5, 0.7); },
             [](double x) { return std::min(0.7, std::max(-0.5, x)); });
  CheckUnary("add_scalar", [](const Tensor& x) { return ops::AddScalar(x, 1.5); }, [](double x) { return x + 1.5; });
  CheckUnary("mul_scalar", [](const Tensor& x) { return ops::MulScalar(x, -3); }, [](double x) { return -3 * x; });
  CheckUnary("rsub_scalar", [](const Tensor& x) { return ops::RSubScalar(x, 2); }, [](double x) { return 2 - x; });
  CheckUnary("rdiv_scalar", [](const Tensor& x) { return ops::RDivScalar(x, 2); }, [](double x) { return 2 / x; },
             0.3, 2);
  CheckUnary("pow_scalar", [](const Tensor& x) { return ops::PowScalar(x, 3); }, [](double x) { return x * x * x; });
  CheckUnary("pow_scalar2", [](const Tensor& x) { return ops::PowScalar(x, 2); }, [](double x) { return x * x; });
  CheckUnary("pow_scalar_frac", [](const Tensor& x) { return ops::PowScalar(x, 1.5); },
             [](double x) { return std::pow(x, 1.5); }, 0.2, 2);
}

TEST(Elementwise, Activations) {
  CheckUnary("relu", ops::Relu, [](double x) { return x > 0 ? x : 0; });
  CheckUnary("leaky_relu", [](const Tensor& x) { return ops::LeakyRelu(x, 0.1); },
             [](double x) { return x > 0 ? x : 0.1 * x; });
  CheckUnary("sigmoid", ops::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); });
  CheckUnary("tanh", ops::Tanh, [](double x) { return std::tanh(x); });
  CheckUnary("gelu", ops::Gelu, [](double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  });
  CheckUnary("softplus", ops::Softplus, [](double x) { return std::log(1 + std::exp(x)); });
}

void CheckBinary(const std::string& name, const std::function<Tensor(const Tensor&, const Tensor&)>& f, const D2& ref,
                 const Shape& sa, const Shape& sb, double lo = -2, double hi = 2) {
  Tensor a = RandomTensor(sa, DType::kFloat64, 11, lo, hi);
  Tensor b = RandomTensor(sb, DType::kFloat64, 12, lo, hi);
  Shape so = BroadcastShapes(sa, sb, "test");
  std::vector<double> av = a.ToVector<double>(), bv = b.ToVector<double>(), want(size_t(NumElements(so)));
  Shape st = ContiguousStrides(so);
  for (int64_t i = 0; i < NumElements(so); ++i) {
    int64_t ia = 0, ib = 0, stride_a = 1, stride_b = 1;
    for (int64_t d = int64_t(so.size()) - 1; d >= 0; --d) {
      int64_t idx = (i / st[size_t(d)]) % so[size_t(d)];
      int64_t da = d - int64_t(so.size() - sa.size()), db = d - int64_t(so.size() - sb.size());
      if (da >= 0) { ia += (sa[size_t(da)] == 1 ? 0 : idx) * stride_a; stride_a *= sa[size_t(da)]; }
      if (db >= 0) { ib += (sb[size_t(db)] == 1 ? 0 : idx) * stride_b; stride_b *= sb[size_t(db)]; }
    }
    want[size_t(i)] = ref(av[size_t(ia)], bv[size_t(ib)]);
  }
  auto g = [&](const std::vector<Tensor>& in) { return f(in[0], in[1]); };
  CheckForward32(g, {a, b}, want, 1e-5, 1e-6, name + " " + ToString(sa) + " " + ToString(sb));
  GradCheck(g, {a, b}, 1e-6, 1e-6, name + " " + ToString(sa) + " " + ToString(sb));
}

TEST(Elementwise, BinaryWithBroadcasting) {
  std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{3}, {2, 3}}, {{2, 1, 4}, {3, 1}}, {{2, 3}, {}}, {{}, {2, 3}}, {{4, 1}, {1, 5}}};
  for (auto& s : shapes) {
    CheckBinary("add", ops::Add, [](double a, double b) { return a + b; }, s.first, s.second);
    CheckBinary("sub", ops::Sub, [](double a, double b) { return a - b; }, s.first, s.second);
    CheckBinary("mul", ops::Mul, [](double a, double b) { return a * b; }, s.first, s.second);
    CheckBinary("div", ops::Div, [](double a, double b) { return a / b; }, s.first, s.second, 0.5, 2);
    CheckBinary("pow", ops::Pow, [](double a, double b) { return std::pow(a, b); }, s.first, s.second, 0.5, 2);
  }
}

TEST(Elementwise, TensorUsedTwiceAccumulatesGradient) {
  Tensor x = RandomTensor({4}, DType::kFloat64, 3);
  GradCheck([](const std::vector<Tensor>& in) { return ops::Add(ops::Mul(in[0], in[0]), ops::Exp(in[0])); }, {x});
}

TEST(Elementwise, Errors) {
  Tensor a = RandomTensor({2, 3}, DType::kFloat32, 1);
  Tensor b = RandomTensor({4}, DType::kFloat32, 2);
  LOOM_EXPECT_THROW_MSG(ops::Add(a, b), ShapeError, "[add] shapes (2, 3) and (4,) do not broadcast");
  Tensor c = RandomTensor({2, 3}, DType::kFloat64, 3);
  LOOM_EXPECT_THROW_MSG(ops::Mul(a, c), DTypeError, "[mul] dtypes differ: float32 and float64");
  Tensor i = ops::Zeros({2, 3}, DType::kInt32, Cpu());
  LOOM_EXPECT_THROW_MSG(ops::Relu(i), DTypeError, "[relu] input must be float32 or float64, got int32");
  LOOM_EXPECT_THROW_MSG(ops::Clamp(a, 1, 0), ValueError, "[clamp] low 1 is above high 0");
  LOOM_EXPECT_THROW_MSG(ops::Add(a, Tensor()), ValueError, "[add] input 1 is undefined");
}

}  // namespace
}  // namespace test
}  // namespace loom
