// Step 1 of the graph (graph/capture.h) on hand-built op lists: block indices in first-touch
// order, access lists, random offsets, unwritten reads, who holds a block at the end of a
// capture, and the list a pass rebuilds. Nothing runs: the records are only listed.
#include <gtest/gtest.h>

#include "common/harness.h"
#include "common/op_lists.h"
#include "graph/capture.h"

namespace loom {
namespace test {
namespace {

TEST(Capture, BlocksAreIndexedInFirstTouchOrderWithTheirAccesses) {
  Tensor x = ops::Zeros({8}, DType::kFloat32, CpuDevice());
  Tensor a = Lazy(8), b = Lazy(8);
  OpList l("t");
  l.Append(Record("relu", {x}, {a}));
  l.Append(Record("add", {a, x}, {b}));
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l.BlockIndex(x.block()), 0);
  EXPECT_EQ(l.BlockIndex(a.block()), 1);
  EXPECT_EQ(l.BlockIndex(b.block()), 2);
  EXPECT_EQ(l.BlockIndex(Lazy(1).block()), -1);
  EXPECT_EQ(l.access[1].reads, (std::vector<int>{1, 0}));
  EXPECT_EQ(l.access[1].writes, (std::vector<int>{2}));
  EXPECT_TRUE(l.facts[0].has_memory);
  EXPECT_FALSE(l.facts[1].has_memory);
  EXPECT_EQ(l.facts[2].bytes, 32u);
}

TEST(Capture, RandomOpsGetConsecutiveCounterRanges) {
  Tensor u = Lazy(10), v = Lazy(3);
  OpList l("t");
  l.Append(Record("uniform", {}, {u}, Attrs({{"low", 0.0}, {"high", 1.0}})));
  l.Append(Record("uniform", {}, {v}, Attrs({{"low", 0.0}, {"high", 1.0}})));
  EXPECT_EQ(l.ops[0].rng_offset, 0u);
  EXPECT_EQ(l.ops[1].rng_offset, 3u);  // one counter per four elements: ceil(10 / 4)
  EXPECT_EQ(l.random_draws, 4u);
}

TEST(Capture, ReadingABlockNothingWroteRaises) {
  OpList l("t");
  LOOM_EXPECT_THROW_MSG(l.Append(Record("relu", {Lazy(4)}, {Lazy(4)})), GraphError,
                        "[graph 't'] op 0 (relu) reads input 0 (float32 (4,) on cpu:0) that nothing has written");
}

TEST(Capture, HoldersAreNotedAtTheEndOfTheCapture) {
  Tensor x = ops::Zeros({4}, DType::kFloat32, CpuDevice());
  x.block()->set_persistent(true);
  OpList l("t");
  Tensor held = Lazy(4);
  {
    Tensor dropped = Lazy(4);
    l.Append(Record("relu", {x}, {dropped}));
    l.Append(Record("exp", {dropped}, {held}));
  }
  l.NoteHolders();
  EXPECT_TRUE(l.facts[0].marked_persistent);  // x: marked by its creator (and held here)
  EXPECT_FALSE(l.facts[1].held_outside);      // only the records hold it
  EXPECT_TRUE(l.facts[2].held_outside);       // the test still holds it
}

TEST(Capture, ARebuiltListKeepsWhatTheCaptureKnewOfEachBlock) {
  Tensor x = ops::Zeros({4}, DType::kFloat32, CpuDevice());
  Tensor a = Lazy(4), b = Lazy(4), c = Lazy(4);
  OpList l("t");
  l.Append(Record("relu", {x}, {a}));
  l.Append(Record("exp", {a}, {b}));
  l.Append(Record("tanh", {x}, {c}));
  l.NoteHolders();
  ASSERT_TRUE(l.facts[l.BlockIndex(c.block())].held_outside);
  // A "pass" that drops the first two ops.
  std::vector<OpRecord> kept = {l.ops[2]};
  a = b = Tensor();
  OpList r = Rebuild(std::move(kept), l);
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(r.blocks.size(), 2u);
  EXPECT_EQ(r.graph_name(), "t");
  EXPECT_EQ(r.BlockIndex(x.block()), 0);
  EXPECT_TRUE(r.facts[1].held_outside);  // carried over, not recounted
  EXPECT_EQ(r.access[0].reads, std::vector<int>{0});
}

}  // namespace
}  // namespace test
}  // namespace loom
