// Losses beyond the op-case table (common/op_cases.cc, run by test/ops, holds softmax,
// log_softmax, softmax_cross_entropy, mse and their gradients): the gradient of the seed
// example's whole model, and the errors.
#include <cmath>

#include "common/harness.h"
#include "core/autocast.h"
#include "core/autograd.h"

LOOM_OP_KIND(linear_cross_entropy);

namespace loom {
namespace test {
namespace {

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

// Note [Cross-entropy fused with the head's product]: the backward (the forward's gradients
// scaled by the loss's) against finite differences, through a loss scaled by 3 and one used
// twice, w as a table and as (D, V), in chunks; and the gradients against the unfused ops'.
TEST(LinearCrossEntropy, GradientsMatchFiniteDifferencesAndTheUnfusedOps) {
  Tensor y = ops::FromVector(std::vector<int64_t>{0, 6, 1, 3, 3, 2, 5}, {7}, Cpu());
  for (bool table : {true, false}) {
    Tensor h = RandomTensor({7, 4}, DType::kFloat64, 51);
    Tensor w = RandomTensor(table ? Shape{7, 4} : Shape{4, 7}, DType::kFloat64, 52);
    GradCheck(
        [&](const std::vector<Tensor>& in) {
          Tensor l = ops::LinearCrossEntropy(in[0], in[1], y, table);
          return ops::Add(ops::MulScalar(l, 3.0), ops::Mul(l, l));
        },
        {h, w}, 1e-6, 1e-6, table ? "w (V, D)" : "w (D, V)");
    // chunks of 3 rows (the last one short), against softmax_cross_entropy(matmul)
    Tensor hf = h.Detach(), wf = w.Detach(), hu = h.Detach(), wu = w.Detach();
    for (Tensor* t : {&hf, &wf, &hu, &wu}) t->set_requires_grad(true);
    Tensor fused = Call(op_kind::linear_cross_entropy, {hf, wf, y},
                        Attrs{{"tb", int64_t(table)}, {"grads", int64_t(1)}, {"chunk", int64_t(3)}})[0];
    Tensor logits = ops::MatMul(hu, table ? ops::Transpose(wu) : wu);
    Tensor plain = ops::SoftmaxCrossEntropy(logits, y);
    EXPECT_NEAR(fused.Item(), plain.Item(), 1e-13);
    std::vector<std::pair<Tensor, Tensor>> gf = Backward(ops::MulScalar(fused, 0.5)),
                                           gu = Backward(ops::MulScalar(plain, 0.5));
    ASSERT_EQ(gf.size(), 2u);
    ASSERT_EQ(gu.size(), 2u);
    auto grad_of = [](const std::vector<std::pair<Tensor, Tensor>>& g, const Tensor& p) {
      for (const auto& pg : g)
        if (pg.first.block() == p.block()) return pg.second.ToVector<double>();
      ADD_FAILURE() << "no gradient for " << p.Describe();
      return std::vector<double>();
    };
    for (size_t i = 0; i < 2; ++i) {
      std::vector<double> a = grad_of(gf, i ? wf : hf), b = grad_of(gu, i ? wu : hu);
      ASSERT_EQ(a.size(), b.size());
      for (size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], b[j], 1e-14) << table << " input " << i << " " << j;
    }
  }
}

// Without an input that wants a gradient the op computes the loss alone (grads 0), which then
// cannot be differentiated; bfloat16 operands as the bf16 policy lowers them, under an
// AutocastScope, give the float32 loss within bfloat16's rounding of h and w.
TEST(LinearCrossEntropy, AsksForGradientsOnlyWhenAutogradWantsThem) {
  Tensor h = RandomTensor({9, 8}, DType::kFloat32, 61), w = RandomTensor({11, 8}, DType::kFloat32, 62);
  Tensor y = ops::FromVector(std::vector<int32_t>{0, 10, 3, 3, 7, 1, 2, 9, 5}, {9}, Cpu());
  EXPECT_EQ(Call(op_kind::linear_cross_entropy, {h, w, y}, Attrs{{"grads", int64_t(0)}}).size(), 1u);
  EXPECT_EQ(Call(op_kind::linear_cross_entropy, {h, w, y}, Attrs{{"grads", int64_t(1)}}).size(), 3u);
  const float f32 = ops::LinearCrossEntropy(h, w, y).Item();
  {
    NoGradGuard no_grad;
    Tensor hg = h.Detach();
    hg.set_requires_grad(true);
    EXPECT_EQ(ops::LinearCrossEntropy(hg, w, y).Item(), f32);
  }
  Tensor hg = h.Detach();
  hg.set_requires_grad(true);
  Tensor with = ops::LinearCrossEntropy(hg, w, y);
  EXPECT_EQ(with.Item(), f32) << "the loss does not depend on whether the gradients were computed";
  Tensor without = Call(op_kind::linear_cross_entropy, {hg, w, y}, Attrs{{"grads", int64_t(0)}})[0];
  LOOM_EXPECT_THROW_MSG(Backward(without), ValueError, "[linear_cross_entropy] was called with grads 0");
  float bf16;
  {
    AutocastScope scope(Precision::kBFloat16);
    bf16 = ops::LinearCrossEntropy(h, w, y).Item();
  }
  EXPECT_NE(bf16, f32) << "h and w were not rounded to bfloat16";
  EXPECT_NEAR(bf16, f32, 2e-2 * std::abs(f32));
}

TEST(LinearCrossEntropy, Errors) {
  Tensor h = RandomTensor({4, 3}, DType::kFloat32, 1), w = RandomTensor({5, 3}, DType::kFloat32, 2);
  Tensor y = ops::FromVector(std::vector<int32_t>{0, 4, 1, 2}, {4}, Cpu());
  auto lce = [](const Tensor& a, const Tensor& b, const Tensor& c, bool table = true) {
    return ops::LinearCrossEntropy(a, b, c, table);
  };
  LOOM_EXPECT_THROW_MSG(lce(h, w, ops::FromVector(std::vector<int32_t>{0, 5, 1, 2}, {4}, Cpu())), ValueError,
                        "[linear_cross_entropy] label 5 in row 1 is outside [0, 5)");
  LOOM_EXPECT_THROW_MSG(lce(h, w, ops::Zeros({3}, DType::kInt32, Cpu())), ShapeError,
                        "[linear_cross_entropy] h (4, 3) needs labels of shape (4,), got (3,)");
  LOOM_EXPECT_THROW_MSG(lce(h, w, ops::Zeros({4}, DType::kFloat32, Cpu())), DTypeError,
                        "[linear_cross_entropy] labels must be int32 or int64 class indices, got float32");
  LOOM_EXPECT_THROW_MSG(lce(h, RandomTensor({5, 4}, DType::kFloat32, 3), y), ShapeError,
                        "[linear_cross_entropy] h (4, 3) needs w of shape (V, 3) with V > 0 (tb 1), got (5, 4)");
  LOOM_EXPECT_THROW_MSG(lce(h, w, y, false), ShapeError,
                        "[linear_cross_entropy] h (4, 3) needs w of shape (3, V) with V > 0 (tb 0), got (5, 3)");
  LOOM_EXPECT_THROW_MSG(lce(h, RandomTensor({5, 3}, DType::kFloat64, 4), y), DTypeError,
                        "[linear_cross_entropy] h (float32) and w (float64) must have one dtype");
  LOOM_EXPECT_THROW_MSG(lce(RandomTensor({4}, DType::kFloat32, 5), w, y), ShapeError,
                        "[linear_cross_entropy] h must be (N, D) with N, D > 0, got (4,)");
  LOOM_EXPECT_THROW_MSG(Call(op_kind::linear_cross_entropy, {h, w, y}, Attrs{{"chunk", int64_t(-2)}}), ValueError,
                        "[linear_cross_entropy] chunk (rows per chunk, 0 for the default) must be >= 0, got -2");
  LOOM_EXPECT_THROW_MSG(Call(op_kind::linear_cross_entropy, {h, w, y}, Attrs{{"grads", int64_t(2)}}), ValueError,
                        "[linear_cross_entropy] grads must be 0 or 1, got 2");
}

}  // namespace
}  // namespace test
}  // namespace loom
