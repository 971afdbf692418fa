// CUDA's grad_norm (src/device/cuda/grad_norm_kernels.cuh, Note [Gradient norms in few launches])
// run on the CPU by the emulator (Note [CUDA kernels emulated on the CPU]), launched as
// schedule.cu launches it: 50 gradients (two tables of at most 48), empty ones and one of a single
// value, in float32 and float64, against the float64 norm; and a gradient with fewer blocks than
// its values need (as NormBlocks gives one of over 2^18 values), whose threads stride.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "emu/cuda_emu.h"  // before the kernels' sources: its macros name CUDA's built-ins
#include "device/cuda/device_math.cuh"

namespace loom {
namespace cuda {
namespace {
#include "device/cuda/grad_norm_kernels.cuh"
}  // namespace
}  // namespace cuda

namespace test {
namespace {

using namespace cuda;  // the kernels, as schedule.cu sees them

// schedule.cu's GradNormCuda over tensors of one dtype.
template <typename T>
double GradNorm(const std::vector<std::vector<T>>& grads) {
  int64_t parts = 0;
  for (const auto& g : grads) parts += NormBlocks(int64_t(g.size()));
  std::vector<double> partial(size_t(parts), NAN);
  int64_t at = 0;
  NormTable table;
  auto flush = [&] {
    const int64_t blocks = table.first_block[table.count];
    emu::Launch({unsigned(blocks)}, {kNormThreads}, [&] { SumSquaresKernel<T>(table, partial.data() + at); });
    at += blocks;
    table.count = 0;
  };
  for (const auto& g : grads) {
    if (table.count == kNormTable) flush();
    AddNormTensor(table, g.data(), int64_t(g.size()));
  }
  flush();
  EXPECT_EQ(at, parts);
  double norm = NAN;
  emu::Launch({1}, {kNormThreads}, [&] { SqrtOfSumKernel(partial.data(), at, &norm); });
  return norm;
}

template <typename T>
void Check() {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<std::vector<T>> grads;
  double want = 0;
  for (int k = 0; k < 50; ++k) {
    // a block each: a few hundred values; empty ones and a single value
    const size_t n = k % 17 == 3 ? 0 : k == 5 ? 1 : 100 + 7 * size_t(k);
    std::vector<T> g(n);
    for (T& v : g) {
      v = T(u(rng));
      want += double(v) * double(v);
    }
    grads.push_back(std::move(g));
  }
  EXPECT_NEAR(GradNorm(grads), std::sqrt(want), 1e-12 * std::sqrt(want));
}

TEST(GradNormKernels, TablesOfGradientsGiveTheNorm) {
  Check<float>();
  Check<double>();
}

// NormBlocks caps a gradient at kNormBlocks blocks (2^18 values and more); two blocks for 5,000
// values here stride the same way: each thread adds values a step of 1,024 apart.
TEST(GradNormKernels, ThreadsStrideOverAGradientWithFewerBlocksThanItsValuesNeed) {
  EXPECT_EQ(NormBlocks(int64_t(1) << 20), kNormBlocks);
  std::vector<float> g(5000);
  double want = 0;
  for (size_t i = 0; i < g.size(); ++i) want += double(g[i] = float(i % 7) - 3.f) * double(g[i]);
  NormTable table;
  AddNormTensor(table, g.data(), int64_t(g.size()));
  table.first_block[1] = 2;
  std::vector<double> partial(2, NAN);
  emu::Launch({2}, {kNormThreads}, [&] { SumSquaresKernel<float>(table, partial.data()); });
  EXPECT_EQ(partial[0] + partial[1], want);
}

}  // namespace
}  // namespace test
}  // namespace loom
