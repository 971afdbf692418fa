// The graph end to end on the CPU: capture, analysis, lazy allocation, recycling, planned
// arena, serial and parallel replay against eager execution, feeding, randomness, schedules,
// host reads and errors.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>

#include "common/harness.h"
#include "common/mlp.h"
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
  void SetUp() override { dev_ = CpuDevice(); dev_->ResetGraph(); dev_->graph_options() = GraphOptions(); }
  void TearDown() override { dev_->ResetGraph(); dev_->graph_options() = GraphOptions(); }
  std::shared_ptr<Device> dev_;
};

bool SameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

struct RunResult {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
};

RunResult Eager(const Blobs& data, int steps, double dropout = 0) {
  Mlp m({32, 64, 64, 10}, 5);
  nn::SGD opt(0.05, 0.9, 1e-4);
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    auto batch = data.Batch(16, 100 + uint32_t(s));
    r.losses.push_back(float(m.Step(batch.first, batch.second, opt, dropout).Item()));
  }
  r.params = m.Values();
  return r;
}

RunResult Graphed(const Blobs& data, int steps, bool sequential, MemoryMode mode, double dropout = 0) {
  auto dev = CpuDevice();
  Mlp m({32, 64, 64, 10}, 5);
  nn::SGD opt(0.05, 0.9, 1e-4);
  auto first = data.Batch(16, 100);
  Tensor x = first.first, y = first.second;
  dev->graph_options().memory = mode;
  dev->graph_options().parallel_fallback = false;  // the parallel schedule itself is under test
  dev->EnableGraph(true, "train");
  Tensor loss = m.Step(x, y, opt, dropout);
  dev->EnableGraph(false);
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    auto batch = data.Batch(16, 100 + uint32_t(s));
    x.CopyFrom(batch.first.ToVector<float>());
    y.CopyFrom(batch.second.ToVector<int32_t>());
    dev->RunGraph(sequential, "train");
    r.losses.push_back(float(loss.Item()));
  }
  r.params = m.Values();
  dev->ResetGraph("train");
  return r;
}

TEST_F(GraphTest, SerialReplayIsBitwiseEqualToEager) {
  Blobs data(32, 10);
  RunResult e = Eager(data, 5);
  for (MemoryMode mode : {MemoryMode::kPlanned, MemoryMode::kDynamic}) {
    RunResult g = Graphed(data, 5, true, mode);
    EXPECT_EQ(std::memcmp(e.losses.data(), g.losses.data(), e.losses.size() * sizeof(float)), 0) << Name(mode);
    EXPECT_TRUE(SameBits(e.params, g.params)) << Name(mode);
  }
}

TEST_F(GraphTest, SerialReplayWithDropoutIsBitwiseEqualToEager) {
  Blobs data(32, 10);
  RunResult e = Eager(data, 4, 0.3);
  RunResult g = Graphed(data, 4, true, MemoryMode::kPlanned, 0.3);
  EXPECT_EQ(std::memcmp(e.losses.data(), g.losses.data(), e.losses.size() * sizeof(float)), 0);
  EXPECT_TRUE(SameBits(e.params, g.params));
  EXPECT_NE(e.losses[0], e.losses[1]);
}

TEST_F(GraphTest, ParallelReplayAgreesWithEager) {
  Blobs data(32, 10);
  RunResult e = Eager(data, 5);
  for (MemoryMode mode : {MemoryMode::kPlanned, MemoryMode::kDynamic}) {
    RunResult g = Graphed(data, 5, false, mode);
    for (size_t i = 0; i < e.losses.size(); ++i) EXPECT_NEAR(g.losses[i], e.losses[i], 1e-6 * std::abs(e.losses[i]));
    for (size_t p = 0; p < e.params.size(); ++p)
      for (size_t k = 0; k < e.params[p].size(); ++k)
        ASSERT_NEAR(g.params[p][k], e.params[p][k], 1e-6 * std::abs(e.params[p][k]) + 1e-7) << Name(mode);
  }
}

