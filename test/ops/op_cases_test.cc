// Every row of the op-case table on the CPU (Note [The op-case table] in common/op_cases.h):
// forward against its float64 reference, the gradient check where it applies, and graph replay
// against eager execution, one test per op. And the table itself: every op with a CPU kernel
// has rows, every differentiable op a gradient check, and the rows are well formed.
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "common/harness.h"
#include "common/op_check.h"

namespace loom {
namespace test {
namespace {

class OpCaseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OpCaseTest, ForwardGradientAndGraphReplay) {
  for (const OpCase* c : CasesOf(GetParam())) {
    CheckForward(*c);
    if (c->ChecksGradient()) CheckGradient(*c);
    CheckGraphReplay(*c);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpCaseTest, ::testing::ValuesIn(OpsWithCases()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

bool IsTestProbe(const std::string& op) { return op.rfind("test_", 0) == 0; }

// A second CPU device ("cpu:1", CPU kernels, memory of its own): the other device of
// CheckAgainstCpu, so that the CUDA mode's path (inputs copied to another device and viewed
// there, creation ops on it, outputs compared) runs in CPU CI too.
class SecondCpu : public Device {
 public:
  SecondCpu() : Device(DeviceType::kCPU, 1, &Allocate, [](void* p) { std::free(p); }) {}
  // Host memory both: the process's CPU device copies.
  void MemcpyToHost(void* dst, const void* src, size_t n) override { CpuDevice()->MemcpyToHost(dst, src, n); }
  void MemcpyFromHost(void* dst, const void* src, size_t n) override { CpuDevice()->MemcpyFromHost(dst, src, n); }

 private:
  static void* Allocate(size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
};

TEST(OpCaseTable, EveryRowRunsOnAnotherDeviceAsOnTheCpu) {
  auto other = std::make_shared<SecondCpu>();
  for (const OpCase& c : AllOpCases()) CheckAgainstCpu(c, other);
}

TEST(OpCaseTable, EveryOpWithACpuKernelHasARow) {
  std::vector<std::string> with = OpsWithCases();
  std::set<std::string> covered(with.begin(), with.end());
  std::map<std::string, std::string> exempt(OpsWithoutCases().begin(), OpsWithoutCases().end());
  for (const std::string& name : ListOps()) {
    if (IsTestProbe(name) || !GetOp(name).kernels[int(DeviceType::kCPU)]) continue;
    if (exempt.count(name))
      EXPECT_FALSE(covered.count(name)) << name << " has rows now: drop it from OpsWithoutCases()";
    else
      EXPECT_TRUE(covered.count(name)) << name << " has a CPU kernel but no row in test/common/op_cases*.cc";
  }
  for (const auto& [name, why] : exempt) {
    EXPECT_NO_THROW(GetOp(name)) << name << " is listed in OpsWithoutCases() but not registered";
    EXPECT_FALSE(why.empty()) << name;
  }
}

TEST(OpCaseTable, EveryDifferentiableOpHasAGradientCheck) {
  std::set<std::string> checked;
  for (const OpCase& c : AllOpCases())
    if (c.ChecksGradient()) checked.insert(c.op);
  for (const std::string& name : ListOps()) {
    if (IsTestProbe(name) || !GetOp(name).backward) continue;
    EXPECT_TRUE(checked.count(name)) << name << " has a backward but no row checks its gradient";
  }
}

// A device's exact rows compare bytes, except NaN's sign and payload (CUDA writes a canonical
// NaN where the CPU passes an operand's on).
TEST(OpCaseTable, ExactRowsCompareBytesAndAnyNaNEqualsAnyNaN) {
  const uint32_t quiet = 0x7fc00000u, canonical = 0x7fffffffu, negative = 0xffc00001u;
  auto f32 = [](std::vector<uint32_t> bits) {
    std::vector<uint8_t> b(bits.size() * 4);
    std::memcpy(b.data(), bits.data(), b.size());
    return TensorWithBytes({int64_t(bits.size())}, DType::kFloat32, b);
  };
  const uint32_t one = 0x3f800000u, zero = 0, minus_zero = 0x80000000u;
  EXPECT_TRUE(SameBitsAnyNaN(f32({one, quiet}), f32({one, canonical})));
  EXPECT_TRUE(SameBitsAnyNaN(f32({negative}), f32({quiet})));
  EXPECT_FALSE(SameBitsAnyNaN(f32({zero}), f32({minus_zero})));  // equal values, other bits
  EXPECT_FALSE(SameBitsAnyNaN(f32({one, quiet}), f32({one, one})));
  EXPECT_FALSE(SameBitsAnyNaN(f32({one}), f32({one, one})));
  // Integers: bytes alone (0x7fc00000 is no NaN there).
  const Tensor i1 = FromDoubles({1, 2}, {2}, DType::kInt32), i2 = FromDoubles({1, 3}, {2}, DType::kInt32);
  EXPECT_TRUE(SameBitsAnyNaN(i1, i1));
  EXPECT_FALSE(SameBitsAnyNaN(i1, i2));
}

TEST(OpCaseTable, RowsAreWellFormed) {
  std::set<std::string> labels;
  for (const OpCase& c : AllOpCases()) {
    EXPECT_TRUE(labels.insert(c.label).second) << "two rows are labelled '" << c.label << "'";
    EXPECT_NO_THROW(GetOp(c.op)) << c.label;
    EXPECT_TRUE(bool(c.ref)) << c.label << " has no reference";
    // Random ops draw from the device generator: only a row that sets it is reproducible.
    EXPECT_EQ(bool(GetOp(c.op).random_draws), c.random) << c.label;
    EXPECT_EQ(c.outputs == OpCase::Outputs::kFresh, c.inputs.empty()) << c.label;
    for (int i : c.into) EXPECT_TRUE(i >= -1 && i < int(c.inputs.size())) << c.label;  // -1: a fresh output
    if (c.force_grad) {
      EXPECT_TRUE(c.ChecksGradient()) << c.label << " forces a gradient check that cannot run";
    }
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
