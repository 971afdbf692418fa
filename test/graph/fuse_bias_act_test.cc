// Note [Fusing bias and activation] (graph/fuse_bias_act.cc): on MLPs with each activation the
// pass makes every linear layer one dense_bias_act and every activation gradient with its bias
// gradient one bias_act_grad; replay stays bitwise equal to eager on the CPU; the pass leaves a
// chain alone where an intermediate is read by another op or held by the user; the memory an
// intermediate took is gone from the plan.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "common/harness.h"
#include "common/mlp.h"
#include "core/ops_cnn.h"
#include "core/bias_act_formulas.h"
#include "graph/graph.h"

LOOM_OP_KIND(dense_bias_act);
LOOM_OP_KIND(bias_act_grad);
LOOM_OP_KIND(add_bias);
LOOM_OP_KIND(bias_grad);
LOOM_OP_KIND(relu);
LOOM_OP_KIND(tanh);
LOOM_OP_KIND(sigmoid);
LOOM_OP_KIND(conv2d);
LOOM_OP_KIND(conv2d_relu);
LOOM_OP_KIND(conv2d_grad_bias);

namespace loom {
namespace test {
namespace {

// How the first layer's intermediates are used besides the chain itself.
enum class Layer0 { kPlain, kPreActivationReadByAnOp, kMatmulReadByAnOp, kPreActivationHeld };

Tensor Activate(const Tensor& z, BiasAct act) {
  switch (act) {
    case BiasAct::kTanh: return ops::Tanh(z);
    case BiasAct::kSigmoid: return ops::Sigmoid(z);
    default: return ops::Relu(z);
  }
}

// The MLP of test/common/mlp.h with activation `act`; `held` receives layer 0's pre-activation.
Tensor Step(const Mlp& m, const Tensor& x, const Tensor& y, nn::Optimizer& opt, BiasAct act, Layer0 how,
            Tensor* held = nullptr) {
  Tensor h = x, extra;
  for (size_t i = 0; i < m.params.size(); i += 2) {
    Tensor c = ops::MatMul(h, m.params[i]);
    Tensor z = ops::AddBias(c, m.params[i + 1]);
    if (i == 0 && how == Layer0::kPreActivationReadByAnOp) extra = ops::Sum(z);
    if (i == 0 && how == Layer0::kMatmulReadByAnOp) extra = ops::Sum(c);
    if (i == 0 && held) *held = z;
    h = i + 2 < m.params.size() ? Activate(z, act) : z;
  }
  Tensor loss = ops::SoftmaxCrossEntropy(h, y);
  if (extra.defined()) loss = ops::Add(loss, ops::MulScalar(extra, 1e-3));
  for (auto& pg : Backward(loss)) opt.Apply(pg.second, pg.first, pg.first.name());
  return loss;
}

struct Counts {
  size_t dense[kNumBiasActs] = {}, grads = 0, add_bias = 0, bias_grad = 0, activations = 0;
};
Counts Count(const Graph& g) {
  Counts c;
  for (const OpRecord& op : g.ops().ops) {
    if (op.def == &op_kind::dense_bias_act) ++c.dense[op.attrs.Int("act")];
    c.grads += op.def == &op_kind::bias_act_grad;
    c.add_bias += op.def == &op_kind::add_bias;
    c.bias_grad += op.def == &op_kind::bias_grad;
    c.activations += op.def == &op_kind::relu || op.def == &op_kind::tanh || op.def == &op_kind::sigmoid;
  }
  return c;
}

class FuseBiasActTest : public ::testing::Test {
 protected:
  static constexpr int kSteps = 4;
  const std::vector<int64_t> dims_ = {32, 64, 48, 10};
  Blobs data_{32, 10};

  TrainRun Eager(BiasAct act, Layer0 how, int64_t batch) {
    Mlp m(dims_, 5);
    nn::SGD opt(0.05, 0.9, 1e-4);
    TrainRun r;
    for (int s = 0; s < kSteps; ++s) {
      auto b = data_.Batch(batch, 100 + uint32_t(s));
      r.losses.push_back(float(Step(m, b.first, b.second, opt, act, how).Item()));
    }
    r.params = m.Values();
    return r;
  }