TEST_F(GraphTest, ReplayWithNewDataKeepsTraining) {
  Blobs data(32, 10);
  RunResult g = Graphed(data, 60, true, MemoryMode::kPlanned);
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
  dev_->EnableGraph(true, "train");
  Tensor loss = m.Step(b.first, b.second, opt);
  size_t setup_ops = dev_->ops_run() - ops_before;  // optimizer state zeros and the lr scalar
  dev_->EnableGraph(false);
  Graph& g = dev_->GetGraph("train");
  // Only setup ran: one fill per momentum buffer plus the learning-rate scalar.
  EXPECT_EQ(setup_ops, m.params.size() + 1);
  size_t state_bytes = 8;  // the lr scalar
  for (const Tensor& p : m.params) state_bytes += p.nbytes();
  EXPECT_EQ(dev_->stats().live_bytes, live_before + state_bytes);
  for (size_t i = 0; i < g.blocks().size(); ++i) {
    if (!g.analysis().blocks[i].persistent) {
      EXPECT_FALSE(g.blocks()[i]->allocated()) << "block " << i;
    }
  }
  EXPECT_TRUE(SameBits(before, m.Values()));  // the update did not run either
  EXPECT_FALSE(loss.block()->allocated());
  dev_->RunGraph(true, "train");
  EXPECT_TRUE(loss.block()->allocated());
  EXPECT_FALSE(SameBits(before, m.Values()));
}

