// The cast op's float32 -> float16 / bfloat16 conversion on the CPU (creation.cc), shared with the
// updates that write a 16-bit copy of their parameter (optimizer.cc, Note [bfloat16 weight copies
// kept by the update] in graph/weight_copies.cc): one function, so the copy holds the cast's bits.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace loom {
namespace cpu {

// f: (n) float32 -> h: (n) `to` (kFloat16 or kBFloat16), on the calling thread; round to nearest
// even (core/half.h).
void CastFloat32To16(const float* f, uint16_t* h, int64_t n, DType to);

}  // namespace cpu
}  // namespace loom
