// Note [Batch norm with its ReLU] (graph/fuse_bn_relu.cc): on a residual block the pass folds
// each ReLU into the batch norm before it (with the shortcut's add at the block's end), and the
// backward keeps its ReLU gradients; replay stays bitwise equal to eager with
// and without the layout pass, with an identity shortcut and with a convolution + batch norm
// one; a batch norm output held by the user keeps its ReLU.
#include <gtest/gtest.h>

#include <cstring>

#include "common/harness.h"
#include "common/mlp.h"
#include "core/ops_cnn.h"
#include "device/cpu/kernels/conv_dnnl.h"
#include "graph/graph.h"

LOOM_OP_KIND(batch_norm_train);
LOOM_OP_KIND(relu);
LOOM_OP_KIND(relu_grad);
LOOM_OP_KIND(add);

namespace loom {
namespace test {
namespace {

enum class Shortcut { kIdentity, kConvBatchNorm };

// conv 3x3 -> bn -> relu = a; conv 3x3 (a) -> bn -> add(shortcut(a)) -> relu; global average
// pooling; a dense layer; cross-entropy. C channels (16: the CPU's blocked layout takes them).
struct ResidualNet {
  static constexpr int64_t kC = 16;
  std::vector<Tensor> params;  // w0, g0, b0, w1, g1, b1, w2, g2, b2, fc, fc bias
  std::vector<Tensor> stats;   // running mean and variance of bn0, bn1, bn2

  ResidualNet() {
    uint32_t seed = 11;
    auto p = [&](const Shape& s, double lo, double hi) {
      params.push_back(RandomTensor(s, DType::kFloat32, seed++, lo, hi).set_requires_grad(true));
    };
    for (int i = 0; i < 3; ++i) {
      const Shape w = i == 0 ? Shape{kC, 3, 3, 3} : i == 1 ? Shape{kC, kC, 3, 3} : Shape{kC, kC, 1, 1};
      p(w, -0.3, 0.3);
      p({kC}, 0.5, 1.5);
      p({kC}, -0.5, 0.5);
      stats.push_back(ops::Zeros({kC}, DType::kFloat32, CpuDevice()));
      stats.push_back(ops::Ones({kC}, DType::kFloat32, CpuDevice()));
    }
    p({kC, 10}, -0.3, 0.3);
    p({10}, -0.1, 0.1);
  }

  Tensor Bn(const Tensor& x, int i) const {
    return ops::BatchNorm(x, params[size_t(3 * i + 1)], params[size_t(3 * i + 2)], stats[size_t(2 * i)],
                          stats[size_t(2 * i + 1)], true);
  }

  // One SGD step; `held` receives bn0's output (the user keeps the pre-activation).
  Tensor Step(const Tensor& x, const Tensor& y, nn::Optimizer& opt, Shortcut sc, Tensor* held = nullptr) const {
    ops::Conv2dOptions same;
    same.padding = {1, 1};
    Tensor z0 = Bn(ops::Conv2d(x, params[0], Tensor(), same), 0);
    if (held) *held = z0;
    Tensor a = ops::Relu(z0);
    Tensor z1 = Bn(ops::Conv2d(a, params[3], Tensor(), same), 1);
    Tensor s = sc == Shortcut::kIdentity ? a : Bn(ops::Conv2d(a, params[6]), 2);
    Tensor o = ops::Relu(ops::Add(z1, s));
    Tensor logits = ops::AddBias(ops::MatMul(ops::GlobalAvgPool(o), params[9]), params[10]);
    Tensor loss = ops::SoftmaxCrossEntropy(logits, y);
    for (auto& pg : Backward(loss)) opt.Apply(pg.second, pg.first, pg.first.name());
    return loss;
  }

