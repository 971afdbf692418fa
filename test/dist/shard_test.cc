// Sharded optimizer state (Note [Sharded optimizer state] in nn/dist_opt.h): N sharded ranks give
// the numbers of one rank, in eager mode and in serial and parallel replay, through Step and
// through BackwardAndUpdate, with SGD and AdamW (and its schedule), clipping by global norm, small
// and large buckets; each rank keeps 1/N of the state; the collectives of a bucket are issued
// while backward runs; misuse is a typed error. Rank functions run under a launcher (Note [Rank
// launchers]).
#include <gtest/gtest.h>

#include <cmath>

#include "dist_common.h"
#include "io/comm/simulated.h"

LOOM_OP_KIND(reducescatter);
LOOM_OP_KIND(allgather_shards);
LOOM_OP_KIND(allreduce);

namespace loom {
namespace test {
namespace {

const Mode kModes[] = {Mode::kEager, Mode::kSerial, Mode::kParallel};

TEST(DistShard, ShardedRanksEqualOneRankInFloat64) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    const int world = comm->size();
    for (bool adam : {false, true}) {
      const auto one = TrainMlp(0, 1, nullptr, Mode::kEager, DType::kFloat64, 10, {}, Updates::kAfterBackward, {},
                                OptSpec{adam, false})
                           .params;
      for (size_t bucket : {size_t(512), size_t(25) << 20})
        for (Updates updates : {Updates::kAfterBackward, Updates::kBackwardAndUpdate})
          for (Mode mode : kModes) {
            const DistRun many = TrainMlp(rank, world, comm, mode, DType::kFloat64, 10, {}, updates, {},
                                          OptSpec{adam, true, bucket});
            EXPECT_LE(RelativeDiff(many.params, one), 1e-10)
                << (adam ? "adamw" : "sgd") << ", bucket " << bucket << ", updates " << int(updates) << ", "
                << Name(mode) << ", rank " << rank;
          }
    }
  });
}

TEST(DistShard, FourShardedRanksEqualOneRank) {
  if (WorldSize(4) != 4) GTEST_SKIP() << "mpirun started " << WorldSize(4) << " ranks, this test needs 4";
  Launch()(4, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    const auto one = TrainMlp(0, 1, nullptr, Mode::kEager, DType::kFloat64, 10, {}, Updates::kAfterBackward, {},
                              OptSpec{true, false})
                         .params;
    for (Mode mode : kModes) {
      const DistRun many = TrainMlp(rank, 4, comm, mode, DType::kFloat64, 10, {}, Updates::kBackwardAndUpdate, {},
                                    OptSpec{true, true, 1024});
      EXPECT_LE(RelativeDiff(many.params, one), 1e-10) << Name(mode) << ", rank " << rank;
    }
  });
}

// Note [Clipping under DistOpt] with sharding: the norm is the square root of the all-reduced
// sum of the ranks' squared piece norms, the same on every rank as on one.
TEST(DistShard, ClippingByGlobalNormEqualsOneRank) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    const nn::GradClip clip{0.05, 0, 1e-6};
    const DistRun one = TrainMlp(0, 1, nullptr, Mode::kEager, DType::kFloat64, 10, {}, Updates::kAfterBackward, clip);
    const double one_norm = one.opt->last_grad_norm().Item();
    EXPECT_GT(one_norm, 2 * clip.max_norm);
    for (Updates updates : {Updates::kAfterBackward, Updates::kBackwardAndUpdate})
      for (Mode mode : kModes) {
        const DistRun many = TrainMlp(rank, comm->size(), comm, mode, DType::kFloat64, 10, {}, updates, clip,
                                      OptSpec{false, true, 2048});
        EXPECT_LE(RelativeDiff(many.params, one.params), 1e-10) << Name(mode) << ", rank " << rank;
        EXPECT_NEAR(many.opt->last_grad_norm().Item(), one_norm, 1e-10 * one_norm) << Name(mode) << ", rank " << rank;
      }
  });
}

// docs/design.md invariant 5: the serial replay is bitwise the eager run.
TEST(DistShard, SerialReplayIsBitwiseEager) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    const OptSpec spec{true, true, 1024};
    const auto eager = TrainMlp(rank, comm->size(), comm, Mode::kEager, DType::kFloat32, 10, {},
                                Updates::kBackwardAndUpdate, {}, spec)
                           .params;
    const auto serial = TrainMlp(rank, comm->size(), comm, Mode::kSerial, DType::kFloat32, 10, {},
                                 Updates::kBackwardAndUpdate, {}, spec)
                            .params;
    EXPECT_EQ(RelativeDiff(serial, eager), 0.0);
  });
}

