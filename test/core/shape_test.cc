// Shape ops: views (reshape, transpose, permute, flatten) share blocks and index correctly;
// copies (concat, slice, broadcast_to) against host index arithmetic; gradients by finite
// differences; the errors.
#include "common/harness.h"

namespace loom {
namespace test {
namespace {

// Row-major multi-index of flat position i in `shape`.
std::vector<int64_t> Unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}
int64_t Ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + idx[d];
  return i;
}

// Host reference of a permutation: out[idx] = in[idx mapped through perm].
std::vector<double> PermuteRef(const std::vector<double>& v, const Shape& shape, const std::vector<int64_t>& perm) {
  Shape os(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) os[i] = shape[size_t(perm[i])];
  std::vector<double> out(v.size());
  for (int64_t k = 0; k < int64_t(v.size()); ++k) {
    std::vector<int64_t> oi = Unravel(k, os), ii(shape.size());
    for (size_t d = 0; d < perm.size(); ++d) ii[size_t(perm[d])] = oi[d];
    out[size_t(k)] = v[size_t(Ravel(ii, shape))];
  }
  return out;
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

TEST(Shape, Concat) {
  Shape s0{2, 3, 2}, s1{2, 1, 2}, s2{2, 4, 2};
  Tensor a = RandomTensor(s0, DType::kFloat64, 5), b = RandomTensor(s1, DType::kFloat64, 6),
         c = RandomTensor(s2, DType::kFloat64, 7);
  std::vector<std::vector<double>> vs{a.ToVector<double>(), b.ToVector<double>(), c.ToVector<double>()};
  std::vector<Shape> ss{s0, s1, s2};
  Shape os{2, 8, 2};
  std::vector<double> want(size_t(NumElements(os)));
  for (int64_t k = 0; k < NumElements(os); ++k) {
    std::vector<int64_t> idx = Unravel(k, os);
    size_t which = 0;
    while (idx[1] >= ss[which][1]) idx[1] -= ss[which++][1];
    want[size_t(k)] = vs[which][size_t(Ravel(idx, ss[which]))];
  }
  auto f = [](const std::vector<Tensor>& in) { return ops::Concat(in, 1); };
  CheckForward32(f, {a, b, c}, want, 1e-6, 1e-7, "concat axis 1");
  GradCheck(f, {a, b, c}, 1e-6, 1e-6, "concat axis 1");
  auto g = [](const std::vector<Tensor>& in) { return ops::Concat(in, -1); };
  Tensor d = RandomTensor({2, 3, 1}, DType::kFloat64, 8);
  EXPECT_EQ(g({a, d}).shape(), (Shape{2, 3, 3}));
  GradCheck(g, {a, d}, 1e-6, 1e-6, "concat axis -1");
  GradCheck([](const std::vector<Tensor>& in) { return ops::Concat({in[0], in[0]}, 0); }, {a}, 1e-6, 1e-6,
            "concat of one tensor twice");

  // Integer dtypes, one input, an empty input, and a strided input.
  Tensor i0 = ops::FromVector<int32_t>({1, 2, 3, 4}, {2, 2}, Cpu());
  Tensor i1 = ops::FromVector<int32_t>({5, 6}, {2, 1}, Cpu());
  EXPECT_EQ(ops::Concat({i0, i1}, 1).ToVector<int32_t>(), (std::vector<int32_t>{1, 2, 5, 3, 4, 6}));
  EXPECT_EQ(ops::Concat({i0, i1.Reshape({1, 2})}, 0).ToVector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ops::Concat({i0}, 0).ToVector<int32_t>(), i0.ToVector<int32_t>());
  Tensor e = ops::Zeros({2, 0}, DType::kInt32, Cpu());
  EXPECT_EQ(ops::Concat({e, i0, e}, 1).ToVector<int32_t>(), i0.ToVector<int32_t>());
  EXPECT_EQ(ops::Concat({i0.Transpose(), i1}, 1).ToVector<int32_t>(), (std::vector<int32_t>{1, 3, 5, 2, 4, 6}));
}

TEST(Shape, Slice) {
  Shape s{3, 5, 2};
  Tensor x = RandomTensor(s, DType::kFloat64, 9);
  std::vector<double> v = x.ToVector<double>();
  auto ref = [&](int64_t axis, int64_t start, int64_t end) {
    Shape os = s;
    os[size_t(axis)] = end - start;
    std::vector<double> out(size_t(NumElements(os)));
    for (int64_t k = 0; k < NumElements(os); ++k) {
      std::vector<int64_t> idx = Unravel(k, os);
      idx[size_t(axis)] += start;
      out[size_t(k)] = v[size_t(Ravel(idx, s))];
    }
    return out;
  };
  struct Case { int64_t axis, start, end, nstart, nend; };
  for (Case c : {Case{1, 1, 4, 1, 4}, Case{0, 0, 3, 0, 3}, Case{2, 1, 2, 1, 2}, Case{1, -3, -1, 2, 4},
                 Case{-2, 0, -1, 0, 4}, Case{1, 2, 2, 2, 2}}) {
    std::string what = "slice axis " + std::to_string(c.axis) + " [" + std::to_string(c.start) + ", " +
                       std::to_string(c.end) + ")";
    auto f = [c](const std::vector<Tensor>& in) { return ops::Slice(in[0], c.axis, c.start, c.end); };
    int64_t ax = c.axis < 0 ? c.axis + 3 : c.axis;
    Tensor y = f({x});
    EXPECT_TRUE(y.is_contiguous());
    EXPECT_NE(y.block(), x.block());
    CheckForward32(f, {x}, ref(ax, c.nstart, c.nend), 1e-6, 1e-7, what);
    if (c.nend > c.nstart) GradCheck(f, {x}, 1e-6, 1e-6, what);
  }
  // Of a strided view, and of integers.
  Tensor t = x.Transpose(0, 1);  // (5, 3, 2)
  EXPECT_EQ(ops::Slice(t, 0, 1, 3).ToVector<double>(), PermuteRef(ref(1, 1, 3), {3, 2, 2}, {1, 0, 2}));
  Tensor i = ops::FromVector<int64_t>({0, 1, 2, 3, 4, 5}, {2, 3}, Cpu());
  EXPECT_EQ(ops::Slice(i, 1, 1, 3).ToVector<int64_t>(), (std::vector<int64_t>{1, 2, 4, 5}));
}

TEST(Shape, SliceGradWritesIntoZeros) {
  Tensor x = RandomTensor({2, 4}, DType::kFloat64, 10).set_requires_grad(true);
  Tensor y = ops::Slice(x, 1, 1, 3);
  Tensor dy = ops::FromVector<double>({1, 2, 3, 4}, {2, 2}, Cpu());
  std::vector<double> got;
  Backward(y, [&](const Tensor&, const Tensor& g) { got = g.ToVector<double>(); }, dy);
  EXPECT_EQ(got, (std::vector<double>{0, 1, 2, 0, 0, 3, 4, 0}));
  // Second order: slice_grad's own backward is the slice.
  GradCheck([](const std::vector<Tensor>& in) {
    return Call1("slice_grad", {in[0]}, Attrs{{"axis", int64_t(1)}, {"start", int64_t(1)}, {"end", int64_t(3)},
                                              {"shape", Shape{2, 4}}});
  }, {RandomTensor({2, 2}, DType::kFloat64, 11)}, 1e-6, 1e-6, "slice_grad");
}

TEST(Shape, BroadcastTo) {
  struct Case { Shape in, out; };
  for (const Case& c : {Case{{3}, {2, 3}}, Case{{2, 1}, {2, 4}}, Case{{1, 3, 1}, {2, 3, 2}}, Case{{}, {2, 2}},
                        Case{{2, 1, 3}, {4, 2, 5, 3}}, Case{{2, 3}, {2, 3}}}) {
    Tensor x = RandomTensor(c.in, DType::kFloat64, 12);
    std::vector<double> v = x.ToVector<double>();
    std::vector<double> want(size_t(NumElements(c.out)));
    size_t off = c.out.size() - c.in.size();
    for (int64_t k = 0; k < NumElements(c.out); ++k) {
      std::vector<int64_t> oi = Unravel(k, c.out), ii(c.in.size());
      for (size_t d = 0; d < c.in.size(); ++d) ii[d] = c.in[d] == 1 ? 0 : oi[d + off];
      want[size_t(k)] = v[size_t(Ravel(ii, c.in))];
    }
    std::string what = "broadcast_to " + ToString(c.in) + " -> " + ToString(c.out);
    auto f = [c](const std::vector<Tensor>& in) { return ops::BroadcastTo(in[0], c.out); };
    CheckForward32(f, {x}, want, 1e-6, 1e-7, what);
    GradCheck(f, {x}, 1e-6, 1e-6, what);
  }
  Tensor u = ops::FromVector<uint8_t>({7, 9}, {2, 1}, Cpu());
  EXPECT_EQ(ops::BroadcastTo(u, {2, 3}).ToVector<uint8_t>(), (std::vector<uint8_t>{7, 7, 7, 9, 9, 9}));
  Tensor h = ops::Cast(ops::FromVector<float>({1.5f, -2}, {2}, Cpu()), DType::kFloat16);
  EXPECT_EQ(ToDoubles(ops::BroadcastTo(h, {2, 2})), (std::vector<double>{1.5, -2, 1.5, -2}));
}

TEST(Shape, ViewGradients) {
  Tensor x = RandomTensor({2, 3, 4}, DType::kFloat64, 13);
  GradCheck([](const std::vector<Tensor>& in) { return ops::Reshape(in[0], {4, -1}); }, {x}, 1e-6, 1e-6, "reshape");
  GradCheck([](const std::vector<Tensor>& in) { return in[0].Reshape({6, 4}); }, {x}, 1e-6, 1e-6, "Tensor::Reshape");
  GradCheck([](const std::vector<Tensor>& in) { return ops::Transpose(in[0], 0, 2); }, {x}, 1e-6, 1e-6, "transpose");
  GradCheck([](const std::vector<Tensor>& in) { return ops::Permute(in[0], {1, 2, 0}); }, {x}, 1e-6, 1e-6,
            "permute");
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
