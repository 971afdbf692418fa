// softmax, log_softmax (any axis), softmax_cross_entropy (index and float labels) and mse:
// forward against plain double loops, gradients by finite differences and by formula, the errors.
#include <cmath>

#include "common/harness.h"

namespace loom {
namespace test {
namespace {

// exp(x) / sum(exp(x)) along `axis`, without the max shift (inputs are small), or its log.
std::vector<double> RefSoftmax(const std::vector<double>& x, const Shape& s, int64_t axis, bool log) {
  int64_t rank = int64_t(s.size());
  int64_t a = axis < 0 ? axis + rank : axis;
  int64_t outer = 1, n = s[size_t(a)], inner = 1;
  for (int64_t i = 0; i < a; ++i) outer *= s[size_t(i)];
  for (int64_t i = a + 1; i < rank; ++i) inner *= s[size_t(i)];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double z = 0;
      for (int64_t k = 0; k < n; ++k) z += std::exp(x[size_t((o * n + k) * inner + i)]);
      for (int64_t k = 0; k < n; ++k) {
        size_t at = size_t((o * n + k) * inner + i);
        y[at] = log ? std::log(std::exp(x[at]) / z) : std::exp(x[at]) / z;
      }
    }
  return y;
}

void CheckSoftmax(bool log, const Shape& s, int64_t axis, bool grad) {
  std::string what = std::string(log ? "log_softmax " : "softmax ") + ToString(s) + " axis " + std::to_string(axis);
  Tensor x = RandomTensor(s, DType::kFloat64, 5, -2, 2);
  std::vector<double> want = RefSoftmax(x.ToVector<double>(), s, axis, log);
  auto f = [&](const std::vector<Tensor>& in) {
    return log ? ops::LogSoftmax(in[0], axis) : ops::Softmax(in[0], axis);
  };
  CheckForward32(f, {x}, want, 1e-5, 1e-6, what);
  if (grad) GradCheck(f, {x}, 1e-6, 1e-6, what);
}

TEST(Loss, SoftmaxAnyAxis) {
  for (int64_t axis : {-1, 0, 1, 2, -2}) CheckSoftmax(false, {2, 3, 4}, axis, true);
  CheckSoftmax(false, {5}, 0, true);
  CheckSoftmax(false, {2, 3, 130}, 1, false);  // inner 130: blocks of 64 + 64 + 2 lines
  CheckSoftmax(false, {3000, 12}, -1, false);  // many rows: split across threads
  CheckSoftmax(false, {700, 3, 20}, 1, false);
}

TEST(Loss, LogSoftmaxAnyAxis) {
  for (int64_t axis : {-1, 0, 1, 2, -2}) CheckSoftmax(true, {2, 3, 4}, axis, true);
  CheckSoftmax(true, {5}, 0, true);
  CheckSoftmax(true, {2, 3, 130}, 1, false);
  CheckSoftmax(true, {3000, 12}, -1, false);
}

TEST(Loss, SoftmaxIsStableForLargeInputs) {
  // softmax(x + c) = softmax(x): with c = +-1000 a naive exp() overflows or underflows.
  Shape s{4, 6};
  Tensor x = RandomTensor(s, DType::kFloat64, 9);
  std::vector<double> sm = RefSoftmax(x.ToVector<double>(), s, -1, false);
  std::vector<double> lsm = RefSoftmax(x.ToVector<double>(), s, -1, true);
  for (double c : {1000.0, -1000.0}) {
    for (DType dt : {DType::kFloat64, DType::kFloat32}) {
      double tol = dt == DType::kFloat64 ? 1e-9 : 2e-4;
      Tensor xs = ops::Cast(ops::AddScalar(x, c), dt);
      ExpectClose(ToDoubles(ops::Softmax(xs)), sm, tol, tol, "softmax shifted by " + std::to_string(c));
      ExpectClose(ToDoubles(ops::LogSoftmax(xs)), lsm, tol, tol, "log_softmax shifted by " + std::to_string(c));
    }
  }
}

// -mean_i sum_c t_ic log softmax(x_i)_c by plain loops, with t one-hot rows for index labels.
double RefCrossEntropy(const std::vector<double>& x, const std::vector<double>& t, int64_t n, int64_t c) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double z = 0;
    for (int64_t j = 0; j < c; ++j) z += std::exp(x[size_t(i * c + j)]);
    for (int64_t j = 0; j < c; ++j) total -= t[size_t(i * c + j)] * (x[size_t(i * c + j)] - std::log(z));
  }
  return total / double(n);
}

