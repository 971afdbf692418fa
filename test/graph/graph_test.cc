// The graph end to end on the CPU: capture, analysis, lazy allocation, recycling, planned
// arena, serial and parallel replay against eager execution, feeding, randomness, schedules,
// host reads, errors and threads. (The pipeline's steps alone: capture_test, analysis_test,
// plan_test, pack_test, schedule_test; SINGA's keyed calls: registry_test.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "common/harness.h"
#include "common/mlp.h"
#include "device/cpu/blas.h"
#include "graph/graph.h"
#include "graph/step.h"

namespace loom {
namespace test {
namespace {

// A probe op for tests: records, while it runs, which of its "watched" blocks have memory.
std::vector<const Block*> g_watched;
std::vector<bool> g_watched_allocated;
size_t g_live_at_probe = 0;
LOOM_OP(test_probe) {
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return std::vector<TensorMeta>{in[0]}; };
}
void ProbeCpu(const OpRecord& op, const KernelContext& ctx) {
  g_watched_allocated.clear();
  for (const Block* b : g_watched) g_watched_allocated.push_back(b->allocated());
  g_live_at_probe = ctx.device->stats().live_bytes;
  std::memcpy(op.outputs[0].raw_data(), op.inputs[0].raw_data(), op.inputs[0].nbytes());
}
LOOM_KERNEL(test_probe, kCPU, ProbeCpu);

class GraphTest : public ::testing::Test {
 protected:
  void SetUp() override { dev_ = CpuDevice(); }
  std::unique_ptr<Graph> Capture(const std::string& name, const std::function<void()>& step,
                                 GraphOptions options = {}) {
    return Graph::Capture(dev_, name, step, options);
  }
  std::shared_ptr<Device> dev_;
};

// The MLP run of test/common/mlp.h, eager or captured once and replayed (Note [The graph API in
// tests]); the parallel schedule itself is under test, so it never falls back to serial.
TrainRun Eager(const Blobs& data, int steps, double dropout = 0) {
  Mlp m({32, 64, 64, 10}, 5);
  nn::SGD opt(0.05, 0.9, 1e-4);
  TrainRun r;
  TrainEager(m, opt, data, 0, steps, &r, BatchPlan{16, 100}, dropout);
  return r;
}

TrainRun Graphed(const Blobs& data, int steps, bool sequential, MemoryMode mode, double dropout = 0) {
  Mlp m({32, 64, 64, 10}, 5);
  nn::SGD opt(0.05, 0.9, 1e-4);
  GraphOptions options;
  options.memory = mode;
  options.parallel_fallback = false;
  CapturedGraph g(CpuDevice(), "train", options);
  return TrainReplayed(g, m, opt, data, steps, BatchPlan{16, 100}, dropout, sequential);
}

TEST_F(GraphTest, SerialReplayIsBitwiseEqualToEager) {
  Blobs data(32, 10);
  TrainRun e = Eager(data, 5);
  for (MemoryMode mode : {MemoryMode::kPlanned, MemoryMode::kDynamic}) {
    TrainRun g = Graphed(data, 5, true, mode);
    EXPECT_EQ(std::memcmp(e.losses.data(), g.losses.data(), e.losses.size() * sizeof(float)), 0) << Name(mode);
    EXPECT_TRUE(SameBits(e.params, g.params)) << Name(mode);
  }
}

TEST_F(GraphTest, SerialReplayWithDropoutIsBitwiseEqualToEager) {
  Blobs data(32, 10);
  TrainRun e = Eager(data, 4, 0.3);
  TrainRun g = Graphed(data, 4, true, MemoryMode::kPlanned, 0.3);
  EXPECT_EQ(std::memcmp(e.losses.data(), g.losses.data(), e.losses.size() * sizeof(float)), 0);
  EXPECT_TRUE(SameBits(e.params, g.params));
  EXPECT_NE(e.losses[0], e.losses[1]);
}

TEST_F(GraphTest, ParallelReplayAgreesWithEager) {
  Blobs data(32, 10);
  TrainRun e = Eager(data, 5);
  for (MemoryMode mode : {MemoryMode::kPlanned, MemoryMode::kDynamic}) {
    TrainRun g = Graphed(data, 5, false, mode);
    for (size_t i = 0; i < e.losses.size(); ++i) EXPECT_NEAR(g.losses[i], e.losses[i], 1e-6 * std::abs(e.losses[i]));
    for (size_t p = 0; p < e.params.size(); ++p)
      for (size_t k = 0; k < e.params[p].size(); ++k)
        ASSERT_NEAR(g.params[p][k], e.params[p][k], 1e-6 * std::abs(e.params[p][k]) + 1e-7) << Name(mode);
  }
}

TEST_F(GraphTest, ReplayWithNewDataKeepsTraining) {
  Blobs data(32, 10);
  TrainRun g = Graphed(data, 60, true, MemoryMode::kPlanned);
  EXPECT_LT(g.losses.back(), 0.5f * g.losses.front());
}

TEST_F(GraphTest, CaptureRunsNothingAndAllocatesNoIntermediate) {
  Blobs data(32, 10);
  Mlp m({32, 64, 64, 10}, 5);
  nn::SGD opt(0.05, 0.9);
  auto b = data.Batch(16, 1);
  std::vector<std::vector<float>> before = m.Values();
  size_t live_before = dev_->stats().live_bytes;
  uint64_t ops_before = dev_->ops_run();
  Graph g(dev_, "train");
  g.BeginCapture();
  Tensor loss = m.Step(b.first, b.second, opt);
  size_t setup_ops = dev_->ops_run() - ops_before;  // optimizer state zeros and the lr scalar
  g.EndCapture();
  // Only setup ran: one fill per momentum buffer plus the learning-rate scalar.
  EXPECT_EQ(setup_ops, m.params.size() + 1);
  size_t state_bytes = 8;  // the lr scalar
  for (const Tensor& p : m.params) state_bytes += p.nbytes();
  EXPECT_EQ(dev_->stats().live_bytes, live_before + state_bytes);
  for (size_t i = 0; i < g.ops().blocks.size(); ++i) {
    if (!g.analysis().blocks[i].persistent) {
      EXPECT_FALSE(g.ops().blocks[i]->allocated()) << "block " << i;
    }
  }
  EXPECT_TRUE(SameBits(before, m.Values()));  // the update did not run either
  EXPECT_FALSE(loss.block()->allocated());
  g.Run();
  EXPECT_TRUE(loss.block()->allocated());
  EXPECT_FALSE(SameBits(before, m.Values()));
}

TEST_F(GraphTest, DynamicModeFreesEachBlockAfterItsLastReader) {
  GraphOptions dynamic;
  dynamic.memory = MemoryMode::kDynamic;
  Tensor x = RandomTensor({256, 256}, DType::kFloat32, 1);
  Graph g(dev_, "chain", dynamic);
  g.BeginCapture();
  Tensor a = ops::Relu(x);          // op 0: a's last reader is op 1
  Tensor b = ops::Exp(a);           // op 1
  Tensor c = ops::Tanh(b);          // op 2: b's last reader
  Tensor out = Call1("test_probe", {c});  // op 3: a and b must be gone, c alive
  Tensor d = ops::Neg(out);         // op 4
  g_watched = {a.block(), b.block(), c.block()};
  a = b = c = out = Tensor();       // only the graph holds them now
  g.EndCapture();
  EXPECT_EQ(g.stats().num_intermediate, 4u);
  size_t live_before = dev_->stats().live_bytes;
  g.Run();
  ASSERT_EQ(g_watched_allocated.size(), 3u);
  EXPECT_FALSE(g_watched_allocated[0]);
  EXPECT_FALSE(g_watched_allocated[1]);
  EXPECT_TRUE(g_watched_allocated[2]);
  // At the probe: c, the probe's output and d's block (allocated on first use, not yet) -> c + out.
  EXPECT_EQ(g_live_at_probe, live_before + 2 * x.nbytes() + d.nbytes());
  // After the replay every intermediate is back in the pool; d (held by us) persists.
  EXPECT_EQ(dev_->stats().live_bytes, live_before + d.nbytes());
  EXPECT_EQ(g.stats().dynamic_peak_bytes, 2 * x.nbytes());
  g_watched.clear();
}

TEST_F(GraphTest, PlannedArenaWithinFivePercentOfLowerBoundOnMlp) {
  Blobs data(784, 10);
  Mlp m({784, 1024, 1024, 10}, 3);
  nn::SGD opt(0.01, 0.9);
  auto b = data.Batch(64, 1);
  auto graph = Capture("mlp", [&] { m.Step(b.first, b.second, opt); });
  const Graph& g = *graph;
  const GraphStats& s = g.stats();
  ASSERT_GT(s.lower_bound_bytes, 0u);
  EXPECT_LE(double(s.arena_bytes), 1.05 * double(s.lower_bound_bytes)) << g.Summary();
  // No two intermediates share arena bytes while both are alive, except an in-place hand-over
  // (Note [In-place reuse]): the input's last op is the output's first.
  const std::vector<BlockFacts>& facts = g.ops().facts;
  for (size_t a = 0; a < facts.size(); ++a) {
    for (size_t b = a + 1; b < facts.size(); ++b) {
      size_t oa = g.layout().BlockOffset(int(a)), ob = g.layout().BlockOffset(int(b));
      if (oa == SIZE_MAX || ob == SIZE_MAX) continue;
      const BlockLife &la = g.analysis().blocks[a], &lb = g.analysis().blocks[b];
      bool mem = oa < ob + facts[b].bytes && ob < oa + facts[a].bytes;
      bool life = la.first <= lb.last && lb.first <= la.last;
      bool handover = oa == ob && (la.last == lb.first || lb.last == la.first);
      EXPECT_FALSE(mem && life && !handover) << "blocks " << a << " and " << b;
    }
  }
  size_t live_before = dev_->stats().live_bytes;
  graph->Run();
  size_t arena_alloc = dev_->stats().live_bytes - live_before;
  graph->Run();
  // Replays after the first allocate nothing.
  EXPECT_EQ(dev_->stats().live_bytes - live_before, arena_alloc);
  uint64_t allocs = dev_->stats().num_allocs;
  graph->Run();
  EXPECT_EQ(dev_->stats().num_allocs, allocs);
}

// Note [Weight gradient into the update]: at batch <= 16 the pass makes each weight gradient
// and its SGD update one op, the replay stays bitwise equal to eager for every SGD variant, and
// the pass leaves alone what it must: a batch above 16, a layer narrower than 16, a gradient the
// user holds, and a graph captured with fuse = false.
TEST_F(GraphTest, WeightGradientsFuseIntoTheirUpdatesAndStayBitwiseEqual) {
  Blobs data(32, 10);
  struct Variant {
    double momentum, weight_decay, dampening;
    bool nesterov;
  };
  for (Variant v : {Variant{0.9, 1e-4, 0, false}, Variant{0.9, 1e-3, 0, true}, Variant{0, 1e-4, 0, false},
                    Variant{0.5, 0, 0.25, false}}) {
    for (int64_t batch : {int64_t(2), int64_t(3), int64_t(16), int64_t(17)}) {
      for (bool fuse : {true, false}) {
        std::string what = "momentum " + std::to_string(v.momentum) + (v.nesterov ? " nesterov" : "") +
                           " batch " + std::to_string(batch) + (fuse ? " fused" : " unfused");
        const int steps = 4;
        TrainRun e;
        {
          Mlp m({32, 64, 48, 10}, 5);
          nn::SGD opt(0.05, v.momentum, v.weight_decay, v.nesterov, v.dampening);
          for (int s = 0; s < steps; ++s) {
            auto b = data.Batch(batch, 100 + uint32_t(s));
            e.losses.push_back(float(m.Step(b.first, b.second, opt).Item()));
          }
          e.params = m.Values();
        }
        Mlp m({32, 64, 48, 10}, 5);
        nn::SGD opt(0.05, v.momentum, v.weight_decay, v.nesterov, v.dampening);
        auto first = data.Batch(batch, 100);
        Tensor x = first.first, y = first.second;
        GraphOptions options;
        options.run_passes = fuse;
        Tensor loss;
        auto graph = Capture("train", [&] { loss = m.Step(x, y, opt); }, options);
        const Graph& g = *graph;
        size_t fused_ops = 0;
        for (const OpRecord& op : g.ops().ops) fused_ops += op.name() == "matmul_sgd_update";
        // w0 (32x64) and w1 (64x48) fuse where their weight gradient takes the skinny kernel
        // (Note [Which GEMM kernel]: batch <= 16); w2 (48x10) is narrower than 16 columns.
        const bool skinny = ChooseSgemm(true, false, 32, 64, batch) == GemmKernel::kSkinny &&
                            ChooseSgemm(true, false, 64, 48, batch) == GemmKernel::kSkinny;
        const size_t want = fuse && skinny ? 2 : 0;
        if (batch <= 16) {
          EXPECT_EQ(want, fuse ? 2u : 0u) << what;  // the fused path is exercised
        }
        EXPECT_EQ(g.stats().counters.Get("fused_weight_grad_updates"), int64_t(want)) << what;
        EXPECT_EQ(fused_ops, want) << what;
        std::vector<float> losses;
        for (int s = 0; s < steps; ++s) {
          auto b = data.Batch(batch, 100 + uint32_t(s));
          x.CopyFrom(b.first.ToVector<float>());
          y.CopyFrom(b.second.ToVector<int32_t>());
          graph->Run();
          losses.push_back(float(loss.Item()));
        }
        EXPECT_EQ(std::memcmp(e.losses.data(), losses.data(), losses.size() * sizeof(float)), 0) << what;
        EXPECT_TRUE(SameBits(e.params, m.Values())) << what;
      }
    }
  }
  // A gradient the user still holds when the capture ends is stored, as the user expects.
  Mlp m({32, 64, 48, 10}, 5);
  nn::SGD opt(0.05, 0.9);
  auto b = data.Batch(8, 1);
  std::vector<std::pair<Tensor, Tensor>> grads;
  auto held = Capture("held", [&] {
    Tensor loss = ops::SoftmaxCrossEntropy(m.Logits(b.first), b.second);
    grads = Backward(loss);
    for (auto& pg : grads) opt.Apply(pg.second, pg.first, pg.first.name());
  });
  EXPECT_EQ(held->stats().counters.Get("fused_weight_grad_updates"), 0);
  held->Run();
  EXPECT_EQ(grads[0].second.ToVector<float>().size(), grads[0].second.numel());
}

TEST_F(GraphTest, HostReadsInsideCaptureRaise) {
  Tensor x = RandomTensor({4, 4}, DType::kFloat32, 1);
  Tensor y, s;
  auto g = Capture("reads", [&] {
    y = ops::Relu(x);
    s = ops::Sum(y);
    LOOM_EXPECT_THROW_MSG(s.Item(), GraphError, "while cpu:0 is capturing graph 'reads'");
    LOOM_EXPECT_THROW_MSG(y.ToVector<float>(), GraphError, "capturing");
    LOOM_EXPECT_THROW_MSG(y.ToString(), GraphError, "capturing");
    // Even a tensor computed before the capture: its value could change inside the step.
    LOOM_EXPECT_THROW_MSG(x.Item(), GraphError, "capturing");
  });
  g->Run();
  EXPECT_GE(s.Item(), 0.0);
}

TEST_F(GraphTest, FeedingAnInputOfTheWrongShapeRaises) {
  Tensor x = RandomTensor({8, 4}, DType::kFloat32, 1);
  auto g = Capture("feed", [&] { ops::Relu(x); });
  std::vector<float> wrong(12 * 4);
  LOOM_EXPECT_THROW_MSG(x.CopyFrom(wrong), ShapeError, "holds 128 bytes, host data has 192");
  LOOM_EXPECT_THROW_MSG(ops::CopyInto(x, RandomTensor({12, 4}, DType::kFloat32, 2)), ShapeError,
                        "cannot copy float32 (12, 4) on cpu:0 into float32 (8, 4) on cpu:0");
}

TEST_F(GraphTest, CapturedStepRecapturesPerShapeOrRaisesWithTheDifference) {
  Blobs data(32, 10);
  Mlp m({32, 16, 10}, 5);
  nn::SGD opt(0.05);
  auto fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{m.Step(in[0], in[1], opt)}; };
  {
    CapturedStep step(dev_, fn, "strict", /*recapture=*/false);
    auto b = data.Batch(16, 1);
    step({b.first, b.second});
    auto small = data.Batch(5, 2);
    try {
      step({small.first, small.second});
      ADD_FAILURE() << "expected a GraphError";
    } catch (const GraphError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("float32 (16, 32) on cpu:0; int32 (16,) on cpu:0"), std::string::npos) << msg;
      EXPECT_NE(msg.find("float32 (5, 32) on cpu:0; int32 (5,) on cpu:0"), std::string::npos) << msg;
    }
  }
  CapturedStep step(dev_, fn, "epoch", /*recapture=*/true);
  std::vector<double> losses;
  for (int s = 0; s < 30; ++s) {
    auto b = data.Batch(s % 3 == 2 ? 5 : 16, 10 + uint32_t(s));  // every third batch is short
    losses.push_back(step({b.first, b.second})[0].Item());
  }
  EXPECT_EQ(step.num_graphs(), 2u);
  EXPECT_LT(losses.back(), losses.front());
}

