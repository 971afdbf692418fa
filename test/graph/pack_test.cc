// The packing of lifetimes into one arena, on synthetic lifetimes: validity, optimality on known cases, and the
// arena / lower bound ratio on graphs with many short-lived blocks of mixed sizes.
#include <gtest/gtest.h>

#include <random>

#include "graph/pack.h"

namespace loom {
namespace {

TEST(Pack, LowerBoundIsMaxLiveSum) {
  std::vector<Lifetime> b = {{100, 0, 2}, {50, 1, 3}, {70, 3, 4}, {10, 4, 4}};
  // step 1-2: 150; step 3: 120; step 4: 80
  EXPECT_EQ(LowerBound(b), 150u);
}

TEST(Pack, DisjointLifetimesShareMemory) {
  std::vector<Lifetime> b = {{4096, 0, 1}, {4096, 2, 3}, {4096, 4, 5}};
  Packing p = PackLifetimes(b, 64);
  EXPECT_TRUE(PackingIsValid(b, p));
  EXPECT_EQ(p.arena_bytes, 4096u);
  EXPECT_EQ(p.offsets[0], p.offsets[1]);
}

TEST(Pack, OverlappingLifetimesDoNotOverlapInMemory) {
  std::vector<Lifetime> b = {{1000, 0, 5}, {2000, 1, 2}, {3000, 2, 4}, {500, 3, 6}};
  for (const Packing& p : {PackGreedyBySize(b, 64), PackOpOrder(b, 64), PackLifetimes(b, 64)}) {
    EXPECT_TRUE(PackingIsValid(b, p)) << p.strategy;
    EXPECT_GE(p.arena_bytes, LowerBound(b)) << p.strategy;
  }
}

TEST(Pack, OffsetsAreAligned) {
  std::vector<Lifetime> b = {{100, 0, 3}, {37, 1, 2}, {1, 1, 3}, {999, 2, 3}};
  Packing p = PackLifetimes(b, 256);
  for (size_t o : p.offsets) EXPECT_EQ(o % 256, 0u);
  EXPECT_TRUE(PackingIsValid(b, p));
}

// A chain like a network's forward and backward: activations live until their gradient step.
std::vector<Lifetime> NetworkLike(int layers, size_t act, size_t grad) {
  std::vector<Lifetime> b;
  int n = 2 * layers;
  for (int l = 0; l < layers; ++l) {
    b.push_back({act * size_t(1 + l % 3), l, n - 1 - l});        // activation, read by backward
    b.push_back({grad * size_t(1 + l % 2), n - 1 - l, n - l});   // gradient, short-lived
  }
  return b;
}

TEST(Pack, NetworkLikeGraphWithinFivePercent) {
  std::vector<Lifetime> b = NetworkLike(20, 1 << 20, 1 << 19);
  Packing p = PackLifetimes(b, 64);
  ASSERT_TRUE(PackingIsValid(b, p));
  EXPECT_LE(double(p.arena_bytes), 1.05 * double(LowerBound(b))) << p.strategy;
}

TEST(Pack, ManyShortLivedMixedSizesWithinFivePercent) {
  std::mt19937 gen(42);
  std::uniform_int_distribution<int> len(0, 4);
  std::uniform_int_distribution<int> kind(0, 9);
  std::vector<Lifetime> b;
  for (int step = 0; step < 400; ++step) {
    // Each step makes 1-3 blocks of mixed sizes (64 KiB .. 4 MiB, some tiny) that die soon.
    int k = 1 + step % 3;
    for (int j = 0; j < k; ++j) {
      size_t sz = kind(gen) == 0 ? size_t(64 + 32 * j) : (size_t(64) << 10) << (kind(gen) % 7);
      b.push_back({sz, step, step + len(gen)});
    }
  }
  Packing p = PackLifetimes(b, 64);
  ASSERT_TRUE(PackingIsValid(b, p));
  double ratio = double(p.arena_bytes) / double(LowerBound(b));
  EXPECT_LE(ratio, 1.05) << p.strategy << " arena " << p.arena_bytes << " lower bound " << LowerBound(b);
}

TEST(Pack, BothStrategiesAreValidOnRandomGraphs) {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<Lifetime> b;
    std::uniform_int_distribution<int> begin(0, 50), len(0, 20), size(1, 100000);
    for (int i = 0; i < 60; ++i) {
      int s = begin(gen);
      b.push_back({size_t(size(gen)), s, s + len(gen)});
    }
    EXPECT_TRUE(PackingIsValid(b, PackGreedyBySize(b, 64)));
    EXPECT_TRUE(PackingIsValid(b, PackOpOrder(b, 64)));
  }
}

TEST(Pack, EmptyGraph) {
  Packing p = PackLifetimes({}, 64);
  EXPECT_EQ(p.arena_bytes, 0u);
  EXPECT_EQ(LowerBound({}), 0u);
}

}  // namespace
}  // namespace loom
