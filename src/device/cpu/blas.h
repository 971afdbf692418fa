// Dense matrix products on the CPU. float32 runs on oneDNN, or on loom's skinny kernels where
// they measure ahead; float64 (which oneDNN's GEMM does not do) and builds without oneDNN run
// on OpenBLAS, named explicitly (never the reference libblas.so.3, 13-18x slower). These
// wrappers keep cblas.h and oneDNN out of every other file.
//
// Note [Which GEMM kernel]
// Debian's OpenBLAS 0.3.21 picks its kernels from a table of CPU models: on a CPU it does not
// know it falls back to old ones (a Xeon family 6 model 207 with AVX-512 got `Prescott`, SSE3:
// an MLP step at batch 64 took 22 ms, 6 ms with OPENBLAS_CORETYPE=SKYLAKEX). oneDNN reads the
// CPU's feature bits instead, so float32 products go to oneDNN and nothing depends on a table.
// The skinny kernels (Note [Skinny GEMM]) are kept where they measured ahead of oneDNN's sgemm.
// One thread, min of 15 calls, microseconds, on an AMD EPYC with AVX-512 (shared, noisy):
//
//   shape (M x N x K)          skinny  oneDNN  OpenBLAS (its right core, Cooperlake)
//   NN 1 x 1024 x 1024           67      71     421
//   NN 2 x 1024 x 1024           84     185     495
//   NN 3 x 1024 x 1024          156     144     354
//   NN 8 x 1024 x 1024          264     210     493
//   NT 1 x 1024 x 1024           71      57     417
//   NT 8 x 1024 x 1024          452     398     899
//   TN 1024 x 1024 x 1           99     169     473
//   TN 1024 x 1024 x 2          125     148     461
//   TN 1024 x 1024 x 3          152     160     298
//   TN 1024 x 1024 x 8          515     250     598
//   NN 64 x 1024 x 1024           -    1595    1776
//   NT 64 x 1024 x 1024           -    1882    2150
//   TN 1024 x 1024 x 64           -    1387    1654
//   NN 64 x 10 x 1024             -      27      20
//   TN 1024 x 10 x 64             -      38      21
//
// So: skinny for NN with M <= 2 and TN with K <= 2; oneDNN for every other float32 product.
// OpenBLAS, even with its right kernels, was ahead only on products with a handful of columns
// (the last rows above: tens of microseconds of a step that takes milliseconds), and there only
// when it recognised the CPU; it is not worth a rule that depends on its CPU table.
// LOOM_CPU_GEMM=openblas (or SetCpuGemmImpl) restores the rules without oneDNN: skinny for
// every shape IsSkinny takes, OpenBLAS for the rest.
#pragma once

#include <cstdint>

namespace loom {

// OpenBLAS runs on the calling thread only (Note [One thread pool]).
void BlasUseOneThread();
// Row-major C = alpha * op(A) op(B) + beta * C.  A: (M, K) or (K, M) when ta; B: (K, N) or (N, K).
// beta == 0 ignores C's contents; K == 0 gives C = beta * C.
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// Which float32 implementations Gemm may use. kAuto: Note [Which GEMM kernel]; kOpenBlas:
// skinny kernels and OpenBLAS only (the choice without oneDNN).
enum class CpuGemmImpl { kAuto, kOpenBlas };
void SetCpuGemmImpl(CpuGemmImpl impl);
CpuGemmImpl GetCpuGemmImpl();  // first call reads LOOM_CPU_GEMM (openblas | auto)

enum class GemmKernel { kSkinny, kDnnl, kOpenBlas };
// The kernel Gemm runs a float32 product of this shape on.
GemmKernel ChooseSgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k);

// OpenBLAS's kernel family by instruction set: 0 SSE, 1 AVX, 2 AVX2 + FMA, 3 AVX-512, -1 a
// core name loom does not know (openblas_get_corename(), case-insensitive).
int OpenBlasCoreIsaLevel(const char* core);
// The same scale for this CPU (CPUID).
int CpuIsaLevel();

}  // namespace loom
