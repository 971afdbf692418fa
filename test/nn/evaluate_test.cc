// nn::Top1Correct and nn::Evaluate: the strict arg-max count on hand-made logits, and a pass over
// a data set (with a smaller last batch) against a host reference computed from one eval-mode
// forward of the whole set, eagerly and with graphs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "common/harness.h"
#include "core/ops.h"
#include "core/device.h"
#include "io/dataset.h"
#include "nn/cnn_layers.h"
#include "nn/evaluate.h"
#include "nn/model.h"

namespace loom {
namespace test {
namespace {

TEST(Top1Correct, CountsRowsWhoseLabelIsStrictlyLargest) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits = {
      0.1f, 2.0f, -1.f,  // label 1: the largest               -> correct
      3.0f, 3.0f, 0.0f,  // label 0: tied with class 1           -> wrong
      0.5f, 0.5f, 0.5f,  // label 2: a constant row (all tied)   -> wrong
      1.0f, nan, 0.0f,   // label 0: a NaN in the row            -> wrong
      -5.f, -4.f, -3.f,  // label 2: the largest (all negative)  -> correct
      9.0f, 1.0f, 2.0f,  // label 1: not the largest             -> wrong
      0.0f, 1.0f, 2.0f,  // label 7: outside [0, 3)              -> wrong
  };
  std::vector<int32_t> labels = {1, 0, 2, 0, 2, 1, 7};
  auto dev = CpuDevice();
  Tensor c = nn::Top1Correct(ops::FromVector(logits, {7, 3}, dev), ops::FromVector(labels, {7}, dev));
  EXPECT_EQ(c.shape(), Shape{});
  EXPECT_EQ(c.Item(), 2.0);
  std::vector<int64_t> labels64(labels.begin(), labels.end());
  EXPECT_EQ(nn::Top1Correct(ops::FromVector(logits, {7, 3}, dev), ops::FromVector(labels64, {7}, dev)).Item(), 2.0);
}

TEST(TopKCorrect, CountsRowsWhoseLabelIsAmongTheKLargestStrictly) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits = {
      5, 4, 3, 2, 1, 0,  // label 2: third largest              -> in the top 3, not the top 2
      5, 4, 3, 3, 1, 0,  // label 2: tied with class 3 for third -> not in the top 3, in the top 4
      1, 1, 1, 1, 1, 1,  // label 0: a constant row              -> in no top k < 6
      0, 1, 2, 3, 4, 5,  // label 5: the largest                -> in every top k
      0, 1, nan, 3, 4, 5,  // label 5: a NaN in the row          -> never
      0, 1, 2, 3, 4, 5,  // label 9: outside [0, 6)              -> never
  };
  std::vector<int32_t> labels = {2, 2, 0, 5, 5, 9};
  auto dev = CpuDevice();
  Tensor l = ops::FromVector(logits, {6, 6}, dev), y = ops::FromVector(labels, {6}, dev);
  EXPECT_EQ(nn::TopKCorrect(l, y, 1).Item(), 1.0);
  EXPECT_EQ(nn::TopKCorrect(l, y, 2).Item(), 1.0);
  EXPECT_EQ(nn::TopKCorrect(l, y, 3).Item(), 2.0);
  EXPECT_EQ(nn::TopKCorrect(l, y, 4).Item(), 3.0);
  EXPECT_EQ(nn::TopKCorrect(l, y, 6).Item(), 4.0);   // k >= C: every valid, NaN-free row
  EXPECT_EQ(nn::TopKCorrect(l, y, 60).Item(), 4.0);
  EXPECT_THROW(nn::TopKCorrect(l, y, 0), ValueError);
}

TEST(Top1Correct, RejectsBadShapesAndDtypes) {
  auto dev = CpuDevice();
  Tensor logits = ops::Zeros({4, 3}, DType::kFloat32, dev);
  EXPECT_THROW(nn::Top1Correct(logits, ops::Zeros({3}, DType::kInt32, dev)), ShapeError);
  EXPECT_THROW(nn::Top1Correct(ops::Zeros({4}, DType::kFloat32, dev), ops::Zeros({4}, DType::kInt32, dev)),
               ShapeError);
  EXPECT_THROW(nn::Top1Correct(logits, ops::Zeros({4}, DType::kFloat32, dev)), DTypeError);
  EXPECT_THROW(nn::Top1Correct(ops::Zeros({4, 3}, DType::kInt32, dev), ops::Zeros({4}, DType::kInt32, dev)),
               DTypeError);
}

// 20 random 1x4x4 images in 5 classes.
std::shared_ptr<io::ImageData> SmallImages() {
  auto d = std::make_shared<io::ImageData>();
  d->n = 20;
  d->channels = 1;
  d->height = d->width = 4;
  std::mt19937 gen(5);
  for (int64_t i = 0; i < d->n * 16; ++i) d->images.push_back(uint8_t(gen() % 256));
  for (int64_t i = 0; i < d->n; ++i) d->labels.push_back(int32_t(gen() % 5));
  return d;
}

std::shared_ptr<nn::Layer> SmallNet() {
  auto net = std::make_shared<nn::Sequential>();
  net->Add(std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1));
  net->Add(std::make_shared<nn::BatchNorm2d>(4));
  net->Add(nn::ReLU());
  net->Add(std::make_shared<nn::Flatten>());
  net->Add(std::make_shared<nn::Linear>(64, 5));
  return net;
}

