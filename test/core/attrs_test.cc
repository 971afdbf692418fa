// Note [Attribute types] in core/attrs.h: a missing attribute or one of another type is the
// caller's mistake (an AttrError, a ValueError) naming the op, the attribute and the types, not
// an InternalError (issue 16, class 8).
#include "common/harness.h"

namespace loom {
namespace test {
namespace {

TEST(Attrs, AWronglyTypedOrMissingAttributeIsAUserErrorNamingTheOp) {
  Tensor x = RandomTensor({2, 3}, DType::kFloat32, 1);
  LOOM_EXPECT_THROW_MSG(Call("softmax", {x}, Attrs{{"axis", std::string("x")}}), ValueError,
                        "[softmax] attribute 'axis' must be an int, got a str");
  LOOM_EXPECT_THROW_MSG(Call("add_scalar", {x}, Attrs{{"s", std::vector<int64_t>{1}}}), AttrError,
                        "[add_scalar] attribute 's' must be a number, got a list of ints");
  LOOM_EXPECT_THROW_MSG(Call("reshape", {x}, Attrs{}), AttrError,
                        "[reshape] needs attribute 'shape' (a list of ints)");
  Tensor y = ops::Zeros({2, 3}, DType::kFloat32, Cpu());
  Attrs fill{{"shape", y.shape()}, {"dtype", int64_t(y.dtype())}, {"value", std::string("1")}};
  LOOM_EXPECT_THROW_MSG(CallInto("fill", {}, {y}, fill), ValueError,
                        "[fill] attribute 'value' must be a number, got a str");
  // Read directly, without an op: the attribute and the types, no brackets.
  Attrs a{{"k", int64_t(2)}};
  EXPECT_EQ(a.Float("k"), 2.0);  // an int is a number
  LOOM_EXPECT_THROW_MSG(a.Str("k"), AttrError, "attribute 'k' must be a str, got an int");
}

}  // namespace
}  // namespace test
}  // namespace loom
