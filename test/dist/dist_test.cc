// Data-parallel training (issue 15): N ranks give the numbers of one rank, in eager mode and in
// serial and parallel replay; gradient buckets; the collective lane; failures end every rank
// with a typed error. Rank functions run under a launcher (Note [Rank launchers]).
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "dist_common.h"
#include "graph/passes.h"
#include "graph/schedule.h"

LOOM_OP_KIND(allreduce);
LOOM_OP_KIND(sgd_update);

namespace loom {
namespace test {
namespace {

// ---- N ranks == 1 rank ----

void ExpectSameAsOneRank(const Launcher& launch, int world, Mode mode, DType dtype, double tol) {
  launch(world, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    const std::vector<std::vector<double>> one = TrainMlp(0, 1, nullptr, Mode::kEager, dtype, 20).params;
    const std::vector<std::vector<double>> many = TrainMlp(rank, world, comm, mode, dtype, 20).params;
    const double d = RelativeDiff(many, one);
    EXPECT_LE(d, tol) << world << " ranks, " << Name(mode) << ", " << Name(dtype) << ", rank " << rank;
    // The run moved the parameters: the comparison is not of two initial states.
    const std::vector<std::vector<double>> init = TrainMlp(0, 1, nullptr, Mode::kEager, dtype, 0).params;
    EXPECT_GT(RelativeDiff(one, init), 1e-3);
  });
}

TEST(DistTraining, TwoRanksEqualOneRankInFloat64InEveryMode) {
  for (Mode mode : {Mode::kEager, Mode::kSerial, Mode::kParallel})
    ExpectSameAsOneRank(Launch(), WorldSize(2), mode, DType::kFloat64, 1e-10);
}

TEST(DistTraining, FourRanksEqualOneRankInFloat64) {
  if (WorldSize(4) != 4) GTEST_SKIP() << "mpirun started " << WorldSize(4) << " ranks, this test needs 4";
  ExpectSameAsOneRank(Launch(), 4, Mode::kSerial, DType::kFloat64, 1e-10);
  ExpectSameAsOneRank(Launch(), 4, Mode::kParallel, DType::kFloat64, 1e-10);
}

TEST(DistTraining, TwoRanksEqualOneRankInFloat32InEveryMode) {
  for (Mode mode : {Mode::kEager, Mode::kSerial, Mode::kParallel})
    ExpectSameAsOneRank(Launch(), WorldSize(2), mode, DType::kFloat32, 1e-5);
}

// nn::Model and the programs update each parameter from Backward's callback, so the captured list
// reads a gradient (its update) soon after its last write, before the bucket holding it is full:
// the bucket pass must move those updates after the bucket's all-reduce (Note [Gradient buckets]),
// with overlap and with collectives forced after backward, small buckets and the default ones.
TEST(DistTraining, UpdatesDuringBackwardEqualOneRank) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    const int world = comm->size();
    const auto one = TrainMlp(0, 1, nullptr, Mode::kEager, DType::kFloat64, 10).params;
    for (bool overlap : {true, false})
      for (int cap : {512, 25 << 20}) {
        GraphOptions o;
        o.overlap_collectives = overlap;
        o.bucket_bytes = cap;
        o.first_bucket_bytes = cap / 4;
        for (Mode mode : {Mode::kEager, Mode::kSerial, Mode::kParallel}) {
          const auto many = TrainMlp(rank, world, comm, mode, DType::kFloat64, 10, o, Updates::kDuringBackward).params;
          EXPECT_LE(RelativeDiff(many, one), 1e-10)
              << Name(mode) << ", overlap " << overlap << ", bucket " << cap << " bytes, rank " << rank;
        }
      }
  });
}

