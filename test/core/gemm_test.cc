// loom's GEMM entry point (device/cpu/blas.h) on every path it routes to (Note [Which GEMM
// kernel]): oneDNN, the skinny kernels, OpenBLAS, against a float64 reference computed here.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/harness.h"
#include "core/half.h"
#include "device/cpu/blas.h"
#include "device/cpu/dnnl_gemm.h"
#include "device/cpu/parallel.h"
#include "device/kernel_report.h"

namespace loom {
namespace test {
namespace {

class GemmImplScope {
 public:
  explicit GemmImplScope(CpuGemmImpl impl) : prev_(GetCpuGemmImpl()) { SetCpuGemmImpl(impl); }
  ~GemmImplScope() { SetCpuGemmImpl(prev_); }

 private:
  CpuGemmImpl prev_;
};

template <typename T>
struct GemmCase {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  std::vector<T> a, b, c0;
};

template <typename T>
GemmCase<T> MakeCase(bool ta, bool tb, int64_t m, int64_t n, int64_t k, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  GemmCase<T> g{ta, tb, m, n, k, 0, 0, 0, {}, {}, {}};
  // Leading dimensions padded by a few elements: rows of the operands do not touch.
  g.lda = (ta ? m : k) + 3;
  g.ldb = (tb ? k : n) + 5;
  g.ldc = n + 2;
  auto fill = [&](int64_t count) {
    std::vector<T> v(size_t(std::max<int64_t>(count, 1)));
    for (T& x : v) x = T(u(rng));
    return v;
  };
  g.a = fill((ta ? k : m) * g.lda);
  g.b = fill((tb ? n : k) * g.ldb);
  g.c0 = fill(m * g.ldc);
  return g;
}

// Runs `product` (C = alpha op(A) op(B) + beta C into the pointer it is given) on the case and
// checks every element of C against float64 sums, and that the padding between C's rows is
// untouched. beta == 0 starts from NaN in C (it must be ignored).
template <typename T, typename Product>
void CheckProduct(const GemmCase<T>& g, T alpha, T beta, const std::string& label, Product product) {
  std::vector<T> c = g.c0;
  if (beta == T(0)) c.assign(c.size(), T(NAN));
  const std::vector<T> before = c;
  product(c.data());
  const std::string what = label + " ta=" + std::to_string(g.ta) + " tb=" + std::to_string(g.tb) +
                           " m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                           " alpha=" + std::to_string(double(alpha)) + " beta=" + std::to_string(double(beta));
  const double tol = (std::is_same<T, float>::value ? 2e-6 : 1e-13) * (4 + double(g.k));
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < g.k; ++q)
        s += double(g.ta ? g.a[size_t(q * g.lda + i)] : g.a[size_t(i * g.lda + q)]) *
             double(g.tb ? g.b[size_t(j * g.ldb + q)] : g.b[size_t(q * g.ldb + j)]);
      const double want = double(alpha) * s + (beta == T(0) ? 0.0 : double(beta) * double(g.c0[size_t(i * g.ldc + j)]));
      ASSERT_NEAR(double(c[size_t(i * g.ldc + j)]), want, tol) << what << " at (" << i << ", " << j << ")";
    }
    for (int64_t j = g.n; j < g.ldc; ++j) {
      const T got = c[size_t(i * g.ldc + j)], was = before[size_t(i * g.ldc + j)];
      ASSERT_TRUE(std::isnan(double(was)) ? std::isnan(double(got)) : got == was) << what << ": padding changed";
    }
  }
}
template <typename T>
void CheckGemm(const GemmCase<T>& g, T alpha, T beta, const std::string& label) {
  CheckProduct(g, alpha, beta, label, [&](T* c) {
    Gemm(g.ta, g.tb, g.m, g.n, g.k, alpha, g.a.data(), g.lda, g.b.data(), g.ldb, beta, c, g.ldc);
  });
}

struct Layout {
  bool ta, tb;
};
const Layout kLayouts[] = {{false, false}, {false, true}, {true, false}, {true, true}};

