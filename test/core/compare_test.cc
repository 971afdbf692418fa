// Comparisons (equal, not_equal, greater, less, greater_equal, less_equal): NaN and signed zeros, the bool result with no gradient, and
// the errors (Note [Comparisons] in core/compare_formulas.h). Forward on every comparable
// dtype and broadcast, graph replay and CUDA are rows of the op-case table (common/op_cases.cc).
#include <limits>

#include "common/harness.h"

namespace loom {
namespace test {
namespace {

TEST(Compare, NaNEqualsNothingAndSignedZerosAreEqual) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Tensor a = FromDoubles({nan, 0.0, 1.0, nan}, {4}, dt);
    Tensor b = FromDoubles({nan, -0.0, 1.0, 2.0}, {4}, dt);
    EXPECT_EQ(ToDoubles(ops::Equal(a, b)), (std::vector<double>{0, 1, 1, 0})) << Name(dt);
    EXPECT_EQ(ToDoubles(ops::NotEqual(a, b)), (std::vector<double>{1, 0, 0, 1})) << Name(dt);
  }
}

TEST(Compare, NaNIsUnorderedAndSignedZerosAreEqual) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Tensor a = FromDoubles({nan, 0.0, 1.0, 1.0, 3.0}, {5}, dt);
    Tensor b = FromDoubles({1.0, -0.0, nan, 2.0, 2.0}, {5}, dt);
    EXPECT_EQ(ToDoubles(ops::Greater(a, b)), (std::vector<double>{0, 0, 0, 0, 1})) << Name(dt);
    EXPECT_EQ(ToDoubles(ops::Less(a, b)), (std::vector<double>{0, 0, 0, 1, 0})) << Name(dt);
    EXPECT_EQ(ToDoubles(ops::GreaterEqual(a, b)), (std::vector<double>{0, 1, 0, 0, 1})) << Name(dt);
    EXPECT_EQ(ToDoubles(ops::LessEqual(a, b)), (std::vector<double>{0, 1, 0, 1, 0})) << Name(dt);
  }
}

TEST(Compare, HasNoGradient) {
  Tensor a = RandomTensor({3}, DType::kFloat64, 7);
  a.set_requires_grad(true);
  Tensor eq = ops::Equal(a, a);
  EXPECT_FALSE(eq.requires_grad());
  EXPECT_EQ(ToDoubles(eq), (std::vector<double>{1, 1, 1}));
}

TEST(Compare, Errors) {
  Tensor a = RandomTensor({2, 3}, DType::kFloat32, 1);
  LOOM_EXPECT_THROW_MSG(ops::Equal(a, RandomTensor({4}, DType::kFloat32, 2)), ShapeError,
                        "[equal] shapes (2, 3) and (4,) do not broadcast");
  LOOM_EXPECT_THROW_MSG(ops::NotEqual(a, RandomTensor({2, 3}, DType::kFloat64, 3)), DTypeError,
                        "[not_equal] dtypes differ: float32 and float64");
  Tensor h = ops::Zeros({2}, DType::kFloat16, Cpu());
  LOOM_EXPECT_THROW_MSG(ops::Equal(h, h), DTypeError, "[equal] cannot compare float16 tensors");
  LOOM_EXPECT_THROW_MSG(ops::Equal(a, Tensor()), ValueError, "[equal] input 1 is undefined");
  LOOM_EXPECT_THROW_MSG(ops::Less(a, RandomTensor({4}, DType::kFloat32, 2)), ShapeError,
                        "[less] shapes (2, 3) and (4,) do not broadcast");
  LOOM_EXPECT_THROW_MSG(ops::GreaterEqual(h, h), DTypeError, "[greater_equal] cannot compare float16 tensors");
}

}  // namespace
}  // namespace test
}  // namespace loom