// Note [Clipping under DistOpt]: clipping by global norm measures the averaged gradient, so 2
// ranks clip as one rank on the global batch, through Step and through BackwardAndUpdate, in
// every mode; every rank computes the norm of one rank. max_norm is well below the gradient's
// norm, so every step clips (the unclipped run ends elsewhere).
TEST(DistTraining, ClippingByGlobalNormEqualsOneRank) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    const int world = comm->size();
    const nn::GradClip clip{0.05, 0, 1e-6};
    const DistRun one = TrainMlp(0, 1, nullptr, Mode::kEager, DType::kFloat64, 10, {}, Updates::kAfterBackward, clip);
    const double one_norm = one.opt->last_grad_norm().Item();
    EXPECT_GT(one_norm, 2 * clip.max_norm);
    const auto unclipped = TrainMlp(0, 1, nullptr, Mode::kEager, DType::kFloat64, 10).params;
    EXPECT_GT(RelativeDiff(unclipped, one.params), 1e-3);
    for (Updates updates : {Updates::kAfterBackward, Updates::kBackwardAndUpdate})
      for (Mode mode : {Mode::kEager, Mode::kSerial, Mode::kParallel}) {
        GraphOptions o;
        o.bucket_bytes = 4096;
        const DistRun many = TrainMlp(rank, world, comm, mode, DType::kFloat64, 10, o, updates, clip);
        EXPECT_LE(RelativeDiff(many.params, one.params), 1e-10)
            << Name(mode) << ", updates " << int(updates) << ", rank " << rank;
        ASSERT_TRUE(many.opt->last_grad_norm().defined());
        EXPECT_NEAR(many.opt->last_grad_norm().Item(), one_norm, 1e-10 * one_norm) << Name(mode) << ", rank " << rank;
      }
  });
}

// docs/design.md invariant 5: the serial replay (buckets and all) is bitwise the eager run.
TEST(DistTraining, SerialReplayIsBitwiseEager) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    GraphOptions o;
    o.bucket_bytes = 4096;
    const auto eager = TrainMlp(rank, comm->size(), comm, Mode::kEager, DType::kFloat32, 10).params;
    const auto serial = TrainMlp(rank, comm->size(), comm, Mode::kSerial, DType::kFloat32, 10, o).params;
    EXPECT_EQ(RelativeDiff(serial, eager), 0.0);
  });
}

// Eager bucketed steps (StepBucketed) and per-gradient Apply give the same numbers.
TEST(DistTraining, EagerBucketedStepEqualsPerGradientApply) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    std::vector<std::vector<double>> got[2];
    for (int bucketed = 0; bucketed < 2; ++bucketed) {
      auto dev = NewCpuDevice(rank);
      Mlp m(kDims, 7, dev, DType::kFloat64);
      nn::DistOpt opt(std::make_shared<nn::SGD>(0.05, 0.9), comm, Compression::kNone, /*bucket_bytes=*/4096);
      const int64_t rows = kGlobalBatch / comm->size();
      Tensor x = ops::Zeros({rows, kFeatures}, DType::kFloat64, dev), y = ops::Zeros({rows}, DType::kInt32, dev);
      for (int s = 0; s < 5; ++s) {
        FillShard(s, rank, comm->size(), x, y);
        Tensor loss = ops::SoftmaxCrossEntropy(m.Logits(x), y);
        auto pg = Backward(loss);
        if (bucketed) opt.StepBucketed(pg);
        else for (auto& p : pg) opt.Apply(p.second, p.first, p.first.name());
      }
      for (const Tensor& p : m.params) got[bucketed].push_back(p.ToVector<double>());
    }
    EXPECT_EQ(RelativeDiff(got[1], got[0]), 0.0);
  });
}

// ---- the captured graph: buckets, token chain, plan, schedule ----

struct Captured {
  std::vector<int> allreduces;  // op indices
};
Captured FindAllReduces(const Graph& g) {
  Captured c;
  for (size_t i = 0; i < g.ops().size(); ++i)
    if (g.ops().ops[i].def == &op_kind::allreduce) c.allreduces.push_back(int(i));
  return c;
}

size_t GradientBytes(DType dtype) {
  size_t n = 0;
  for (size_t i = 0; i + 1 < kDims.size(); ++i) n += size_t(kDims[i] * kDims[i + 1] + kDims[i + 1]);
  return n * SizeOf(dtype);  // every gradient of kDims is a multiple of 64 bytes: no padding
}

