// Dependency analysis on hand-made access lists: all three hazards for every block, parameters
// included, lifetimes, refcounts and persistence.
#include <gtest/gtest.h>

#include <algorithm>

#include "graph/analysis.h"

namespace loom {
namespace {

bool HasEdge(const Analysis& a, int from, int to, DepKind k) {
  for (const Dep& d : a.deps)
    if (d.from == from && d.to == to) return d.kinds & uint8_t(k);
  return false;
}

TEST(Analysis, ReadAfterWrite) {
  // 0: writes b1 from b0; 1: reads b1 writes b2
  std::vector<AccessList> ops = {{{0}, {1}}, {{1}, {2}}};
  std::vector<BlockFacts> blocks(3, BlockFacts{16, false, false, false});
  blocks[0].has_memory = true;
  Analysis a = Analyse(ops, blocks);
  EXPECT_TRUE(HasEdge(a, 0, 1, DepKind::kRAW));
  EXPECT_EQ(a.deps.size(), 1u);
}

// The SINGA bug: a parameter read by the forward pass and updated by the optimizer, with no
// earlier writer in the graph. The update must wait for every reader.
TEST(Analysis, WriteAfterReadOnParameterWithoutEarlierWriter) {
  // b0 = param (has memory), b1 = input, b2 = activation, b3 = grad
  // 0: act = f(param, input); 1: grad = g(act); 2: param = update(param, grad);
  // 3: another reader of param placed before the update in issue order? -> reorder: reader at 1
  std::vector<AccessList> ops = {
      {{0, 1}, {2}},  // forward reads the parameter
      {{2}, {3}},     // backward
      {{0, 3}, {0}},  // optimizer updates the parameter in place
  };
  std::vector<BlockFacts> blocks(4, BlockFacts{64, false, false, false});
  blocks[0].has_memory = blocks[1].has_memory = true;
  Analysis a = Analyse(ops, blocks);
  EXPECT_TRUE(HasEdge(a, 0, 2, DepKind::kWAR));
  EXPECT_TRUE(HasEdge(a, 1, 2, DepKind::kRAW));
  EXPECT_TRUE(a.blocks[0].persistent);
  EXPECT_TRUE(a.blocks[0].read_before_write);
}

TEST(Analysis, WriteAfterWrite) {
  std::vector<AccessList> ops = {{{}, {0}}, {{}, {0}}, {{0}, {1}}};
  std::vector<BlockFacts> blocks(2, BlockFacts{8, false, false, false});
  Analysis a = Analyse(ops, blocks);
  EXPECT_TRUE(HasEdge(a, 0, 1, DepKind::kWAW));
  EXPECT_TRUE(HasEdge(a, 1, 2, DepKind::kRAW));
  EXPECT_FALSE(HasEdge(a, 0, 2, DepKind::kRAW));  // the second write shadows the first
}

TEST(Analysis, LifetimesRefcountsAndRecyclingPoints) {
  // 0: b1 = f(b0); 1: b2 = g(b1); 2: b3 = h(b1, b2); b3 held by the user (the loss)
  std::vector<AccessList> ops = {{{0}, {1}}, {{1}, {2}}, {{1, 2}, {3}}};
  std::vector<BlockFacts> blocks = {{100, false, false, true}, {200, false, false, false}, {300, false, false, false},
                                    {4, false, true, false}};
  Analysis a = Analyse(ops, blocks);
  EXPECT_EQ(a.blocks[1].first, 0);
  EXPECT_EQ(a.blocks[1].last, 2);
  EXPECT_EQ(a.blocks[1].accessors, 3);
  EXPECT_EQ(a.blocks[2].first, 1);
  EXPECT_EQ(a.blocks[2].last, 2);
  EXPECT_TRUE(a.blocks[0].persistent);
  EXPECT_TRUE(a.blocks[3].persistent);
  EXPECT_FALSE(a.blocks[1].persistent);
  EXPECT_EQ(a.allocs[0], std::vector<int>{1});
  EXPECT_EQ(a.frees[2], (std::vector<int>{1, 2}));
  EXPECT_EQ(a.lower_bound_bytes, 500u);
  EXPECT_EQ(a.persistent_bytes, 104u);
}

TEST(Analysis, InPlaceUpdateHasNoSelfEdge) {
  std::vector<AccessList> ops = {{{0}, {0}}};
  std::vector<BlockFacts> blocks(1, BlockFacts{8, true, false, true});
  Analysis a = Analyse(ops, blocks);
  EXPECT_TRUE(a.deps.empty());
}

}  // namespace
}  // namespace loom
