// One GEMM on a CUDA device for kernels other than matmul's (linear_cross_entropy's chunks), run
// as the matmul kernel runs its products (linalg.cc: cuBLASLt or cuBLAS, TF32 as the device's
// float32 math says, tensor cores for 16-bit operands).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace loom {
namespace cuda {

class CudaDeviceImpl;

// Row-major C (M, N, contiguous) = op(A) op(B) (+ C when accumulate), on the device's stream.
// operands: float32 or float64 (C of that dtype), or bfloat16 / float16 (C float32). A: (M, K) or
// (K, M) when ta, leading dimension lda; B: (K, N) or (N, K) when tb, leading dimension ldb.
void DeviceGemm(CudaDeviceImpl& dev, DType operands, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a,
                int64_t lda, const void* b, int64_t ldb, void* c, bool accumulate);

}  // namespace cuda
}  // namespace loom
