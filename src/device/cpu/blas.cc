// Note [One thread pool]
// OpenBLAS and oneDNN run single-threaded (oneDNN on one OpenMP thread: dnnl_common.h); loom
// splits large GEMMs across its own pool (ParallelFor) by blocks of columns of C, or of rows
// when C has more rows than columns. Two pools on the same cores fight: OpenBLAS's workers spin
// for a while after each call and take the cores from loom's pool, which made CNN steps bimodal
// (17 ms or 40 ms) on two cores. With one pool nothing spins, thread counts stay at loom's
// (the core count by default), and the graph's parallel replay (whose workers run kernels
// serially) needs no special case.
#include "device/cpu/blas.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/debug.h"
#include "core/error.h"
#include "device/cpu/dnnl_gemm.h"
#include "device/cpu/parallel.h"
#include "device/cpu/skinny_gemm.h"
#include "device/kernel_report.h"

namespace loom {

namespace {
// Below this many multiply-adds a GEMM runs on the calling thread.
constexpr int64_t kSplitFlops = int64_t(1) << 18;

// by_rows: blocks of rows whenever there are enough (oneDNN's matmul primitive: a block of
// columns leaves C with rows longer than the block, which its fast kernels do not take).
template <typename T, typename TC = T, typename Fn>
void SplitGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
               TC* c, int64_t ldc, Fn gemm, bool by_rows = false) {
  const int threads = NumThreads();
  if (threads <= 1 || m * n * k < kSplitFlops) return gemm(m, n, a, b, c);
  // Each block packs its share of one operand and all of the other: split the larger side.
  if ((m > n || by_rows) && m >= 4 * threads) {  // blocks of rows of C: rows of op(A)
    int64_t step = (m + threads - 1) / threads;
    step = (step + 7) / 8 * 8;
    ParallelFor((m + step - 1) / step, 1, [&](int64_t s, int64_t e) {
      for (int64_t blk = s; blk < e; ++blk) {
        int64_t m0 = blk * step, m1 = std::min(m, m0 + step);
        gemm(m1 - m0, n, ta ? a + m0 : a + m0 * lda, b, c + m0 * ldc);
      }
    });
    return;
  }
  // blocks of columns of C: columns of op(B)
  int64_t step = (n + threads - 1) / threads;
  step = (step + 15) / 16 * 16;
  ParallelFor((n + step - 1) / step, 1, [&](int64_t s, int64_t e) {
    for (int64_t blk = s; blk < e; ++blk) {
      int64_t n0 = blk * step, n1 = std::min(n, n0 + step);
      gemm(m, n1 - n0, a, tb ? b + n0 * ldb : b + n0, c + n0);
    }
  });
}

// C = beta C for an empty sum (K == 0), which not every library accepts.
template <typename T>
void ScaleOnly(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}

const char* IsaLevelName(int level) {
  switch (level) {
    case 0: return "SSE";
    case 1: return "AVX";
    case 2: return "AVX2";
    case 3: return "AVX-512";
    default: return "unknown";
  }
}

// What the skinny kernels were compiled for (-march=native: this machine's vector width).
constexpr const char* kSkinnyIsa =
#ifdef __AVX512F__
    "AVX-512";
#elif defined(__AVX2__)
    "AVX2";
#else
    "generic vectors";
#endif

std::string OpenBlasName() { return std::string(openblas_get_config()); }

// Once per process: warn when OpenBLAS runs kernels for an older instruction set than the CPU's
// (Note [Which GEMM kernel]).
void CheckOpenBlasCore() {
  const char* core = openblas_get_corename();
  const int blas = OpenBlasCoreIsaLevel(core), cpu = CpuIsaLevel();
  if (blas < 0 || blas >= cpu) return;
  std::string what = std::string("OpenBLAS chose its '") + core + "' kernels (" + IsaLevelName(blas) +
                     ") but this CPU supports " + IsaLevelName(cpu) + "; ";
  if (cpu::HaveDnnlGemm() && GetCpuGemmImpl() == CpuGemmImpl::kAuto)
    what += "float32 GEMM runs on oneDNN (ISA " + cpu::DnnlIsa() +
            ") instead, float64 GEMM stays on OpenBLAS";
  else
    what += "GEMM runs on those kernels (oneDNN's GEMM is not in use)";
  what += " (OPENBLAS_CORETYPE overrides OpenBLAS's choice, e.g. SKYLAKEX or HASWELL)";
  WarnOnce("openblas core", what);
}

void CheckOpenBlasCoreOnce() {
  static const bool done = (CheckOpenBlasCore(), true);
  (void)done;
}

void ReportSgemmOnce() {
  static const bool reported = (ReportKernel("gemm f32", "oneDNN sgemm (ISA " + cpu::DnnlIsa() + ")"), true);
  (void)reported;
}

std::atomic<int> g_impl{-1};  // -1: not read from the environment yet
}  // namespace

void SetCpuGemmImpl(CpuGemmImpl impl) { g_impl = int(impl); }
CpuGemmImpl GetCpuGemmImpl() {
  int v = g_impl.load();
  if (v < 0) {
    const char* s = std::getenv("LOOM_CPU_GEMM");
    v = int(s && std::strcmp(s, "openblas") == 0 ? CpuGemmImpl::kOpenBlas : CpuGemmImpl::kAuto);
    g_impl = v;
  }
  return CpuGemmImpl(v);
}

