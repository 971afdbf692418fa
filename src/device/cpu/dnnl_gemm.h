// float32 GEMM through oneDNN (Note [Which GEMM kernel] in blas.h). oneDNN picks its kernels
// from the CPU's own feature bits (CPUID) when it loads, so it needs no table of CPU models.
// Without oneDNN (LOOM_USE_DNNL=OFF, or the library is not installed) HaveDnnlGemm() is false
// and the callers stay on OpenBLAS.
#pragma once

#include <cstdint>
#include <string>

namespace loom {
namespace cpu {

bool HaveDnnlGemm();
// Row-major C = alpha op(A) op(B) + beta C on the calling thread alone (one OpenMP thread;
// loom's pool splits the work: Note [One thread pool]). A: (M, K) or (K, M) when ta; B: (K, N)
// or (N, K) when tb; beta == 0 ignores C's contents. M, N, K >= 1.
void DnnlSgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The same product through oneDNN's matmul primitive (Note [Which GEMM kernel]: faster than the
// sgemm for NT products with 16 rows or more and K >= 32), built once per shape and leading
// dimensions and kept in a process-wide cache. Takes alpha == 1 and beta 0 or 1 only (beta 1: a
// sum post-op); returns false, touching nothing, for anything else. Its scratchpad (about
// 140 KiB for the MLP's products) is a per-thread buffer that lives as long as the thread, like
// the packing buffers oneDNN's sgemm and OpenBLAS allocate for themselves. Each new
// implementation is reported (device/kernel_report.h) when its first primitive is built.
bool DnnlMatmul(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The same product with bfloat16 operands (the bits, as uint16_t) and a float32 C: products and
// sums in float32 (Note [Precision policy] in core/autocast.h). oneDNN's bf16 kernels need
// AVX512-BF16 or AMX to be fast and run everywhere; returns false, touching nothing, when oneDNN
// has no implementation or alpha/beta are other than above.
bool DnnlMatmulBf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
                    const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The same with float16 operands. oneDNN implements f16 products only on CPUs with AVX512-FP16
// (or AMX-FP16); elsewhere this returns false (cached per shape, so asked once) and the caller
// widens the operands to float32 itself.
bool DnnlMatmulF16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
                   const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);
// Whether DnnlMatmulBf16 (bf16) or DnnlMatmulF16 would run this product: alpha 1, beta 0 or 1,
// and a primitive for the shape (built and cached here; nothing runs). A caller splitting one
// product into blocks asks for every block before it writes any.
bool DnnlMatmulHalfTakes(bool bf16, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, int64_t lda,
                         int64_t ldb, float beta, int64_t ldc);
// The most capable instruction set oneDNN dispatches to on this CPU ("avx512_core_bf16", ...),
// or "none" without oneDNN.
std::string DnnlIsa();

}  // namespace cpu
}  // namespace loom
