// Note [Weights kept blocked] (device/cpu/passes/weight_layout.cc): a captured step keeps the weights of its
// convolutions (16-multiple channels, updated by SGD or Adam) and their state in oneDNN's blocked
// layout between replays; replay stays bitwise equal to eager, whatever reads or writes the
// weights between replays (host reads and writes, eager ops, another graph) sees and reaches
// OIHW values, destroying the graph leaves OIHW values, and a weight with another use stays
// OIHW.
#include <gtest/gtest.h>

#include <memory>

#include "common/conv_params.h"
#include "common/files.h"
#include "common/harness.h"
#include "common/mlp.h"
#include "core/ops_cnn.h"
#include "device/cpu/kernels/conv_dnnl.h"
#include "graph/graph.h"
#include "io/checkpoint.h"
#include "nn/optimizer_checkpoint.h"

LOOM_OP_KIND(conv2d);
LOOM_OP_KIND(conv2d_grad_input);
LOOM_OP_KIND(conv2d_grad_weight);

namespace loom {
namespace test {
namespace {

constexpr int kSteps = 3;

// What the step does besides training.
enum class Extra {
  kNone,
  kPenalty,   // the loss adds 1e-4 sum(w1 * w1): w1 has a reader besides the convolutions
  kHoldGrad,  // the user keeps w2's gradient
};

// conv(3->16) -> bn -> relu -> conv(16->32) -> bn -> relu -> conv 1x1 (32->32) -> relu -> global
// average pool -> linear. w1 and w2 (and their momentum) may be kept blocked; w0 (3 input
// channels) may not.
struct Net {
  std::vector<Tensor> p;      // trained: w0, g0, b0, w1, g1, b1, w2, fc, fc bias
  std::vector<Tensor> stats;  // running mean and variance of both batch norms
  explicit Net(const std::shared_ptr<Device>& dev) {
    dev->SetRandSeed(23);
    p = TrainableParams(dev,
                        {Shape{16, 3, 3, 3}, Shape{16}, Shape{16}, Shape{32, 16, 3, 3}, Shape{32}, Shape{32},
                         Shape{32, 32, 1, 1}, Shape{32, 10}, Shape{10}},
                        {1, 4});
    stats = RunningStats(dev, {16, 32});
  }
  Tensor Step(const Tensor& x, const Tensor& y, nn::Optimizer& opt, Extra extra = Extra::kNone,
              Tensor* held = nullptr) const {
    ops::Conv2dOptions same;
    same.padding = {1, 1};
    Tensor h = ops::Relu(ops::BatchNorm(ops::Conv2d(x, p[0], Tensor(), same), p[1], p[2], stats[0], stats[1], true));
    h = ops::Relu(ops::BatchNorm(ops::Conv2d(h, p[3], Tensor(), same), p[4], p[5], stats[2], stats[3], true));
    h = ops::GlobalAvgPool(ops::Relu(ops::Conv2d(h, p[6], Tensor(), ops::Conv2dOptions())));
    Tensor loss = ops::SoftmaxCrossEntropy(ops::AddBias(ops::MatMul(h, p[7]), p[8]), y);
    if (extra == Extra::kPenalty) loss = ops::Add(loss, ops::MulScalar(ops::Sum(ops::Mul(p[3], p[3])), 1e-4));
    for (auto& pg : Backward(loss)) {
      if (held && pg.first.block() == p[6].block()) *held = pg.second;
      opt.Apply(pg.second, pg.first, pg.first.name());
    }
    return loss;
  }
  std::vector<std::vector<float>> Values(const nn::Optimizer& opt) const {
    std::vector<std::vector<float>> v = HostValues(p, stats);
    for (const auto& [key, t] : opt.states()) v.push_back(t.ToVector<float>());  // the momentum buffers
    return v;
  }
};

constexpr int64_t kSide = 9;   // images kSide x kSide
constexpr uint32_t kSeed = 700;  // batch s: ImageBatch(kSide, kSeed, s)
std::pair<Tensor, Tensor> Batch(int s) { return ImageBatch(kSide, kSeed, s); }

// SGD with momentum and weight decay (one state buffer), or Adam with decoupled decay (two).
enum class Opt { kSgd, kAdam };
std::unique_ptr<nn::Optimizer> MakeOptimizer(Opt o) {
  if (o == Opt::kAdam) return std::make_unique<nn::Adam>(0.01, 0.9, 0.999, 1e-8, 1e-3, true);
  return std::make_unique<nn::SGD>(0.05, 0.9, 1e-3);
}

// Between steps s and s + 1 (both runs alike): read w1 on the host, run an eager op on w2, and
// write w1 from the host (a tenth smaller). Returns what the reads saw.
std::vector<std::vector<float>> Meddle(Net& net) {
  std::vector<std::vector<float>> seen;
  std::vector<float> w1 = net.p[3].ToVector<float>();
  seen.push_back(w1);
  seen.push_back(ops::MulScalar(net.p[6], 2.0).ToVector<float>());
  for (float& v : w1) v *= 0.9f;
  net.p[3].CopyFrom(w1);
  return seen;
}

struct Outcome {
  TrainRun run;
  std::vector<std::vector<float>> seen;  // what Meddle saw, step after step
  GraphStats stats;
  std::vector<std::string> attrs;  // the weight layout attributes of the replayed records, in order
};

Outcome Eager(bool meddle, Opt o = Opt::kSgd) {
  Net net(CpuDevice());
  auto optimizer = MakeOptimizer(o);
  nn::Optimizer& opt = *optimizer;
  Outcome r;
  for (int s = 0; s < kSteps; ++s) {
    auto b = Batch(s);
    r.run.losses.push_back(float(net.Step(b.first, b.second, opt).Item()));
    if (meddle)
      for (auto& v : Meddle(net)) r.seen.push_back(std::move(v));
  }
  r.run.params = net.Values(opt);
  return r;
}

// Replays a captured step; with `keep_graph` false the graph is destroyed before the values are
// read (they must be OIHW again).
Outcome Replayed(bool meddle, Extra extra = Extra::kNone, bool keep = true, bool keep_graph = true,
                 Opt o = Opt::kSgd, bool sequential = true) {
  Net net(CpuDevice());
  auto optimizer = MakeOptimizer(o);
  nn::Optimizer& opt = *optimizer;
  auto b = Batch(0);
  Tensor x = b.first, y = b.second, loss, held;
  GraphOptions options;
  options.passes.Set("keep_weights_blocked", keep);
  if (!sequential) {
    // The dependency-driven replay itself, on two workers, whatever the machine's core count and
    // whatever a first timed replay would measure (Note [Parallel or serial]).
    options.parallel_fallback = false;
    options.num_workers = 2;
  }
  auto g = Graph::Capture(CpuDevice(), "weights", [&] {
    loss = net.Step(x, y, opt, extra, extra == Extra::kHoldGrad ? &held : nullptr);
  }, options);
  Outcome r;
  for (const OpRecord& op : g->ops().ops)
    for (const char* a : {"w_blocked", "dw_blocked"})
      if (IntAttrOrZero(op, a) != 0) r.attrs.push_back(op.def->name + " " + a);
  r.run.losses = ReplayImageSteps(*g, x, y, loss, kSteps, kSide, kSeed, [&](int) {
    if (meddle)
      for (auto& v : Meddle(net)) r.seen.push_back(std::move(v));
  }, sequential);
  r.stats = g->stats();
  if (!keep_graph) {
    EXPECT_NE(net.p[3].block()->guard(), nullptr);
    g.reset();
    EXPECT_EQ(net.p[3].block()->guard(), nullptr) << "the graph's guard outlived it";
  }
  r.run.params = net.Values(opt);
  return r;
}

using WeightLayoutTest = BlockedLayoutTest;

TEST_F(WeightLayoutTest, ConvWeightsStayBlockedAndReplayIsBitwiseEager) {
  const Outcome e = Eager(false);
  const Outcome g = Replayed(false);
  // w1 and w2 with their momentum; w0 has 3 input channels.
  EXPECT_EQ(g.stats.counters.Get("blocked_weights"), 4);
  // The 1x1 convolution took its ReLU (Note [Fusing bias and activation]).
  EXPECT_EQ(g.attrs, (std::vector<std::string>{"conv2d w_blocked", "conv2d_relu w_blocked",
                                               "conv2d_grad_input w_blocked", "conv2d_grad_weight dw_blocked",
                                               "conv2d_grad_input w_blocked", "conv2d_grad_weight dw_blocked"}));
  ExpectBitwiseRuns(e.run, g.run, "replay with blocked weights");
  // The parallel replay's workers pass the guards as the serial replay does.
  const Outcome p = Replayed(false, Extra::kNone, true, true, Opt::kSgd, /*sequential=*/false);
  EXPECT_EQ(p.stats.counters.Get("blocked_weights"), 4);
  EXPECT_EQ(p.stats.parallel_replays, uint64_t(kSteps)) << "the workers did not replay";
  ExpectBitwiseRuns(e.run, p.run, "parallel replay with blocked weights");
  const Outcome off = Replayed(false, Extra::kNone, /*keep=*/false);
  EXPECT_EQ(off.stats.counters.Get("blocked_weights"), 0);
  EXPECT_TRUE(off.attrs.empty());
  ExpectBitwiseRuns(e.run, off.run, "replay without");
}

TEST_F(WeightLayoutTest, AdamStateStaysBlockedToo) {
  const Outcome e = Eager(true, Opt::kAdam);
  const Outcome g = Replayed(true, Extra::kNone, true, true, Opt::kAdam);
  EXPECT_EQ(g.stats.counters.Get("blocked_weights"), 6);  // w1 and w2, with m and v each
  ASSERT_EQ(e.seen.size(), g.seen.size());
  for (size_t i = 0; i < e.seen.size(); ++i) EXPECT_EQ(e.seen[i], g.seen[i]) << "read " << i << " between replays";
  ExpectBitwiseRuns(e.run, g.run, "Adam replay with blocked weights and state");
}

TEST_F(WeightLayoutTest, ReadsAndWritesBetweenReplaysSeeAndReachOihwValues) {
  const Outcome e = Eager(true);
  const Outcome g = Replayed(true);
  EXPECT_EQ(g.stats.counters.Get("blocked_weights"), 4);
  ASSERT_EQ(e.seen.size(), g.seen.size());
  for (size_t i = 0; i < e.seen.size(); ++i) EXPECT_EQ(e.seen[i], g.seen[i]) << "read " << i << " between replays";
  ExpectBitwiseRuns(e.run, g.run, "replay with host reads, eager ops and host writes between replays");
}

TEST_F(WeightLayoutTest, DestroyingTheGraphLeavesOihwValues) {
  const Outcome e = Eager(false);
  const Outcome g = Replayed(false, Extra::kNone, true, /*keep_graph=*/false);
  ExpectBitwiseRuns(e.run, g.run, "values read after the graph went");
}

TEST_F(WeightLayoutTest, AnotherGraphReadingTheWeightsSeesOihwValues) {
  // An evaluation graph (forward only, no update: nothing of it is kept blocked) replayed
  // between the training graph's replays, against the same in eager mode.
  auto run = [](bool graphs) {
    Net net(CpuDevice());
    nn::SGD opt(0.05, 0.9);
    auto b = Batch(0);
    Tensor x = b.first, y = b.second, loss, eval;
    auto forward = [&] {
      ops::Conv2dOptions same;
      same.padding = {1, 1};
      Tensor h = ops::Relu(ops::Conv2d(ops::Relu(ops::Conv2d(x, net.p[0], Tensor(), same)), net.p[3], Tensor(), same));
      return ops::Sum(ops::Conv2d(h, net.p[6], Tensor(), ops::Conv2dOptions()));
    };
    std::unique_ptr<Graph> train, test;
    if (graphs) {
      train = Graph::Capture(CpuDevice(), "train", [&] { loss = net.Step(x, y, opt); });
      test = Graph::Capture(CpuDevice(), "eval", [&] { eval = forward(); });
      EXPECT_EQ(train->stats().counters.Get("blocked_weights"), 4);
      EXPECT_EQ(test->stats().counters.Get("blocked_weights"), 0);
    }
    std::vector<float> seen;
    for (int s = 0; s < kSteps; ++s) {
      auto bs = Batch(s);
      x.CopyFrom(bs.first.ToVector<float>());
      y.CopyFrom(bs.second.ToVector<int32_t>());
      if (graphs) {
        train->Run();
        test->Run();
      } else {
        loss = net.Step(x, y, opt);
        eval = forward();
      }
      seen.push_back(float(loss.Item()));
      seen.push_back(float(eval.Item()));
    }
    return seen;
  };
  EXPECT_EQ(run(false), run(true));
}

TEST_F(WeightLayoutTest, CheckpointsBetweenReplaysSaveAndRestoreOihwValues) {
  // After step 1, a checkpoint of the parameters and the optimizer state; after step 2, the same
  // checkpoint restored (a rewind), then one more step: the files and the values bitwise as in
  // eager mode.
  auto run = [](bool graph) {
    TempDir dir;
    Net net(CpuDevice());
    nn::SGD opt(0.05, 0.9, 1e-3);
    auto b = Batch(0);
    Tensor x = b.first, y = b.second, loss;
    std::unique_ptr<Graph> g;
    if (graph) g = Graph::Capture(CpuDevice(), "train", [&] { loss = net.Step(x, y, opt); });
    io::NamedTensors params;
    for (size_t i = 0; i < net.p.size(); ++i) params.push_back({"p" + std::to_string(i), net.p[i]});
    std::vector<std::vector<float>> seen;
    for (int s = 0; s < 4; ++s) {
      auto bs = Batch(s);
      x.CopyFrom(bs.first.ToVector<float>());
      y.CopyFrom(bs.second.ToVector<int32_t>());
      if (graph) g->Run();
      else loss = net.Step(x, y, opt);
      if (s == 1) {
        io::NamedTensors all = params;
        std::map<std::string, double> meta;
        nn::AddOptimizerState(opt, &all, &meta);
        io::SaveCheckpoint(dir / "ckpt", all, meta);
        for (const auto& [name, t] : io::LoadCheckpoint(dir / "ckpt").tensors) seen.push_back(t.ToVector<float>());
      }
      if (s == 2) {
        const io::Checkpoint ckpt = io::LoadCheckpoint(dir / "ckpt");
        io::RestoreInto(ckpt, params);
        nn::RestoreOptimizerState(ckpt, opt, CpuDevice());
      }
    }
    if (graph) EXPECT_EQ(g->stats().counters.Get("blocked_weights"), 4);
    for (auto& v : net.Values(opt)) seen.push_back(std::move(v));
    return seen;
  };
  EXPECT_EQ(run(false), run(true));
}

TEST_F(WeightLayoutTest, AWeightWithAnotherUseStaysOihw) {
  // w1 read by the penalty: only w2 and its momentum stay blocked.
  Outcome g = Replayed(false, Extra::kPenalty);
  EXPECT_EQ(g.stats.counters.Get("blocked_weights"), 2);
  // w2's gradient held by the user: only w1 and its momentum.
  g = Replayed(false, Extra::kHoldGrad);
  EXPECT_EQ(g.stats.counters.Get("blocked_weights"), 2);
  // A weight Python viewed without a copy (swig/tensor.i) is never kept blocked.
  Net net(CpuDevice());
  nn::SGD opt(0.05, 0.9);
  net.p[3].block()->set_host_viewed();
  auto b = Batch(0);
  auto graph = Graph::Capture(CpuDevice(), "viewed", [&] { net.Step(b.first, b.second, opt); });
  EXPECT_EQ(graph->stats().counters.Get("blocked_weights"), 2);
  EXPECT_EQ(net.p[3].block()->guard(), nullptr);
  EXPECT_NE(net.p[6].block()->guard(), nullptr);
}

TEST_F(WeightLayoutTest, ConversionRejectsWeightsItCannotBlock) {
  Tensor w = ops::Zeros({16, 3, 3, 3}, DType::kFloat32, CpuDevice());
  EXPECT_THROW(Call1("conv_weight_layout", {w}, Attrs{{"blocked", int64_t(1)}}), ShapeError);
  Tensor v = ops::Zeros({16, 16, 3, 3}, DType::kFloat32, CpuDevice());
  EXPECT_THROW(Call1("conv_weight_layout", {v}, Attrs{{"blocked", int64_t(2)}}), ValueError);
  Tensor d = ops::Zeros({16, 16, 3, 3}, DType::kFloat64, CpuDevice());
  EXPECT_THROW(Call1("conv_weight_layout", {d}, Attrs{{"blocked", int64_t(1)}}), DTypeError);
}

}  // namespace
}  // namespace test
}  // namespace loom