GemmKernel ChooseSgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  if (!cpu::HaveDnnlGemm() || GetCpuGemmImpl() == CpuGemmImpl::kOpenBlas)
    return IsSkinny(ta, tb, m, n, k) ? GemmKernel::kSkinny : GemmKernel::kOpenBlas;
  // Note [Which GEMM kernel]: the skinny kernels where they measured ahead of oneDNN, and for
  // every TN product they take (the weight gradient the graph computes into its update).
  const bool skinny_wins = (!ta && !tb && m <= 2) || (ta && !tb);
  if (skinny_wins && IsSkinny(ta, tb, m, n, k)) return GemmKernel::kSkinny;
  return !ta && tb && m >= 16 && k >= 32 ? GemmKernel::kDnnlMatmul : GemmKernel::kDnnl;
}

int OpenBlasCoreIsaLevel(const char* core) {
  std::string s(core ? core : "");
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  auto in = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (s == n) return true;
    return false;
  };
  if (in({"skylakex", "cooperlake", "sapphirerapids"})) return 3;
  if (in({"haswell", "zen", "excavator"})) return 2;
  if (in({"sandybridge", "bulldozer", "piledriver", "steamroller"})) return 1;
  if (in({"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "opteron", "opteron_sse3", "barcelona",
          "bobcat", "nano", "katmai", "coppermine", "northwood", "banias", "athlon", "generic"}))
    return 0;
  return -1;
}

int CpuIsaLevel() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return 3;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
  if (__builtin_cpu_supports("avx")) return 1;
  return 0;
#else
  return -1;
#endif
}

void BlasUseOneThread() { openblas_set_num_threads(1); }

void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return ScaleOnly(m, n, beta, c, ldc);
  // OpenBLAS's kernel choice concerns a float32 user only where float32 runs on it (issue 33:
  // no notice for every run that never touches it), or when asked (LOOM_DEBUG).
  if (DebugLevel() >= 1) CheckOpenBlasCoreOnce();
  switch (ChooseSgemm(ta, tb, m, n, k)) {
    case GemmKernel::kSkinny: {
      static const bool reported =
          (ReportKernel("gemm f32", std::string("loom skinny kernels (") + kSkinnyIsa + ", Note [Skinny GEMM])"), true);
      (void)reported;
      LOOM_ASSERT(SkinnyGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), "Gemm: skinny kernel refused ",
                  m, "x", n, "x", k);
      return;
    }
    case GemmKernel::kDnnl:
      ReportSgemmOnce();
      return SplitGemm<float>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                              [&](int64_t mm, int64_t nn, const float* aa, const float* bb, float* cc) {
                                cpu::DnnlSgemm(ta, tb, mm, nn, k, alpha, aa, lda, bb, ldb, beta, cc, ldc);
                              });
    case GemmKernel::kDnnlMatmul:  // the primitive reports itself when built
      return SplitGemm<float>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                              [&](int64_t mm, int64_t nn, const float* aa, const float* bb, float* cc) {
                                if (cpu::DnnlMatmul(ta, tb, mm, nn, k, alpha, aa, lda, bb, ldb, beta, cc, ldc)) return;
                                ReportSgemmOnce();  // alpha or beta the primitive does not take
                                cpu::DnnlSgemm(ta, tb, mm, nn, k, alpha, aa, lda, bb, ldb, beta, cc, ldc);
                              },
                              /*by_rows=*/true);
    case GemmKernel::kOpenBlas: {
      CheckOpenBlasCoreOnce();
      static const bool reported =
          (ReportKernel("gemm f32", "OpenBLAS core " + std::string(openblas_get_corename()) + " (" + OpenBlasName() + ")"),
           true);
      (void)reported;
      return SplitGemm<float>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                              [&](int64_t mm, int64_t nn, const float* aa, const float* bb, float* cc) {
                                cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                                            tb ? CblasTrans : CblasNoTrans, int(mm), int(nn), int(k), alpha, aa,
                                            int(lda), bb, int(ldb), beta, cc, int(ldc));
                              });
    }
  }
}

bool GemmHalf(bool bf16, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
              int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0 || k <= 0) return false;
  // Every block's primitive first (a block that fell back after others had written C would
  // leave it half summed when beta is 1); then the blocks, on the pool.
  std::atomic<bool> takes{true};
  SplitGemm<uint16_t, float>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                             [&](int64_t mm, int64_t nn, const uint16_t*, const uint16_t*, float*) {
                               if (!cpu::DnnlMatmulHalfTakes(bf16, ta, tb, mm, nn, k, alpha, lda, ldb, beta, ldc))
                                 takes = false;
                             },
                             /*by_rows=*/true);
  if (!takes) return false;
  SplitGemm<uint16_t, float>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                             [&](int64_t mm, int64_t nn, const uint16_t* aa, const uint16_t* bb, float* cc) {
                               const bool ran =
                                   bf16 ? cpu::DnnlMatmulBf16(ta, tb, mm, nn, k, alpha, aa, lda, bb, ldb, beta, cc, ldc)
                                        : cpu::DnnlMatmulF16(ta, tb, mm, nn, k, alpha, aa, lda, bb, ldb, beta, cc, ldc);
                               LOOM_ASSERT(ran, "GemmHalf: a block oneDNN took a moment ago was refused");
                             },
                             /*by_rows=*/true);
  return true;
}

void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return ScaleOnly(m, n, beta, c, ldc);
  CheckOpenBlasCoreOnce();
  static const bool reported =
      (ReportKernel("gemm f64", "OpenBLAS core " + std::string(openblas_get_corename()) + " (" + OpenBlasName() + ")"),
       true);
  (void)reported;
  SplitGemm<double>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                    [&](int64_t mm, int64_t nn, const double* aa, const double* bb, double* cc) {
                      cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                                  int(mm), int(nn), int(k), alpha, aa, int(lda), bb, int(ldb), beta, cc, int(ldc));
                    });
}

}  // namespace loom
