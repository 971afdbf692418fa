// Element-wise dtype conversion on the device, for kernels that convert as part of their work
// (cudnn.cc: the bfloat16 convolutions' float32 results), and the same with a change of layout
// between NCHW and NHWC (cudnn.cc: Note [NHWC convolutions on cuDNN]). The cast op's kernel
// (creation.cu) runs the same conversion, so the values are the cast op's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace loom {
namespace cuda {

// y[0, n) = x[0, n) converted from dtype `from` to dtype `to`, issued on `stream`.
void LaunchCast(DType from, const void* x, DType to, void* y, int64_t n, cudaStream_t stream);

// y = x converted from dtype `from` to dtype `to` as LaunchCast converts, and from layout
// x_nhwc to layout y_nhwc: both hold n images of c channels of hw pixels, NCHW ((n, c, hw)
// row-major) or NHWC ((n, hw, c)). For a convolution's weight (O, C/g, KH, KW): n = O,
// c = C/g, hw = KH KW. With equal layouts it is LaunchCast. Issued on `stream`.
void LaunchRelayout(DType from, const void* x, bool x_nhwc, DType to, void* y, bool y_nhwc, int64_t n, int64_t c,
                    int64_t hw, cudaStream_t stream);

}  // namespace cuda
}  // namespace loom
