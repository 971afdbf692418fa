// The bias-and-activation epilogue of the fused dense layer on CUDA (Note [Dense, bias,
// activation] in core/ops/dense_bias_act.cc), for the GEMM in linalg.cc: where no cuBLASLt
// epilogue computes the activation (tanh, sigmoid, float64, or no algorithm for the shape).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/bias_act_formulas.h"

namespace loom {
namespace cuda {

// y: (rows, n) = act(y + b) in place, b: (n); with b null, y = act(y). Issued on `stream`.
void LaunchBiasActEpilogue(DType dtype, BiasAct act, const void* b, void* y, int64_t rows, int64_t n,
                           cudaStream_t stream);

}  // namespace cuda
}  // namespace loom