  std::vector<std::vector<float>> Values() const {
    std::vector<std::vector<float>> v;
    for (const auto* ts : {&params, &stats})
      for (const Tensor& t : *ts) v.push_back(t.ToVector<float>());
    return v;
  }
};

constexpr int kSteps = 3;
constexpr int64_t kBatch = 4;

std::pair<Tensor, Tensor> Images(int step) {
  Tensor x = RandomTensor({kBatch, 3, 8, 8}, DType::kFloat32, 500 + uint32_t(step), -1, 1);
  std::vector<int32_t> labels;
  for (int64_t i = 0; i < kBatch; ++i) labels.push_back(int32_t((i * 3 + step) % 10));
  return {x, ops::FromVector(labels, {kBatch}, CpuDevice())};
}

TrainRun Eager(Shortcut sc) {
  ResidualNet net;
  nn::SGD opt(0.05, 0.9);
  TrainRun r;
  for (int s = 0; s < kSteps; ++s) {
    auto b = Images(s);
    r.losses.push_back(float(net.Step(b.first, b.second, opt, sc).Item()));
  }
  r.params = net.Values();
  return r;
}

struct Replayed {
  TrainRun run;
  GraphStats stats;
  int bn_relu = 0, bn_relu_residual = 0, relus = 0, relu_grads = 0, adds = 0;
};

Replayed Replay(Shortcut sc, bool fuse, bool layouts, Tensor* held = nullptr) {
  ResidualNet net;
  nn::SGD opt(0.05, 0.9);
  auto first = Images(0);
  Tensor x = first.first, y = first.second, loss;
  GraphOptions options;
  options.passes.Set("fuse_bn_relu", fuse);
  options.passes.Set("plan_layouts", layouts);
  auto g = Graph::Capture(CpuDevice(), "bn_relu", [&] { loss = net.Step(x, y, opt, sc, held); }, options);
  Replayed r;
  for (const OpRecord& op : g->ops().ops) {
    if (op.def == &op_kind::batch_norm_train && op.attrs.Int("relu", 0))
      ++(op.inputs.size() == 6 ? r.bn_relu_residual : r.bn_relu);
    r.relus += op.def == &op_kind::relu;
    r.relu_grads += op.def == &op_kind::relu_grad;
    r.adds += op.def == &op_kind::add && op.outputs[0].ndim() == 4;
  }
  for (int s = 0; s < kSteps; ++s) {
    auto b = Images(s);
    x.CopyFrom(b.first.ToVector<float>());
    y.CopyFrom(b.second.ToVector<int32_t>());
    g->Run();
    r.run.losses.push_back(float(loss.Item()));
  }
  r.run.params = net.Values();
  r.stats = g->stats();
  return r;
}

TEST(FuseBnRelu, ResidualBlocksFuseAndReplayStaysBitwiseEqualToEager) {
  for (Shortcut sc : {Shortcut::kIdentity, Shortcut::kConvBatchNorm}) {
    const TrainRun e = Eager(sc);
    for (bool layouts : {false, true}) {
      if (layouts && !cpu::HaveDnnl()) continue;  // the blocked layout is oneDNN's
      const std::string what = std::string(sc == Shortcut::kIdentity ? "identity" : "conv + bn") + " shortcut" +
                               (layouts ? ", layouts planned" : "");
      const Replayed on = Replay(sc, true, layouts), off = Replay(sc, false, layouts);
      ExpectBitwiseRuns(e, on.run, what + ", fused");
      ExpectBitwiseRuns(e, off.run, what + ", not fused");
      // bn0 + relu, and bn1 + add + relu (with a convolution shortcut, bn2's output is the
      // residual); both ReLU gradients stay.
      EXPECT_EQ(on.bn_relu, 1) << what;
      EXPECT_EQ(on.bn_relu_residual, 1) << what;
      EXPECT_EQ(on.relus, 0) << what;
      EXPECT_EQ(on.relu_grads, 2) << what;
      EXPECT_EQ(on.stats.counters.Get("fused_bn_relu"), 2) << what;
      EXPECT_EQ(off.bn_relu + off.bn_relu_residual, 0) << what;
      EXPECT_EQ(off.relus, 2) << what;
      EXPECT_EQ(off.relu_grads, 2) << what;
      EXPECT_EQ(off.stats.counters.Get("fused_bn_relu"), 0) << what;
      // The forward add is gone (the backward's adds of gradients stay).
      EXPECT_EQ(on.adds, off.adds - 1) << what;
      // z0, z1 and the add's sum are no longer written; they lived
      // for one op each, away from the step's peak (the saved activations at the turn of the
      // backward), which stays where it was.
      EXPECT_EQ(on.stats.lower_bound_bytes, off.stats.lower_bound_bytes) << what;
      EXPECT_LE(on.stats.arena_bytes, off.stats.arena_bytes) << what;
      if (layouts) {
        // The regions stay blocked, less the three blocks that are gone (the residual is tied
        // to the fused batch norm's y as the add tied it).
        EXPECT_GT(on.stats.counters.Get("blocked_layouts"), 0) << what;
        EXPECT_EQ(off.stats.counters.Get("blocked_layouts") - on.stats.counters.Get("blocked_layouts"), 3) << what;
      }
    }
  }
}

TEST(FuseBnRelu, ABatchNormOutputTheUserHoldsKeepsItsRelu) {
  Tensor held;
  const Replayed r = Replay(Shortcut::kIdentity, true, false, &held);
  ExpectBitwiseRuns(Eager(Shortcut::kIdentity), r.run, "bn0's output held");
  // bn0's output is held: its relu stays; the block's end still fuses.
  EXPECT_EQ(r.bn_relu, 0);
  EXPECT_EQ(r.bn_relu_residual, 1);
  EXPECT_EQ(r.relus, 1);
  ASSERT_TRUE(held.defined());
  EXPECT_EQ(held.shape(), (Shape{kBatch, ResidualNet::kC, 8, 8}));
}

TEST(FuseBnRelu, TheFusedRecordsCheckTheirOperands) {
  Tensor x = RandomTensor({2, 3, 4, 4}, DType::kFloat32, 1);
  Tensor c = ops::Ones({3}, DType::kFloat32, CpuDevice()), z = ops::Zeros({3}, DType::kFloat32, CpuDevice());
  const Attrs relu{{"momentum", 0.1}, {"eps", 1e-5}, {"relu", int64_t(1)}};
  LOOM_EXPECT_THROW_MSG(Call("batch_norm_train", {x, c, z, z, c, RandomTensor({2, 3, 4, 5}, DType::kFloat32, 2)}, relu),
                        ShapeError, "[batch_norm_train] residual (2, 3, 4, 5) float32 must be y's shape (2, 3, 4, 4)");
  LOOM_EXPECT_THROW_MSG(Call("batch_norm_train", {x, c, z, z, c, x}, Attrs{{"momentum", 0.1}, {"eps", 1e-5}}),
                        ValueError, "[batch_norm_train] a residual (input 5) needs relu = 1");
  // Differentiating a fused forward record is refused: the pass makes it after the backward.
  Tensor xg = RandomTensor({2, 3, 4, 4}, DType::kFloat32, 3).set_requires_grad(true);
  Tensor rm = ops::Zeros({3}, DType::kFloat32, CpuDevice()), rv = ops::Ones({3}, DType::kFloat32, CpuDevice());
  Tensor y = Call("batch_norm_train", {xg, c, z, rm, rv}, relu)[0];
  LOOM_EXPECT_THROW_MSG(Backward(ops::Sum(y)), ValueError, "relu = 1 is made by the graph pass fuse_bn_relu");
}

}  // namespace
}  // namespace test
}  // namespace loom