// Shapes around every switch of Note [Which GEMM kernel] (M = 2, 3 for NN; the skinny kernels'
// own limits at 16 rows or K = 16 and 16 / 32 columns), dimensions of 1, odd sizes, and
// products large enough that loom's pool splits them by rows or by columns.
template <typename T>
int CheckAllShapes(const std::string& label) {
  std::mt19937 rng(1234);
  int checked = 0;
  for (const Layout& l : kLayouts)
    for (int64_t m : {1, 2, 3, 4, 16, 17, 45})
      for (int64_t n : {1, 7, 16, 33, 130})
        for (int64_t k : {1, 2, 3, 16, 17, 31, 32, 70}) {
          GemmCase<T> g = MakeCase<T>(l.ta, l.tb, m, n, k, rng);
          CheckGemm<T>(g, T(1), T(0), label);
          CheckGemm<T>(g, T(1), T(1), label);  // what oneDNN's matmul primitive takes
          CheckGemm<T>(g, T(-0.5), T(1), label);
          CheckGemm<T>(g, T(1.5), T(0.25), label);
          if (::testing::Test::HasFatalFailure()) return checked;
          ++checked;
        }
  // Split across the pool: blocks of rows (M > N) and of columns.
  for (const Layout& l : kLayouts)
    for (auto mnk : {std::vector<int64_t>{300, 40, 90}, {37, 300, 90}, {2, 1000, 300}, {300, 500, 2}}) {
      GemmCase<T> g = MakeCase<T>(l.ta, l.tb, mnk[0], mnk[1], mnk[2], rng);
      CheckGemm<T>(g, T(1), T(0), label);
      CheckGemm<T>(g, T(1), T(1), label);
      CheckGemm<T>(g, T(0.75), T(-1), label);
      if (::testing::Test::HasFatalFailure()) return checked;
      ++checked;
    }
  return checked;
}

TEST(Gemm, Float32EveryPathAgainstFloat64) {
  const int threads = NumThreads();
  for (int t : {1, 2}) {
    SetNumThreads(t);
    {
      GemmImplScope auto_impl(CpuGemmImpl::kAuto);
      EXPECT_EQ(CheckAllShapes<float>("auto, " + std::to_string(t) + " threads"), 4 * 7 * 5 * 8 + 16);
    }
    {
      GemmImplScope openblas(CpuGemmImpl::kOpenBlas);
      EXPECT_EQ(CheckAllShapes<float>("openblas, " + std::to_string(t) + " threads"), 4 * 7 * 5 * 8 + 16);
    }
  }
  SetNumThreads(threads);
}

TEST(Gemm, Float64AgainstFloat64Loops) { EXPECT_EQ(CheckAllShapes<double>("float64"), 4 * 7 * 5 * 8 + 16); }