// Note [Bounded recapture]: a step keeps max_step_graphs graphs, the least recently used going
// first; a dropped shape comes back as a new capture, the kept ones replay.
TEST_F(GraphTest, CapturedStepKeepsABoundedNumberOfGraphsLeastRecentlyUsedFirst) {
  Blobs data(32, 10);
  Mlp m({32, 16, 10}, 5);
  nn::SGD opt(0.05);
  auto fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{m.Step(in[0], in[1], opt)}; };
  GraphOptions o;
  o.max_step_graphs = 3;
  CapturedStep step(dev_, fn, "bounded", /*recapture=*/true, true, o);
  auto run = [&](int64_t n) {  // a handle keeps a dropped graph alive: a new one is another object
    auto b = data.Batch(n, uint32_t(n));
    step({b.first, b.second});
    return step.last_graph();
  };
  std::shared_ptr<Graph> g4 = run(4), g5 = run(5);
  run(6);
  EXPECT_EQ(run(4), g4);  // replayed: 4 is now the most recently used, 5 the least
  EXPECT_EQ(step.num_graphs(), 3u);
  run(7);  // drops 5
  EXPECT_EQ(step.num_graphs(), 3u);
  EXPECT_EQ(run(4), g4);
  EXPECT_NE(run(5), g5);  // captured again (and 6 dropped)
  EXPECT_EQ(step.num_graphs(), 3u);
  for (int64_t n = 1; n <= 40; ++n) run(n);  // every batch size once: still bounded
  EXPECT_EQ(step.num_graphs(), 3u);
  o.max_step_graphs = 0;  // no bound
  CapturedStep unbounded(dev_, fn, "unbounded", true, true, o);
  for (int64_t n = 1; n <= 12; ++n) {
    auto b = data.Batch(n, uint32_t(n));
    unbounded({b.first, b.second});
  }
  EXPECT_EQ(unbounded.num_graphs(), 12u);
  o.max_step_graphs = -1;
  LOOM_EXPECT_THROW_MSG(CapturedStep(dev_, fn, "bad", true, true, o), ValueError, "[graph] option max_step_graphs is -1");
}

