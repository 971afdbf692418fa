// A user's own data through the DataLoader (Note [Users' data sets] in io/user_dataset.h):
// io::ArrayDataset refuses bad input with typed errors naming the data set, the sample and the
// shapes; the loader serves its samples in EpochOrder, labels or float targets, the same batches
// with or without its background thread, and from a Seek the batches an uninterrupted pass gives.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "common/harness.h"
#include "core/device.h"
#include "io/dataset.h"
#include "io/user_dataset.h"

namespace loom {
namespace test {
namespace {

// n samples of shape (3): sample i is (i, 10 i, 100 i), label i % 4.
std::shared_ptr<io::ArrayDataset> Counting(int64_t n) {
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.insert(x.end(), {float(i), float(10 * i), float(100 * i)});
    y.push_back(int32_t(i % 4));
  }
  return std::make_shared<io::ArrayDataset>(std::move(x), Shape{3}, std::move(y), "counting");
}

io::DataLoaderOptions Options(int64_t batch, int prefetch = 2) {
  io::DataLoaderOptions o;
  o.batch_size = batch;
  o.seed = 7;
  o.prefetch = prefetch;
  return o;
}

// Every batch of one epoch, as the samples' first values (their indices).
std::vector<std::vector<float>> Epoch(io::DataLoader& loader) {
  std::vector<std::vector<float>> out;
  io::HostBatch b;
  while (loader.NextHost(&b)) {
    out.emplace_back();
    for (int64_t i = 0; i < b.size; ++i) out.back().push_back(b.x[size_t(3 * i)]);
  }
  return out;
}

TEST(ArrayDataset, RefusesBadInputNamingTheDataSetTheSampleAndTheShapes) {
  using V = std::vector<float>;
  using L = std::vector<int32_t>;
  LOOM_EXPECT_THROW_MSG(io::ArrayDataset(V(12), {3}, L(5), "mine"), ShapeError,
                        "[dataset 'mine'] x holds 4 samples of shape (3,) but y holds 5 labels");
  LOOM_EXPECT_THROW_MSG(io::ArrayDataset(V(10), {3}, L(3), "mine"), ShapeError,
                        "x holds 10 values, not a whole number of samples of shape (3,)");
  LOOM_EXPECT_THROW_MSG(io::ArrayDataset(V(), {3}, L(), "mine"), ValueError, "[dataset 'mine'] is empty");
  LOOM_EXPECT_THROW_MSG(io::ArrayDataset(V(6), {3, 0}, L(2), "mine"), ShapeError,
                        "the sample shape (3, 0) has a dimension that is not positive");
  V bad(6, 1.0f);
  bad[4] = std::numeric_limits<float>::quiet_NaN();
  LOOM_EXPECT_THROW_MSG(io::ArrayDataset(bad, {3}, L(2), "mine"), ValueError,
                        "[dataset 'mine'] sample 1: x value nan at element 1 is not finite");
  LOOM_EXPECT_THROW_MSG(io::ArrayDataset(V(6), {3}, L{0, -2}, "mine"), ValueError,
                        "sample 1: label -2 is negative");
  LOOM_EXPECT_THROW_MSG(io::ArrayDataset(V(6), {3}, V(5), {2}, "mine"), ShapeError,
                        "y holds 5 values, not a whole number of targets of shape (2,)");
  LOOM_EXPECT_THROW_MSG(io::ArrayDataset(V(6), {3}, V(6), {2}, "mine"), ShapeError,
                        "x holds 2 samples of shape (3,) but y holds 3 targets of shape (2,)");
  LOOM_EXPECT_THROW_MSG(io::ArrayDataset(V(6), {3}, L(2), ""), ValueError, "needs a name");
}

// A dataset of someone's own: int64 targets, or a Get that fails.
class Custom : public io::Dataset {
 public:
  explicit Custom(DType t, int64_t fail_at = -1) : t_(t), fail_at_(fail_at) {}
  std::string name() const override { return "custom"; }
  int64_t size() const override { return 8; }
  Shape sample_shape() const override { return {2}; }
  DType target_dtype() const override { return t_; }
  void Get(int64_t i, const io::SampleOut& out) const override {
    LOOM_CHECK(i != fail_at_, IOError, "[custom] cannot read sample ", i);
    out.x[0] = out.x[1] = float(i);
    *out.label = int32_t(i);
  }

