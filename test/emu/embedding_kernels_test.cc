// CUDA's embedding and its gradient by sorted rows (src/device/cuda/embedding_kernels.cuh, Note
// [Embedding gradient by sorted rows]) run on the CPU by the emulator (Note [CUDA kernels
// emulated on the CPU]), launched as transformer.cu launches them with a stable sort standing
// in for CUB's: each row of the gradient is the CPU's float sum in order of the tokens, bit for
// bit (a token 20 times, rows no token names), and an index outside the table is the recorded
// error with every value NaN; the lookup copies rows and makes a bad index's row NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "emu/cuda_emu.h"  // before the kernels' sources: its macros name CUDA's built-ins
#include "device/cuda/device_math.cuh"

namespace loom {
namespace cuda {
namespace {
#include "device/cuda/embedding_kernels.cuh"
}  // namespace
}  // namespace cuda

namespace test {
namespace {

using namespace cuda;  // the kernels, as transformer.cu sees them

constexpr int64_t kV = 37, kD = 20;

// transformer.cu's EmbeddingGradCuda, std::stable_sort in CUB's place.
std::vector<float> EmbeddingGrad(const std::vector<int64_t>& idx, const std::vector<float>& dy, KernelError& err) {
  const int64_t n = int64_t(idx.size());
  std::vector<uint32_t> keys(idx.size()), tokens(idx.size());
  std::vector<int> begin(size_t(kV), 0), end(size_t(kV), 0);
  int bad = 0;
  emu::Launch({Blocks(n)}, {kThreads}, [&] {
    EmbeddingRowKeysKernel<int64_t>(idx.data(), n, kV, keys.data(), tokens.data(), &bad, &err);
  });
  std::vector<size_t> order(idx.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  std::vector<uint32_t> sorted_keys(idx.size()), sorted_tokens(idx.size());
  for (size_t p = 0; p < order.size(); ++p) sorted_keys[p] = keys[order[p]], sorted_tokens[p] = tokens[order[p]];
  emu::Launch({Blocks(n)}, {kThreads},
              [&] { EmbeddingRowBoundsKernel(sorted_keys.data(), n, kV, begin.data(), end.data()); });
  std::vector<float> g(size_t(kV * kD), 123.f);
  emu::Launch({Blocks(kV * kD)}, {kThreads}, [&] {
    EmbeddingRowSumsKernel<float>(sorted_tokens.data(), begin.data(), end.data(), &bad, dy.data(), g.data(), kV, kD);
  });
  return g;
}

std::vector<int64_t> Indices(int64_t n) {
  std::mt19937 rng(13);
  std::uniform_int_distribution<int64_t> row(0, kV / 2);  // rows past V / 2: named by no token
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = i % 3 == 0 ? 5 : row(rng);  // row 5: every third token
  return idx;
}

TEST(EmbeddingKernels, GradientRowsAreTheCpusSumsInTokenOrder) {
  const std::vector<int64_t> idx = Indices(60);
  std::mt19937 rng(14);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> dy(idx.size() * size_t(kD));
  for (float& v : dy) v = u(rng);
  KernelError err{};
  const std::vector<float> g = EmbeddingGrad(idx, dy, err);
  EXPECT_EQ(err.code, kKernelOk);
  std::vector<float> want(g.size(), 0.f);  // the CPU's loop: tokens in order, float sums
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t j = 0; j < kD; ++j) want[size_t(idx[i] * kD + j)] += dy[i * size_t(kD) + size_t(j)];
  EXPECT_GE(std::count(idx.begin(), idx.end(), 5), 20);  // more than kLoadsAhead a row
  EXPECT_EQ(std::memcmp(g.data(), want.data(), g.size() * sizeof(float)), 0);
}

TEST(EmbeddingKernels, AnIndexOutsideTheTableIsRecordedAndMakesNaN) {
  std::vector<int64_t> idx = Indices(12);
  idx[7] = kV;
  idx[9] = -1;
  const std::vector<float> dy(idx.size() * size_t(kD), 1.f);
  KernelError err{};
  const std::vector<float> g = EmbeddingGrad(idx, dy, err);
  EXPECT_EQ(err.code, kIndexOutOfRange);
  EXPECT_EQ(err.op, kOpEmbeddingGrad);
  EXPECT_EQ(err.a, 7);  // the first bad position, as the CPU's scan reports it
  EXPECT_EQ(err.b, kV);
  EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float v) { return std::isnan(v); }));

  std::vector<float> table(size_t(kV * kD));
  std::iota(table.begin(), table.end(), 0.f);
  std::vector<float> y(idx.size() * size_t(kD), 0.f);
  KernelError ferr{};
  const int64_t n = int64_t(idx.size());
  emu::Launch({Blocks(n * kD)}, {kThreads}, [&] {
    EmbeddingKernel<float, int64_t>(table.data(), idx.data(), y.data(), n, kV, kD, &ferr);
  });
  EXPECT_EQ(ferr.code, kIndexOutOfRange);
  EXPECT_EQ(ferr.a, 7);
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t j = 0; j < kD; ++j) {
      const float got = y[i * size_t(kD) + size_t(j)];
      if (idx[i] < 0 || idx[i] >= kV) {
        EXPECT_TRUE(std::isnan(got)) << i;
      } else {
        EXPECT_EQ(got, table[size_t(idx[i] * kD + j)]) << i;
      }
    }
}

}  // namespace
}  // namespace test
}  // namespace loom
