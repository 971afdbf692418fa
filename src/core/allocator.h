// A caching allocator with statistics, shared by the CPU and CUDA devices.
//
// Freed memory is kept in size-class free lists and handed out again for requests of the same
// class, so a training loop stops calling the system allocator after its first step. Sizes are
// rounded to 512 bytes below 1 MiB and to a multiple of 1/8 of the next power of two above it,
// which bounds the waste at 1/8 of that power of two (under 25% of the request, under 12.5% for
// most sizes) while letting similar sizes share memory.
//
// Statistics count the bytes callers asked for (live, peak), so that they compare directly with
// a graph's liveness lower bound; reserved_bytes counts what the pool holds from the system.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace loom {

struct MemStats {
  size_t live_bytes = 0;      // requested bytes currently handed out
  size_t peak_bytes = 0;      // max of live_bytes since the last ResetPeak
  size_t reserved_bytes = 0;  // bytes obtained from the system and not returned
  uint64_t num_allocs = 0;    // Malloc calls served (from the cache or the system)
  uint64_t num_system_allocs = 0;
};

class CachingAllocator {
 public:
  using RawAlloc = std::function<void*(size_t)>;
  using RawFree = std::function<void(void*)>;
  CachingAllocator(RawAlloc alloc, RawFree free) : raw_alloc_(std::move(alloc)), raw_free_(std::move(free)) {}
  ~CachingAllocator();

  void* Malloc(size_t bytes);
  void Free(void* p);
  void EmptyCache();  // returns every cached (free) chunk to the system
  MemStats stats() const;
  void ResetPeak();

  static size_t RoundSize(size_t bytes);

 private:
  struct Chunk {
    size_t rounded;
    size_t requested;
  };
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // rounded size -> cached chunks
  std::unordered_map<void*, Chunk> in_use_;
  MemStats stats_;
};

}  // namespace loom
