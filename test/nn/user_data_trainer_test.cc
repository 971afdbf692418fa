// nn::Trainer on a user's own data (io::ArrayDataset through the DataLoader): a small MLP learns
// two classes from std::vectors and a linear regression learns float targets with MSE; a run
// stopped at step k and resumed reads the same batches as an uninterrupted run and ends with
// bitwise its parameters and optimizer state (eager and graph mode).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/files.h"
#include "common/harness.h"
#include "core/device.h"
#include "core/ops.h"
#include "io/checkpoint.h"
#include "io/checkpoint_dir.h"
#include "io/user_dataset.h"
#include "nn/trainer.h"

namespace loom {
namespace test {
namespace {

constexpr int64_t kBatch = 10, kSamples = 120;  // 12 steps an epoch

// Two classes of points in the plane: class 1 inside the circle of radius 1, class 0 outside
// (up to radius 2): not linearly separable, so the hidden layer has to learn.
std::shared_ptr<io::ArrayDataset> Circle(uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> x;
  std::vector<int32_t> y;
  while (int64_t(y.size()) < kSamples) {
    const float a = u(gen), b = u(gen), r = std::sqrt(a * a + b * b);
    if (r > 2 || std::fabs(r - 1) < 0.15f) continue;  // a margin around the boundary
    x.insert(x.end(), {a, b});
    y.push_back(r < 1 ? 1 : 0);
  }
  return std::make_shared<io::ArrayDataset>(std::move(x), Shape{2}, std::move(y), "circle");
}

std::shared_ptr<nn::Layer> Mlp(const std::shared_ptr<Device>& dev) {
  nn::LayerOptions o;
  o.device = dev;
  auto net = std::make_shared<nn::Sequential>();
  net->Add(std::make_shared<nn::Linear>(2, 32, true, o));
  net->Add(nn::ReLU());
  net->Add(std::make_shared<nn::Linear>(32, 2, true, o));
  return net;
}

struct MlpRun {
  std::shared_ptr<Device> dev = CpuDevice();
  std::shared_ptr<nn::Model> model;
  explicit MlpRun(bool graph) {
    dev->SetRandSeed(3);
    model = std::make_shared<nn::Model>(Mlp(dev), std::make_shared<nn::SGD>(0.1, 0.9));
    model->Compile({ops::Zeros({kBatch, 2}, DType::kFloat32, dev)}, true, graph);
  }
};

io::DataLoaderOptions Loader(const std::shared_ptr<Device>& dev, bool shuffle = true) {
  io::DataLoaderOptions o;
  o.batch_size = kBatch;
  o.seed = 5;
  o.shuffle = shuffle;
  o.drop_last = true;
  o.device = dev;
  return o;
}

TEST(TrainerOnArrays, AnMlpLearnsTwoClassesFromVectors) {
  MlpRun run(/*graph=*/true);
  io::DataLoader train(Circle(1), Loader(run.dev));
  io::DataLoader held_out(Circle(2), Loader(run.dev, /*shuffle=*/false));
  const nn::EvalResult before = nn::Evaluate(*run.model, held_out);
  nn::TrainerOptions t;
  t.epochs = 15;
  t.progress = t.verbose = false;
  const nn::TrainResult r = nn::Trainer(*run.model, train, &held_out, t).Fit();
  EXPECT_EQ(r.steps, 15 * kSamples / kBatch);
  EXPECT_LT(r.eval.loss, 0.5 * before.loss) << "held-out loss " << before.loss << " -> " << r.eval.loss;
  EXPECT_GT(r.eval.top1, 0.9);
}

TEST(TrainerOnArrays, ALinearModelLearnsFloatTargetsWithMse) {
  // y = (x0 - 2 x1 + 0.5, 3 x2) from x of shape (3).
  std::mt19937 gen(4);
  std::normal_distribution<float> n;
  std::vector<float> x, y;
  for (int64_t i = 0; i < kSamples; ++i) {
    const float a = n(gen), b = n(gen), c = n(gen);
    x.insert(x.end(), {a, b, c});
    y.insert(y.end(), {a - 2 * b + 0.5f, 3 * c});
  }
  auto data = std::make_shared<io::ArrayDataset>(x, Shape{3}, y, Shape{2}, "plane");
  auto dev = CpuDevice();
  dev->SetRandSeed(3);
  nn::LayerOptions lo;
  lo.device = dev;
  nn::Model model(std::make_shared<nn::Linear>(3, 2, true, lo), std::make_shared<nn::SGD>(0.05), nn::LossKind::kMse);
  model.Compile({ops::Zeros({kBatch, 3}, DType::kFloat32, dev)}, true, /*use_graph=*/false);
  io::DataLoader train(data, Loader(dev));
  nn::TrainerOptions t;
  t.max_steps = 1;
  t.progress = t.verbose = false;
  const double first = nn::Trainer(model, train, nullptr, t).Fit().train_loss;
  t.max_steps = 0;
  t.epochs = 20;
  const double last = nn::Trainer(model, train, nullptr, t).Fit().train_loss;
  EXPECT_LT(last, 1e-3 * first) << "MSE " << first << " -> " << last;
  // Evaluation is a classifier's: float targets are refused, naming the data set.
  LOOM_EXPECT_THROW_MSG(nn::Evaluate(model, train), DTypeError, "data set 'plane' gives float32 targets");
}

// (graph mode): stopped after step 17 (mid-epoch), then resumed from its checkpoint.
class TrainerOnArraysResume : public ::testing::TestWithParam<bool> {};

TEST_P(TrainerOnArraysResume, ReadsTheSameBatchesAndEndsBitwiseEqualToAnUninterruptedRun) {
  const bool graph = GetParam();
  TempDir tmp;
  auto data = Circle(1);
  // Each run's batches, as the first x value of each sample; prefetch 0 runs the transform when
  // the trainer takes the batch, so a run records exactly the batches it trained on.
  auto fit = [&](const std::string& dir, int64_t max_steps, std::vector<std::vector<float>>* seen) {
    MlpRun run(graph);
    io::DataLoaderOptions o = Loader(run.dev);
    o.prefetch = 0;
    o.transform = [seen](io::HostBatch& b) {
      seen->emplace_back();
      for (int64_t i = 0; i < b.size; ++i) seen->back().push_back(b.x[size_t(2 * i)]);
    };
    io::DataLoader train(data, o);
    nn::TrainerOptions t;
    t.epochs = 3;
    t.max_steps = max_steps;
    t.checkpoint_dir = dir;
    t.checkpoint_every = 5;
    t.resume = true;
    t.progress = t.verbose = false;
    nn::Trainer(*run.model, train, nullptr, t).Fit();
  };
  std::vector<std::vector<float>> whole, first, second;
  fit(tmp / "whole", 0, &whole);
  fit(tmp / "split", 17, &first);
  fit(tmp / "split", 0, &second);
  ASSERT_EQ(whole.size(), size_t(36));
  ASSERT_EQ(first.size(), size_t(17));
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(first, whole);
  io::Checkpoint a = io::LoadCheckpoint(io::CheckpointDir(tmp / "whole").Latest()),
                 b = io::LoadCheckpoint(io::CheckpointDir(tmp / "split").Latest());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  EXPECT_GT(a.tensors.size(), size_t(4));  // the parameters and their momentum
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const Tensor &x = a.tensors[i].second, &y = b.tensors[i].second;
    ASSERT_EQ(x.nbytes(), y.nbytes());
    EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << a.tensors[i].first << " differs";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, TrainerOnArraysResume, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Graph" : "Eager"; });

}  // namespace
}  // namespace test
}  // namespace loom