// Note [Gradients on the wire] with sharding: the reduce-scatter sends 16 bits as the all-reduce
// does and rounds this rank's slot alike, so the run equals the unsharded one bitwise.
TEST(DistShard, SixteenBitWireEqualsTheUnshardedRun) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    for (Compression wire : {Compression::kBFloat16, Compression::kFloat16}) {
      OptSpec spec{true, false, 1024, wire};
      const auto plain = TrainMlp(rank, comm->size(), comm, Mode::kSerial, DType::kFloat32, 6, {},
                                  Updates::kBackwardAndUpdate, {}, spec)
                             .params;
      spec.shard = true;
      const auto sharded = TrainMlp(rank, comm->size(), comm, Mode::kSerial, DType::kFloat32, 6, {},
                                    Updates::kBackwardAndUpdate, {}, spec)
                               .params;
      EXPECT_EQ(RelativeDiff(sharded, plain), 0.0) << Name(wire) << ", rank " << rank;
    }
  });
}

// Note [Loss scaling] with sharding: each rank checks its pieces, the non-finite flag is
// all-reduced, so every rank skips the same steps as an unsharded run (gradients on an fp16
// wire: from 2^40 the first steps overflow float16 and are skipped).
TEST(DistShard, LossScalingSkipsTheSameStepsAsUnsharded) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    nn::LossScaling ls;
    ls.init_scale = std::ldexp(1.0, 40);
    ls.interval = 3;
    OptSpec spec{true, false, 1024, Compression::kFloat16, ls};
    for (Mode mode : {Mode::kEager, Mode::kSerial}) {
      spec.shard = false;
      const DistRun plain = TrainMlp(rank, comm->size(), comm, mode, DType::kFloat32, 12, {},
                                     Updates::kBackwardAndUpdate, {}, spec);
      spec.shard = true;
      const DistRun sharded = TrainMlp(rank, comm->size(), comm, mode, DType::kFloat32, 12, {},
                                       Updates::kBackwardAndUpdate, {}, spec);
      const nn::LossScaleReading a = plain.opt->loss_scale(), b = sharded.opt->loss_scale();
      EXPECT_GT(a.skipped_steps, 0) << "the test skips no step: it checks nothing";
      EXPECT_EQ(b.skipped_steps, a.skipped_steps) << Name(mode) << ", rank " << rank;
      EXPECT_EQ(b.scale, a.scale) << Name(mode) << ", rank " << rank;
      EXPECT_LE(RelativeDiff(sharded.params, plain.params), 1e-6) << Name(mode) << ", rank " << rank;
    }
  });
}

// The non-finite flag is all-reduced: one parameter's gradient overflows float16 on the wire, the
// other's does not, and with 2 ranks each owns one of them. Every rank must skip the step, as
// without sharding; a rank that decided alone would update the parameter it owns.
TEST(DistShard, AnOverflowInOneRanksSlotSkipsTheStepOnEveryRank) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    for (bool shard : {false, true}) {
      auto dev = NewCpuDevice(rank);
      Tensor w0 = ops::Full({64}, 0.5, DType::kFloat32, dev), w1 = ops::Full({64}, 0.5, DType::kFloat32, dev);
      for (Tensor* w : {&w0, &w1}) {
        w->set_requires_grad(true);
        w->block()->set_persistent(true);
      }
      auto sgd = std::make_shared<nn::SGD>(0.1);
      nn::LossScaling ls;
      ls.init_scale = 1 << 20;
      sgd->SetLossScaling(ls);
      nn::DistOpt opt(sgd, comm, Compression::kFloat16, 1 << 20, shard);
      // d/dw0 = 1e3 (x 2^20 overflows float16), d/dw1 = 1e-3 (x 2^20 = 1049: finite)
      opt.BackwardAndUpdate(ops::Add(ops::Sum(ops::MulScalar(w0, 1e3)), ops::Sum(ops::MulScalar(w1, 1e-3))));
      EXPECT_EQ(opt.loss_scale().skipped_steps, 1) << "shard " << shard << ", rank " << rank;
      for (const Tensor& w : {w0, w1})
        EXPECT_EQ(w.ToVector<float>(), std::vector<float>(64, 0.5f)) << "shard " << shard << ", rank " << rank;
    }
  });
}

