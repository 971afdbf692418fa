#include "core/allocator.h"

#include <cstdio>

#include "core/debug.h"
#include "core/error.h"
#include "core/shape.h"

namespace loom {

size_t CachingAllocator::RoundSize(size_t bytes) {
  if (bytes == 0) bytes = 1;
  // Tensors are at most kMaxTensorBytes (Note [Checked sizes]); this keeps the shift below < 64.
  LOOM_CHECK(bytes <= size_t(kMaxTensorBytes), DeviceError, "[allocator] cannot allocate ", bytes,
             " bytes: more than loom addresses (2^56)");
  if (bytes <= (size_t(1) << 20)) return (bytes + 511) & ~size_t(511);
  size_t p = size_t(1) << (64 - __builtin_clzll(bytes - 1));  // next power of two
  size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}

CachingAllocator::~CachingAllocator() {
  EmptyCache();
  // Chunks still in use belong to blocks that outlive the device's allocator (process exit).
  for (auto& kv : in_use_) raw_free_(kv.first);
}

void* CachingAllocator::Malloc(size_t bytes) {
  size_t rounded = RoundSize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  auto it = free_.find(rounded);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    p = raw_alloc_(rounded);
    if (!p) {  // out of memory: drop the cache and try once more
      for (auto& kv : free_)
        for (void* q : kv.second) { raw_free_(q); stats_.reserved_bytes -= kv.first; }
      free_.clear();
      p = raw_alloc_(rounded);
      LOOM_CHECK(p, DeviceError, "[allocator] out of memory allocating ", bytes, " bytes (",
                 stats_.live_bytes, " bytes live)");
    }
    stats_.reserved_bytes += rounded;
    stats_.num_system_allocs++;
  }
  in_use_[p] = Chunk{rounded, bytes};
  stats_.live_bytes += bytes;
  stats_.num_allocs++;
  if (stats_.live_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.live_bytes;
  if (DebugLevel() >= 3) std::fprintf(stderr, "[loom alloc] %p %zu bytes (live %zu)\n", p, bytes, stats_.live_bytes);
  return p;
}

void CachingAllocator::Free(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(p);
  LOOM_ASSERT(it != in_use_.end(), "freeing a pointer this allocator did not hand out");
  stats_.live_bytes -= it->second.requested;
  if (DebugLevel() >= 3)
    std::fprintf(stderr, "[loom free]  %p %zu bytes (live %zu)\n", p, it->second.requested, stats_.live_bytes);
  free_[it->second.rounded].push_back(p);
  in_use_.erase(it);
}

void CachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : free_)
    for (void* q : kv.second) {
      raw_free_(q);
      stats_.reserved_bytes -= kv.first;
    }
  free_.clear();
}

MemStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.live_bytes;
}

}  // namespace loom
