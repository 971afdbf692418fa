// float64 -> float32 rounded to odd, for casts to float16/bfloat16: a second rounding of the
// result to at most 11 significant bits is then correctly rounded (24 >= 2 * 11 + 2), whereas
// rounding twice to nearest is not. Header-only; usable from CUDA code.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LOOM_RTO_HD __host__ __device__ __forceinline__
#else
#define LOOM_RTO_HD inline
#endif

namespace loom {

LOOM_RTO_HD float RoundToOddFloat(double v) {
  float f = float(v);
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if (double(f) == v || (b & 0x7f800000u) == 0x7f800000u) return f;  // exact, inf or nan
  if ((f < 0 ? -double(f) : double(f)) > (v < 0 ? -v : v)) --b;      // truncate toward zero
  b |= 1u;                                                              // and make it odd
  std::memcpy(&f, &b, 4);
  return f;
}

}  // namespace loom
