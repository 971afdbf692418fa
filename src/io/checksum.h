// The checksum loom files carry: 64-bit FNV-1a. Simple, dependency-free and good at what a
// checkpoint needs (catching flipped or missing bytes); not a defence against tampering.
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

}  // namespace io
}  // namespace loom