TEST(Gemm, EmptySumScalesC) {
  std::vector<float> a(4, 1), b(4, 1), c{1, 2, 3, 4};
  Gemm(false, false, 2, 2, 0, 1.0f, a.data(), 1, b.data(), 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  std::vector<double> cd(4, NAN);
  Gemm(false, false, 2, 2, 0, 1.0, nullptr, 1, nullptr, 2, 0.0, cd.data(), 2);
  EXPECT_EQ(cd, std::vector<double>(4, 0.0));
}

// bfloat16 operands, a float32 C (GemmHalf), on one thread and split across two, in every
// layout, on shapes the pool splits by rows and by columns with a remainder block: against the
// float64 sums of the same bfloat16 values (their products are exact in float32), C's padding
// untouched, beta 1 accumulating. What oneDNN does not take is refused before anything is
// written (alpha other than 1).
TEST(Gemm, Bfloat16OperandsOnThePoolAgainstFloat64) {
  if (!cpu::HaveDnnlGemm()) GTEST_SKIP() << "loom built without oneDNN: 16-bit operands are widened by the caller";
  const int threads = NumThreads();
  std::mt19937 rng(77);
  for (int t : {1, 2}) {
    SetNumThreads(t);
    for (const Layout& l : kLayouts)
      for (auto mnk : {std::vector<int64_t>{301, 40, 90}, {37, 300, 90}, {64, 64, 64}, {5, 3, 7}}) {
        GemmCase<float> g = MakeCase<float>(l.ta, l.tb, mnk[0], mnk[1], mnk[2], rng);
        std::vector<uint16_t> a(g.a.size()), b(g.b.size());
        for (size_t i = 0; i < a.size(); ++i) a[i] = FloatToBFloat16(g.a[i]), g.a[i] = BFloat16ToFloat(a[i]);
        for (size_t i = 0; i < b.size(); ++i) b[i] = FloatToBFloat16(g.b[i]), g.b[i] = BFloat16ToFloat(b[i]);
        for (float beta : {0.0f, 1.0f})
          CheckProduct<float>(g, 1.0f, beta, std::to_string(t) + " threads, bf16", [&](float* c) {
            EXPECT_TRUE(GemmHalf(true, g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data(), g.lda, b.data(), g.ldb, beta, c, g.ldc));
          });
        if (::testing::Test::HasFatalFailure()) break;
        std::vector<float> c = g.c0;
        EXPECT_FALSE(GemmHalf(true, g.ta, g.tb, g.m, g.n, g.k, 2.0f, a.data(), g.lda, b.data(), g.ldb, 0.0f, c.data(),
                              g.ldc));
        EXPECT_EQ(c, g.c0) << "a refused product wrote C";
      }
  }
  SetNumThreads(threads);
}

// The routing itself (Note [Which GEMM kernel]), so that the thresholds above are the ones used.
TEST(Gemm, ChoosesTheMeasuredKernel) {
  {
    GemmImplScope auto_impl(CpuGemmImpl::kAuto);
    const GemmKernel big = cpu::HaveDnnlGemm() ? GemmKernel::kDnnl : GemmKernel::kOpenBlas;
    const GemmKernel after_skinny = cpu::HaveDnnlGemm() ? GemmKernel::kDnnl : GemmKernel::kSkinny;
    EXPECT_EQ(ChooseSgemm(false, false, 2, 1024, 1024), GemmKernel::kSkinny);
    EXPECT_EQ(ChooseSgemm(false, false, 3, 1024, 1024), after_skinny);
    EXPECT_EQ(ChooseSgemm(true, false, 1024, 1024, 16), GemmKernel::kSkinny);
    EXPECT_EQ(ChooseSgemm(true, false, 1024, 1024, 17), big);
    EXPECT_EQ(ChooseSgemm(false, true, 1, 1024, 1024), after_skinny);
    EXPECT_EQ(ChooseSgemm(false, true, 15, 1024, 1024), after_skinny);
    EXPECT_EQ(ChooseSgemm(false, true, 16, 1024, 1024),
              cpu::HaveDnnlGemm() ? GemmKernel::kDnnlMatmul : GemmKernel::kSkinny);
    EXPECT_EQ(ChooseSgemm(false, true, 16, 1024, 31), big);
    EXPECT_EQ(ChooseSgemm(false, false, 64, 1024, 1024), big);
    EXPECT_EQ(ChooseSgemm(true, true, 1, 1024, 1024), big);
    EXPECT_EQ(ChooseSgemm(false, false, 2, 10, 1024), big);  // too few columns for the skinny kernels
  }
  {
    GemmImplScope openblas(CpuGemmImpl::kOpenBlas);
    EXPECT_EQ(ChooseSgemm(false, false, 16, 1024, 1024), GemmKernel::kSkinny);
    EXPECT_EQ(ChooseSgemm(false, false, 17, 1024, 1024), GemmKernel::kOpenBlas);
    EXPECT_EQ(ChooseSgemm(true, false, 1024, 1024, 16), GemmKernel::kSkinny);
  }
}

TEST(Gemm, ReportsTheKernelItRan) {
  GemmImplScope auto_impl(CpuGemmImpl::kAuto);
  std::vector<float> a(64 * 64, 1), b(64 * 64, 1), c(64 * 64);
  Gemm(false, false, 64, 64, 64, 1.0f, a.data(), 64, b.data(), 64, 0.0f, c.data(), 64);
  bool found = false;
  for (const auto& r : ReportedKernels())
    if (r.first == "gemm f32")
      found |= r.second.find(cpu::HaveDnnlGemm() ? "oneDNN sgemm (ISA " : "OpenBLAS core ") == 0;
  EXPECT_TRUE(found);
}

TEST(Gemm, OpenBlasCoreLevels) {
  EXPECT_EQ(OpenBlasCoreIsaLevel("Prescott"), 0);
  EXPECT_EQ(OpenBlasCoreIsaLevel("Sandybridge"), 1);
  EXPECT_EQ(OpenBlasCoreIsaLevel("Haswell"), 2);
  EXPECT_EQ(OpenBlasCoreIsaLevel("Zen"), 2);
  EXPECT_EQ(OpenBlasCoreIsaLevel("SkylakeX"), 3);
  EXPECT_EQ(OpenBlasCoreIsaLevel("COOPERLAKE"), 3);
  EXPECT_EQ(OpenBlasCoreIsaLevel("SomethingNew"), -1);
  EXPECT_GE(CpuIsaLevel(), 0);
}

}  // namespace
}  // namespace test
}  // namespace loom
