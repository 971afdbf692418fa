// The simulated communicator (io/comm/simulated.h, Note [Simulated ranks]): the alpha-beta costs
// of its collectives, the values of N ranks holding the same data, and its statistics. No clock
// is asserted: the costs are checked as numbers, never as waits.
#include <gtest/gtest.h>

#include <cmath>

#include "dist_common.h"
#include "io/comm/simulated.h"

namespace loom {
namespace test {
namespace {

TEST(SimulatedComm, CostsFollowTheAlphaBetaModel) {
  SimulatedLink l{8, 10, 5};  // 8 ranks, 10 Gbit/s = 1.25e9 bytes/s, 5 us
  // ring all-reduce of 100 MB: 2 * 7 * 5 us + 2 * 7/8 * 1e8 / 1.25e9 s
  EXPECT_NEAR(RingAllReduceSeconds(1e8, l), 70e-6 + 0.14, 1e-12);
  EXPECT_NEAR(RingAllGatherSeconds(1e6, l), 35e-6 + 7 * 0.8e-3, 1e-12);
  EXPECT_NEAR(TreeBroadcastSeconds(1e6, l), 3 * (5e-6 + 0.8e-3), 1e-12);
  EXPECT_NEAR(BarrierSeconds(l), 15e-6, 1e-15);
  // reduce-scatter, ring, of a 1 MB buffer: 7 * 5 us + 7/8 * 1e6 / 1.25e9 s; tree all-reduce:
  // reduce and broadcast, 2 * 3 * (5 us + 1e6 / 1.25e9 s)
  EXPECT_NEAR(RingReduceScatterSeconds(1e6, l), 35e-6 + 0.7e-3, 1e-12);
  EXPECT_NEAR(TreeAllReduceSeconds(1e6, l), 6 * (5e-6 + 0.8e-3), 1e-12);
  // The ops' models: the in-place gather of sharding moves 1/N of its buffer from each rank.
  EXPECT_EQ(CollectiveSeconds("allreduce", 1e8, l), RingAllReduceSeconds(1e8, l));
  EXPECT_EQ(CollectiveSeconds("allreduce", 1e8, l, /*tree=*/true), TreeAllReduceSeconds(1e8, l));
  EXPECT_EQ(CollectiveSeconds("reducescatter", 1e6, l), RingReduceScatterSeconds(1e6, l));
  EXPECT_EQ(CollectiveSeconds("allgather_shards", 8e6, l), RingAllGatherSeconds(1e6, l));
  EXPECT_THROW(CollectiveSeconds("alltoall", 1, l), ValueError);
  // A small buffer over many ranks: the tree's fewer messages win; a large one over few: the ring.
  const SimulatedLink many{512, 10, 5}, few{4, 10, 5};
  EXPECT_LT(TreeAllReduceSeconds(1e3, many), RingAllReduceSeconds(1e3, many));
  EXPECT_LT(RingAllReduceSeconds(1e8, few), TreeAllReduceSeconds(1e8, few));
  l.ranks = 5;  // ceil(log2 5) = 3 rounds
  EXPECT_NEAR(BarrierSeconds(l), 15e-6, 1e-15);
  l.ranks = 1;  // nothing to exchange
  EXPECT_EQ(RingAllReduceSeconds(1e8, l), 0);
  EXPECT_EQ(TreeBroadcastSeconds(1e8, l), 0);
}

TEST(SimulatedComm, ValuesAreThoseOfRanksHoldingTheSameData) {
  SimulatedCommunicator c({4, 1e6, 0});
  std::vector<float> x{1.5f, -2, 3};
  c.AllReduce(x.data(), 3, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(x, (std::vector<float>{6, -8, 12}));
  c.AllReduce(x.data(), 3, DType::kFloat32, ReduceOp::kMax);
  EXPECT_EQ(x, (std::vector<float>{6, -8, 12}));
  std::vector<int64_t> all(8, 0), mine{7, 9};
  c.AllGather(mine.data(), all.data(), 2, DType::kInt64);
  EXPECT_EQ(all, (std::vector<int64_t>{7, 9, 7, 9, 7, 9, 7, 9}));
  c.Broadcast(x.data(), 3, DType::kFloat32, 3);
  EXPECT_EQ(x, (std::vector<float>{6, -8, 12}));
  EXPECT_THROW(c.Broadcast(x.data(), 3, DType::kFloat32, 4), ValueError);
  // A reduce-scatter sums this rank's slot (the first) over 4 ranks holding the same values.
  std::vector<double> slots{1, 2, 5, 5, 5, 5, 5, 5};
  c.ReduceScatter(slots.data(), 2, DType::kFloat64, ReduceOp::kSum);
  EXPECT_EQ(slots[0], 4);
  EXPECT_EQ(slots[1], 8);
  EXPECT_THROW(SimulatedCommunicator({0, 10, 1}), ValueError);
  EXPECT_THROW(SimulatedCommunicator({2, 0, 1}), ValueError);
  EXPECT_THROW(SimulatedCommunicator({2, 10, -1}), ValueError);
  EXPECT_EQ(c.stats().collectives, 5);
}

// Issue order A, X, B, C, D: X (a collective) follows A, D (an update) follows X and C.
TEST(SimulatedComm, PredictedStepOverlapsTheLaneWithCompute) {
  const std::vector<std::vector<int>> succs{{1, 2}, {4}, {3}, {4}, {}};
  const std::vector<bool> lane{false, true, false, false, false};
  // X (1.5 s) runs beside B and C (1 s each): hidden.
  StepPrediction p = PredictStep(succs, lane, {1, 1.5, 1, 1, 0.5});
  EXPECT_DOUBLE_EQ(p.step_s, 3.5);
  EXPECT_DOUBLE_EQ(p.compute_s, 3.5);
  EXPECT_DOUBLE_EQ(p.comm_s, 1.5);
  EXPECT_DOUBLE_EQ(p.exposed_s, 0);
  // X (3 s) outlasts them: D waits for it, 1 s exposed.
  p = PredictStep(succs, lane, {1, 3, 1, 1, 0.5});
  EXPECT_DOUBLE_EQ(p.step_s, 4.5);
  EXPECT_DOUBLE_EQ(p.exposed_s, 1);
  // Everything on one resource in issue order: the sum.
  p = PredictStep(succs, {false, false, false, false, false}, {1, 3, 1, 1, 0.5});
  EXPECT_DOUBLE_EQ(p.step_s, 6.5);
  EXPECT_THROW(PredictStep({{0}}, {false}, {1}), ValueError);
  // Issue order A, X, U, B: U (an update) waits for X, B (backward) only for A. The compute
  // resource runs B while U waits, as the replay does: the step ends with U, at 1 + 3 + 0.5.
  p = PredictStep({{1, 3}, {2}, {}, {}}, {false, true, false, false}, {1, 3, 0.5, 1});
  EXPECT_DOUBLE_EQ(p.step_s, 4.5);
  EXPECT_DOUBLE_EQ(p.exposed_s, 2);
}

// Note [Waiting for the slowest rank]: the expected largest of N draws from the samples, less
// their mean.
TEST(SimulatedComm, WaitForTheSlowestRankGrowsWithRanksAndSpread) {
  EXPECT_DOUBLE_EQ(StragglerSeconds({1, 2, 3, 10}, 1), 0);  // one rank waits for no one
  EXPECT_DOUBLE_EQ(StragglerSeconds({2, 2, 2}, 64), 0);     // ranks that never vary
  // Two samples {1, 3}: the larger of two draws is 3 unless both draw 1 (1/4): 2.5, mean 2.
  EXPECT_DOUBLE_EQ(StragglerSeconds({3, 1}, 2), 0.5);
  // Four samples, one slow (a descheduled step): 4 ranks meet it with 1 - (3/4)^4.
  const std::vector<double> s{1, 1, 1, 5};
  EXPECT_NEAR(StragglerSeconds(s, 4), 1 + 4 * (1 - std::pow(0.75, 4)) - 2, 1e-12);
  double last = 0;
  for (int n : {2, 4, 8, 64, 512}) {
    const double w = StragglerSeconds(s, n);
    EXPECT_GT(w, last) << n << " ranks";
    last = w;
  }
  EXPECT_LE(last, 5 - 2);  // saturates at the slowest sample less the mean
  EXPECT_NEAR(last, 3, 1e-9);
  EXPECT_THROW(StragglerSeconds({}, 2), ValueError);
  EXPECT_THROW(StragglerSeconds({1}, 0), ValueError);
}

// Note [Ranks sharing cores]: a stretch of compute costs its wall time unless the host's ranks need
// more of its cores than it has.
TEST(SimulatedComm, RanksSharingCoresTakeTheirCoresTurns) {
  EXPECT_DOUBLE_EQ(SharedCoresSeconds(1.0, 1.0, 2, 2), 1.0);  // a core per rank
  EXPECT_DOUBLE_EQ(SharedCoresSeconds(1.0, 2.0, 1, 2), 1.0);  // one rank's two threads on two cores
  EXPECT_DOUBLE_EQ(SharedCoresSeconds(1.0, 1.0, 4, 2), 2.0);  // two ranks per core, short ops run whole
  EXPECT_DOUBLE_EQ(SharedCoresSeconds(2.1, 1.0, 4, 2), 2.1);  // long ops the scheduler sliced itself
  EXPECT_DOUBLE_EQ(SharedCoresSeconds(0.5, 0.0, 8, 1), 0.5);  // a stretch that waited (no CPU)
  EXPECT_THROW(SharedCoresSeconds(-1, 1, 1, 1), ValueError);
  EXPECT_THROW(SharedCoresSeconds(1, 1, 0, 1), ValueError);
  EXPECT_THROW(SharedCoresSeconds(1, 1, 1, 0), ValueError);
}

// DistOpt over 4 simulated ranks (the sum is 4 x the gradient, the scale 1/4) trains bitwise as
// plain SGD on the same batch, eagerly and replayed; the statistics count every bucket all-reduce
// of every replay and the model's seconds for their bytes.
TEST(SimulatedComm, DistOptTrainsAsOneRankAndCountsTheModelledTime) {
  const auto plain = TrainMlp(0, 1, nullptr, Mode::kEager, DType::kFloat32, 6).params;
  const SimulatedLink link{4, 1e4, 0.5};
  for (Mode mode : {Mode::kEager, Mode::kSerial, Mode::kParallel}) {
    auto sim = std::make_shared<SimulatedCommunicator>(link);
    GraphOptions o;
    o.bucket_bytes = 2048;
    o.first_bucket_bytes = 512;
    DistRun run = TrainMlp(0, 1, sim, mode, DType::kFloat32, 6, o, Updates::kDuringBackward);
    EXPECT_EQ(RelativeDiff(run.params, plain), 0.0) << Name(mode);
    const SimulatedStats s = sim->stats();
    if (mode == Mode::kEager) {
      EXPECT_EQ(s.collectives, 6 * 6) << "one blocking all-reduce per gradient and step (3 layers x 2)";
      continue;
    }
    // The replays' all-reduces, read from the graph; plus the capture's all-gather of its hash
    // (Note [Ranks capture the same graph]).
    int64_t per_step = 0;
    double bytes = 0, seconds = 0;
    for (const OpRecord& op : run.graph->graph().ops().ops)
      if (op.name() == "allreduce") {
        ++per_step;
        bytes += double(op.inputs[0].nbytes());
        seconds += RingAllReduceSeconds(double(op.inputs[0].nbytes()), link);
      }
    EXPECT_GT(per_step, 2) << Name(mode);
    EXPECT_EQ(s.collectives, 1 + 6 * per_step) << Name(mode);
    EXPECT_NEAR(s.bytes, 8 + 6 * bytes, 1e-6) << Name(mode);
    EXPECT_NEAR(s.modelled_s, RingAllGatherSeconds(8, link) + 6 * seconds, 1e-12) << Name(mode);
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
