// Layers, the model zoo and Model: graph mode against eager on real networks, training in both
// modes, schedules under replay, and the user errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "common/graph_capture.h"
#include "common/harness.h"
#include "common/mlp.h"
#include "graph/graph.h"
#include "nn/cnn_layers.h"
#include "nn/model.h"
#include "nn/models.h"

namespace loom {
namespace test {
namespace {

// Images whose class decides a bright quadrant and channel: learnable by a small CNN.
std::pair<Tensor, Tensor> ImageBatch(int64_t n, uint32_t seed, int64_t size = 32, int64_t classes = 10) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> noise(0, 0.3f);
  std::uniform_int_distribution<int32_t> cls(0, int32_t(classes - 1));
  std::vector<float> x(static_cast<size_t>(n * 3 * size * size));
  std::vector<int32_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int32_t c = cls(gen);
    y[size_t(i)] = c;
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t h = 0; h < size; ++h)
        for (int64_t w = 0; w < size; ++w) {
          bool hot = (ch == c % 3) && ((h < size / 2) == (c % 2 == 0)) && ((w < size / 2) == (c / 2 % 2 == 0));
          x[size_t(((i * 3 + ch) * size + h) * size + w)] = (hot ? 1.0f : 0.0f) + noise(gen);
        }
  }
  return {ops::FromVector(x, {n, 3, size, size}, CpuDevice()), ops::FromVector(y, {n}, CpuDevice())};
}

std::vector<std::vector<float>> Values(const nn::NamedTensors& ts) {
  std::vector<std::vector<float>> v;
  for (auto& t : ts) v.push_back(t.second.ToVector<float>());
  return v;
}

struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<float>> params, states;
};

// `steps` SGD steps of a zoo network on batches of ImageBatch(batch, seed + step), eager or
// replayed.
Trained TrainNet(const std::function<std::shared_ptr<nn::Layer>()>& make, uint64_t seed, bool graph, int steps,
                 int64_t batch, uint32_t data_seed) {
  CpuDevice()->SetRandSeed(seed);
  nn::Model m(make(), std::make_shared<nn::SGD>(0.05, 0.9, 5e-4));
  auto first = ImageBatch(batch, data_seed);
  m.Compile({first.first}, true, graph, true);
  Trained t;
  for (int s = 0; s < steps; ++s) {
    auto b = ImageBatch(batch, data_seed + uint32_t(s));
    t.losses.push_back(float(m.TrainOneBatch(b.first, b.second).loss.Item()));
  }
  t.params = Values(m.Params());
  t.states = Values(m.States());
  return t;
}

Trained TrainResNet18(bool graph, int steps) {
  return TrainNet([] { return nn::MakeResNet18(10); }, 2024, graph, steps, 4, 1);
}

TEST(Model, ResNet18GraphIsBitwiseEqualToEagerIncludingRunningStats) {
  Trained e = TrainResNet18(false, 3);
  Trained g = TrainResNet18(true, 3);
  ASSERT_EQ(e.losses.size(), g.losses.size());
  EXPECT_EQ(std::memcmp(e.losses.data(), g.losses.data(), e.losses.size() * sizeof(float)), 0)
      << e.losses[2] << " vs " << g.losses[2];
  EXPECT_TRUE(SameBits(e.params, g.params));
  EXPECT_TRUE(SameBits(e.states, g.states));
  EXPECT_FALSE(e.states.empty());
}

double TrainSmallCnn(bool graph, int steps, double* first) {
  CpuDevice()->SetRandSeed(7);
  nn::Model m(nn::MakeSmallCnn(3, 10), std::make_shared<nn::SGD>(0.05, 0.9));
  auto b0 = ImageBatch(16, 100);
  m.Compile({b0.first}, true, graph, true);
  double last = 0;
  for (int s = 0; s < steps; ++s) {
    auto b = ImageBatch(16, 100 + uint32_t(s));
    double l = m.TrainOneBatch(b.first, b.second).loss.Item();
    if (s == 0) *first = l;
    last = l;
  }
  return last;
}

TEST(Model, SmallCnnLossFallsInBothModes) {
  for (bool graph : {false, true}) {
    double first = 0;
    double last = TrainSmallCnn(graph, 25, &first);
    EXPECT_LT(last, 0.5 * first) << (graph ? "graph" : "eager") << " first " << first << " last " << last;
  }
}