TEST(DistGraph, OneAllReducePerBucketChainedThroughTheToken) {
  for (int cap : {4096, 6000, 1 << 20}) {
    Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
      GraphOptions o;
      o.bucket_bytes = cap;
      o.first_bucket_bytes = 0;  // as bucket_bytes
      DistRun run = TrainMlp(rank, comm->size(), comm, Mode::kSerial, DType::kFloat64, 2, o);
      const Graph& g = run.graph->graph();
      const Captured c = FindAllReduces(g);
      const size_t cap_elems = size_t(cap) / 8 * 8;
      EXPECT_EQ(c.allreduces.size(), (GradientBytes(DType::kFloat64) + cap_elems - 1) / cap_elems) << "cap " << cap;
      const Block* token = g.ops().ops[size_t(c.allreduces[0])].inputs[1].block();
      for (size_t k = 0; k < c.allreduces.size(); ++k) {
        const OpRecord& op = g.ops().ops[size_t(c.allreduces[k])];
        EXPECT_EQ(op.inputs[1].block(), token);
        EXPECT_EQ(op.outputs[1].block(), token);
        if (k == 0) continue;
        const auto& preds = g.analysis().preds[size_t(c.allreduces[k])];
        EXPECT_NE(std::find(preds.begin(), preds.end(), c.allreduces[k - 1]), preds.end())
            << "all-reduce " << k << " does not follow all-reduce " << k - 1;
      }
    });
  }
}

// Note [Data parallelism folded into the update]: a bucket's all-reduce only sums; each update
// reading a bucketed gradient applies 1/N itself. The same records in every mode, and eager
// DistOpt submits the same update.
TEST(DistGraph, AllReducesSumAndUpdatesCarryOneOverN) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    const double inv_n = 1.0 / comm->size();
    for (bool overlap : {true, false}) {
      GraphOptions o;
      o.bucket_bytes = 4096;
      o.overlap_collectives = overlap;
      DistRun run = TrainMlp(rank, comm->size(), comm, Mode::kSerial, DType::kFloat64, 1, o);
      const OpList& ops = run.graph->graph().ops();
      std::set<const Block*> bucketed;
      int allreduces = 0, updates = 0;
      for (const OpRecord& op : ops.ops) {
        if (op.def == &op_kind::allreduce) {
          ++allreduces;
          EXPECT_EQ(op.attrs.Float("scale", 1.0), 1.0) << "a bucket's all-reduce must be a pure sum";
          EXPECT_EQ(op.attrs.Int("reduce", 0), 0);
          for (size_t k = 2; k < op.inputs.size(); ++k) bucketed.insert(op.inputs[k].block());
        }
      }
      for (const OpRecord& op : ops.ops)
        if (op.def == &op_kind::sgd_update) {
          ++updates;
          EXPECT_TRUE(bucketed.count(op.inputs[1].block())) << "the update reads a gradient outside the buckets";
          EXPECT_EQ(op.attrs.Float("grad_mult", 1.0), inv_n);
          EXPECT_EQ(op.attrs.Int("grad_scaled", 0), 0);
        }
      EXPECT_GT(allreduces, 1);
      EXPECT_EQ(updates, int(2 * (kDims.size() - 1)));
    }
    // A plain optimizer (one rank, no DistOpt) carries no multiplier.
    DistRun plain = TrainMlp(0, 1, nullptr, Mode::kSerial, DType::kFloat64, 1);
    for (const OpRecord& op : plain.graph->graph().ops().ops)
      if (op.def == &op_kind::sgd_update) EXPECT_FALSE(op.attrs.Has("grad_mult"));
  });
}

TEST(DistGraph, SmallFirstBucket) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    GraphOptions o;
    o.bucket_bytes = 8192;
    o.first_bucket_bytes = 1024;
    DistRun run = TrainMlp(rank, comm->size(), comm, Mode::kSerial, DType::kFloat64, 1, o);
    const Graph& g = run.graph->graph();
    const Captured c = FindAllReduces(g);
    EXPECT_EQ(c.allreduces.size(), 1 + (GradientBytes(DType::kFloat64) - 1024 + 8191) / 8192);
    EXPECT_EQ(g.ops().ops[size_t(c.allreduces[0])].inputs[0].nbytes(), 1024u);
  });
}