TEST_F(GraphTest, RandomOpsDrawFreshNumbersOnEveryReplayAndMatchEager) {
  dev_->SetRandSeed(77);
  std::vector<std::vector<float>> eager;
  for (int i = 0; i < 3; ++i) eager.push_back(ops::Uniform({64}, 0, 1, DType::kFloat32, dev_).ToVector<float>());
  dev_->SetRandSeed(77);
  Tensor u(Shape{64}, DType::kFloat32, dev_);
  auto g = Capture("rand", [&] { ops::UniformInto(u, 0, 1); });
  std::vector<std::vector<float>> replayed;
  for (int i = 0; i < 3; ++i) {
    g->Run();
    replayed.push_back(u.ToVector<float>());
  }
  EXPECT_TRUE(SameBits(eager, replayed));
  EXPECT_NE(replayed[0], replayed[1]);
}

TEST_F(GraphTest, LearningRateScheduleTakesEffectWithoutRecapture) {
  // loss = sum(w * x): the gradient is x whatever w is, so each update is exactly -lr * x.
  Tensor w = ops::Zeros({8}, DType::kFloat64, dev_);
  w.set_requires_grad(true);
  Tensor x = ops::FromVector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {8}, dev_);
  nn::SGD opt(0.1);
  auto g = Capture("lr", [&] {
    Tensor loss = ops::Sum(ops::Mul(w, x));
    for (auto& pg : Backward(loss)) opt.Apply(pg.second, pg.first);
  });
  auto step_size = [&] {
    std::vector<double> before = w.ToVector<double>();
    g->Run();
    std::vector<double> after = w.ToVector<double>();
    return (before[3] - after[3]) / 4.0;
  };
  EXPECT_DOUBLE_EQ(step_size(), 0.1);
  opt.SetLearningRate(0.01);
  EXPECT_DOUBLE_EQ(step_size(), 0.01);
  for (int epoch = 0; epoch < 3; ++epoch) {  // a step schedule: x0.5 per epoch
    opt.SetLearningRate(0.2 * std::pow(0.5, epoch));
    EXPECT_DOUBLE_EQ(step_size(), 0.2 * std::pow(0.5, epoch));
  }
  EXPECT_EQ(g->stats().replays, 5u);
}

