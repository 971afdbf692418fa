// The schedule of the parallel replay (graph/schedule.h) on synthetic op lists: the analysis'
// edges, the edges in-place reuse and shared arena bytes add, and the parallel-or-serial choice
// with injected op costs (no clock: Note [Parallel or serial]).
#include <gtest/gtest.h>

#include <algorithm>

#include "graph/schedule.h"

namespace loom {
namespace {

// An op list as the schedule sees it: accesses and block sizes (no records, no Block objects).
OpList Synthetic(std::vector<AccessList> access, size_t nblocks, const std::vector<int>& inputs) {
  OpList l;
  l.ops.resize(access.size());
  l.access = std::move(access);
  l.blocks.resize(nblocks);
  l.facts.assign(nblocks, BlockFacts{64, false, false, false});
  for (int b : inputs) l.facts[size_t(b)].has_memory = true;
  l.uses.resize(nblocks);  // what OpList::Append would index
  for (size_t i = 0; i < l.access.size(); ++i) {
    for (int b : l.access[i].reads) l.uses[size_t(b)].readers.push_back(int(i));
    for (int b : l.access[i].writes) l.uses[size_t(b)].writers.push_back(int(i));
  }
  return l;
}

bool Waits(const Schedule& s, int from, int to) {
  const auto& v = s.succs[size_t(from)];
  return std::find(v.begin(), v.end(), to) != v.end();
}

TEST(Schedule, DynamicMemoryKeepsTheAnalysisEdges) {
  // 0: b1 = f(b0); 1: b2 = f(b0); 2: b3 = f(b1, b2)
  OpList l = Synthetic({{{0}, {1}}, {{0}, {2}}, {{1, 2}, {3}}}, 4, {0});
  Analysis a = Analyse(l.access, l.facts);
  Schedule s = BuildSchedule(l, a, MemoryLayout());
  EXPECT_TRUE(Waits(s, 0, 2));
  EXPECT_TRUE(Waits(s, 1, 2));
  EXPECT_FALSE(Waits(s, 0, 1));  // two readers of b0: independent
  EXPECT_EQ(s.npreds, (std::vector<int>{0, 0, 2}));
}

TEST(Schedule, AnOpWritingIntoItsInputWaitsForTheInputsOtherReaders) {
  // 0: b1 = f(b0); 1: b2 = g(b1); 2: b3 = h(b1), b3 taking over b1's memory (b1 dies at op 2).
  // The analysis orders nothing between 1 and 2 (both only read b1); overwriting b1 needs 1 first.
  OpList l = Synthetic({{{0}, {1}}, {{1}, {2}}, {{1}, {3}}}, 4, {0});
  Analysis a = Analyse(l.access, l.facts);
  EXPECT_FALSE(Waits(BuildSchedule(l, a, MemoryLayout()), 1, 2));
  MemoryLayout m;
  m.entries = {{64, 0, 2}, {64, 1, 1}};
  m.entry_ops = {{0, 1, 2}, {1}};
  m.entry_of_block = {-1, 0, 1, 0};
  m.inplace = {{2, 1, 3}};
  m.packing.offsets = {0, 64};
  m.packing.arena_bytes = 128;
  Schedule s = BuildSchedule(l, a, m);
  EXPECT_TRUE(Waits(s, 1, 2));
  EXPECT_TRUE(Waits(s, 0, 2));
}

TEST(Schedule, BlocksSharingArenaBytesAreOrdered) {
  // Two independent chains: 0: b1 = f(b0); 1: b2 = f(b1) and 2: b3 = f(b0); 3: b4 = f(b3).
  // Plan: b1 (ops 0-1) and b3 (ops 2-3) at the same offset, so ops 0 and 1 finish before op 2.
  OpList l = Synthetic({{{0}, {1}}, {{1}, {2}}, {{0}, {3}}, {{3}, {4}}}, 5, {0});
  l.facts[2].held_outside = l.facts[4].held_outside = true;
  Analysis a = Analyse(l.access, l.facts);
  EXPECT_FALSE(Waits(BuildSchedule(l, a, MemoryLayout()), 1, 2));
  MemoryLayout m;
  m.entries = {{64, 0, 1}, {64, 2, 3}};
  m.entry_ops = {{0, 1}, {2, 3}};
  m.entry_of_block = {-1, 0, -1, 1, -1};
  m.packing.offsets = {0, 0};
  m.packing.arena_bytes = 64;
  Schedule s = BuildSchedule(l, a, m);
  EXPECT_TRUE(Waits(s, 0, 2));
  EXPECT_TRUE(Waits(s, 1, 2));
  EXPECT_FALSE(Waits(s, 2, 1));
  // At different offsets they stay independent.
  m.packing.offsets = {0, 64};
  m.packing.arena_bytes = 128;
  EXPECT_FALSE(Waits(BuildSchedule(l, a, m), 1, 2));
}

Schedule FromEdges(size_t n, const std::vector<std::pair<int, int>>& edges) {
  Schedule s;
  s.succs.assign(n, {});
  s.npreds.assign(n, 0);
  for (auto& e : edges) {
    s.succs[size_t(e.first)].push_back(e.second);
    s.npreds[size_t(e.second)]++;
  }
  return s;
}

TEST(ParallelOrSerial, AChainRunsSeriallyWhateverItsCosts) {
  Schedule chain = FromEdges(4, {{0, 1}, {1, 2}, {2, 3}});
  for (auto costs : {std::vector<double>{5, 1, 3, 2}, std::vector<double>{1, 1, 1, 1}}) {
    ParallelChoice c = ChooseParallelOrSerial(chain, costs, 2);
    EXPECT_DOUBLE_EQ(c.parallelism, 1.0);
    EXPECT_TRUE(c.run_serially);
  }
}

TEST(ParallelOrSerial, IndependentOpsRunInParallelWhenThereIsEnoughWorkForTheWorkers) {
  Schedule wide = FromEdges(4, {});
  ParallelChoice c = ChooseParallelOrSerial(wide, {2, 2, 2, 2}, 2);
  EXPECT_DOUBLE_EQ(c.parallelism, 4.0);
  EXPECT_FALSE(c.run_serially);
  // Eight workers want more than four ops' worth of parallel work (0.9 x 8).
  EXPECT_TRUE(ChooseParallelOrSerial(wide, {2, 2, 2, 2}, 8).run_serially);
  // One long op dominates: 13 / 10 is too little for two workers.
  ParallelChoice skewed = ChooseParallelOrSerial(wide, {10, 1, 1, 1}, 2);
  EXPECT_DOUBLE_EQ(skewed.parallelism, 1.3);
  EXPECT_TRUE(skewed.run_serially);
}

TEST(ParallelOrSerial, ADiamondIsWeighedByItsLongestPath) {
  // 0 -> {1, 2} -> 3
  Schedule diamond = FromEdges(4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}});
  ParallelChoice narrow = ChooseParallelOrSerial(diamond, {1, 4, 4, 1}, 2);  // 10 / 6
  EXPECT_NEAR(narrow.parallelism, 10.0 / 6.0, 1e-12);
  EXPECT_TRUE(narrow.run_serially);
  ParallelChoice wide = ChooseParallelOrSerial(diamond, {1, 9, 9, 1}, 2);  // 20 / 11, above 0.9 x 2
  EXPECT_NEAR(wide.parallelism, 20.0 / 11.0, 1e-12);
  EXPECT_FALSE(wide.run_serially);
}