TEST_F(GraphTest, DynamicModeFreesEachBlockAfterItsLastReader) {
  dev_->graph_options().memory = MemoryMode::kDynamic;
  Tensor x = RandomTensor({256, 256}, DType::kFloat32, 1);
  dev_->EnableGraph(true, "chain");
  Tensor a = ops::Relu(x);          // op 0: a's last reader is op 1
  Tensor b = ops::Exp(a);           // op 1
  Tensor c = ops::Tanh(b);          // op 2: b's last reader
  Tensor out = Call1("test_probe", {c});  // op 3: a and b must be gone, c alive
  Tensor d = ops::Neg(out);         // op 4
  g_watched = {a.block(), b.block(), c.block()};
  a = b = c = out = Tensor();       // only the graph holds them now
  dev_->EnableGraph(false);
  const Graph& g = dev_->GetGraph("chain");
  EXPECT_EQ(g.stats().num_intermediate, 4u);
  size_t live_before = dev_->stats().live_bytes;
  dev_->RunGraph(true, "chain");
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
  dev_->EnableGraph(true, "mlp");
  Tensor loss = m.Step(b.first, b.second, opt);
  dev_->EnableGraph(false);
  const GraphStats& s = dev_->GetGraph("mlp").stats();
  ASSERT_GT(s.lower_bound_bytes, 0u);
  EXPECT_LE(double(s.arena_bytes), 1.05 * double(s.lower_bound_bytes)) << dev_->GetGraph("mlp").Summary();
  // No two intermediates share arena bytes while both are alive, except an in-place hand-over
  // (Note [In-place reuse]): the input's last op is the output's first.
  const Graph& g = dev_->GetGraph("mlp");
  for (size_t a = 0; a < g.blocks().size(); ++a) {
    for (size_t b = a + 1; b < g.blocks().size(); ++b) {
      size_t oa = g.PlannedOffset(int(a)), ob = g.PlannedOffset(int(b));
      if (oa == SIZE_MAX || ob == SIZE_MAX) continue;
      const BlockLife &la = g.analysis().blocks[a], &lb = g.analysis().blocks[b];
      bool mem = oa < ob + g.block_facts()[b].bytes && ob < oa + g.block_facts()[a].bytes;
      bool life = la.first <= lb.last && lb.first <= la.last;
      bool handover = oa == ob && (la.last == lb.first || lb.last == la.first);
      EXPECT_FALSE(mem && life && !handover) << "blocks " << a << " and " << b;
    }
  }
  size_t live_before = dev_->stats().live_bytes;
  dev_->RunGraph(true, "mlp");
  size_t arena_alloc = dev_->stats().live_bytes - live_before;
  dev_->RunGraph(true, "mlp");
  // Replays after the first allocate nothing.
  EXPECT_EQ(dev_->stats().live_bytes - live_before, arena_alloc);
  uint64_t allocs = dev_->stats().num_allocs;
  dev_->RunGraph(true, "mlp");
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
    for (int64_t batch : {int64_t(3), int64_t(16), int64_t(17)}) {
      for (bool fuse : {true, false}) {
        std::string what = "momentum " + std::to_string(v.momentum) + (v.nesterov ? " nesterov" : "") +
                           " batch " + std::to_string(batch) + (fuse ? " fused" : " unfused");
        const int steps = 4;
        RunResult e;
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
        dev_->graph_options().fuse = fuse;
        dev_->EnableGraph(true, "train");
        Tensor loss = m.Step(x, y, opt);
        dev_->EnableGraph(false);
        const Graph& g = dev_->GetGraph("train");
        size_t fused_ops = 0;
        for (const OpRecord& op : g.ops()) fused_ops += op.name() == "matmul_sgd_update";
        // w0 (32x64) and w1 (64x48) fuse; w2 (48x10) is narrower than 16 columns.
        const size_t want = fuse && batch <= 16 ? 2 : 0;
        EXPECT_EQ(g.stats().fused_ops, want) << what;
        EXPECT_EQ(fused_ops, want) << what;
        std::vector<float> losses;
        for (int s = 0; s < steps; ++s) {
          auto b = data.Batch(batch, 100 + uint32_t(s));
          x.CopyFrom(b.first.ToVector<float>());
          y.CopyFrom(b.second.ToVector<int32_t>());
          dev_->RunGraph(true, "train");
          losses.push_back(float(loss.Item()));
        }
        EXPECT_EQ(std::memcmp(e.losses.data(), losses.data(), losses.size() * sizeof(float)), 0) << what;
        EXPECT_TRUE(SameBits(e.params, m.Values())) << what;
        dev_->ResetGraph("train");
        dev_->graph_options() = GraphOptions();
      }
    }
  }
  // A gradient the user still holds when the capture ends is stored, as the user expects.
  Mlp m({32, 64, 48, 10}, 5);
  nn::SGD opt(0.05, 0.9);
  auto b = data.Batch(8, 1);
  dev_->EnableGraph(true, "held");
  Tensor loss = ops::SoftmaxCrossEntropy(m.Logits(b.first), b.second);
  auto grads = Backward(loss);
  for (auto& pg : grads) opt.Apply(pg.second, pg.first, pg.first.name());
  dev_->EnableGraph(false);
  EXPECT_EQ(dev_->GetGraph("held").stats().fused_ops, 0u);
  dev_->RunGraph(true, "held");
  EXPECT_EQ(grads[0].second.ToVector<float>().size(), grads[0].second.numel());
}

TEST_F(GraphTest, HostReadsInsideCaptureRaise) {
  Tensor x = RandomTensor({4, 4}, DType::kFloat32, 1);
  dev_->EnableGraph(true, "reads");
  Tensor y = ops::Relu(x);
  Tensor s = ops::Sum(y);
  LOOM_EXPECT_THROW_MSG(s.Item(), GraphError, "while cpu:0 is capturing graph 'reads'");
  LOOM_EXPECT_THROW_MSG(y.ToVector<float>(), GraphError, "capturing");
  LOOM_EXPECT_THROW_MSG(y.ToString(), GraphError, "capturing");
  // Even a tensor computed before the capture: its value could change inside the step.
  LOOM_EXPECT_THROW_MSG(x.Item(), GraphError, "capturing");
  dev_->EnableGraph(false);
  dev_->RunGraph(true, "reads");
  EXPECT_GE(s.Item(), 0.0);
}

