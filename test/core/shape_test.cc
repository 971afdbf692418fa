// Shape ops beyond the op-case table (common/op_cases.cc, run by test/ops, holds every shape
// op's values and gradients): views share blocks with the strides they should have, copies do
// not, the wrappers, gradients through chains of views, and the errors.
#include "common/harness.h"
#include "common/op_refs.h"

namespace loom {
namespace test {
namespace {

// The values of v (of `shape`) permuted: the op-case table's reference of permute.
std::vector<double> PermuteRef(const std::vector<double>& v, const Shape& shape, const std::vector<int64_t>& perm) {
  const std::vector<HostTensor> in{HostTensor(shape, v)};
  const Attrs attrs{{"perm", perm}};
  return ref::Permute(RefArgs{in, attrs})[0].v;
}

TEST(Shape, ReshapeIsAViewOnContiguousInput) {
  Tensor x = RandomTensor({2, 3, 4}, DType::kFloat64, 1);
  Tensor y = ops::Reshape(x, {4, -1});
  EXPECT_EQ(y.shape(), (Shape{4, 6}));
  EXPECT_EQ(y.block(), x.block());
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_EQ(y.ToVector<double>(), x.ToVector<double>());
  Tensor z = x.Reshape({24});
  EXPECT_EQ(z.block(), x.block());
  EXPECT_EQ(ops::Reshape(x, {-1, 2, 2}).shape(), (Shape{6, 2, 2}));
}

TEST(Shape, ReshapeScalarAndEmpty) {
  Tensor s = ops::Full({}, 2.5, DType::kFloat32, Cpu());
  Tensor r = ops::Reshape(s, {1, 1});
  EXPECT_EQ(r.shape(), (Shape{1, 1}));
  EXPECT_EQ(ops::Reshape(r, {}).Item(), 2.5);
  Tensor e = ops::Zeros({0, 3}, DType::kFloat32, Cpu());
  EXPECT_EQ(ops::Reshape(e, {3, 0}).shape(), (Shape{3, 0}));
}

TEST(Shape, ReshapeOfStridedInputCopies) {
  Tensor x = RandomTensor({3, 4}, DType::kFloat64, 2);
  std::vector<double> want = PermuteRef(x.ToVector<double>(), {3, 4}, {1, 0});
  Tensor t = x.Transpose();
  ASSERT_FALSE(t.is_contiguous());
  Tensor a = ops::Reshape(t, {12});  // copy op + view
  Tensor b = t.Reshape({2, 6});      // Tensor::Reshape: the view copies privately
  EXPECT_NE(a.block(), x.block());
  EXPECT_NE(b.block(), x.block());
  EXPECT_EQ(a.ToVector<double>(), want);
  EXPECT_EQ(b.ToVector<double>(), want);
}

TEST(Shape, TransposeAndPermuteAreStridedViews) {
  Shape s{2, 3, 4};
  Tensor x = RandomTensor(s, DType::kFloat64, 3);
  std::vector<double> v = x.ToVector<double>();
  Tensor t = ops::Transpose(x, 0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_EQ(t.block(), x.block());
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.ToVector<double>(), PermuteRef(v, s, {2, 1, 0}));
  EXPECT_EQ(x.Transpose().ToVector<double>(), PermuteRef(v, s, {0, 2, 1}));  // default: last two axes

  Tensor p = ops::Permute(x, {1, 2, 0});
  EXPECT_EQ(p.shape(), (Shape{3, 4, 2}));
  EXPECT_EQ(p.strides(), (Shape{4, 1, 12}));
  EXPECT_EQ(p.block(), x.block());
  EXPECT_EQ(p.ToVector<double>(), PermuteRef(v, s, {1, 2, 0}));
  EXPECT_EQ(ops::Permute(x, {-1, 0, 1}).ToVector<double>(), PermuteRef(v, s, {2, 0, 1}));
  // A view of a view composes strides.
  EXPECT_EQ(ops::Transpose(p, 0, 1).ToVector<double>(), PermuteRef(v, s, {2, 1, 0}));
  // float32 through the same views.
  Tensor x32 = ops::Cast(x, DType::kFloat32);
  ExpectClose(ToDoubles(ops::Permute(x32, {1, 2, 0})), PermuteRef(v, s, {1, 2, 0}), 1e-6, 1e-7, "permute f32");
}

TEST(Shape, Flatten) {
  Tensor x = RandomTensor({2, 3, 4}, DType::kFloat32, 4);
  Tensor f = ops::Flatten(x);
  EXPECT_EQ(f.shape(), (Shape{2, 12}));
  EXPECT_EQ(f.block(), x.block());
  EXPECT_EQ(ops::Flatten(x, 0).shape(), (Shape{24}));
  EXPECT_EQ(ops::Flatten(x, 2).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(ops::Flatten(x, -2).shape(), (Shape{2, 12}));
  EXPECT_EQ(ops::Flatten(x.Transpose(0, 1)).ToVector<float>(), x.Transpose(0, 1).ToVector<float>());
}

// A tensor concatenated with itself: its gradient is the sum of both bands (the op's values and
// gradients for every dtype are the op-case table's).
TEST(Shape, ConcatOfOneTensorTwice) {
  GradCheck([](const std::vector<Tensor>& in) { return ops::Concat({in[0], in[0]}, 0); },
            {RandomTensor({2, 3, 2}, DType::kFloat64, 5)}, 1e-6, 1e-6, "concat of one tensor twice");
}

// ops::Slice hands the op the normalised range: negative positions count from the end.
TEST(Shape, SliceWrapperNormalisesTheRange) {
  Tensor x = RandomTensor({3, 5, 2}, DType::kFloat64, 9);
  EXPECT_EQ(ops::Slice(x, 1, -3, -1).ToVector<double>(), ops::Slice(x, 1, 2, 4).ToVector<double>());
  EXPECT_EQ(ops::Slice(x, -2, 0, -1).ToVector<double>(), ops::Slice(x, 1, 0, 4).ToVector<double>());
  Tensor y = ops::Slice(x, 1, 1, 4);
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_NE(y.block(), x.block());
}

// The views' own gradients are the op-case table's; here: through the wrappers, and chains
// through strided gradients.
TEST(Shape, ViewGradients) {
  Tensor x = RandomTensor({2, 3, 4}, DType::kFloat64, 13);
  GradCheck([](const std::vector<Tensor>& in) { return in[0].Reshape({6, 4}); }, {x}, 1e-6, 1e-6, "Tensor::Reshape");
  GradCheck([](const std::vector<Tensor>& in) { return ops::Flatten(in[0]); }, {x}, 1e-6, 1e-6, "flatten");
  // Chains through strided gradients: reshape of a transpose, the two Reshape paths, permute of
  // a permute, and a view used twice.
  GradCheck([](const std::vector<Tensor>& in) { return ops::Reshape(ops::Transpose(in[0], 0, 1), {3, 8}); }, {x},
            1e-6, 1e-6, "reshape(transpose)");
  GradCheck([](const std::vector<Tensor>& in) { return ops::Transpose(in[0], 0, 1).Reshape({3, 8}); }, {x}, 1e-6,
            1e-6, "Tensor::Reshape(transpose)");
  GradCheck([](const std::vector<Tensor>& in) { return ops::Permute(ops::Permute(in[0], {2, 0, 1}), {0, 2, 1}); },
            {x}, 1e-6, 1e-6, "permute(permute)");
  GradCheck([](const std::vector<Tensor>& in) {
    return ops::Mul(ops::Transpose(in[0], 0, 1), ops::Transpose(ops::Exp(in[0]), 0, 1));
  }, {x}, 1e-6, 1e-7, "transpose used twice");
}

TEST(Shape, Errors) {
  Tensor x = RandomTensor({2, 3}, DType::kFloat32, 14);
  LOOM_EXPECT_THROW_MSG(ops::Reshape(x, {4, 2}), ShapeError, "[reshape] cannot reshape (2, 3) into (4, 2)");
  LOOM_EXPECT_THROW_MSG(x.Reshape({4, 2}), ShapeError, "[reshape] cannot reshape (2, 3) into (4, 2)");
  LOOM_EXPECT_THROW_MSG(ops::Reshape(x, {4, -1}), ShapeError, "[reshape] cannot reshape (2, 3) into (4, -1)");
  LOOM_EXPECT_THROW_MSG(ops::Reshape(x, {-1, -1}), ShapeError, "[reshape] only one dimension may be -1");
  LOOM_EXPECT_THROW_MSG(ops::Reshape(x, {-2, -3}), ShapeError, "[reshape] negative dimension in (-2, -3)");
  LOOM_EXPECT_THROW_MSG(ops::Transpose(x, 0, 2), ValueError,
                        "[transpose] axis 2 is out of range for a tensor of rank 2");
  Tensor v = RandomTensor({3}, DType::kFloat32, 15);
  LOOM_EXPECT_THROW_MSG(ops::Transpose(v), ValueError, "[transpose] axis -2 is out of range for a tensor of rank 1");
  LOOM_EXPECT_THROW_MSG(ops::Permute(x, {0, 0}), ValueError,
                        "[permute] (0, 0) is not a permutation of the axes of (2, 3)");
  LOOM_EXPECT_THROW_MSG(ops::Permute(x, {0}), ValueError, "[permute] (0,) is not a permutation");
  LOOM_EXPECT_THROW_MSG(ops::Permute(x, {0, 2}), ValueError, "[permute] (0, 2) is not a permutation");
  Tensor y = RandomTensor({2, 4}, DType::kFloat32, 16);
  LOOM_EXPECT_THROW_MSG(ops::Concat({x, y}, 0), ShapeError,
                        "[concat] input 1 is (2, 4), input 0 is (2, 3): shapes must agree except on axis 0");
  LOOM_EXPECT_THROW_MSG(ops::Concat({x, v}, 1), ShapeError, "[concat] input 1 is (3,), input 0 is (2, 3)");
  LOOM_EXPECT_THROW_MSG(ops::Concat({x, ops::Cast(x, DType::kFloat64)}, 0), DTypeError,
                        "[concat] input 1 is float64, input 0 is float32");
  LOOM_EXPECT_THROW_MSG(ops::Concat({x, x}, 2), ValueError, "[concat] axis 2 is out of range for a tensor of rank 2");
  LOOM_EXPECT_THROW_MSG(ops::Concat({}, 0), ValueError, "[concat] needs at least one input");
  LOOM_EXPECT_THROW_MSG(ops::Slice(x, 1, 1, 5), ValueError,
                        "[slice] range [1, 5) is out of bounds for axis 1 of (2, 3) (size 3)");
  LOOM_EXPECT_THROW_MSG(ops::Slice(x, 1, -4, 2), ValueError, "[slice] range [-4, 2) is out of bounds");
  LOOM_EXPECT_THROW_MSG(ops::Slice(x, 1, 2, 1), ValueError, "[slice] range [2, 1) is out of bounds");
  LOOM_EXPECT_THROW_MSG(ops::Slice(x, 2, 0, 1), ValueError, "[slice] axis 2 is out of range for a tensor of rank 2");
  LOOM_EXPECT_THROW_MSG(ops::BroadcastTo(x, {3, 3}), ShapeError, "[broadcast_to] cannot broadcast (2, 3) to (3, 3)");
  LOOM_EXPECT_THROW_MSG(ops::BroadcastTo(x, {3}), ShapeError, "[broadcast_to] cannot broadcast (2, 3) to (3,)");
  LOOM_EXPECT_THROW_MSG(ops::Flatten(x, 3), ValueError, "[flatten] axis 3 is out of range");
}

}  // namespace
}  // namespace test
}  // namespace loom
