// A product with 16-bit operands for kernels other than matmul's (linear_cross_entropy's chunks).
#pragma once

#include <cstdint>

namespace loom {
namespace cpu {

// Row-major C = alpha op(A) op(B) + beta C with bfloat16 (bf16) or float16 operands (their bits)
// and a float32 C, as the matmul kernel computes it: oneDNN's product where it takes the shape,
// else both operands widened to float32 exactly and the float32 GEMM (blas.h).
void HalfGemm(bool bf16, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
              int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace cpu
}  // namespace loom
