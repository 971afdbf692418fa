// matmul (broadcast batches, the internal transpose and batch-sum attributes), add_bias and
// bias_grad: forward against plain double loops, gradients by finite differences, the errors.
#include <cmath>
#include <cstring>
#include <random>

#include "common/harness.h"
#include "device/cpu/parallel.h"
#include "device/cpu/skinny_gemm.h"

namespace loom {
namespace test {
namespace {

// op(a) op(b) for every batch of the broadcast batch shape, by plain loops in double. With
// sum_batch the batches are added up into one (M, N) matrix.
std::vector<double> RefMatMul(const Tensor& ta, const Tensor& tb, bool transa, bool transb, bool sum_batch,
                              Shape* out_shape) {
  std::vector<double> a = ToDoubles(ta), b = ToDoubles(tb);
  const Shape& sa = ta.shape();
  const Shape& sb = tb.shape();
  size_t ra = sa.size(), rb = sb.size();
  int64_t m = transa ? sa[ra - 1] : sa[ra - 2], k = transa ? sa[ra - 2] : sa[ra - 1];
  int64_t n = transb ? sb[rb - 2] : sb[rb - 1];
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  size_t r = std::max(ba.size(), bb.size());
  Shape batch(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i + ba.size() < r ? 1 : ba[i + ba.size() - r];
    int64_t y = i + bb.size() < r ? 1 : bb[i + bb.size() - r];
    batch[i] = std::max(x, y);
  }
  int64_t nb = 1;
  for (int64_t d : batch) nb *= d;
  // Linear batch index of `which` (ba or bb) for the output batch index `i`.
  auto source = [&](int64_t i, const Shape& src) {
    int64_t idx = 0, stride = 1;
    for (size_t d = r; d-- > 0;) {
      int64_t coord = i % batch[d];
      i /= batch[d];
      if (d + src.size() >= r) {
        int64_t dim = src[d + src.size() - r];
        idx += (dim == 1 ? 0 : coord) * stride;
        stride *= dim;
      }
    }
    return idx;
  };
  std::vector<double> out(size_t((sum_batch ? 1 : nb) * m * n), 0.0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    const double* pa = a.data() + source(bi, ba) * m * k;
    const double* pb = b.data() + source(bi, bb) * k * n;
    double* pc = out.data() + (sum_batch ? 0 : bi * m * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q)
          s += (transa ? pa[q * m + i] : pa[i * k + q]) * (transb ? pb[j * k + q] : pb[q * n + j]);
        pc[i * n + j] += s;
      }
  }
  *out_shape = sum_batch ? Shape{} : batch;
  out_shape->push_back(m);
  out_shape->push_back(n);
  return out;
}

Tensor MatMulAttr(const Tensor& a, const Tensor& b, bool ta, bool tb, bool sum_batch = false) {
  return Call1("matmul", {a, b}, Attrs{{"ta", int64_t(ta)}, {"tb", int64_t(tb)}, {"sum_batch", int64_t(sum_batch)}});
}

void CheckMatMul(const Shape& sa, const Shape& sb, bool grad = true) {
  std::string what = "matmul " + ToString(sa) + " @ " + ToString(sb);
  Tensor a = RandomTensor(sa, DType::kFloat64, 21);
  Tensor b = RandomTensor(sb, DType::kFloat64, 22);
  Shape want_shape;
  std::vector<double> want = RefMatMul(a, b, false, false, false, &want_shape);
  EXPECT_EQ(ops::MatMul(a, b).shape(), want_shape) << what;
  auto f = [](const std::vector<Tensor>& in) { return ops::MatMul(in[0], in[1]); };
  CheckForward32(f, {a, b}, want, 1e-5, 1e-5, what);
  if (grad) GradCheck(f, {a, b}, 1e-6, 1e-6, what);
}

TEST(Linalg, MatMul2D) {
  CheckMatMul({3, 4}, {4, 5});
  CheckMatMul({1, 2}, {2, 1});
  CheckMatMul({4, 1}, {1, 3});  // K = 1: an outer product
}

TEST(Linalg, MatMulBatched) {
  CheckMatMul({2, 3, 4}, {2, 4, 5});
  CheckMatMul({2, 2, 3, 4}, {2, 2, 4, 2});
}

TEST(Linalg, MatMulBroadcastBatches) {
  CheckMatMul({2, 3, 4}, {4, 5});        // a weight shared by the batch (rows folded into one GEMM)
  CheckMatMul({2, 3, 3, 4}, {4, 2});     // two batch dimensions, 2-D rhs
  CheckMatMul({3, 4}, {2, 4, 5});        // 2-D lhs, batched rhs
  CheckMatMul({2, 1, 3, 4}, {3, 4, 5});  // both broadcast: output batch (2, 3)
  CheckMatMul({1, 3, 4}, {2, 4, 5});     // unit batch dimension
  CheckMatMul({2, 3, 4}, {1, 4, 5});
  CheckMatMul({3, 4}, {1, 4, 5});        // 2-D lhs against a unit batch
}

TEST(Linalg, MatMulTransposeAttributes) {
  // Stored operands: lhs (.., M, K) or (.., K, M); rhs (.., K, N) or (.., N, K). M=3, K=4, N=5.
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      std::string what = "matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb);
      Tensor a = RandomTensor(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, DType::kFloat64, 31);
      Tensor b = RandomTensor(tb ? Shape{5, 4} : Shape{4, 5}, DType::kFloat64, 32);
      Shape want_shape;
      std::vector<double> want = RefMatMul(a, b, ta, tb, false, &want_shape);
      EXPECT_EQ(want_shape, (Shape{2, 3, 5}));
      auto f = [&](const std::vector<Tensor>& in) { return MatMulAttr(in[0], in[1], ta, tb); };
      CheckForward32(f, {a, b}, want, 1e-5, 1e-5, what);
      GradCheck(f, {a, b}, 1e-6, 1e-6, what);
      // Batched rhs too, so that both gradients are summed over a broadcast batch.
      Tensor b3 = RandomTensor(tb ? Shape{3, 1, 5, 4} : Shape{3, 1, 4, 5}, DType::kFloat64, 33);
      std::vector<double> want3 = RefMatMul(a, b3, ta, tb, false, &want_shape);
      EXPECT_EQ(want_shape, (Shape{3, 2, 3, 5}));
      CheckForward32(f, {a, b3}, want3, 1e-5, 1e-5, what + " batched rhs");
      GradCheck(f, {a, b3}, 1e-6, 1e-6, what + " batched rhs");
    }
}

TEST(Linalg, MatMulSumBatch) {
  struct Case {
    Shape sa, sb;
    bool ta, tb;
  };
  // (1) both batched and A transposed: one GEMM over the folded batch; (2)-(4) the batch loop
  // accumulating into one output, with broadcasting.
  std::vector<Case> cases = {{{3, 4, 2}, {3, 4, 5}, true, false},
                             {{2, 3, 4}, {2, 5, 4}, false, true},
                             {{2, 3, 4}, {4, 5}, false, false},
                             {{2, 1, 4, 3}, {3, 4, 5}, true, false}};
  for (const Case& c : cases) {
    std::string what = "matmul sum_batch " + ToString(c.sa) + " @ " + ToString(c.sb);
    Tensor a = RandomTensor(c.sa, DType::kFloat64, 41);
    Tensor b = RandomTensor(c.sb, DType::kFloat64, 42);
    Shape want_shape;
    std::vector<double> want = RefMatMul(a, b, c.ta, c.tb, true, &want_shape);
    auto f = [&](const std::vector<Tensor>& in) { return MatMulAttr(in[0], in[1], c.ta, c.tb, true); };
    EXPECT_EQ(f({a, b}).shape(), want_shape) << what;
    CheckForward32(f, {a, b}, want, 1e-5, 1e-5, what);
  }
}

TEST(Linalg, MatMulLargeAndManySmall) {
  // Each GEMM above OpenBLAS's threading threshold: batches run one after another.
  Tensor a = RandomTensor({2, 70, 80}, DType::kFloat64, 51);
  Tensor b = RandomTensor({2, 80, 60}, DType::kFloat64, 52);
  Shape s;
  std::vector<double> want = RefMatMul(a, b, false, false, false, &s);
  auto f = [](const std::vector<Tensor>& in) { return ops::MatMul(in[0], in[1]); };
  CheckForward32(f, {a, b}, want, 1e-4, 1e-4, "large batched matmul");
  // Many tiny GEMMs: split across threads by batch.
  Tensor c = RandomTensor({300, 8, 8}, DType::kFloat64, 53);
  Tensor d = RandomTensor({300, 8, 8}, DType::kFloat64, 54);
  want = RefMatMul(c, d, false, false, false, &s);
  CheckForward32(f, {c, d}, want, 1e-5, 1e-5, "many small matmuls");
  // Broadcast lhs against many rhs batches (no row folding possible).
  Tensor e = RandomTensor({8, 8}, DType::kFloat64, 55);
  want = RefMatMul(e, d, false, false, false, &s);
  CheckForward32(f, {e, d}, want, 1e-5, 1e-5, "2-D lhs, many rhs batches");
}

TEST(Linalg, MatMulEmpty) {
  Tensor a = ops::Zeros({2, 0}, DType::kFloat64, Cpu());
  Tensor b = ops::Zeros({0, 3}, DType::kFloat64, Cpu());
  Tensor y = ops::MatMul(a, b);  // an empty sum: zeros
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  ExpectClose(ToDoubles(y), std::vector<double>(6, 0.0), 0, 0, "K = 0");
  Tensor c = RandomTensor({0, 4}, DType::kFloat32, 1);
  Tensor d = RandomTensor({4, 3}, DType::kFloat32, 2);
  EXPECT_EQ(ops::MatMul(c, d).shape(), (Shape{0, 3}));
}

TEST(Linalg, AddBias) {
  for (const Shape& sx : {Shape{2, 3, 4}, Shape{5}, Shape{6, 4}}) {
    std::string what = "add_bias " + ToString(sx);
    Tensor x = RandomTensor(sx, DType::kFloat64, 61);
    Tensor b = RandomTensor({sx.back()}, DType::kFloat64, 62);
    std::vector<double> xv = x.ToVector<double>(), bv = b.ToVector<double>(), want(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want[i] = xv[i] + bv[i % bv.size()];
    auto f = [](const std::vector<Tensor>& in) { return ops::AddBias(in[0], in[1]); };
    CheckForward32(f, {x, b}, want, 1e-6, 1e-6, what);
    GradCheck(f, {x, b}, 1e-6, 1e-6, what);
  }
}

TEST(Linalg, BiasGradSumsLeadingDimensions) {
  // Wide (split by columns across threads) and tall (one column block, many rows).
  for (const Shape& s : {Shape{3, 40000}, Shape{5000, 7}, Shape{2, 3, 5}}) {
    Tensor dy = RandomTensor(s, DType::kFloat64, 71);
    std::vector<double> v = dy.ToVector<double>();
    int64_t n = s.back();
    std::vector<double> want(size_t(n), 0.0);
    for (size_t i = 0; i < v.size(); ++i) want[i % size_t(n)] += v[i];
    auto f = [](const std::vector<Tensor>& in) { return Call1("bias_grad", {in[0]}); };
    CheckForward32(f, {dy}, want, 1e-4, 1e-3, "bias_grad " + ToString(s));
  }
}

TEST(Linalg, LinearLayerGradient) {
  // y = tanh(x W + b) on a (batch, time, features) input: every parameter against finite differences.
  Tensor x = RandomTensor({2, 3, 4}, DType::kFloat64, 81);
  Tensor w = RandomTensor({4, 5}, DType::kFloat64, 82);
  Tensor b = RandomTensor({5}, DType::kFloat64, 83);
  GradCheck([](const std::vector<Tensor>& in) { return ops::Tanh(ops::AddBias(ops::MatMul(in[0], in[1]), in[2])); },
            {x, w, b}, 1e-6, 1e-6, "linear layer");
}

// The skinny kernels (Note [Skinny GEMM]) straight, against double loops: every row count up to
// 16, column counts around the 16- and 32-wide panels, K around the 16-wide vectors, padded
// leading dimensions, alpha and beta (beta = 0 must ignore NaN in C), one thread and two (the
// result must be bitwise the same), and the shapes they leave to OpenBLAS.
TEST(Linalg, SkinnyGemmAgainstLoops) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  auto fill = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
  };
  const int threads = NumThreads();
  struct Layout {
    bool ta, tb;
  };
  int checked = 0;
  for (Layout l : {Layout{false, false}, Layout{false, true}, Layout{true, false}})
    for (int64_t small : {1, 2, 3, 4, 5, 7, 8, 9, 13, 16})
      for (int64_t n : {16, 17, 31, 32, 33, 50, 300})
        for (int64_t big : {32, 47, 100, 1000}) {
          // NN and NT: M = small, K = big; TN: K = small, M = big.
          const int64_t m = l.ta ? big : small, k = l.ta ? small : big;
          const int64_t lda = (l.ta ? m : k) + 3, ldb = (l.tb ? k : n) + 5, ldc = n + 2;
          std::vector<float> a = fill(size_t((l.ta ? k : m) * lda)), b = fill(size_t((l.tb ? n : k) * ldb));
          std::vector<float> c0 = fill(size_t(m * ldc));
          for (float alpha : {1.0f, -0.5f})
            for (float beta : {0.0f, 1.0f, 0.25f}) {
              std::vector<float> c = c0;
              if (beta == 0) c.assign(c.size(), std::nanf(""));
              std::vector<float> c1 = c;
              SetNumThreads(1);
              bool took1 = SkinnyGemm(l.ta, l.tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c1.data(), ldc);
              SetNumThreads(std::max(threads, 2));
              bool took = SkinnyGemm(l.ta, l.tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
              SetNumThreads(threads);
              std::string what = "skinny gemm ta=" + std::to_string(l.ta) + " tb=" + std::to_string(l.tb) +
                                 " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                 " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
              ASSERT_TRUE(took && took1) << what;
              for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < n; ++j) {
                  double s = 0;
                  for (int64_t q = 0; q < k; ++q)
                    s += double(l.ta ? a[q * lda + i] : a[i * lda + q]) *
                         double(l.tb ? b[j * ldb + q] : b[q * ldb + j]);
                  double want = alpha * s + (beta == 0 ? 0.0 : beta * double(c0[i * ldc + j]));
                  float got = c[i * ldc + j];
                  ASSERT_NEAR(got, want, 1e-5 * (1 + std::sqrt(double(k)))) << what << " at (" << i << ", " << j << ")";
                  ASSERT_EQ(std::memcmp(&got, &c1[i * ldc + j], sizeof got), 0)
                      << what << ": one thread and two differ at (" << i << ", " << j << ")";
                }
              for (int64_t i = 0; i < m; ++i)  // the padding between rows of C is untouched
                for (int64_t j = n; j < ldc; ++j)
                  ASSERT_TRUE(beta == 0 ? std::isnan(c[i * ldc + j]) : c[i * ldc + j] == c0[i * ldc + j]) << what;
              ++checked;
            }
        }
  EXPECT_EQ(checked, 3 * 10 * 7 * 4 * 6);
  // Not skinny: left to OpenBLAS, C untouched.
  std::vector<float> a(64 * 64, 1), b(64 * 64, 1), c(64 * 64, 3);
  EXPECT_FALSE(SkinnyGemm(false, false, 17, 64, 64, 1, a.data(), 64, b.data(), 64, 0, c.data(), 64));  // M > 16
  EXPECT_FALSE(SkinnyGemm(false, false, 8, 15, 64, 1, a.data(), 64, b.data(), 64, 0, c.data(), 64));   // N < 16
  EXPECT_FALSE(SkinnyGemm(false, true, 8, 64, 31, 1, a.data(), 64, b.data(), 64, 0, c.data(), 64));    // short dots
  EXPECT_FALSE(SkinnyGemm(true, false, 64, 64, 17, 1, a.data(), 64, b.data(), 64, 0, c.data(), 64));   // K > 16
  EXPECT_FALSE(SkinnyGemm(true, true, 4, 64, 4, 1, a.data(), 64, b.data(), 64, 0, c.data(), 64));  // both transposed
  EXPECT_EQ(c, std::vector<float>(64 * 64, 3));
}

