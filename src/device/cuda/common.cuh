// Helpers shared by the CUDA kernels: launch shapes, dtype dispatch, the host side of strided and
// broadcast indexing, errors found on the device; the device code that needs no CUDA runtime
// (math overloads, 16-bit conversions, indexing, block reductions) is device_math.cuh. What the
// CPU kernels share too is in device/kernel_shapes.h and device/kernel_dispatch.h.
//
// Every kernel runs on the device's stream (cuda_device.h), never synchronises the host and
// never allocates. Element loops are grid-stride loops over int64 indices.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/op.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/device_math.cuh"
#include "device/kernel_dispatch.h"
#include "device/kernel_shapes.h"

namespace loom {
namespace cuda {

// Calls f(T{}) with T = float or double for the tensor's dtype (the arithmetic dtypes).
template <typename F>
void FloatDispatch(DType t, const char* op, F&& f) {
  DispatchFloat(t, op, "CUDA", f);
}

// Note [What a kernel supports]: a result of the input's dtype, or a float32 result rounded to
// bfloat16 or float16 (Note [Casts fused into their producers] in graph/fuse_casts.cc), for the
// producers that take a fused cast (elementwise.cu).
bool FusedCastSupportedCuda(const OpRecord& op);

// Calls f(T{}, Out{}, bf16) for a producer that may take a fused cast: T the input's arithmetic
// dtype, Out T, or uint16_t for a 16-bit output (bf16 says bfloat16 rather than float16) from
// float32; StoreResult<Out> stores each result.
template <typename F>
void FusedCastDispatch(const OpRecord& op, const char* name, F&& f) {
  const DType in = op.inputs[0].dtype(), out = op.outputs[0].dtype();
  if (out != in && in == DType::kFloat32 && (out == DType::kBFloat16 || out == DType::kFloat16))
    return f(float{}, uint16_t{}, out == DType::kBFloat16);
  FloatDispatch(out, name, [&](auto tag) { f(tag, tag, false); });
}

// `strides[k]` has one entry per dimension of `shape`. Throws ShapeError naming `op` when the
// collapsed rank exceeds kMaxDims.
Indexer MakeIndexer(const Shape& shape, const std::vector<std::vector<int64_t>>& strides, const char* op);

}  // namespace cuda
}  // namespace loom