  // Captures one step (fused or not), replays kSteps; the graph stays alive for inspection.
  TrainRun Replayed(BiasAct act, Layer0 how, int64_t batch, GraphOptions options, std::unique_ptr<Graph>* keep,
                    Tensor* held = nullptr) {
    Mlp m(dims_, 5);
    nn::SGD opt(0.05, 0.9, 1e-4);
    auto first = data_.Batch(batch, 100);
    Tensor x = first.first, y = first.second, loss;
    *keep = Graph::Capture(CpuDevice(), "fuse", [&] { loss = Step(m, x, y, opt, act, how, held); }, options);
    TrainRun r;
    for (int s = 0; s < kSteps; ++s) {
      auto b = data_.Batch(batch, 100 + uint32_t(s));
      x.CopyFrom(b.first.ToVector<float>());
      y.CopyFrom(b.second.ToVector<int32_t>());
      (*keep)->Run();
      r.losses.push_back(float(loss.Item()));
    }
    r.params = m.Values();
    return r;
  }

  void ExpectBitwise(const TrainRun& e, const TrainRun& g, const std::string& what) {
    ASSERT_EQ(e.losses.size(), g.losses.size()) << what;
    EXPECT_EQ(std::memcmp(e.losses.data(), g.losses.data(), e.losses.size() * sizeof(float)), 0) << what;
    EXPECT_TRUE(SameBits(e.params, g.params)) << what;
  }

