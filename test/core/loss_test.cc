// Losses beyond the op-case table (common/op_cases.cc, run by test/ops, holds softmax,
// log_softmax, softmax_cross_entropy, mse and their gradients): the gradient of the seed
// example's whole model, and the errors.
#include <cmath>

#include "common/harness.h"

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

}  // namespace
}  // namespace test
}  // namespace loom
