// Element-wise ops and activations: a gradient that accumulates over several uses, and the
// errors. Forward, gradient and replay of every op are rows of the op-case table
// (common/op_cases.cc), run by test/ops.
#include <cmath>

#include "common/harness.h"

namespace loom {
namespace test {
namespace {

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