TEST(DistGraph, PlanStaysTightAndReplayAllocatesNothing) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    GraphOptions o;
    o.bucket_bytes = 4096;
    DistRun run = TrainMlp(rank, comm->size(), comm, Mode::kSerial, DType::kFloat64, 2, o);
    const GraphStats& s = run.graph->graph().stats();
    ASSERT_GT(s.lower_bound_bytes, 0u);
    EXPECT_LE(double(s.arena_bytes) / double(s.lower_bound_bytes), 1.05);
    const uint64_t before = run.device->stats().num_allocs;
    run.graph->Replay(true);
    run.graph->Replay(false);
    EXPECT_EQ(run.device->stats().num_allocs, before);
  });
}

// Note [A lane for collectives], Note [Gradient buckets]: each bucket's all-reduce waits only for
// the writers of its own gradients (and the all-reduce before it), and nothing of the backward
// waits for it: only the updates reading its gradients, and later all-reduces.
TEST(DistGraph, AllReducesOverlapTheBackwardByStructure) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    GraphOptions o;
    o.bucket_bytes = 4096;
    o.first_bucket_bytes = 0;
    DistRun run = TrainMlp(rank, comm->size(), comm, Mode::kParallel, DType::kFloat64, 1, o);
    const Graph& g = run.graph->graph();
    const OpList& ops = g.ops();
    const Schedule& sched = g.schedule();
    const Captured c = FindAllReduces(g);
    ASSERT_GE(c.allreduces.size(), 3u);
    std::vector<std::vector<int>> preds(ops.size());
    for (size_t i = 0; i < ops.size(); ++i)
      for (int s : sched.succs[i]) preds[size_t(s)].push_back(int(i));
    for (int a : c.allreduces) {
      EXPECT_EQ(sched.lane[size_t(a)], Lane::kCollective);
      const OpRecord& ar = ops.ops[size_t(a)];
      std::set<const Block*> members;
      for (size_t k = 2; k < ar.inputs.size(); ++k) members.insert(ar.inputs[k].block());
      ASSERT_FALSE(members.empty());
      for (int p : preds[size_t(a)]) {
        if (ops.ops[size_t(p)].def == &op_kind::allreduce) continue;
        bool writes_member = false;
        for (const Tensor& t : ops.ops[size_t(p)].outputs) writes_member |= members.count(t.block()) > 0;
        EXPECT_TRUE(writes_member) << "all-reduce " << a << " waits for " << ops.ops[size_t(p)].name() << " (op " << p
                                   << "), which writes none of its gradients";
      }
      // Everything downstream of the all-reduce: updates and all-reduces only.
      std::vector<char> down(ops.size(), 0);
      down[size_t(a)] = 1;
      for (size_t i = size_t(a); i < ops.size(); ++i) {
        if (!down[i]) continue;
        for (int s : sched.succs[i]) down[size_t(s)] = 1;
      }
      for (size_t i = size_t(a) + 1; i < ops.size(); ++i) {
        if (!down[i]) continue;
        EXPECT_TRUE(ops.ops[i].def == &op_kind::allreduce || ops.ops[i].def == &op_kind::sgd_update)
            << ops.ops[i].name() << " (op " << i << ") waits for all-reduce " << a;
      }
    }
    // And there is backward left to overlap: compute ops issued after the first all-reduce.
    int after = 0;
    for (size_t i = size_t(c.allreduces[0]) + 1; i < ops.size(); ++i)
      after += ops.ops[i].def != &op_kind::allreduce && ops.ops[i].def != &op_kind::sgd_update;
    EXPECT_GT(after, 0);
  });
}

