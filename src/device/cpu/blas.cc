// Note [One thread pool]
// OpenBLAS runs single-threaded; loom splits large GEMMs across its own pool (ParallelFor) by
// blocks of columns of C, or of rows when C has more rows than columns. Two pools on the same cores fight:
// OpenBLAS's workers spin for a while after each call and take the cores from loom's pool,
// which made CNN steps bimodal (17 ms or 40 ms) on two cores. With one pool nothing spins, and
// the graph's parallel replay (whose workers run kernels serially) needs no special case.
#include "device/cpu/blas.h"

#include <cblas.h>

#include <algorithm>

#include "device/cpu/parallel.h"
#include "device/cpu/skinny_gemm.h"

namespace loom {

namespace {
// Below this many multiply-adds a GEMM runs on the calling thread.
constexpr int64_t kSplitFlops = int64_t(1) << 18;

template <typename T, typename Fn>
void SplitGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
               T* c, int64_t ldc, Fn gemm) {
  const int threads = NumThreads();
  if (threads <= 1 || m * n * k < kSplitFlops) return gemm(m, n, a, b, c);
  // Each block packs its share of one operand and all of the other: split the larger side.
  if (m > n && m >= 4 * threads) {  // blocks of rows of C: rows of op(A)
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
}  // namespace

void BlasUseOneThread() { openblas_set_num_threads(1); }

void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (SkinnyGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;  // Note [Skinny GEMM]
  SplitGemm<float>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                   [&](int64_t mm, int64_t nn, const float* aa, const float* bb, float* cc) {
                     cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                                 int(mm), int(nn), int(k), alpha, aa, int(lda), bb, int(ldb), beta, cc, int(ldc));
                   });
}

void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  SplitGemm<double>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                    [&](int64_t mm, int64_t nn, const double* aa, const double* bb, double* cc) {
                      cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                                  int(mm), int(nn), int(k), alpha, aa, int(lda), bb, int(ldb), beta, cc, int(ldc));
                    });
}

}  // namespace loom
