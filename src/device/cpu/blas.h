// The BLAS we link is OpenBLAS, named explicitly (never the reference libblas.so.3, 13-18x
// slower). These wrappers keep cblas.h out of every other file.
#pragma once

#include <cstdint>

namespace loom {

// OpenBLAS runs on the calling thread only (Note [One thread pool]).
void BlasUseOneThread();
// Row-major C = alpha * op(A) op(B) + beta * C.  A: (M, K) or (K, M) when ta; B: (K, N) or (N, K).
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace loom