// The reference system's bug: a parameter read by the forward pass and updated by the
// optimizer, with nothing else ordering the two. The update is ready at once; only the
// write-after-read edge keeps the parallel replay from running it during the slow read.
TEST_F(GraphTest, WriteAfterReadOnParameterIsOrderedUnderParallelReplay) {
  Tensor p = RandomTensor({512, 512}, DType::kFloat32, 1);
  Tensor g = RandomTensor({512, 512}, DType::kFloat32, 2);
  Tensor x = RandomTensor({512, 512}, DType::kFloat32, 3);
  nn::SGD opt(0.5);
  std::vector<float> p0 = p.ToVector<float>();
  Tensor want = ops::MatMul(x, p);  // the forward pass must see the parameter before the update
  std::vector<float> want_v = want.ToVector<float>();
  GraphOptions options;
  options.parallel_fallback = false;
  Tensor y;
  auto captured = Capture("war", [&] {
    y = ops::MatMul(x, p);  // op 0: reads p (slow)
    opt.Apply(g, p);     // op 1: writes p, depends on nothing but the WAR edge
  }, options);
  const Graph& graph = *captured;
  bool war = false;
  for (const Dep& d : graph.analysis().deps) war = war || (d.from == 0 && d.to == 1 && (d.kinds & uint8_t(DepKind::kWAR)));
  EXPECT_TRUE(war);
  for (int rep = 0; rep < 5; ++rep) {
    p.CopyFrom(p0);
    captured->Run(/*sequential=*/false);
    ASSERT_EQ(y.ToVector<float>(), want_v) << "replay " << rep;
  }
}

