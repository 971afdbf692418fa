// The cast op's float32 -> float16 / bfloat16 conversion on the CPU (creation.cc), shared with the
// updates that write a 16-bit copy of their parameter (optimizer.cc, Note [bfloat16 weight copies
// kept by the update] in graph/weight_copies.cc): one function, so the copy holds the cast's bits.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace loom {
namespace cpu {

// f: (n) float32 -> h: (n) `to` (kFloat16 or kBFloat16), on the calling thread; round to nearest
// even (core/half.h).
void CastFloat32To16(const float* f, uint16_t* h, int64_t n, DType to);

// FloatToBFloat16 (core/half.h) written without a branch, bit for bit the same, so that a loop
// that rounds as it goes vectorises (attention's blocks, bias_grad's copy).
inline uint16_t Bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest);
}

}  // namespace cpu
}  // namespace loom