// Note [Planned scratch]: convolution scratch lives in the arena, so a planned replay of a CNN
// step allocates nothing and its device peak is no higher than eager's.
TEST(Model, PlannedCnnReplayAllocatesNothingAndStaysUnderEagerPeak) {
  auto peak_of = [](bool graph, uint64_t* replay_allocs) {
    CpuDevice()->SetRandSeed(7);
    nn::Model m(nn::MakeSmallCnn(3, 10), std::make_shared<nn::SGD>(0.05, 0.9));
    auto b = ImageBatch(16, 100);
    m.Compile({b.first}, true, graph, true);
    m.TrainOneBatch(b.first, b.second);
    m.TrainOneBatch(b.first, b.second);
    CpuDevice()->ResetPeak();
    uint64_t allocs = CpuDevice()->stats().num_allocs;
    m.TrainOneBatch(b.first, b.second).loss.Item();
    *replay_allocs = CpuDevice()->stats().num_allocs - allocs;
    size_t peak = CpuDevice()->stats().peak_bytes;
    return peak;
  };
  uint64_t eager_allocs = 0, graph_allocs = 0;
  size_t eager = peak_of(false, &eager_allocs);
  size_t graph = peak_of(true, &graph_allocs);
  EXPECT_GT(eager_allocs, 0u);
  EXPECT_EQ(graph_allocs, 0u);
  EXPECT_LE(graph, eager);
}

TEST(Model, LearningRateScheduleTakesEffectUnderReplay) {
  CpuDevice()->SetRandSeed(3);
  auto opt = std::make_shared<nn::SGD>(0.1);
  nn::Model m(nn::MakeMlp({8, 4}), opt, nn::LossKind::kMse);
  Tensor x = RandomTensor({2, 8}, DType::kFloat32, 1);
  Tensor y = RandomTensor({2, 4}, DType::kFloat32, 2);
  m.Compile({x}, true, true, true);
  const Tensor w = m.Params()[0].second;
  auto update = [&] {
    std::vector<float> before = w.ToVector<float>();
    m.TrainOneBatch(x, y);
    std::vector<float> after = w.ToVector<float>();
    double s = 0;
    for (size_t i = 0; i < before.size(); ++i) s += std::abs(double(after[i]) - before[i]);
    return s;
  };
  update();  // capture + first replay
  double big = update();
  opt->SetLearningRate(0.001);
  double small = update();
  EXPECT_NEAR(small / big, 0.01, 0.002);  // gradients barely move at these rates
  EXPECT_EQ(m.train_graph()->stats().replays, 3u);
  // Cosine schedule: each step's update follows the rate.
  for (int s = 0; s < 4; ++s) {
    double lr = 0.001 * 0.5 * (1 + std::cos(M_PI * s / 4.0));
    opt->SetLearningRate(lr);
    EXPECT_NEAR(update() / small, lr / 0.001, 0.05 * lr / 0.001 + 1e-3);
  }
}

TEST(Model, EvalUsesRunningStatisticsAndItsOwnGraph) {
  CpuDevice()->SetRandSeed(5);
  nn::Model m(nn::MakeSmallCnn(3, 10), std::make_shared<nn::SGD>(0.05, 0.9));
  auto b = ImageBatch(8, 3);
  m.Compile({b.first}, true, true, true);
  m.TrainOneBatch(b.first, b.second);
  Tensor out1 = m.Forward(b.first);
  std::vector<float> o1 = out1.ToVector<float>();
  m.TrainOneBatch(b.first, b.second);
  Tensor out2 = m.Forward(b.first);
  EXPECT_NE(o1, out2.ToVector<float>());  // parameters moved in between
  EXPECT_TRUE(m.net().training());        // Forward restored train mode
  // Eval output equals an eager eval forward with the same parameters.
  m.Eval();
  Tensor eager;
  {
    NoGradGuard ng;
    eager = m.net().Forward(b.first);
  }
  EXPECT_EQ(eager.ToVector<float>(), out2.ToVector<float>());
}