std::vector<double> OneHot(const std::vector<int64_t>& labels, int64_t c) {
  std::vector<double> t(labels.size() * size_t(c), 0.0);
  for (size_t i = 0; i < labels.size(); ++i) t[i * size_t(c) + size_t(labels[i])] = 1;
  return t;
}

TEST(Loss, SoftmaxCrossEntropyIndexLabels) {
  Tensor x = RandomTensor({4, 5}, DType::kFloat64, 13, -2, 2);
  std::vector<int64_t> lab = {0, 4, 2, 2};
  double want = RefCrossEntropy(x.ToVector<double>(), OneHot(lab, 5), 4, 5);
  auto f = [](const std::vector<Tensor>& in) { return ops::SoftmaxCrossEntropy(in[0], in[1]); };
  Tensor l64 = ops::FromVector(lab, {4}, Cpu());
  Tensor l32 = ops::FromVector(std::vector<int32_t>(lab.begin(), lab.end()), {4}, Cpu());
  for (const Tensor& l : {l64, l32}) {
    std::string what = std::string("softmax_cross_entropy ") + Name(l.dtype()) + " labels";
    EXPECT_EQ(f({x, l}).shape(), Shape{}) << what;
    CheckForward32(f, {x, l}, {want}, 1e-5, 1e-6, what);
    GradCheck(f, {x, l}, 1e-6, 1e-6, what);
  }
}

TEST(Loss, SoftmaxCrossEntropyGradientFormula) {
  // Enough rows to split across threads; d loss / d logits = (softmax - onehot) / N * dy.
  const int64_t n = 5000, c = 10;
  Tensor x = RandomTensor({n, c}, DType::kFloat64, 17, -3, 3);
  std::vector<int64_t> lab(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) lab[size_t(i)] = (i * 7 + 3) % c;
  Tensor l = ops::FromVector(lab, {n}, Cpu());
  std::vector<double> xv = x.ToVector<double>(), p = RefSoftmax(xv, {n, c}, -1, false);
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    Tensor xd = ops::Cast(x, dt).Detach().set_requires_grad(true);
    Tensor loss = ops::SoftmaxCrossEntropy(xd, l);
    double tol = dt == DType::kFloat64 ? 1e-10 : 1e-5;
    EXPECT_NEAR(loss.Item(), RefCrossEntropy(xv, OneHot(lab, c), n, c), tol * 10);
    const double dy = 0.5;
    std::vector<std::pair<Tensor, Tensor>> grads;
    Backward(loss, [&](const Tensor& p, const Tensor& g) { grads.emplace_back(p, g); }, ops::Full({}, dy, dt, Cpu()));
    ASSERT_EQ(grads.size(), 1u);
    std::vector<double> want(p.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j)
        want[size_t(i * c + j)] = (p[size_t(i * c + j)] - (j == lab[size_t(i)] ? 1 : 0)) / double(n) * dy;
    ExpectClose(ToDoubles(grads[0].second), want, tol, tol / double(n), "softmax_cross_entropy gradient");
  }
}

TEST(Loss, SoftmaxCrossEntropyFloatLabels) {
  const int64_t n = 3, c = 4;
  Tensor x = RandomTensor({n, c}, DType::kFloat64, 19, -2, 2);
  std::vector<double> onehot = OneHot({1, 3, 0}, c);
  // Probabilities (rows sum to 1) and unnormalised non-negative weights (rows do not).
  std::vector<double> probs = RandomTensor({n, c}, DType::kFloat64, 23, 0.1, 1).ToVector<double>();
  std::vector<double> weights = probs;
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += probs[size_t(i * c + j)];
    for (int64_t j = 0; j < c; ++j) probs[size_t(i * c + j)] /= s;
  }
  auto f = [](const std::vector<Tensor>& in) { return ops::SoftmaxCrossEntropy(in[0], in[1]); };
  for (const auto& t : {onehot, probs, weights}) {
    Tensor tl = ops::FromVector(t, {n, c}, Cpu());
    double want = RefCrossEntropy(x.ToVector<double>(), t, n, c);
    CheckForward32(f, {x, tl}, {want}, 1e-5, 1e-6, "softmax_cross_entropy float labels");
    GradCheck(f, {x, tl}, 1e-6, 1e-6, "softmax_cross_entropy float labels");  // both inputs
  }
}