  // Replays the step with the default options, expects eager's bits, returns the op counts.
  Counts ReplayedEqualsEager(BiasAct act, Layer0 how, int64_t batch, const std::string& what) {
    std::unique_ptr<Graph> g;
    TrainRun r = Replayed(act, how, batch, GraphOptions(), &g);
    ExpectBitwise(Eager(act, how, batch), r, what);
    return Count(*g);
  }
};

TEST_F(FuseBiasActTest, FiresOnEveryLayerOfAnMlpAndReplayStaysBitwiseEqualToEager) {
  for (BiasAct act : {BiasAct::kRelu, BiasAct::kTanh, BiasAct::kSigmoid}) {
    for (int64_t batch : {int64_t(3), int64_t(64)}) {
      for (bool fuse : {true, false}) {
        const std::string what = "act " + std::to_string(int(act)) + " batch " + std::to_string(batch) +
                                 (fuse ? " fused" : " unfused");
        GraphOptions options;
        options.passes.Set("fuse_bias_act", fuse);
        std::unique_ptr<Graph> g;
        TrainRun r = Replayed(act, Layer0::kPlain, batch, options, &g);
        ExpectBitwise(Eager(act, Layer0::kPlain, batch), r, what);
        const Counts c = Count(*g);
        if (fuse) {
          // Two hidden layers with the activation, the output layer without; the backward of
          // both hidden layers. The output layer's bias gradient comes from the loss: unfused.
          EXPECT_EQ(c.dense[int(act)], 2u) << what;
          EXPECT_EQ(c.dense[int(BiasAct::kNone)], 1u) << what;
          EXPECT_EQ(c.grads, 2u) << what;
          EXPECT_EQ(c.add_bias + c.activations, 0u) << what;
          EXPECT_EQ(c.bias_grad, 1u) << what;
          EXPECT_EQ(g->stats().counters.Get("fused_bias_act"), 5) << what;
        } else {
          EXPECT_EQ(c.dense[0] + c.dense[1] + c.dense[2] + c.dense[3] + c.grads, 0u) << what;
          EXPECT_EQ(c.add_bias, 3u) << what;
          EXPECT_EQ(g->stats().counters.Get("fused_bias_act"), 0) << what;
        }
      }
    }
  }
}

TEST_F(FuseBiasActTest, AChainStopsBeforeAnIntermediateThatIsReadElsewhere) {
  const int64_t batch = 8;
  GraphOptions options;
  {
    // Layer 0's pre-activation is read by a sum: its matmul and bias still fuse, its activation
    // (forward) and activation gradient (backward: the bias gradient reads the sum of two
    // gradients) do not; layer 1 fuses whole.
    const Counts c =
        ReplayedEqualsEager(BiasAct::kTanh, Layer0::kPreActivationReadByAnOp, batch, "pre-activation read");
    EXPECT_EQ(c.dense[int(BiasAct::kTanh)], 1u);
    EXPECT_EQ(c.dense[int(BiasAct::kNone)], 2u);
    EXPECT_EQ(c.activations, 1u);
    EXPECT_EQ(c.grads, 1u);
    EXPECT_EQ(c.bias_grad, 2u);
  }
  {
    // Layer 0's matmul result is read by a sum: layer 0 stays three ops.
    const Counts c = ReplayedEqualsEager(BiasAct::kRelu, Layer0::kMatmulReadByAnOp, batch, "matmul result read");
    EXPECT_EQ(c.dense[int(BiasAct::kRelu)], 1u);
    EXPECT_EQ(c.dense[int(BiasAct::kNone)], 1u);
    EXPECT_EQ(c.add_bias, 1u);
    EXPECT_EQ(c.activations, 1u);
  }
  {
    // The user holds layer 0's pre-activation: it is stored, and after a replay it holds the
    // values eager execution computes for that step.
    std::unique_ptr<Graph> g;
    Tensor held;
    Replayed(BiasAct::kSigmoid, Layer0::kPreActivationHeld, batch, options, &g, &held);
    const Counts c = Count(*g);
    EXPECT_EQ(c.dense[int(BiasAct::kSigmoid)], 1u);
    EXPECT_EQ(c.dense[int(BiasAct::kNone)], 2u);
    EXPECT_EQ(c.activations, 1u);
    Mlp m(dims_, 5);
    nn::SGD opt(0.05, 0.9, 1e-4);
    Tensor eager_held;
    for (int s = 0; s < kSteps; ++s) {
      auto b = data_.Batch(batch, 100 + uint32_t(s));
      Step(m, b.first, b.second, opt, BiasAct::kSigmoid, Layer0::kPreActivationHeld, &eager_held);
    }
    EXPECT_TRUE(SameBits({eager_held.ToVector<float>()}, {held.ToVector<float>()}));
  }
}

// The memory the intermediates took. Planned training graphs already had each chain in one
// block (add_bias and the activation run in place, Note [In-place reuse]; the activations save
// their output only): the arena must not grow. Without in-place reuse (dynamic memory), a
// forward pass held matmul's and add_bias's results at once, and the activation's input with
// its output: fused, one result per layer, and the peak drops.
TEST_F(FuseBiasActTest, ThePlanNeverGrowsAndWithoutInPlaceReuseThePeakDrops) {
  for (BiasAct act : {BiasAct::kRelu, BiasAct::kTanh}) {
    GraphStats train[2], infer[2];
    for (bool fuse : {false, true}) {
      GraphOptions options;
      options.passes.Set("fuse_bias_act", fuse);
      std::unique_ptr<Graph> g;
      Replayed(act, Layer0::kPlain, 64, options, &g);
      train[fuse] = g->stats();

      options.memory = MemoryMode::kDynamic;
      Mlp m(dims_, 5);
      Tensor x = data_.Batch(64, 100).first, logits;
      auto f = Graph::Capture(CpuDevice(), "infer", [&] {
        NoGradGuard no_grad;
        Tensor h = x;
        for (size_t i = 0; i < m.params.size(); i += 2) {
          h = ops::AddBias(ops::MatMul(h, m.params[i]), m.params[i + 1]);
          if (i + 2 < m.params.size()) h = Activate(h, act);
        }
        logits = h;
      }, options);
      f->Run();
      infer[fuse] = f->stats();
      EXPECT_EQ(infer[fuse].counters.Get("fused_bias_act"), fuse ? 3 : 0);
    }
    const std::string what = "act " + std::to_string(int(act));
    EXPECT_LE(train[1].arena_bytes, train[0].arena_bytes) << what;
    EXPECT_LE(train[1].lower_bound_bytes, train[0].lower_bound_bytes) << what;
    EXPECT_LT(infer[1].dynamic_peak_bytes, infer[0].dynamic_peak_bytes) << what;
    EXPECT_LT(infer[1].lower_bound_no_inplace_bytes, infer[0].lower_bound_no_inplace_bytes) << what;
    std::printf("%s: training arena %zu -> %zu bytes; inference without in-place reuse: peak %zu -> %zu\n",
                what.c_str(), train[0].arena_bytes, train[1].arena_bytes, infer[0].dynamic_peak_bytes,
                infer[1].dynamic_peak_bytes);
  }
}

// A small convolutional net without batch norm: conv (bias) -> relu -> conv (bias) -> relu ->
// global average pool -> linear. Each conv + relu becomes conv2d_relu (oneDNN then ReLU for
// float32), each relu gradient with its conv2d_grad_bias one bias_act_grad (channels = 1), and
// replay stays bitwise equal to eager.
TEST_F(FuseBiasActTest, ConvolutionsWithReluFuseAndReplayStaysBitwiseEqualToEager) {
  auto dev = CpuDevice();
  struct ConvNet {
    std::vector<Tensor> p;
    explicit ConvNet(const std::shared_ptr<Device>& dev) {
      dev->SetRandSeed(11);
      for (Shape s : {Shape{8, 3, 3, 3}, Shape{8}, Shape{12, 8, 3, 3}, Shape{12}, Shape{12, 10}, Shape{10}}) {
        Tensor t = ops::Normal(s, 0, 0.3, DType::kFloat32, dev);
        t.set_requires_grad(true).set_name("p" + std::to_string(p.size()));
        t.block()->set_persistent(true);
        p.push_back(t);
      }
    }
    Tensor Step(const Tensor& x, const Tensor& y, nn::Optimizer& opt) const {
      ops::Conv2dOptions same;
      same.padding = {1, 1};
      Tensor h = ops::Relu(ops::Conv2d(x, p[0], p[1], same));
      h = ops::Relu(ops::Conv2d(h, p[2], p[3], same));
      Tensor logits = ops::AddBias(ops::MatMul(ops::GlobalAvgPool(h), p[4]), p[5]);
      Tensor loss = ops::SoftmaxCrossEntropy(logits, y);
      for (auto& pg : Backward(loss)) opt.Apply(pg.second, pg.first, pg.first.name());
      return loss;
    }
    std::vector<std::vector<float>> Values() const {
      std::vector<std::vector<float>> v;
      for (const Tensor& t : p) v.push_back(t.ToVector<float>());
      return v;
    }
  };
  auto batch = [&](int s) {
    Tensor x = RandomTensor({4, 3, 10, 10}, DType::kFloat32, uint64_t(200 + s));
    std::vector<int32_t> labels = {int32_t(s % 10), 3, 7, int32_t((s * 3) % 10)};
    return std::make_pair(x, ops::FromVector(labels, {4}, dev));
  };
  TrainRun e;
  {
    ConvNet net(dev);
    nn::SGD opt(0.05, 0.9);
    for (int s = 0; s < kSteps; ++s) {
      auto b = batch(s);
      e.losses.push_back(float(net.Step(b.first, b.second, opt).Item()));
    }
    e.params = net.Values();
  }
  for (bool fuse : {true, false}) {
    ConvNet net(dev);
    nn::SGD opt(0.05, 0.9);
    auto b = batch(0);
    Tensor x = b.first, y = b.second, loss;
    GraphOptions options;
    options.passes.Set("fuse_bias_act", fuse);
    auto g = Graph::Capture(dev, "conv", [&] { loss = net.Step(x, y, opt); }, options);
    size_t conv_relu = 0, conv = 0, channel_grads = 0, conv_bias_grads = 0;
    for (const OpRecord& op : g->ops().ops) {
      conv_relu += op.def == &op_kind::conv2d_relu;
      conv += op.def == &op_kind::conv2d;
      channel_grads += op.def == &op_kind::bias_act_grad && op.attrs.Int("channels", 0) == 1;
      conv_bias_grads += op.def == &op_kind::conv2d_grad_bias;
    }
    EXPECT_EQ(conv_relu, fuse ? 2u : 0u);
    EXPECT_EQ(conv, fuse ? 0u : 2u);
    EXPECT_EQ(channel_grads, fuse ? 2u : 0u);
    EXPECT_EQ(conv_bias_grads, fuse ? 0u : 2u);
    EXPECT_EQ(g->stats().counters.Get("fused_bias_act"), fuse ? 5 : 0);  // + the linear layer's dense_bias_act
    TrainRun r;
    for (int s = 0; s < kSteps; ++s) {
      auto bs = batch(s);
      x.CopyFrom(bs.first.ToVector<float>());
      y.CopyFrom(bs.second.ToVector<int32_t>());
      g->Run();
      r.losses.push_back(float(loss.Item()));
    }
    r.params = net.Values();
    ExpectBitwise(e, r, fuse ? "conv fused" : "conv unfused");
  }
}

// The fused kernels compute what the ops they replace compute, bit for bit, whatever the values:
// NaN (which relu keeps or drops exactly as the relu op does), negative zeros, negatives. A
// library's own activation (oneDNN's ReLU post-op maps NaN to 0) would break this.
TEST_F(FuseBiasActTest, FusedKernelsEqualTheOpsTheyReplaceBitForBitOnAnyValues) {
  auto bits = [](const Tensor& a, const Tensor& b) {
    if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
    if (a.dtype() == DType::kFloat64) {
      std::vector<double> va = a.ToVector<double>(), vb = b.ToVector<double>();
      return std::memcmp(va.data(), vb.data(), va.size() * sizeof(double)) == 0;
    }
    std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
    return std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0;
  };
  auto with_specials = [](Tensor t) {
    std::vector<float> v = t.ToVector<float>();
    v[1] = std::numeric_limits<float>::quiet_NaN();
    v[2] = -0.0f;
    return ops::FromVector(v, t.shape(), CpuDevice());
  };
  Tensor x = with_specials(RandomTensor({5, 12}, DType::kFloat32, 1)), w = RandomTensor({12, 20}, DType::kFloat32, 2);
  Tensor b = RandomTensor({20}, DType::kFloat32, 3);
  for (BiasAct act : {BiasAct::kNone, BiasAct::kRelu, BiasAct::kTanh, BiasAct::kSigmoid}) {
    Tensor z = ops::AddBias(ops::MatMul(x, w), b);
    Tensor unfused = act == BiasAct::kNone ? z : Activate(z, act);
    Tensor fused = Call1("dense_bias_act", {x, w, b}, Attrs{{"act", int64_t(act)}});
    EXPECT_TRUE(bits(fused, unfused)) << "dense_bias_act act " << int(act);
    Tensor dy = with_specials(RandomTensor(unfused.shape(), DType::kFloat32, 4));
    std::vector<Tensor> g = Call("bias_act_grad", {unfused, dy}, Attrs{{"act", int64_t(act)}});
    Tensor dz = act == BiasAct::kNone ? dy
                : Call1(act == BiasAct::kRelu ? "relu_grad" : act == BiasAct::kTanh ? "tanh_grad" : "sigmoid_grad",
                        {unfused, dy});
    EXPECT_TRUE(bits(g[0], dz)) << "bias_act_grad act " << int(act);
    EXPECT_TRUE(bits(g[1], Call1("bias_grad", {dz}))) << "bias_act_grad act " << int(act);
  }
  // float32 convolutions run on oneDNN; float64 on the im2col kernels.
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Tensor cx = ops::Cast(with_specials(RandomTensor({3, 4, 9, 9}, DType::kFloat32, 5)), dt);
    Tensor cw = RandomTensor({8, 4, 3, 3}, dt, 6), cb = RandomTensor({8}, dt, 7);
    ops::Conv2dOptions o;
    o.padding = {1, 1};
    Tensor unfused = ops::Relu(ops::Conv2d(cx, cw, cb, o));
    Attrs a{{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{1, 1}},
            {"dilation", std::vector<int64_t>{1, 1}}, {"groups", int64_t(1)}};
    Tensor fused = Call1("conv2d_relu", {cx, cw, cb}, a);
    EXPECT_TRUE(bits(fused, unfused)) << Name(dt);
    Tensor dy = RandomTensor(unfused.shape(), dt, 8);
    std::vector<Tensor> g = Call("bias_act_grad", {unfused, dy}, Attrs{{"act", int64_t(1)}, {"channels", int64_t(1)}});
    Tensor dz = Call1("relu_grad", {unfused, dy});
    EXPECT_TRUE(bits(g[0], dz)) << Name(dt);
    EXPECT_TRUE(bits(g[1], Call1("conv2d_grad_bias", {dz}))) << Name(dt);
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