// Note [Parallel or serial], with collectives: a backward chain 0 -> 1 -> 2 -> 3 -> 4 whose
// gradients are all-reduced on the lane (5 after 1, 6 after 3, chained through the token) and
// then read by updates (7, 8). Counted as critical-path work, the waits make the graph look like
// a chain (parallelism 13 / 9, below 0.9 x 2); on their own lane they hide behind the backward,
// and the played-out parallel replay ends at 9 against 13 for the serial one.
Schedule BackwardWithAllReduces() {
  Schedule s = FromEdges(9, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {1, 5}, {3, 6}, {5, 6}, {5, 7}, {6, 8}});
  s.lane.assign(9, Lane::kCompute);
  s.lane[5] = s.lane[6] = Lane::kCollective;
  return s;
}

TEST(ParallelOrSerial, CollectivesOnTheirLaneKeepAChainParallelWhenTheOverlapPays) {
  const Schedule s = BackwardWithAllReduces();
  const std::vector<double> costs{1, 1, 1, 1, 1, 3, 3, 1, 1};
  for (int pool : {1, 2}) {
    const ParallelChoice c = ChooseParallelOrSerial(s, costs, 2, pool);
    EXPECT_NEAR(c.parallelism, 13.0 / 9.0, 1e-12);  // the parallelism rule alone: serial
    EXPECT_DOUBLE_EQ(c.serial_cost, 13.0);
    EXPECT_LE(c.parallel_cost, 0.9 * 13.0) << "pool " << pool;
    EXPECT_FALSE(c.run_serially) << "pool " << pool;
  }
  // Played out exactly, one worker, one pool thread: 0 1 | 2 3 4 beside the first all-reduce
  // (2..5) | 7 beside the second (5..8) | 8 after it.
  EXPECT_DOUBLE_EQ(ChooseParallelOrSerial(s, costs, 1, 1).parallel_cost, 9.0);
  // The same graph with no lane (the collectives as compute): the old view, a serial replay.
  Schedule no_lane = s;
  no_lane.lane.clear();
  EXPECT_TRUE(ChooseParallelOrSerial(no_lane, costs, 2, 2).run_serially);
  // Cheap collectives hide nothing worth the handoffs: serial.
  EXPECT_TRUE(ChooseParallelOrSerial(s, {1, 1, 1, 1, 1, 0.1, 0.1, 1, 1}, 2, 2).run_serially);
}

// Without collectives the played-out parallel replay is never faster than the serial one, so
// the parallelism rule alone decides (the cases above).
TEST(ParallelOrSerial, WithoutCollectivesThePlayOutNeverBeatsSerial) {
  const Schedule diamond = FromEdges(4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}});
  const Schedule wide = FromEdges(4, {});
  for (int workers : {1, 2, 4})
    for (int pool : {1, 2, 4}) {
      EXPECT_GE(ChooseParallelOrSerial(diamond, {1, 9, 9, 1}, workers, pool).parallel_cost, 20.0);
      EXPECT_GE(ChooseParallelOrSerial(wide, {2, 2, 2, 2}, workers, pool).parallel_cost, 8.0);
    }
}

}  // namespace
}  // namespace loom