TEST(Loss, SoftmaxCrossEntropyLargeLogits) {
  Tensor x = RandomTensor({3, 4}, DType::kFloat64, 29);
  Tensor l = ops::FromVector(std::vector<int32_t>{3, 0, 1}, {3}, Cpu());
  double want = RefCrossEntropy(x.ToVector<double>(), OneHot({3, 0, 1}, 4), 3, 4);
  for (double c : {1000.0, -1000.0}) {
    EXPECT_NEAR(ops::SoftmaxCrossEntropy(ops::AddScalar(x, c), l).Item(), want, 1e-9);
    EXPECT_NEAR(ops::SoftmaxCrossEntropy(ops::Cast(ops::AddScalar(x, c), DType::kFloat32), l).Item(), want, 2e-4);
  }
}

TEST(Loss, Mse) {
  for (const Shape& s : {Shape{3, 4}, Shape{7}, Shape{}}) {
    std::string what = "mse " + ToString(s);
    Tensor p = RandomTensor(s, DType::kFloat64, 31);
    Tensor t = RandomTensor(s, DType::kFloat64, 32);
    std::vector<double> pv = p.ToVector<double>(), tv = t.ToVector<double>();
    double want = 0;
    for (size_t i = 0; i < pv.size(); ++i) want += (pv[i] - tv[i]) * (pv[i] - tv[i]);
    want /= double(pv.size());
    auto f = [](const std::vector<Tensor>& in) { return ops::MseLoss(in[0], in[1]); };
    EXPECT_EQ(f({p, t}).shape(), Shape{}) << what;
    CheckForward32(f, {p, t}, {want}, 1e-5, 1e-6, what);
    GradCheck(f, {p, t}, 1e-6, 1e-6, what);
  }
}

TEST(Loss, MseLargeInputIsSummedInBlocks) {
  Shape s{250000};
  Tensor p = RandomTensor(s, DType::kFloat64, 33);
  Tensor t = RandomTensor(s, DType::kFloat64, 34);
  std::vector<double> pv = p.ToVector<double>(), tv = t.ToVector<double>();
  double want = 0;
  for (size_t i = 0; i < pv.size(); ++i) want += (pv[i] - tv[i]) * (pv[i] - tv[i]);
  want /= double(pv.size());
  EXPECT_NEAR(ops::MseLoss(p, t).Item(), want, 1e-12);
  EXPECT_NEAR(ops::MseLoss(ops::Cast(p, DType::kFloat32), ops::Cast(t, DType::kFloat32)).Item(), want, 1e-5);
  // The gradient, by formula: 2 (p - t) / n.
  Tensor pg = p.Detach().set_requires_grad(true);
  auto grads = Backward(ops::MseLoss(pg, t));
  ASSERT_EQ(grads.size(), 1u);
  std::vector<double> g = grads[0].second.ToVector<double>(), wg(pv.size());
  for (size_t i = 0; i < pv.size(); ++i) wg[i] = 2 * (pv[i] - tv[i]) / double(pv.size());
  ExpectClose(g, wg, 1e-12, 1e-18, "mse gradient");
}

