// Element-wise dtype conversion on the device, for kernels that convert as part of their work
// (cudnn.cc: the bfloat16 convolutions' float32 results). The cast op's kernel (creation.cu)
// runs the same code, so the values are the cast op's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace loom {
namespace cuda {

// y[0, n) = x[0, n) converted from dtype `from` to dtype `to`, issued on `stream`.
void LaunchCast(DType from, const void* x, DType to, void* y, int64_t n, cudaStream_t stream);

}  // namespace cuda
}  // namespace loom