class Evaluate : public ::testing::TestWithParam<bool> {};

TEST_P(Evaluate, MatchesAHostReferenceOverBatches) {
  const bool graph = GetParam();
  auto dev = CpuDevice();
  dev->SetRandSeed(3);
  auto data = SmallImages();
  io::DataLoaderOptions o;
  o.batch_size = 8;  // 8 + 8 + 4: the last batch is smaller
  o.shuffle = false;
  o.mean = {0.5f};
  o.stddev = {0.25f};
  nn::Model model(SmallNet(), std::make_shared<nn::SGD>(0.1, 0.9));
  io::DataLoader train(data, o);
  io::Batch b;
  ASSERT_TRUE(train.Next(&b));
  model.Compile({b.x}, true, graph);
  for (int i = 0; i < 3; ++i) model.TrainOneBatch(b.x, b.y);  // running statistics move off 0 and 1
  const auto states_before = model.States();
  std::vector<std::vector<float>> before;
  for (auto& s : states_before) before.push_back(s.second.ToVector<float>());

  io::DataLoader held_out(data, o);
  nn::EvalResult r = nn::Evaluate(model, held_out);
  EXPECT_TRUE(model.net().training());  // left as it was
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_EQ(model.States()[i].second.ToVector<float>(), before[i]) << "eval mode must not update " << states_before[i].first;

  // Reference: one eval-mode forward of all 20 images, loss and strict arg-max on the host.
  io::DataLoaderOptions all = o;
  all.batch_size = 20;
  io::DataLoader whole(data, all);
  ASSERT_TRUE(whole.Next(&b));
  std::vector<float> logits = model.Forward(b.x).ToVector<float>();
  double loss = 0;
  int correct = 0, correct5 = 0;
  for (int64_t i = 0; i < 20; ++i) {
    const float* row = logits.data() + i * 5;
    const int label = data->labels[size_t(i)];
    double mx = row[0], sum = 0;
    for (int k = 0; k < 5; ++k) mx = std::max(mx, double(row[k]));
    for (int k = 0; k < 5; ++k) sum += std::exp(double(row[k]) - mx);
    loss += std::log(sum) + mx - row[label];
    bool best = true;
    for (int k = 0; k < 5; ++k) best = best && (k == label || row[k] < row[label]);
    correct += best;
    int above = 0;  // other classes at or above the label's logit
    for (int k = 0; k < 5; ++k) above += k != label && row[k] >= row[label];
    correct5 += above < 5;
  }
  EXPECT_EQ(r.samples, 20);
  EXPECT_NEAR(r.loss, loss / 20, 1e-5);
  EXPECT_DOUBLE_EQ(r.top1, correct / 20.0);
  EXPECT_DOUBLE_EQ(r.top5, correct5 / 20.0);
  EXPECT_GT(correct, 0);  // the check above is not vacuous...
  EXPECT_LT(correct, 20);
}

INSTANTIATE_TEST_SUITE_P(Modes, Evaluate, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Graph" : "Eager"; });

TEST(EvaluateErrors, NoBatchIsAValueError) {
  auto dev = CpuDevice();
  io::DataLoaderOptions o;
  o.batch_size = 64;
  o.drop_last = true;  // 20 samples: no whole batch, ever; the loader refuses to be made
  LOOM_EXPECT_THROW_MSG(io::DataLoader never(SmallImages(), o), ValueError, "would have no batch");
  // A loader at the end of its epoch gives Evaluate no batch either.
  o.batch_size = 8;
  io::DataLoader loader(SmallImages(), o);
  loader.Seek(0, loader.batches_per_epoch());
  nn::Model model(SmallNet(), std::make_shared<nn::SGD>(0.1));
  model.Compile({ops::Zeros({2, 1, 4, 4}, DType::kFloat32, dev)});
  EXPECT_THROW(nn::Evaluate(model, loader), ValueError);
}

}  // namespace
}  // namespace test
}  // namespace loom
