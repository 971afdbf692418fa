// The CPU thread pool's count (Note [Thread counts] in device/cpu/parallel.h): counts outside
// 1..MaxThreads() are refused and leave the pool as it was. LOOM_NUM_THREADS is checked the
// same way, in test/python/test_device.py (it is read once per process).
#include <atomic>
#include <thread>

#include "common/harness.h"
#include "device/cpu/parallel.h"

namespace loom {
namespace test {
namespace {

TEST(ThreadCount, OutOfRangeIsAValueErrorAndChangesNothing) {
  const int before = NumThreads();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(MaxThreads(), int(4 * cores));
  LOOM_EXPECT_THROW_MSG(SetNumThreads(0), ValueError, "[set_num_threads] 0 threads: at least 1 is needed");
  LOOM_EXPECT_THROW_MSG(SetNumThreads(-4), ValueError, "at least 1");
  LOOM_EXPECT_THROW_MSG(SetNumThreads(100000), ValueError, "4 x the " + std::to_string(cores) + " cores");
  LOOM_EXPECT_THROW_MSG(SetNumThreads(int64_t(1) << 40), ValueError, "more than");
  EXPECT_EQ(NumThreads(), before);
  SetNumThreads(MaxThreads());
  EXPECT_EQ(NumThreads(), MaxThreads());
  SetNumThreads(before);
  EXPECT_EQ(NumThreads(), before);
}

// One thread fans out while another replaces the pool: the old pool must live until the fan-out
// that holds it returns (a use-after-free under ASan before the pool was shared).
TEST(ThreadCount, ChangingTheCountWhileAnotherThreadRunsOnThePool) {
  const int before = NumThreads();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> total{0};
  std::thread runner([&] {
    while (!stop.load()) {
      std::atomic<int64_t> sum{0};
      ParallelFor(64, 1, [&](int64_t b, int64_t e) { sum += e - b; });
      EXPECT_EQ(sum.load(), 64);
      total += 1;
    }
  });
  for (int i = 0; i < 50; ++i) SetNumThreads(1 + i % 3);
  while (total.load() < 10) std::this_thread::yield();
  stop = true;
  runner.join();
  SetNumThreads(before);
  EXPECT_EQ(NumThreads(), before);
}

}  // namespace
}  // namespace test
}  // namespace loom
