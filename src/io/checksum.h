// The checksum loom files carry: 64-bit FNV-1a. Simple, dependency-free and good at what a
// checkpoint needs (catching flipped or missing bytes); not a defence against tampering.
// And splitmix64, the mixer the data loaders draw their counter-based random numbers from.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom {
namespace io {

constexpr uint64_t kFnv64OffsetBasis = 0xcbf29ce484222325ull;
constexpr uint64_t kFnv64Prime = 0x100000001b3ull;

// FNV-1a over `size` bytes, continuing from `h` (pass the result back in to hash in pieces).
inline uint64_t Fnv1a64(const void* data, size_t size, uint64_t h = kFnv64OffsetBasis) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= kFnv64Prime;
  }
  return h;
}

// splitmix64's output function: a bijective mix of 64 bits (Steele, Lea and Flood, 2014).
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace io
}  // namespace loom
