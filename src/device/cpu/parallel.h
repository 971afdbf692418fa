// Work splitting on the CPU: a small fixed pool (LOOM_NUM_THREADS, default: the core count;
// Note [Thread counts]).
//
// ParallelFor(n, grain, f) calls f(begin, end) on disjoint ranges covering [0, n). Ranges are a
// pure function of (n, grain, thread count), never of timing, so results are deterministic.
// Called from inside a pool task or from a graph worker thread it runs inline: the parallel
// replay already keeps every core busy, and nesting would oversubscribe them.
#pragma once

#include <cstdint>
#include <functional>

namespace loom {

// Note [Thread counts]
// A thread count is an integer from 1 to MaxThreads() = 4 x the machine's cores: more threads
// than that only contend (and 100000 of them would not even start in reasonable time), fewer
// than one is no pool. SetNumThreads refuses anything else with a ValueError that says the
// range; so does the first use of the pool when LOOM_NUM_THREADS (read then, once) holds
// anything but such a number (an empty value counts as unset: the default, the core count).
int NumThreads();
int MaxThreads();
void SetNumThreads(int64_t n);
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

// Marks the calling thread as one that must not fan out (graph replay workers), or, with
// serial = false, lifts that for a scope (a replay worker running the only op in flight).
// SetSerialRegion is the same without a scope; it returns the previous setting.
bool SetSerialRegion(bool serial);
class SerialRegion {
 public:
  explicit SerialRegion(bool serial = true);
  ~SerialRegion();
 private:
  bool prev_;
};

}  // namespace loom
