// Note [Skinny GEMM]
// A training step at a small batch multiplies a few rows by a large weight matrix: the forward
// x W (M = batch), the input gradient dy W^T (M = batch) and the weight gradient x^T dy (K =
// batch). Such products read or write the weights once and do a handful of multiply-adds per
// weight: they are bound by memory traffic, not arithmetic. OpenBLAS 0.3.21 runs them through
// its general GEMM, which packs the whole weight matrix into a buffer first (a second pass over
// it) and, above its small-matrix threshold, took 375 us for a 1x1024 by 1024x1024 product that
// a GEMV does in 60 us (one core; at batch 8 the MLP's products ran at 15 GB/s).
//
// These kernels make one pass over the big operand and keep the small one in cache:
//   NN  C(M,N) = A(M,K) B(K,N),    M <= 16: panels of 32 columns of C, all M rows accumulated
//                                            in registers while B's rows stream through;
//   NT  C(M,N) = A(M,K) B(N,K)^T,  M <= 16: dot products of A's rows with a few rows of B at a
//                                            time, K in vectors, summed across lanes at the end;
//   TN  C(M,N) = A(K,M)^T B(K,N),  K <= 16: each row of C is K scaled rows of B, written once.
// Every element is summed in a fixed order (K ascending; NT: lanes in a fixed tree), whatever
// the thread count, so results are deterministic. Work is split across the pool by columns
// (NN, NT) or rows (TN) of C.
#pragma once

#include <cstdint>

namespace loom {

// Whether SkinnyGemm takes this product (the shapes above); else it is left to OpenBLAS.
bool IsSkinny(bool ta, bool tb, int64_t m, int64_t n, int64_t k);

// C = alpha op(A) op(B) + beta C (row-major; beta == 0 ignores C's contents, as BLAS does).
// Returns false, touching nothing, when the shape is not skinny (the caller uses OpenBLAS).
bool SkinnyGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// TN rows are written in blocks of this many columns.
constexpr int64_t kSkinnyTNColumns = 256;
// C(M,N) = A(K,M)^T B(K,N), K <= 16, on the calling thread: every element the same sum as
// SkinnyGemm(true, false, ...) with alpha 1 and beta 0 computes for it, provided the columns
// start at a multiple of kSkinnyTNColumns of the full product, so a caller may compute the full
// product a few rows (or column blocks) at a time (Note [Weight gradient into the update]).
void SkinnyGemmTNRows(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                      float* c, int64_t ldc);

}  // namespace loom
