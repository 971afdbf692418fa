// Linear algebra beyond the op-case table (common/op_cases.cc, run by test/ops, holds matmul,
// add_bias and bias_grad): a linear layer's gradient, the skinny GEMM kernels straight, and the
// errors.
#include <cmath>
#include <cstring>
#include <random>

#include "common/harness.h"
#include "device/cpu/parallel.h"
#include "device/cpu/skinny_gemm.h"

namespace loom {
namespace test {
namespace {

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
