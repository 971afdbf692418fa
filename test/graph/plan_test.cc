// Step 3 of the graph (graph/plan.h) on hand-built op lists: in-place groups, scratch entries,
// offsets and the planned live bytes. Nothing runs.
#include <gtest/gtest.h>

#include "common/harness.h"
#include "common/op_lists.h"
#include "graph/plan.h"

namespace loom {
namespace test {
namespace {

struct Planned {
  OpList list{"plan"};
  Analysis analysis;
  MemoryLayout layout;
  void Finish(const std::vector<size_t>& scratch = {}) {
    list.NoteHolders();
    analysis = Analyse(list.access, list.facts);
    layout = PlanMemory(list, analysis, scratch);
  }
  int Entry(const Block* b) const { return layout.entry_of_block[size_t(list.BlockIndex(b))]; }
};

TEST(Plan, AnElementwiseChainRunsInPlace) {
  // x -> relu -> a -> sigmoid -> b -> tanh -> out (held): a dies at sigmoid, so b takes a's memory.
  Tensor x = ops::Zeros({256}, DType::kFloat32, CpuDevice());
  Tensor out = Lazy(256);
  Planned p;
  const Block *a_block, *b_block;
  {
    Tensor a = Lazy(256), b = Lazy(256);  // only the records hold them at the end
    a_block = a.block();
    b_block = b.block();
    p.list.Append(Record("relu", {x}, {a}));
    p.list.Append(Record("sigmoid", {a}, {b}));
    p.list.Append(Record("tanh", {b}, {out}));
  }
  p.Finish();
  EXPECT_EQ(p.Entry(a_block), p.Entry(b_block));
  EXPECT_GE(p.Entry(a_block), 0);
  EXPECT_EQ(p.Entry(x.block()), -1);    // an input persists
  EXPECT_EQ(p.Entry(out.block()), -1);  // held outside: persists
  ASSERT_EQ(p.layout.inplace.size(), 1u);
  EXPECT_EQ(p.layout.inplace[0].op, 1);
  ASSERT_EQ(p.layout.entries.size(), 1u);
  EXPECT_EQ(p.layout.entries[0].begin, 0);
  EXPECT_EQ(p.layout.entries[0].end, 2);
  EXPECT_EQ(p.layout.entry_ops[0], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(p.layout.lower_bound_bytes, 1024u);
  EXPECT_EQ(p.layout.packing.arena_bytes, 1024u);
}

TEST(Plan, AnInputStillReadLaterIsNotOverwritten) {
  // a is read by sigmoid and again by add: sigmoid may not write into it.
  Tensor x = ops::Zeros({64}, DType::kFloat32, CpuDevice());
  Tensor out = Lazy(64);
  Planned p;
  Tensor a = Lazy(64), b = Lazy(64);
  p.list.Append(Record("relu", {x}, {a}));
  p.list.Append(Record("sigmoid", {a}, {b}));
  p.list.Append(Record("add", {a, b}, {out}));
  a = b = Tensor();
  p.Finish();
  EXPECT_FALSE(CanRunInPlace(p.list, p.analysis, 1, 0));
  EXPECT_TRUE(p.layout.inplace.empty() || p.layout.inplace[0].op == 2);
  EXPECT_TRUE(PackingIsValid(p.layout.entries, p.layout.packing));
}

TEST(Plan, ScratchIsOneMoreEntryAliveAtItsOpOnly) {
  Tensor x = ops::Zeros({64}, DType::kFloat32, CpuDevice());
  Tensor out = Lazy(64);
  Planned p;
  {
    Tensor a = Lazy(64), b = Lazy(64);
    p.list.Append(Record("relu", {x}, {a}));
    p.list.Append(Record("exp", {x}, {b}));
    p.list.Append(Record("add", {a, b}, {out}));
  }
  p.Finish({0, 1000, 0});
  const int e = p.layout.scratch_entry[1];
  ASSERT_GE(e, 0);
  EXPECT_EQ(p.layout.scratch_entry[0], -1);
  EXPECT_EQ(p.layout.entries[size_t(e)].bytes, 1000u);
  EXPECT_EQ(p.layout.entries[size_t(e)].begin, 1);
  EXPECT_EQ(p.layout.entries[size_t(e)].end, 1);
  EXPECT_EQ(p.layout.ScratchBytes(1), 1000u);
  EXPECT_EQ(p.layout.ScratchBytes(0), 0u);
  EXPECT_NE(p.layout.ScratchOffset(1), SIZE_MAX);
  EXPECT_EQ(p.layout.ScratchOffset(2), SIZE_MAX);
  // At op 1: a (256 B), b (256 B) and the scratch.
  EXPECT_EQ(p.layout.live_bytes[1], 256u + 256u + 1000u);
  EXPECT_TRUE(PackingIsValid(p.layout.entries, p.layout.packing));
  // Offsets of blocks and scratch never overlap while both live.
  const size_t s0 = p.layout.ScratchOffset(1), s1 = s0 + 1000;
  for (int b = 0; b < int(p.list.blocks.size()); ++b) {
    const size_t o = p.layout.BlockOffset(b);
    if (o == SIZE_MAX) continue;
    EXPECT_TRUE(o + p.list.facts[size_t(b)].bytes <= s0 || s1 <= o) << "block " << b;
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
