// device/kernel_report.h: kernel counters add up per name, keep the order they were first added
// in, and are listed with the reported kernels' (loom-bench's "kernel_counters").
#include "common/harness.h"
#include "device/kernel_report.h"

namespace loom {
namespace test {
namespace {

double CounterOf(const std::string& name) {
  for (const auto& c : KernelCounters())
    if (c.first == name) return c.second;
  return -1;
}

TEST(KernelCounters, AddUpPerNameInTheOrderFirstAdded) {
  AddKernelCounter("test counter b", 1.5);
  AddKernelCounter("test counter a", 2);
  AddKernelCounter("test counter b", 0.25);
  EXPECT_EQ(CounterOf("test counter b"), 1.75);
  EXPECT_EQ(CounterOf("test counter a"), 2);
  EXPECT_EQ(CounterOf("test counter never added"), -1);
  const auto all = KernelCounters();
  size_t at_b = all.size(), at_a = all.size();
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].first == "test counter b") at_b = i;
    if (all[i].first == "test counter a") at_a = i;
  }
  EXPECT_LT(at_b, at_a);
  EXPECT_LT(at_a, all.size());
}

}  // namespace
}  // namespace test
}  // namespace loom