TEST_F(GraphTest, DotTraceAndTimelineDumps) {
  Blobs data(8, 3);
  Mlp m({8, 8, 3}, 1);
  nn::SGD opt(0.1, 0.9);
  auto b = data.Batch(4, 1);
  auto graph = Capture("dump", [&] { m.Step(b.first, b.second, opt); });
  Graph& g = *graph;
  std::string dot = g.ToDot();
  EXPECT_NE(dot.find("digraph"), std::string::npos);
  EXPECT_NE(dot.find("matmul"), std::string::npos);
  EXPECT_NE(dot.find("update_group"), std::string::npos);  // the MLP's updates (Note [Small updates grouped])
  LOOM_EXPECT_THROW_MSG(g.WriteTrace("/tmp/loom_never.json"), GraphError, "no profiled replay");
  g.set_profile(true);
  g.Run();
  std::string trace = g.TraceJson();
  EXPECT_NE(trace.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(trace.find("\"ph\":\"X\""), std::string::npos);
  EXPECT_NE(trace.find("\"ph\":\"C\""), std::string::npos);
  EXPECT_EQ(g.last_profile().size(), g.ops().size());
  std::string csv = g.MemoryTimelineCsv();
  EXPECT_EQ(size_t(std::count(csv.begin(), csv.end(), '\n')), g.ops().size() + 1);
  LOOM_EXPECT_THROW_MSG(g.WriteDot("/nonexistent-dir/x.dot"), IOError, "cannot open");
}

// Note [Parallel or serial]: a chain has nothing to run side by side, whatever the op times
// (its total time is its longest chain), so later parallel replays run serially. The choice for
// a wide graph depends on measured times and is tested with injected costs in schedule_test.
TEST_F(GraphTest, FirstParallelReplayMeasuresAChainAndRunsItSerially) {
  GraphOptions options;
  options.num_workers = 2;
  Tensor x = RandomTensor({64, 64}, DType::kFloat32, 1);
  std::vector<Tensor> w;
  for (int i = 0; i < 8; ++i) w.push_back(RandomTensor({64, 64}, DType::kFloat32, 10 + uint32_t(i), -0.1, 0.1));
  Tensor h;
  auto chain = Capture("chain", [&] {
    h = x;
    for (const Tensor& wi : w) h = ops::MatMul(h, wi);
  }, options);
  std::vector<float> first;
  for (int rep = 0; rep < 3; ++rep) {
    chain->Run(/*sequential=*/false);
    if (rep == 0) first = h.ToVector<float>();
    EXPECT_EQ(h.ToVector<float>(), first);  // the same numbers whichever way it ran
  }
  EXPECT_NEAR(chain->stats().parallelism, 1.0, 1e-9);
  EXPECT_TRUE(chain->stats().parallel_runs_serial);
  EXPECT_EQ(chain->stats().replays, 3u);
}

// A graph belongs to its owner: it keeps its device and the blocks it planned, and gives the
// arena back when it goes.
TEST_F(GraphTest, AGraphFreesItsArenaWhenItsOwnerDropsIt) {
  Blobs data(32, 10);
  Mlp m({32, 64, 10}, 5);
  nn::SGD opt(0.05);
  auto b = data.Batch(16, 1);
  size_t live_before = dev_->stats().live_bytes;
  Tensor loss;
  auto g = Capture("owned", [&] { loss = m.Step(b.first, b.second, opt); });
  g->Run();
  const size_t arena = g->stats().arena_bytes;
  ASSERT_GT(arena, 0u);
  EXPECT_GE(dev_->stats().live_bytes, live_before + arena);
  std::vector<Block*> planned;
  for (size_t i = 0; i < g->ops().blocks.size(); ++i)
    if (g->layout().BlockOffset(int(i)) != SIZE_MAX) planned.push_back(g->ops().blocks[i].get());
  ASSERT_FALSE(planned.empty());
  std::vector<std::shared_ptr<Block>> keep;  // blocks outliving the graph must not point into freed memory
  for (size_t i = 0; i < g->ops().blocks.size(); ++i) keep.push_back(g->ops().blocks[i]);
  size_t with_graph = dev_->stats().live_bytes;
  g.reset();
  EXPECT_EQ(dev_->stats().live_bytes, with_graph - arena);
  for (Block* p : planned) EXPECT_FALSE(p->allocated());
  EXPECT_GT(loss.Item(), 0.0);  // a persistent output keeps its own memory
}

TEST_F(GraphTest, CaptureErrorsAndMisuse) {
  Tensor x = RandomTensor({4}, DType::kFloat32, 1);
  // A step that throws leaves no capture behind.
  LOOM_EXPECT_THROW_MSG(Capture("throws", [&] { ops::Relu(x); throw ValueError("[test] boom"); }), ValueError, "boom");
  EXPECT_FALSE(dev_->capturing());
  Graph g(dev_, "g");
  LOOM_EXPECT_THROW_MSG(g.Run(), GraphError, "has no finished capture");
  LOOM_EXPECT_THROW_MSG(g.EndCapture(), GraphError, "without a capture in progress");
  g.BeginCapture();
  Graph other(dev_, "other");
  LOOM_EXPECT_THROW_MSG(other.BeginCapture(), GraphError, "already capturing graph 'g'");
  LOOM_EXPECT_THROW_MSG(g.Run(), GraphError, "still being captured");
  Tensor never(Shape{3}, DType::kFloat32, dev_);
  LOOM_EXPECT_THROW_MSG(ops::Relu(never), GraphError, "reads input 0 (float32 (3,) on cpu:0) that nothing has written");
  Tensor y = ops::Relu(x);
  g.EndCapture();
  LOOM_EXPECT_THROW_MSG(g.BeginCapture(), GraphError, "captured once");
  g.Run();
  EXPECT_EQ(y.ToVector<float>(), ops::Relu(x).ToVector<float>());
  // A graph dropped during its capture ends it.
  { Graph dropped(dev_, "dropped"); dropped.BeginCapture(); }
  EXPECT_FALSE(dev_->capturing());
}

// docs/design.md invariant 10: a capture belongs to the thread that began it.
TEST_F(GraphTest, AnotherThreadsOpDuringACaptureRaisesAndLandsNowhere) {
  Tensor x = RandomTensor({4}, DType::kFloat32, 1);
  Graph g(dev_, "mine");
  g.BeginCapture();
  Tensor y = ops::Relu(x);
  std::string error;
  std::thread other([&] {
    try {
      ops::Exp(x);
    } catch (const GraphError& e) {
      error = e.what();
    }
  });
  other.join();
  EXPECT_NE(error.find("[exp] submitted to cpu:0 by another thread while graph 'mine' is being captured"),
            std::string::npos) << error;
  g.EndCapture();
  EXPECT_EQ(g.stats().num_ops, 1u);
  // Once the capture is over, that thread's ops run as usual.
  std::vector<float> e;
  std::thread after([&] { e = ops::Exp(x).ToVector<float>(); });
  after.join();
  EXPECT_EQ(e.size(), 4u);
}

// Note [One user at a time]: replays of one graph from two threads run one after the other,
// so two threads doing n replays each equal 2n replays on one thread, bit for bit.
TEST_F(GraphTest, ReplaysFromTwoThreadsAreSerialised) {
  Blobs data(32, 10);
  auto b = data.Batch(16, 1);
  const int n = 40;
  auto run = [&](int threads) {
    Mlp m({32, 64, 64, 10}, 5);
    nn::SGD opt(0.01, 0.9);
    auto g = Capture("train", [&] { m.Step(b.first, b.second, opt); });
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&] {
        for (int i = 0; i < 2 * n / threads; ++i) g->Run();
      });
    for (auto& t : ts) t.join();
    EXPECT_EQ(g->stats().replays, uint64_t(2 * n));
    return m.Values();
  };
  std::vector<std::vector<float>> one = run(1), two = run(2);
  for (const auto& p : two)
    for (float v : p) ASSERT_TRUE(std::isfinite(v));
  EXPECT_TRUE(SameBits(one, two));
}

}  // namespace
}  // namespace test
}  // namespace loom
