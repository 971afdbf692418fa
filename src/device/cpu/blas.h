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
// The skinny kernels (Note [Skinny GEMM]) are kept where they measured ahead of oneDNN's sgemm,
// and for small weight gradients (below).
// One thread each (OpenBLAS too), min of 15 calls, microseconds, on an AMD EPYC with AVX-512
// (2 cores shared with other jobs: expect 10-20% noise; OpenBLAS picked its Cooperlake kernels):
//
//   shape (M x N x K)          skinny  oneDNN  OpenBLAS
//   NN 1 x 1024 x 1024           63      59     421
//   NN 2 x 1024 x 1024           85     183     427
//   NN 3 x 1024 x 1024          146     161     495
//   NN 8 x 1024 x 1024          186     174     521
//   NT 1 x 1024 x 1024           74      58     688
//   NT 8 x 1024 x 1024          427     336     961
//   TN 1024 x 1024 x 1           93     206     463
//   TN 1024 x 1024 x 2          111     174     456
//   TN 1024 x 1024 x 3          267     175     454
//   TN 1024 x 1024 x 8          605     214     545
//   NN 64 x 1024 x 1024           -    1595    1776
//   NT 64 x 1024 x 1024           -    1882    2150
//   TN 1024 x 1024 x 64           -    1387    1654
//   NN 64 x 10 x 1024             -      28      20
//   TN 1024 x 10 x 64             -      37      19
//
// oneDNN's matmul primitive (brgemm kernels, built once per shape) beat its sgemm on NT products
// with 16 rows or more: 555 / 880 / 1540 us against 980 / 1318 / 1896 for 16 / 32 / 64 x 1024
// x 1024, measured as the table above; in the MLP's batch-64 step (one thread, 40 replays) the
// input gradient dy W^T took 1590 us median against 2108 with the sgemm. With a short K (64 x
// 1024 x 10 in that step) it was slower (77 us against less than 50), so it takes NT products
// with M >= 16 and K >= 32.
//
// So: skinny for NN with M <= 2; oneDNN for NN with more rows and for every NT product (the
// matmul primitive or the sgemm, as just said). TN
// products (x^T dy, a weight gradient) with K <= 16 stay on the skinny kernel although oneDNN's
// is faster from K = 3 on: it is the kernel the graph uses to compute a weight gradient into its
// SGD update (matmul_sgd_update, Note [Weight gradient into the update]), which must be bitwise
// the unfused result, and the fused update wins by more than the GEMM loses. Per-op medians
// of the MLP's graph step at batch 8 (LOOM_DEBUG=2, 100 replays, shared machine): fused
// 797 + 693 us for the two large weights; on oneDNN and unfused 546 + 576 and 785 + 625 us
// (GEMM + update), and the arena 4 MiB larger (each weight gradient stored).
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

// The same with 16-bit operands (their bits: bfloat16 when bf16, else float16) and a float32 C
// (Note [Precision policy] in core/autocast.h), on oneDNN's matmul primitive, split across
// loom's pool by blocks of rows like the float32 GEMM (Note [One thread pool]; one oneDNN call
// on the calling thread alone ran a 2-core machine's bf16 products on one core, no faster than
// float32 on two). Returns false, touching nothing, when oneDNN does not take every block
// (alpha other than 1, beta other than 0 or 1, no implementation: the caller widens instead).
bool GemmHalf(bool bf16, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
              int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Which float32 implementations Gemm may use. kAuto: Note [Which GEMM kernel]; kOpenBlas:
// skinny kernels and OpenBLAS only (the choice without oneDNN).
enum class CpuGemmImpl { kAuto, kOpenBlas };
void SetCpuGemmImpl(CpuGemmImpl impl);
CpuGemmImpl GetCpuGemmImpl();  // first call reads LOOM_CPU_GEMM (openblas | auto)

enum class GemmKernel { kSkinny, kDnnl, kDnnlMatmul, kOpenBlas };
// The kernel Gemm runs a float32 product of this shape on.
GemmKernel ChooseSgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k);

// OpenBLAS's kernel family by instruction set: 0 SSE, 1 AVX, 2 AVX2 + FMA, 3 AVX-512, -1 a
// core name loom does not know (openblas_get_corename(), case-insensitive).
int OpenBlasCoreIsaLevel(const char* core);
// The same scale for this CPU (CPUID).
int CpuIsaLevel();

}  // namespace loom
