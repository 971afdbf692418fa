// CUDA's grouped optimizer updates (src/device/cuda/update_kernels.cuh, Note [Small updates
// grouped]) run on the CPU by the emulator (Note [CUDA kernels emulated on the CPU]): a table of
// members of 1 to 70,000 elements (one block, several, and a member capped at its 256 blocks,
// whose threads stride) updated by one launch gives each member the bits of its own single
// update, with momentum, Nesterov, weight decay, the clip scale or value, the 16-bit copy and a
// member whose found_inf flag skips it; SGD is also checked against its formula in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "device/optimizer_formulas.h"
#include "emu/emu_checks.h"
#include "emu/cuda_emu.h"  // before the kernels' sources: its macros name CUDA's built-ins
#include "device/cuda/device_math.cuh"

namespace loom {
namespace cuda {
namespace {
using optim::GradMode;
using optim::PrepareGrad;
#include "device/cuda/update_kernels.cuh"
}  // namespace
}  // namespace cuda

namespace test {
namespace {

using namespace cuda;  // the kernels, as elementwise.cu sees them

const std::vector<int64_t> kSizes = {1, 255, 256, 257, 3000, 70000};

struct Member {
  std::vector<float> p, g, s1, s2;
  std::vector<uint16_t> copy;
  float skip = 0;
};

std::vector<Member> Members(bool adam) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1), pos(0.01f, 1);
  std::vector<Member> ms;
  for (int64_t n : kSizes) {
    Member m;
    for (auto* v : {&m.p, &m.g, &m.s1}) {
      v->resize(size_t(n));
      for (float& x : *v) x = u(rng);
    }
    m.s2.resize(size_t(n));
    for (float& x : m.s2) x = adam ? pos(rng) : 0.f;
    m.copy.assign(size_t(n), 0);
    ms.push_back(std::move(m));
  }
  ms[2].skip = 1;  // found_inf set: this member keeps its values
  return ms;
}

void ExpectSame(const std::vector<Member>& group, const std::vector<Member>& single) {
  for (size_t k = 0; k < group.size(); ++k) {
    SCOPED_TRACE("member " + std::to_string(k) + " of " + std::to_string(kSizes[k]) + " elements");
    EXPECT_TRUE(SameBits(group[k].p, single[k].p)) << "parameter";
    EXPECT_TRUE(SameBits(group[k].s1, single[k].s1)) << "first state";
    EXPECT_TRUE(SameBits(group[k].s2, single[k].s2)) << "second state";
    EXPECT_EQ(group[k].copy, single[k].copy) << "16-bit copy";
  }
}

const double kLr = 0.05, kStep = 3, kScale = 0.7;

TEST(UpdateKernels, AnSgdGroupGivesEachMemberItsOwnUpdatesBits) {
  const double wd = 0.01, mom = 0.9, damp = 0.1, mult = 0.5;
  std::vector<Member> group = Members(false), single = group;
  const std::vector<Member> before = group;
  GroupTable t;
  for (Member& m : group)
    AddGroupMember(t, {m.p.data(), m.g.data(), m.s1.data(), nullptr, m.copy.data(), &kLr, nullptr, &kScale, &m.skip,
                       int64_t(m.p.size())});
  ASSERT_EQ(t.first_block[t.count], 1 + 1 + 1 + 2 + 12 + 256);
  emu::Launch({unsigned(t.first_block[t.count])}, {kThreads},
              [&] { SgdGroupKernel<float, GradMode::kScaled>(t, wd, mom, damp, 1, mult, 0, 1); });
  for (Member& m : single) {
    const int64_t n = int64_t(m.p.size());
    emu::Launch({Blocks(n)}, {kThreads}, [&] {
      SgdKernel<float, GradMode::kScaled>(m.p.data(), m.g.data(), m.s1.data(), &kLr, n, float(wd), float(mom),
                                          float(1 - damp), 1, &kScale, mult, 0, &m.skip, m.copy.data(), 1);
    });
  }
  ExpectSame(group, single);
  // Nesterov momentum, in float64, against a member the group updated and the skipped one.
  for (size_t k : {size_t(3), size_t(2)}) {
    const Member& b = before[k];
    for (size_t i = 0; i < b.p.size(); ++i) {
      const double d = double(b.g[i]) * kScale * mult + wd * b.p[i];
      const double v = mom * b.s1[i] + (1 - damp) * d;
      const double want = b.skip != 0 ? b.p[i] : b.p[i] - kLr * (d + mom * v);
      ASSERT_NEAR(group[k].p[i], want, 1e-6) << "member " << k << " [" << i << "]";
    }
  }
}

TEST(UpdateKernels, AnAdamGroupGivesEachMemberItsOwnUpdatesBits) {
  const double b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1, clip = 0.3;
  std::vector<Member> group = Members(true), single = group;
  GroupTable t;
  for (Member& m : group)
    AddGroupMember(t, {m.p.data(), m.g.data(), m.s1.data(), m.s2.data(), m.copy.data(), &kLr, &kStep, nullptr,
                       &m.skip, int64_t(m.p.size())});
  emu::Launch({unsigned(t.first_block[t.count])}, {kThreads},
              [&] { AdamGroupKernel<float, GradMode::kClamped>(t, b1, b2, eps, wd, 1, 1, clip, 0); });
  for (Member& m : single) {
    const int64_t n = int64_t(m.p.size());
    emu::Launch({Blocks(n)}, {kThreads}, [&] {
      AdamKernel<float, GradMode::kClamped>(m.p.data(), m.g.data(), m.s1.data(), m.s2.data(), &kLr, &kStep, n, b1,
                                            b2, eps, wd, 1, nullptr, 1, clip, &m.skip, m.copy.data(), 0);
    });
  }
  ExpectSame(group, single);
  EXPECT_FALSE(SameBits(group[3].p, Members(true)[3].p)) << "the update changed nothing";
  EXPECT_TRUE(SameBits(group[2].p, Members(true)[2].p)) << "the skipped member changed";
}

}  // namespace
}  // namespace test
}  // namespace loom
