// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator, so element i of a random op is a pure function of (key, counter + i)
// on every backend and on every replay. Header-only; usable from CUDA code as well.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace loom {

struct Philox4 {
  uint32_t v[4];
};

LOOM_HD void PhiloxMulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  *lo = uint32_t(p);
}

// Four 32-bit random words for counter `ctr` under `key`.
LOOM_HD Philox4 Philox4x32(uint64_t key, uint64_t ctr) {
  uint32_t c0 = uint32_t(ctr), c1 = uint32_t(ctr >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    PhiloxMulhilo(0xD2511F53u, c0, &hi0, &lo0);
    PhiloxMulhilo(0xCD9E8D57u, c2, &hi1, &lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 (float) or 53 (double) random bits.
LOOM_HD float PhiloxUniformF(uint32_t w) { return float(w >> 8) * (1.0f / 16777216.0f); }
LOOM_HD double PhiloxUniformD(uint32_t a, uint32_t b) {
  uint64_t x = (uint64_t(a) << 21) ^ uint64_t(b >> 11);
  return double(x & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace loom