TEST(Model, Errors) {
  CpuDevice()->SetRandSeed(1);
  nn::Model m(nn::MakeSmallCnn(3, 10), std::make_shared<nn::SGD>(0.05));
  auto b = ImageBatch(4, 1);
  LOOM_EXPECT_THROW_MSG(m.TrainOneBatch(b.first, b.second), GraphError, "called before Compile");
  Tensor four_channels = RandomTensor({4, 4, 32, 32}, DType::kFloat32, 1);
  LOOM_EXPECT_THROW_MSG(m.Compile({four_channels}, true, true), ShapeError,
                        "[Conv2d] input has 4 channels, the layer expects 3");
  m.Compile({b.first}, true, true, true);
  m.set_recapture(false);  // the default is true, as in Python (Note [Bounded recapture])
  Tensor float_labels = RandomTensor({4}, DType::kFloat32, 2);
  LOOM_EXPECT_THROW_MSG(m.TrainOneBatch(b.first, float_labels), Error, "softmax_cross_entropy");
  m.TrainOneBatch(b.first, b.second);
  auto small = ImageBatch(3, 2);
  LOOM_EXPECT_THROW_MSG(m.TrainOneBatch(small.first, small.second), GraphError, "cannot replay with");
  m.set_recapture(true);
  EXPECT_NO_THROW(m.TrainOneBatch(small.first, small.second));
}

// Python and C++ agree on a batch of a new shape: another graph, by default.
TEST(Model, ANewBatchShapeIsCapturedAgainByDefault) {
  CpuDevice()->SetRandSeed(1);
  nn::Model m(nn::MakeMlp({8, 16, 3}), std::make_shared<nn::SGD>(0.1));
  Blobs data(8, 3);
  auto b = data.Batch(4, 0), small = data.Batch(3, 1);
  m.Compile({b.first}, true, true, true);
  m.TrainOneBatch(b.first, b.second);
  EXPECT_NO_THROW(m.TrainOneBatch(small.first, small.second));
  EXPECT_NO_THROW(m.TrainOneBatch(b.first, b.second));
}

TEST(Model, FeedingTheGraphInputsDirectlyMatchesPassingBatches) {
  auto run = [](bool direct) {
    CpuDevice()->SetRandSeed(11);
    nn::Model m(nn::MakeMlp({8, 16, 3}), std::make_shared<nn::SGD>(0.1, 0.9));
    Blobs data(8, 3);
    auto b0 = data.Batch(4, 0);
    m.Compile({b0.first}, true, true, true);
    std::vector<float> losses;
    for (int s = 0; s < 4; ++s) {
      auto b = data.Batch(4, uint32_t(s));
      std::vector<Tensor> in = m.GraphInputs(b.first, b.second);
      if (direct && !in.empty()) {
        EXPECT_NE(in[0].block(), b.first.block());
        in[0].CopyFrom(b.first.ToVector<float>());
        in[1].CopyFrom(b.second.ToVector<int32_t>());
        uint64_t ops_before = CpuDevice()->ops_run();
        losses.push_back(float(m.TrainOneBatch(in[0], in[1]).loss.Item()));
        EXPECT_EQ(CpuDevice()->ops_run() - ops_before, m.train_graph()->ops().size());  // no copy ops
      } else {
        losses.push_back(float(m.TrainOneBatch(b.first, b.second).loss.Item()));
      }
    }
    EXPECT_EQ(m.GraphInputs(Tensor(Shape{5, 8}, DType::kFloat32, CpuDevice()), Tensor(Shape{5}, DType::kInt32, CpuDevice())).size(), 0u);
    return losses;
  };
  EXPECT_EQ(run(false), run(true));
}

TEST(Layers, ParametersAndStatesAreNamedAndPersistent) {
  auto net = nn::MakeResNet18(10);
  nn::NamedTensors p = net->Params();
  nn::NamedTensors s = net->States();
  EXPECT_EQ(p.front().first, "conv1.weight");
  EXPECT_EQ(p.back().first, "fc.bias");
  bool found = false;
  for (auto& kv : s) found = found || kv.first == "layer2.0.downsample.1.running_mean";
  EXPECT_TRUE(found);
  size_t count = 0;
  for (auto& kv : p) {
    EXPECT_TRUE(kv.second.block()->persistent()) << kv.first;
    EXPECT_TRUE(kv.second.requires_grad()) << kv.first;
    count += size_t(kv.second.numel());
  }
  EXPECT_EQ(count, 11173962u);  // ResNet-18 (CIFAR stem, 10 classes), as in torchvision's count
}

