// Defects found by probing loom as a hostile user would (issue 16): sizes that overflow
// (Note [Checked sizes] in core/shape.h), NaN through relu, and shapes and dtypes that used to
// pass silently. Each case failed (crash, wrong answer or no error) before its fix.
#include <cmath>
#include <limits>

#include "common/harness.h"
#include "core/autograd.h"
#include "core/allocator.h"
#include "nn/cnn_layers.h"
#include "nn/layer.h"

namespace loom {
namespace test {
namespace {

constexpr int64_t P(int k) { return int64_t(1) << k; }

TEST(CheckedSizes, ShapesWhoseSizeOverflowsAreShapeErrors) {
  // Used to die of SIGFPE, segfault in the fill kernel, or sum 2^64 ones to 0.
  LOOM_EXPECT_THROW_MSG(ops::Zeros({P(61) + 1}, DType::kFloat32, Cpu()), ShapeError,
                        "[tensor] shape (2305843009213693953,) is too large");
  LOOM_EXPECT_THROW_MSG(ops::Zeros({P(62)}, DType::kFloat32, Cpu()), ShapeError, "too large");
  LOOM_EXPECT_THROW_MSG(ops::Zeros({P(55)}, DType::kFloat64, Cpu()), ShapeError, "of 8-byte elements is too large");
  LOOM_EXPECT_THROW_MSG(ops::Zeros({P(31), P(31)}, DType::kFloat32, Cpu()), ShapeError, "too large");
  LOOM_EXPECT_THROW_MSG(ops::Ones({P(32), P(32)}, DType::kFloat32, Cpu()), ShapeError,
                        "exceeds 2^56 elements");
  // A zero dimension does not excuse the others: the strides would overflow.
  LOOM_EXPECT_THROW_MSG(ops::Zeros({0, P(40), P(40)}, DType::kFloat32, Cpu()), ShapeError, "too large");
  LOOM_EXPECT_THROW_MSG(NumElements({2, -3}), ShapeError, "negative dimension in shape (2, -3)");
  EXPECT_EQ(NumElements({0, 5}), 0);
  EXPECT_EQ(ByteSize({3, P(20)}, 8, "t"), 3 * P(23));
  EXPECT_EQ(ops::Zeros({0, 7}, DType::kFloat64, Cpu()).numel(), 0);
}

TEST(CheckedSizes, LayersWithImpossibleWeightsAreRefused) {
  // Each built a layer with 0-byte weights.
  LOOM_EXPECT_THROW_MSG(nn::Linear(P(32), P(32)), ShapeError, "too large");
  LOOM_EXPECT_THROW_MSG(nn::Conv2d(3, 8, P(40)), ShapeError, "too large");
  LOOM_EXPECT_THROW_MSG(nn::Embedding(P(33), P(31)), ShapeError, "too large");
}

TEST(CheckedSizes, TheAllocatorRefusesWhatItCannotRound) {
  // RoundSize shifted by 64 above 2^63.
  LOOM_EXPECT_THROW_MSG(CachingAllocator::RoundSize((size_t(1) << 63) + 1), DeviceError, "[allocator] cannot allocate");
  EXPECT_EQ(CachingAllocator::RoundSize(P(40) + 1), size_t(P(40) + P(38)));
}

TEST(CheckedSizes, BroadcastsIntoEmptyOutputs) {
  // (3, 0) against (1, 0) is an empty (3, 0): the broadcast kernel divided by its last dimension
  // and died of SIGFPE (found by fuzz_onnx_ops through ArgMax over an axis of an empty tensor).
  Tensor x = ops::Zeros({3, 0}, DType::kFloat32, Cpu());
  Tensor m = ops::Max(x, {0}, true);
  EXPECT_EQ(m.shape(), (Shape{1, 0}));
  EXPECT_EQ(ops::Equal(x, m).shape(), (Shape{3, 0}));
  EXPECT_EQ(ops::Add(x, m).shape(), (Shape{3, 0}));
  EXPECT_EQ(ops::Mul(ops::Zeros({2, 1, 0}, DType::kFloat64, Cpu()), ops::Zeros({4, 1}, DType::kFloat64, Cpu())).shape(),
            (Shape{2, 4, 0}));
}

TEST(CheckedSizes, SoftmaxOverEmptyLinesVisitsNone) {
  // (2^40, 0) along its last axis is 2^40 lines of nothing: the kernel walked every one (a hang
  // found by fuzz_onnx_ops through Softmax, tools/fuzz/regressions/onnx_ops). Forward and
  // backward, softmax and log_softmax, both axes.
  for (bool log : {false, true})
    for (int64_t axis : {int64_t(-1), int64_t(0)}) {
      Tensor x = ops::Zeros({P(40), 0}, DType::kFloat32, Cpu()).set_requires_grad(true);
      Tensor y = log ? ops::LogSoftmax(x, axis) : ops::Softmax(x, axis);
      EXPECT_EQ(y.shape(), (Shape{P(40), 0})) << log << axis;
      std::vector<std::pair<Tensor, Tensor>> pairs = Backward(ops::Sum(y));
      ASSERT_EQ(pairs.size(), 1u);
      EXPECT_EQ(pairs[0].second.shape(), (Shape{P(40), 0})) << log << axis;
    }
  // A line of one element still runs: softmax 1, log_softmax 0.
  EXPECT_EQ(ToDoubles(ops::Softmax(ops::Zeros({3, 1}, DType::kFloat32, Cpu()))), std::vector<double>(3, 1.0));
  EXPECT_EQ(ToDoubles(ops::LogSoftmax(ops::Zeros({3, 1}, DType::kFloat32, Cpu()))), std::vector<double>(3, 0.0));
}

TEST(NaN, ReluAndMaxPropagateNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Tensor x = FromDoubles({nan, -1.0, 2.0}, {3}, dt);
    x.set_requires_grad(true);
    Tensor y = ops::Relu(x);
    std::vector<double> v = ToDoubles(y);
    EXPECT_TRUE(std::isnan(v[0])) << Name(dt);
    EXPECT_EQ(v[1], 0.0);
    EXPECT_EQ(v[2], 2.0);
    // The gradient flows where the output is NaN, as in PyTorch's threshold_backward.
    auto grads = Backward(ops::Sum(y));
    ASSERT_EQ(grads.size(), 1u);
    EXPECT_EQ(ToDoubles(grads[0].second), (std::vector<double>{1, 0, 1})) << Name(dt);
    EXPECT_TRUE(std::isnan(ToDoubles(ops::LeakyRelu(x, 0.1))[0]));
  }
  // max kept the first element when a later one was NaN (std::max); CUDA's MaxOf did the same.
  Tensor m = FromDoubles({1.0, nan, 2.0, 3.0, 4.0, 5.0}, {2, 3}, DType::kFloat32);
  std::vector<double> along0 = ToDoubles(ops::Max(m, {0})), along1 = ToDoubles(ops::Max(m, {1}));
  EXPECT_EQ(along0[0], 3.0);
  EXPECT_TRUE(std::isnan(along0[1]));
  EXPECT_TRUE(std::isnan(along1[0]));
  EXPECT_EQ(along1[1], 5.0);
  Tensor x = FromDoubles({1.0}, {1}, DType::kFloat32);
  LOOM_EXPECT_THROW_MSG(ops::LeakyRelu(x, nan), ValueError, "[leaky_relu] slope must be a finite number");
}

TEST(SilentShapes, ASeedGradientOfAnotherDTypeIsRefused) {
  Tensor w = FromDoubles({1.0, 2.0}, {2}, DType::kFloat32);
  w.set_requires_grad(true);
  Tensor loss = ops::Sum(ops::Mul(w, w));
  LOOM_EXPECT_THROW_MSG(Backward(loss, [](const Tensor&, const Tensor&) {}, FromDoubles({1.0}, {}, DType::kFloat64)),
                        DTypeError, "[backward] gradient");
}

TEST(SilentShapes, MeansOverNothingAreErrorsInEveryLoss) {
  Tensor logits = ops::Zeros({0, 3}, DType::kFloat32, Cpu());
  Tensor labels = ops::Zeros({0}, DType::kInt32, Cpu());
  LOOM_EXPECT_THROW_MSG(ops::SoftmaxCrossEntropy(logits, labels), ShapeError,
                        "[softmax_cross_entropy] logits (0, 3) have no rows");
  LOOM_EXPECT_THROW_MSG(ops::MseLoss(logits, logits), ShapeError, "[mse] pred (0, 3) is empty");
  LOOM_EXPECT_THROW_MSG(ops::Mean(ops::Zeros({2}, DType::kInt32, Cpu())), DTypeError,
                        "[mean] input must be float32 or float64, got int32");
}

TEST(SilentShapes, LinearOnOneSampleWithoutABatchKeepsItsRank) {
  nn::Linear fc(4, 3);
  Tensor x = RandomTensor({4}, DType::kFloat32, 3);
  Tensor y = fc.Forward(x);
  EXPECT_EQ(y.shape(), (Shape{3}));
  EXPECT_EQ(ToDoubles(y), ToDoubles(fc.Forward(ops::Reshape(x, {1, 4}))));
}

}  // namespace
}  // namespace test
}  // namespace loom