// Note [Parallel or serial]: the captured MLP step with DistOpt's buckets is a chain beside its
// all-reduces. With op costs injected (no clock): each compute op the elements it reads and
// writes, the all-reduces together twice the compute, as on a slow link. The parallelism rule
// alone would replay it serially; the collective lane, played out, keeps the parallel replay,
// on one worker or two. With free all-reduces (a fast link) there is nothing to hide, and the
// chain replays serially.
TEST(DistGraph, AChainWithBucketAllReducesKeepsTheParallelReplayWhenOverlapPays) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    GraphOptions o;
    o.bucket_bytes = 4096;
    o.first_bucket_bytes = 0;
    DistRun run = TrainMlp(rank, comm->size(), comm, Mode::kParallel, DType::kFloat64, 1, o);
    const Graph& g = run.graph->graph();
    const Captured c = FindAllReduces(g);
    ASSERT_GE(c.allreduces.size(), 3u);
    const size_t n = g.ops().size();
    std::vector<double> costs(n, 0.0);
    double compute = 0;
    for (size_t i = 0; i < n; ++i) {
      const OpRecord& op = g.ops().ops[i];
      for (const auto* ts : {&op.inputs, &op.outputs})
        for (const Tensor& t : *ts) costs[i] += double(t.numel());
      compute += costs[i];
    }
    for (int a : c.allreduces) {
      compute -= costs[size_t(a)];
      costs[size_t(a)] = 0;
    }
    const ParallelChoice free_links = ChooseParallelOrSerial(g.schedule(), costs, 2, 2);
    EXPECT_TRUE(free_links.run_serially) << "parallelism " << free_links.parallelism;
    for (int a : c.allreduces) costs[size_t(a)] = 2.0 * compute / double(c.allreduces.size());
    for (int workers : {1, 2}) {
      const ParallelChoice choice = ChooseParallelOrSerial(g.schedule(), costs, workers, 2);
      EXPECT_FALSE(choice.run_serially) << workers << " workers: parallel " << choice.parallel_cost << ", serial "
                                        << choice.serial_cost;
      if (workers == 2) EXPECT_LT(choice.parallelism, 0.9 * workers) << "the parallelism rule alone chose parallel";
    }
  });
}

// At run time the all-reduces run on the lane's thread (numbered after the compute workers),
// nothing else does, and the trace shows them there.
TEST(DistGraph, ParallelReplayRunsAllReducesOnTheirLane) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    GraphOptions o;
    o.bucket_bytes = 4096;
    DistRun run = TrainMlp(rank, comm->size(), comm, Mode::kParallel, DType::kFloat64, 1, o);  // num_workers 2
    Graph& g = run.graph->graph();
    g.set_profile(true);
    run.graph->Replay(false);
    int collectives = 0;
    for (const OpTiming& t : g.last_profile()) {
      const bool ar = g.ops().ops[size_t(t.op)].def == &op_kind::allreduce;
      collectives += ar;
      EXPECT_EQ(t.thread == 2, ar) << g.ops().ops[size_t(t.op)].name() << " ran on thread " << t.thread;
    }
    EXPECT_GT(collectives, 0);
    EXPECT_NE(g.TraceJson().find("\"name\":\"allreduce\""), std::string::npos);
  });
}

TEST(DistGraph, WithoutOverlapAllReducesComeAfterTheBackward) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    GraphOptions o;
    o.bucket_bytes = 4096;
    o.overlap_collectives = false;
    DistRun run = TrainMlp(rank, comm->size(), comm, Mode::kParallel, DType::kFloat64, 1, o);
    const OpList& ops = run.graph->graph().ops();
    const Captured c = FindAllReduces(run.graph->graph());
    for (size_t i = size_t(c.allreduces[0]) + 1; i < ops.size(); ++i)
      EXPECT_TRUE(ops.ops[i].def == &op_kind::allreduce || ops.ops[i].def == &op_kind::sgd_update)
          << ops.ops[i].name();
    // Not only in issue order: every all-reduce depends on the last backward op, so that the
    // parallel replay, which starts a lane op once its dependencies are met, cannot start it
    // earlier (Note [Collectives forced after backward]).
    const Schedule& sched = run.graph->graph().schedule();
    const size_t last_backward = size_t(c.allreduces[0]) - 1;
    std::vector<char> down(ops.size(), 0);
    down[last_backward] = 1;
    for (size_t i = last_backward; i < ops.size(); ++i)
      if (down[i])
        for (int s : sched.succs[i]) down[size_t(s)] = 1;
    for (int a : c.allreduces) EXPECT_TRUE(down[size_t(a)]) << "all-reduce " << a << " may start before backward ends";
  });
}