// Each rank keeps the state of its slot only: at most 1/N of the unsharded state, plus padding.
TEST(DistShard, EachRankKeepsItsShareOfTheState) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    const int world = comm->size();
    for (bool adam : {false, true}) {
      const DistRun full = TrainMlp(rank, world, comm, Mode::kEager, DType::kFloat32, 2, {},
                                    Updates::kBackwardAndUpdate, {}, OptSpec{adam, false});
      const DistRun part = TrainMlp(rank, world, comm, Mode::kEager, DType::kFloat32, 2, {},
                                    Updates::kBackwardAndUpdate, {}, OptSpec{adam, true, 2048});
      const double ratio = double(part.opt->state_bytes()) / double(full.opt->state_bytes());
      EXPECT_GT(full.opt->state_bytes(), 0u);
      EXPECT_LE(ratio, 1.0 / world + 0.05) << (adam ? "adamw" : "sgd") << ", rank " << rank;
      EXPECT_GT(ratio, 1.0 / world - 0.05) << (adam ? "adamw" : "sgd") << ", rank " << rank;
      const auto& d = dynamic_cast<const nn::DistOpt&>(*part.opt);
      EXPECT_TRUE(d.sharded());
      EXPECT_EQ(d.shard_bucket_bytes(), d.shard_slot_bytes() * size_t(world));
    }
  });
}

// Updates from Backward's callback: the first bucket's reduce-scatter, updates and gather are
// issued while backward runs (before the gradient of the first layer is computed), so the
// replay can overlap them; every gradient is reduce-scattered, none all-reduced.
TEST(DistShard, BucketsAreReducedWhileBackwardRuns) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    const DistRun run = TrainMlp(rank, comm->size(), comm, Mode::kSerial, DType::kFloat32, 1, {},
                                 Updates::kBackwardAndUpdate, {}, OptSpec{false, true, 512});
    const OpList& ops = run.graph->graph().ops();  // the list as captured and passed
    int first_rs = -1, last_matmul = -1, rs = 0, ag = 0, ar = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const OpRecord& op = ops.ops[i];
      if (op.def == &op_kind::reducescatter) {
        ++rs;
        if (first_rs < 0) first_rs = int(i);
      }
      ag += op.def == &op_kind::allgather_shards;
      ar += op.def == &op_kind::allreduce;
      if (op.name().find("matmul") != std::string::npos) last_matmul = int(i);
    }
    EXPECT_GE(rs, 2) << "rank " << rank;
    EXPECT_EQ(ag, rs);
    EXPECT_EQ(ar, 0);
    EXPECT_GE(first_rs, 0);
    EXPECT_LT(first_rs, last_matmul) << "the first bucket waits for the whole backward, rank " << rank;
  });
}

TEST(DistShard, ParametersKeepTheirValuesWhenTheDistOptGoes) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto dev = NewCpuDevice(rank);
    Mlp m(kDims, 7, dev, DType::kFloat64);
    std::vector<std::vector<double>> after;
    {
      auto opt = std::make_shared<nn::DistOpt>(std::make_shared<nn::SGD>(0.05, 0.9), comm, std::nullopt, 1024, true);
      Tensor x = ops::Zeros({kGlobalBatch / comm->size(), kFeatures}, DType::kFloat64, dev);
      Tensor y = ops::Zeros({kGlobalBatch / comm->size()}, DType::kInt32, dev);
      FillShard(0, rank, comm->size(), x, y);
      opt->BackwardAndUpdate(ops::SoftmaxCrossEntropy(m.Logits(x), y));
      for (const Tensor& p : m.params) {
        EXPECT_FALSE(p.block()->owns_memory()) << "a parameter lives in its bucket";
        after.push_back(p.ToVector<double>());
      }
    }
    for (size_t i = 0; i < m.params.size(); ++i) {
      EXPECT_TRUE(m.params[i].block()->owns_memory()) << "parameter " << i << " has memory of its own again";
      EXPECT_EQ(m.params[i].ToVector<double>(), after[i]);
    }
  });
}

TEST(DistShard, MisuseIsATypedError) {
  auto comms = MakeInProcGroup(1);
  auto dev = NewCpuDevice(0);
  Mlp m(kDims, 7, dev, DType::kFloat32);
  nn::DistOpt opt(std::make_shared<nn::SGD>(0.05, 0.9), comms[0], std::nullopt, 1024, true);
  Tensor x = ops::Zeros({4, kFeatures}, DType::kFloat32, dev), y = ops::Zeros({4}, DType::kInt32, dev);
  auto pairs = Backward(ops::SoftmaxCrossEntropy(m.Logits(x), y));
  // One parameter at a time: a bucket would never learn that the step ended.
  EXPECT_THROW(opt.Apply(pairs[0].second, pairs[0].first, "w"), ValueError);
  // The same gradient twice in one step.
  std::vector<std::pair<Tensor, Tensor>> twice{pairs[0], pairs[0]};
  EXPECT_THROW(opt.Step(twice), ValueError);
  opt.Step(pairs);  // the failed step was dropped: a whole one works
  // A simulated communicator cannot shard: this process would update only its own slot.
  EXPECT_THROW(nn::DistOpt(std::make_shared<nn::SGD>(0.1), std::make_shared<SimulatedCommunicator>(SimulatedLink{2}),
                           std::nullopt, 1024, true),
               ValueError);
}

}  // namespace
}  // namespace test
}  // namespace loom