 private:
  DType t_;
  int64_t fail_at_;
};

TEST(DataLoaderOfADataset, RefusesWhatItCannotServe) {
  LOOM_EXPECT_THROW_MSG(io::DataLoader(std::make_shared<Custom>(DType::kInt64), Options(2)), DTypeError,
                        "[dataset 'custom'] targets of dtype int64: int32 (class labels) or float32");
  io::DataLoaderOptions o = Options(2);
  o.mean = {0.5f};
  o.stddev = {0.2f};
  LOOM_EXPECT_THROW_MSG(io::DataLoader(Counting(4), o), ValueError,
                        "data set 'counting': mean, stddev, crop_padding, hflip and flat are for the image readers");
  o = Options(5);
  o.drop_last = true;
  LOOM_EXPECT_THROW_MSG(io::DataLoader(Counting(4), o), ValueError, "would have no batch");
}

TEST(DataLoaderOfADataset, AFailingGetIsRethrownInTheConsumer) {
  for (int prefetch : {0, 2}) {
    io::DataLoaderOptions o = Options(2, prefetch);
    o.shuffle = false;
    io::DataLoader loader(std::make_shared<Custom>(DType::kInt32, 5), o);
    io::Batch b;
    EXPECT_TRUE(loader.Next(&b));
    EXPECT_TRUE(loader.Next(&b));
    LOOM_EXPECT_THROW_MSG(loader.Next(&b), IOError, "[custom] cannot read sample 5");
    LOOM_EXPECT_THROW_MSG(loader.Next(&b), IOError, "[custom] cannot read sample 5");  // and again
  }
}

TEST(DataLoaderOfADataset, ServesTheSamplesInEpochOrderWithOrWithoutItsThread) {
  auto data = Counting(10);
  io::DataLoader threaded(data, Options(4, 2)), inline_(data, Options(4, 0));
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order = io::EpochOrder(10, true, 7, epoch);
    std::vector<std::vector<float>> want = {{}, {}, {}};
    for (size_t k = 0; k < order.size(); ++k) want[k / 4].push_back(float(order[k]));
    EXPECT_EQ(Epoch(threaded), want) << "epoch " << epoch;
    EXPECT_EQ(Epoch(inline_), want) << "epoch " << epoch;
  }
  EXPECT_NE(io::EpochOrder(10, true, 7, 0), io::EpochOrder(10, true, 7, 1));
  EXPECT_NE(io::EpochOrder(10, true, 7, 0), io::EpochOrder(10, true, 8, 0));
}

TEST(DataLoaderOfADataset, GivesTensorsOfTheSamplesShapeWithLabelsOrFloatTargets) {
  io::DataLoaderOptions o = Options(3);
  o.shuffle = false;
  io::DataLoader labels(Counting(5), o);
  io::Batch b;
  ASSERT_TRUE(labels.Next(&b));
  EXPECT_EQ(b.x.shape(), (Shape{3, 3}));
  EXPECT_EQ(b.x.ToVector<float>(), (std::vector<float>{0, 0, 0, 1, 10, 100, 2, 20, 200}));
  EXPECT_EQ(b.y.dtype(), DType::kInt32);
  EXPECT_EQ(b.y.ToVector<int32_t>(), (std::vector<int32_t>{0, 1, 2}));
  ASSERT_TRUE(labels.Next(&b));
  EXPECT_EQ(b.x.shape(), (Shape{2, 3}));  // the last, smaller batch
  EXPECT_FALSE(labels.Next(&b));

  // Regression: targets of shape (2) per sample; x of shape (1, 2) per sample.
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8}, t = {0.5f, -1, 1.5f, -2, 2.5f, -3, 3.5f, -4};
  auto reg = std::make_shared<io::ArrayDataset>(x, Shape{1, 2}, t, Shape{2}, "reg");
  o.drop_last = true;
  io::DataLoader targets(reg, o);
  EXPECT_EQ(targets.y_dtype(), DType::kFloat32);
  EXPECT_EQ(targets.batches_per_epoch(), 1);
  Tensor tx(targets.x_shape(3), DType::kFloat32, CpuDevice()), ty(targets.y_shape(3), DType::kFloat32, CpuDevice());
  ASSERT_TRUE(targets.NextInto(tx, ty));
  EXPECT_EQ(tx.shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(ty.ToVector<float>(), (std::vector<float>{0.5f, -1, 1.5f, -2, 2.5f, -3}));
  EXPECT_FALSE(targets.NextInto(tx, ty));
  Tensor wrong(Shape{3}, DType::kInt32, CpuDevice());
  LOOM_EXPECT_THROW_MSG(targets.NextInto(tx, wrong), ShapeError, "has float32 y (3, 2), the target y is");
}

TEST(DataLoaderOfADataset, FromASeekGivesTheBatchesOfAnUninterruptedPass) {
  auto data = Counting(23);
  io::DataLoader whole(data, Options(5));
  std::vector<std::vector<float>> all;
  for (int e = 0; e < 3; ++e)
    for (auto& batch : Epoch(whole)) all.push_back(batch);
  // Stop after batch 2 of epoch 1 (5 batches an epoch), as a checkpoint would, then resume.
  io::DataLoader resumed(data, Options(5));
  resumed.Seek(1, 2);
  std::vector<std::vector<float>> rest;
  for (int e = 1; e < 3; ++e)
    for (auto& batch : Epoch(resumed)) rest.push_back(batch);
  EXPECT_EQ(rest, std::vector<std::vector<float>>(all.begin() + 7, all.end()));
}

}  // namespace
}  // namespace test
}  // namespace loom