TEST(Layers, ResNet50ShapesAndParameterCount) {
  auto net = nn::MakeResNet50(1000);
  size_t count = 0;
  for (auto& kv : net->Params()) count += size_t(kv.second.numel());
  EXPECT_EQ(count, 25557032u);  // torchvision resnet50
  // Shape inference only (a capture runs nothing): (2, 3, 224, 224) -> (2, 1000).
  Tensor x = RandomTensor({2, 3, 224, 224}, DType::kFloat32, 1);
  NoGradGuard ng;
  CapturedGraph graph(CpuDevice(), "r50_shapes");
  Tensor y = graph.Capture([&] { return net->Forward(x); });
  EXPECT_EQ(y.shape(), (Shape{2, 1000}));
}

// Training steps of ResNet-50 (Bottleneck blocks, ImageNet stem) on small images: the shapes
// flow through all four stages ((2, 3, 32, 32) -> 1x1 before the pooling -> (2, 10)), the
// parameters move, and the replayed graph matches eager bitwise, BatchNorm statistics included.
Trained TrainResNet50(bool graph, int steps) {
  return TrainNet([] { return nn::MakeResNet50(10); }, 50, graph, steps, 2, 7);
}

TEST(Model, ResNet50TrainsAndGraphMatchesEager) {
  CpuDevice()->SetRandSeed(50);
  auto net = nn::MakeResNet50(10);
  const std::vector<std::vector<float>> before = Values(net->Params());
  {
    NoGradGuard ng;
    EXPECT_EQ(net->Forward(ImageBatch(2, 7).first).shape(), (Shape{2, 10}));
  }
  Trained e = TrainResNet50(false, 2);
  Trained g = TrainResNet50(true, 2);  // the capture step, then one replay
  ASSERT_EQ(e.losses.size(), 2u);
  EXPECT_TRUE(std::isfinite(e.losses[0]) && e.losses[0] > 0) << e.losses[0];
  EXPECT_FALSE(SameBits(before, e.params)) << "training left the parameters unchanged";
  EXPECT_EQ(std::memcmp(e.losses.data(), g.losses.data(), e.losses.size() * sizeof(float)), 0)
      << e.losses[1] << " vs " << g.losses[1];
  EXPECT_TRUE(SameBits(e.params, g.params));
  EXPECT_TRUE(SameBits(e.states, g.states));
}

TEST(Optimizers, AdamMatchesReferenceFormula) {
  Tensor w = ops::FromVector(std::vector<double>{1.0, -2.0}, {2}, CpuDevice());
  w.set_requires_grad(true);
  nn::Adam adam(0.1, 0.9, 0.999, 1e-8);
  double m[2] = {0, 0}, v[2] = {0, 0}, ref[2] = {1.0, -2.0};
  for (int t = 1; t <= 3; ++t) {
    Tensor loss = ops::Sum(ops::Mul(w, w));  // grad = 2w
    for (auto& pg : Backward(loss)) adam.Apply(pg.second, pg.first);
    for (int i = 0; i < 2; ++i) {
      double g = 2 * ref[i];
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
      ref[i] -= 0.1 * mh / (std::sqrt(vh) + 1e-8);
    }
  }
  std::vector<double> got = w.ToVector<double>();
  EXPECT_NEAR(got[0], ref[0], 1e-9);
  EXPECT_NEAR(got[1], ref[1], 1e-9);
  EXPECT_EQ(adam.steps_taken(CpuDevice()), 3);
}

TEST(Optimizers, SgdNesterovAndWeightDecayMatchReference) {
  Tensor w = ops::FromVector(std::vector<double>{0.5, -1.5}, {2}, CpuDevice());
  w.set_requires_grad(true);
  nn::SGD sgd(0.1, 0.9, 0.01, true);
  double buf[2] = {0, 0}, ref[2] = {0.5, -1.5};
  for (int t = 0; t < 3; ++t) {
    Tensor loss = ops::Sum(ops::Mul(w, w));
    for (auto& pg : Backward(loss)) sgd.Apply(pg.second, pg.first);
    for (int i = 0; i < 2; ++i) {
      double g = 2 * ref[i] + 0.01 * ref[i];
      buf[i] = 0.9 * buf[i] + g;
      ref[i] -= 0.1 * (g + 0.9 * buf[i]);
    }
  }
  std::vector<double> got = w.ToVector<double>();
  EXPECT_NEAR(got[0], ref[0], 1e-12);
  EXPECT_NEAR(got[1], ref[1], 1e-12);
  LOOM_EXPECT_THROW_MSG(nn::SGD(0.1, 0, 0, true), ValueError, "Nesterov");
}

}  // namespace
}  // namespace test
}  // namespace loom