// The matmul op on float32 over shapes of a small-batch linear layer: forward (NN), input
// gradient (NT) and weight gradient (TN) take the skinny kernels.
TEST(Linalg, MatMulSmallBatchLinear) {
  CheckMatMul({8, 100}, {100, 40});
  CheckMatMul({1, 64}, {64, 33});
  CheckMatMul({2, 5, 70}, {70, 48});  // rows of a batch folded: M = 10
}

TEST(Linalg, Errors) {
  Tensor a = RandomTensor({2, 3}, DType::kFloat32, 1);
  Tensor b = RandomTensor({4, 5}, DType::kFloat32, 2);
  LOOM_EXPECT_THROW_MSG(ops::MatMul(a, b), ShapeError,
                        "[matmul] lhs (2, 3) and rhs (4, 5): inner dimensions 3 and 4 differ");
  Tensor v = RandomTensor({3}, DType::kFloat32, 3);
  LOOM_EXPECT_THROW_MSG(ops::MatMul(v, b), ShapeError, "[matmul] lhs (3,) must have at least 2 dimensions");
  LOOM_EXPECT_THROW_MSG(ops::MatMul(a, v), ShapeError, "[matmul] rhs (3,) must have at least 2 dimensions");
  Tensor a3 = RandomTensor({2, 3, 4}, DType::kFloat32, 4);
  Tensor b3 = RandomTensor({5, 4, 6}, DType::kFloat32, 5);
  LOOM_EXPECT_THROW_MSG(ops::MatMul(a3, b3), ShapeError,
                        "[matmul] lhs (2, 3, 4) and rhs (5, 4, 6): batch dimensions (2,) and (5,) do not broadcast");
  Tensor b64 = RandomTensor({3, 5}, DType::kFloat64, 6);
  LOOM_EXPECT_THROW_MSG(ops::MatMul(a, b64), DTypeError, "[matmul] dtypes differ: float32 and float64");
  Tensor i = ops::Zeros({2, 3}, DType::kInt32, Cpu());
  LOOM_EXPECT_THROW_MSG(ops::MatMul(i, b), DTypeError, "[matmul] lhs must be float32 or float64, got int32");

  LOOM_EXPECT_THROW_MSG(ops::AddBias(a, RandomTensor({4}, DType::kFloat32, 7)), ShapeError,
                        "[add_bias] x (2, 3) and bias (4,): bias must have shape (3,)");
  LOOM_EXPECT_THROW_MSG(ops::AddBias(a, RandomTensor({1, 3}, DType::kFloat32, 8)), ShapeError,
                        "[add_bias] x (2, 3) and bias (1, 3): bias must have shape (3,)");
  LOOM_EXPECT_THROW_MSG(ops::AddBias(ops::Zeros({}, DType::kFloat32, Cpu()), v), ShapeError,
                        "[add_bias] x () must have at least 1 dimension");
  LOOM_EXPECT_THROW_MSG(ops::AddBias(a, RandomTensor({3}, DType::kFloat64, 9)), DTypeError,
                        "[add_bias] dtypes differ: float32 and float64");
}

}  // namespace
}  // namespace test
}  // namespace loom