// SetLearningRate on a DistOpt reaches the optimizer it wraps (which reads its own rate).
TEST(DistOptRate, SetLearningRateReachesTheWrappedOptimizer) {
  auto errors = RunInProcRanks(1, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto sgd = std::make_shared<nn::SGD>(0.05, 0.9);
    nn::DistOpt opt(sgd, comm);
    nn::Optimizer& base = opt;  // as loom-cnn's --lr-drop and the trainer hold it
    base.SetLearningRate(0.005);
    EXPECT_EQ(sgd->learning_rate(), 0.005);
    EXPECT_EQ(opt.learning_rate(), 0.005);
  });
  for (auto& e : errors) EXPECT_FALSE(e);
}

// ---- failures end every rank with a typed error ----

TEST(DistFailure, RanksThatCapturedDifferentGraphsAllRaiseGraphError) {
  std::atomic<int> graph_errors{0};
  auto errors = RunInProcRanks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto dev = NewCpuDevice(rank);
    Mlp m(rank == 0 ? std::vector<int64_t>{16, 32, 16} : kDims, 7, dev, DType::kFloat64);
    nn::DistOpt opt(std::make_shared<nn::SGD>(0.05, 0.9), comm);
    Tensor x = ops::Zeros({16, kFeatures}, DType::kFloat64, dev), y = ops::Zeros({16}, DType::kInt32, dev);
    CapturedGraph g(dev, "mismatch");
    try {
      g.Capture([&] { m.Step(x, y, opt); });
    } catch (const GraphError& e) {
      EXPECT_NE(std::string(e.what()).find("captured different graphs"), std::string::npos) << e.what();
      graph_errors++;
    }
  });
  for (auto& e : errors) EXPECT_FALSE(e);
  EXPECT_EQ(graph_errors.load(), 2);
}

TEST(DistFailure, ARankThatRaisesMakesTheOthersRaiseCommErrorNamingIt) {
  InProcOptions o;
  o.timeout_s = 20;  // not reached: the failure is reported at once
  auto errors = RunInProcRanks(
      3,
      [&](int rank, const std::shared_ptr<Communicator>& comm) {
        auto dev = NewCpuDevice(rank);
        Tensor t = ops::Ones({8}, DType::kFloat32, dev);
        int id = RegisterCommunicator(comm);
        ops::AllReduce(id, t);
        if (rank == 1) throw ValueError("rank one gives up");
        ops::AllReduce(id, t);
      },
      o);
  for (int r : {0, 2}) {
    ASSERT_TRUE(errors[size_t(r)]);
    LOOM_EXPECT_THROW_MSG(std::rethrow_exception(errors[size_t(r)]), CommError, "rank 1 failed: rank one gives up");
  }
}

TEST(DistFailure, ARankThatNeverArrivesTimesOutNamingIt) {
  InProcOptions o;
  o.timeout_s = 0.3;
  auto errors = RunInProcRanks(
      2,
      [&](int rank, const std::shared_ptr<Communicator>& comm) {
        if (rank == 1) return;  // never calls the collective
        std::vector<double> v(4, 1.0);
        comm->AllReduce(v.data(), 4, DType::kFloat64, ReduceOp::kSum);
      },
      o);
  ASSERT_TRUE(errors[0]);
  LOOM_EXPECT_THROW_MSG(std::rethrow_exception(errors[0]), CommError, "rank(s) 1 did not reach allreduce");
}

}  // namespace
}  // namespace test
}  // namespace loom