TEST(Loss, MlpGradient) {
  // The seed example's model: matmul, add_bias, relu, matmul, add_bias, softmax_cross_entropy.
  Tensor x = RandomTensor({6, 4}, DType::kFloat64, 41);
  Tensor w0 = RandomTensor({4, 5}, DType::kFloat64, 42);
  Tensor b0 = RandomTensor({5}, DType::kFloat64, 43);
  Tensor w1 = RandomTensor({5, 3}, DType::kFloat64, 44);
  Tensor b1 = RandomTensor({3}, DType::kFloat64, 45);
  Tensor y = ops::FromVector(std::vector<int32_t>{0, 2, 1, 1, 0, 2}, {6}, Cpu());
  GradCheck(
      [&](const std::vector<Tensor>& in) {
        Tensor h = ops::Relu(ops::AddBias(ops::MatMul(x, in[0]), in[1]));
        return ops::SoftmaxCrossEntropy(ops::AddBias(ops::MatMul(h, in[2]), in[3]), y);
      },
      {w0, b0, w1, b1}, 1e-6, 1e-6, "mlp");
}

TEST(Loss, Errors) {
  Tensor x = RandomTensor({4, 5}, DType::kFloat32, 1);
  auto sce = [](const Tensor& a, const Tensor& b) { return ops::SoftmaxCrossEntropy(a, b); };
  LOOM_EXPECT_THROW_MSG(sce(x, ops::FromVector(std::vector<int32_t>{0, 5, 1, 2}, {4}, Cpu())), ValueError,
                        "[softmax_cross_entropy] label 5 in row 1 is outside [0, 5)");
  LOOM_EXPECT_THROW_MSG(sce(x, ops::FromVector(std::vector<int64_t>{0, 1, 2, -1}, {4}, Cpu())), ValueError,
                        "[softmax_cross_entropy] label -1 in row 3 is outside [0, 5)");
  LOOM_EXPECT_THROW_MSG(sce(x, ops::Zeros({4}, DType::kUInt8, Cpu())), DTypeError,
                        "[softmax_cross_entropy] labels must be int32, int64 or float");
  LOOM_EXPECT_THROW_MSG(sce(x, RandomTensor({4, 5}, DType::kFloat64, 2)), DTypeError,
                        "[softmax_cross_entropy] float labels must have the logits' dtype float32, got float64");
  LOOM_EXPECT_THROW_MSG(sce(RandomTensor({2, 3, 4}, DType::kFloat32, 3), ops::Zeros({2}, DType::kInt32, Cpu())),
                        ShapeError, "[softmax_cross_entropy] logits must be (N, C), got (2, 3, 4)");
  LOOM_EXPECT_THROW_MSG(
      sce(x, ops::Zeros({3}, DType::kInt32, Cpu())), ShapeError,
      "[softmax_cross_entropy] logits (4, 5) and labels (3,): class-index labels must have shape (4,)");
  LOOM_EXPECT_THROW_MSG(sce(x, RandomTensor({4, 4}, DType::kFloat32, 4)), ShapeError,
                        "[softmax_cross_entropy] logits (4, 5) and labels (4, 4): float labels");
  LOOM_EXPECT_THROW_MSG(sce(ops::Zeros({4, 5}, DType::kInt32, Cpu()), ops::Zeros({4}, DType::kInt32, Cpu())),
                        DTypeError, "[softmax_cross_entropy] logits must be float32 or float64, got int32");

  LOOM_EXPECT_THROW_MSG(ops::Softmax(x, 2), ValueError, "[softmax] axis 2 is out of range for a tensor of rank 2");
  LOOM_EXPECT_THROW_MSG(ops::LogSoftmax(x, -3), ValueError, "[log_softmax] axis -3 is out of range");
  LOOM_EXPECT_THROW_MSG(ops::Softmax(ops::Zeros({2, 3}, DType::kInt32, Cpu())), DTypeError,
                        "[softmax] input must be float32 or float64, got int32");

  Tensor p23 = RandomTensor({2, 3}, DType::kFloat32, 5), p32 = RandomTensor({3, 2}, DType::kFloat32, 6);
  LOOM_EXPECT_THROW_MSG(ops::MseLoss(p23, p32), ShapeError,
                        "[mse] pred (2, 3) and target (3, 2) must have the same shape");
  LOOM_EXPECT_THROW_MSG(ops::MseLoss(x, RandomTensor({4, 5}, DType::kFloat64, 7)), DTypeError,
                        "[mse] dtypes differ: float32 and float64");
}

}  // namespace
}  // namespace test
}  // namespace loom