TEST_F(GraphTest, FeedingAnInputOfTheWrongShapeRaises) {
  Tensor x = RandomTensor({8, 4}, DType::kFloat32, 1);
  dev_->EnableGraph(true, "feed");
  Tensor y = ops::Relu(x);
  dev_->EnableGraph(false);
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

TEST_F(GraphTest, RandomOpsDrawFreshNumbersOnEveryReplayAndMatchEager) {
  dev_->SetRandSeed(77);
  std::vector<std::vector<float>> eager;
  for (int i = 0; i < 3; ++i) eager.push_back(ops::Uniform({64}, 0, 1, DType::kFloat32, dev_).ToVector<float>());
  dev_->SetRandSeed(77);
  Tensor u(Shape{64}, DType::kFloat32, dev_);
  dev_->EnableGraph(true, "rand");
  ops::UniformInto(u, 0, 1);
  dev_->EnableGraph(false);
  std::vector<std::vector<float>> replayed;
  for (int i = 0; i < 3; ++i) {
    dev_->RunGraph(true, "rand");
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
  dev_->EnableGraph(true, "lr");
  Tensor loss = ops::Sum(ops::Mul(w, x));
  for (auto& pg : Backward(loss)) opt.Apply(pg.second, pg.first);
  dev_->EnableGraph(false);
  auto step_size = [&] {
    std::vector<double> before = w.ToVector<double>();
    dev_->RunGraph(true, "lr");
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
  EXPECT_EQ(dev_->GetGraph("lr").stats().replays, 5u);
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
  dev_->graph_options().parallel_fallback = false;
  dev_->EnableGraph(true, "war");
  Tensor y = ops::MatMul(x, p);    // op 0: reads p (slow)
  opt.Apply(g, p);                 // op 1: writes p, depends on nothing but the WAR edge
  dev_->EnableGraph(false);
  const Graph& graph = dev_->GetGraph("war");
  bool war = false;
  for (const Dep& d : graph.analysis().deps) war = war || (d.from == 0 && d.to == 1 && (d.kinds & uint8_t(DepKind::kWAR)));
  EXPECT_TRUE(war);
  for (int rep = 0; rep < 5; ++rep) {
    p.CopyFrom(p0);
    dev_->RunGraph(/*sequential=*/false, "war");
    ASSERT_EQ(y.ToVector<float>(), want_v) << "replay " << rep;
  }
}

TEST_F(GraphTest, ParallelReplayRunsAChainSeriallyAndAWideGraphInParallel) {
  // Note [Parallel or serial]: the first parallel replay measures the graph's parallelism.
  dev_->graph_options().num_workers = 2;
  Tensor x = RandomTensor({96, 96}, DType::kFloat32, 1);
  std::vector<Tensor> w;
  for (int i = 0; i < 16; ++i) w.push_back(RandomTensor({96, 96}, DType::kFloat32, 10 + uint32_t(i), -0.1, 0.1));
  // A chain: every matmul needs the one before.
  dev_->EnableGraph(true, "chain");
  Tensor h = x;
  for (const Tensor& wi : w) h = ops::MatMul(h, wi);
  dev_->EnableGraph(false);
  // Wide: sixteen matmuls that need nothing but x.
  dev_->EnableGraph(true, "wide");
  std::vector<Tensor> outs;
  for (const Tensor& wi : w) outs.push_back(ops::MatMul(x, wi));
  dev_->EnableGraph(false);
  std::vector<float> first_h, first_wide;
  for (int rep = 0; rep < 3; ++rep) {
    dev_->RunGraph(/*sequential=*/false, "chain");
    dev_->RunGraph(/*sequential=*/false, "wide");
    if (rep == 0) {
      first_h = h.ToVector<float>();
      first_wide = outs[15].ToVector<float>();
    }
    EXPECT_EQ(h.ToVector<float>(), first_h);  // the same numbers whichever schedule ran
    EXPECT_EQ(outs[15].ToVector<float>(), first_wide);
  }
  const GraphStats& chain = dev_->GetGraph("chain").stats();
  const GraphStats& wide = dev_->GetGraph("wide").stats();
  EXPECT_NEAR(chain.parallelism, 1.0, 1e-9);  // total time = the chain's time, whatever the timings
  EXPECT_TRUE(chain.parallel_runs_serial);
  EXPECT_GT(wide.parallelism, 1.8) << "16 independent equal matmuls";
  EXPECT_FALSE(wide.parallel_runs_serial);
}

TEST_F(GraphTest, SeveralKeyedGraphsCoexist) {
  Tensor x = RandomTensor({4}, DType::kFloat32, 1);
  dev_->EnableGraph(true, "a");
  Tensor ya = ops::MulScalar(x, 2);
  dev_->EnableGraph(false);
  dev_->EnableGraph(true, "b");
  Tensor yb = ops::MulScalar(x, 3);
  dev_->EnableGraph(false);
  dev_->RunGraph(true, "a");
  dev_->RunGraph(true, "b");
  std::vector<float> xv = x.ToVector<float>(), av = ya.ToVector<float>(), bv = yb.ToVector<float>();
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(av[i], 2 * xv[i]);
    EXPECT_EQ(bv[i], 3 * xv[i]);
  }
  EXPECT_TRUE(dev_->HasGraph("a") && dev_->HasGraph("b"));
}

TEST_F(GraphTest, MisuseRaisesGraphErrors) {
  LOOM_EXPECT_THROW_MSG(dev_->RunGraph(true, "nope"), GraphError, "has no graph 'nope'");
  LOOM_EXPECT_THROW_MSG(dev_->EnableGraph(false), GraphError, "without a capture in progress");
  dev_->EnableGraph(true, "x");
  LOOM_EXPECT_THROW_MSG(dev_->EnableGraph(true, "y"), GraphError, "already capturing graph 'x'");
  LOOM_EXPECT_THROW_MSG(dev_->RunGraph(true, "x"), GraphError, "while graph 'x' is being captured");
  Tensor never(Shape{3}, DType::kFloat32, dev_);
  LOOM_EXPECT_THROW_MSG(ops::Relu(never), GraphError, "reads input 0 (float32 (3,) on cpu:0) that nothing has written");
  dev_->EnableGraph(false);
}

TEST_F(GraphTest, DotTraceAndTimelineDumps) {
  Blobs data(8, 3);
  Mlp m({8, 8, 3}, 1);
  nn::SGD opt(0.1, 0.9);
  auto b = data.Batch(4, 1);
  dev_->EnableGraph(true, "dump");
  Tensor loss = m.Step(b.first, b.second, opt);
  dev_->EnableGraph(false);
  Graph& g = dev_->GetGraph("dump");
  std::string dot = g.ToDot();
  EXPECT_NE(dot.find("digraph"), std::string::npos);
  EXPECT_NE(dot.find("matmul"), std::string::npos);
  EXPECT_NE(dot.find("sgd_update"), std::string::npos);
  LOOM_EXPECT_THROW_MSG(g.WriteTrace("/tmp/loom_never.json"), GraphError, "no profiled replay");
  g.set_profile(true);
  dev_->RunGraph(true, "dump");
  std::string trace = g.TraceJson();
  EXPECT_NE(trace.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(trace.find("\"ph\":\"X\""), std::string::npos);
  EXPECT_NE(trace.find("\"ph\":\"C\""), std::string::npos);
  EXPECT_EQ(g.last_profile().size(), g.ops().size());
  std::string csv = g.MemoryTimelineCsv();
  EXPECT_EQ(size_t(std::count(csv.begin(), csv.end(), '\n')), g.ops().size() + 1);
  LOOM_EXPECT_THROW_MSG(g.WriteDot("/nonexistent-dir/x.dot"), IOError, "cannot open");
}

}  // namespace
}  // namespace test
}  // namespace loom
