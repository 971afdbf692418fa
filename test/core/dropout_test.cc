// Dropout beyond the op-case table (common/op_cases.cc, run by test/ops, holds y, the mask
// against the Philox stream and the gradients): the device counter, fresh numbers on every call
// and replay, reproducibility from the seed, the kept fraction, the wrapper, and the errors.
#include <cmath>

#include "common/graph_capture.h"
#include "common/harness.h"

namespace loom {
namespace test {
namespace {

// Runs the op itself to get both outputs: y and the uint8 mask.
std::pair<Tensor, Tensor> DropoutWithMask(const Tensor& x, double p) {
  std::vector<Tensor> out = Call("dropout", {x}, Attrs{{"p", p}});
  EXPECT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].dtype(), DType::kUInt8);
  EXPECT_EQ(out[1].shape(), x.shape());
  return {out[0], out[1]};
}

// The mask against Philox itself is the op-case table's; here: the counter moves by one per four
// elements, and the mask is bernoulli(1 - p) drawn at the same counter.
TEST(Dropout, MaskIsBernoulliAtTheDeviceCounter) {
  auto dev = Cpu();
  const double p = 0.25;
  const int64_t n = 1001;  // not a multiple of 4
  Tensor x = ops::Ones({n}, DType::kFloat32, dev);
  dev->SetRandSeed(77);
  dev->AdvanceRng(5);
  uint64_t c0 = dev->rng_counter();
  auto [y, mask] = DropoutWithMask(x, p);
  EXPECT_EQ(dev->rng_counter(), c0 + uint64_t(n + 3) / 4);
  std::vector<uint8_t> mv = mask.ToVector<uint8_t>();
  dev->SetRandSeed(77);
  dev->AdvanceRng(5);
  Tensor b = ops::Bernoulli({n}, 1 - p, DType::kUInt8, dev);
  EXPECT_EQ(b.ToVector<uint8_t>(), mv);
}

TEST(Dropout, FreshNumbersEachCallAndSeedReproduces) {
  auto dev = Cpu();
  Tensor x = ops::Ones({4096}, DType::kFloat32, dev);
  dev->SetRandSeed(123);
  std::vector<float> a = ops::Dropout(x, 0.5).ToVector<float>();
  std::vector<float> b = ops::Dropout(x, 0.5).ToVector<float>();
  EXPECT_NE(a, b);
  dev->SetRandSeed(123);
  EXPECT_EQ(ops::Dropout(x, 0.5).ToVector<float>(), a);
  EXPECT_EQ(ops::Dropout(x, 0.5).ToVector<float>(), b);
  dev->SetRandSeed(124);
  EXPECT_NE(ops::Dropout(x, 0.5).ToVector<float>(), a);
}

// docs/design.md invariants 5 and 6: each replay of a captured dropout draws fresh numbers, and N
// replays give the numbers of N eager calls from the same seed.
TEST(Dropout, GraphReplayDrawsFreshNumbersLikeEager) {
  auto dev = Cpu();
  Tensor x = RandomTensor({1001}, DType::kFloat32, 9, 0.5, 1);
  dev->SetRandSeed(99);
  std::vector<float> e1 = ops::Dropout(x, 0.5).ToVector<float>();
  std::vector<float> e2 = ops::Dropout(x, 0.5).ToVector<float>();
  ASSERT_NE(e1, e2);

  dev->SetRandSeed(99);
  CapturedGraph graph(dev, "dropout_test");
  Tensor y = graph.Capture([&] { return ops::Dropout(x, 0.5); });
  EXPECT_EQ(dev->rng_counter(), 0u);  // capture draws nothing
  for (bool sequential : {true, false}) {
    dev->SetRandSeed(99);
    graph.Replay(sequential);
    EXPECT_EQ(y.ToVector<float>(), e1) << "sequential " << sequential;
    graph.Replay(sequential);
    EXPECT_EQ(y.ToVector<float>(), e2) << "sequential " << sequential;
    EXPECT_EQ(dev->rng_counter(), 2 * uint64_t(1001 + 3) / 4);
  }
}

TEST(Dropout, KeptFractionIsOneMinusP) {
  const int64_t n = 400000;
  Tensor x = ops::Ones({n}, DType::kFloat32, Cpu());
  for (double p : {0.1, 0.5, 0.9}) {
    auto [y, mask] = DropoutWithMask(x, p);
    double kept = 0, sum = 0;
    for (uint8_t m : mask.ToVector<uint8_t>()) kept += m;
    for (float v : y.ToVector<float>()) sum += v;
    kept /= double(n);
    double se = std::sqrt(p * (1 - p) / double(n));
    EXPECT_NEAR(kept, 1 - p, 5 * se) << "p = " << p;
    // Inverted dropout keeps the expectation: mean(y) ~ 1.
    EXPECT_NEAR(sum / double(n), 1.0, 5 * se / (1 - p)) << "p = " << p;
  }
}

// Through ops::Dropout, which returns y only, the mask is recovered from y (x has no zeros):
// dx = dy (y != 0) / (1 - p). (dropout's own gradient, for each dtype, is the op-case table's.)
TEST(Dropout, BackwardThroughTheWrapperUsesTheForwardsMask) {
  const double p = 0.4;
  Tensor x = RandomTensor({100}, DType::kFloat64, 4, 0.5, 1).set_requires_grad(true);
  Tensor y = ops::Dropout(x, p);
  Tensor dy = RandomTensor({100}, DType::kFloat64, 5);
  std::vector<double> got;
  Backward(y, [&](const Tensor&, const Tensor& g) { got = g.ToVector<double>(); }, dy);
  std::vector<double> yv = y.ToVector<double>(), dyv = dy.ToVector<double>(), want(100);
  for (size_t i = 0; i < 100; ++i) want[i] = yv[i] != 0 ? dyv[i] / (1 - p) : 0;
  ExpectClose(got, want, 1e-15, 0, "ops::Dropout backward");
}

TEST(Dropout, IdentityWhenNotTrainingOrPZero) {
  auto dev = Cpu();
  Tensor x = RandomTensor({3, 4}, DType::kFloat32, 7).set_requires_grad(true);
  uint64_t ops_before = dev->ops_run(), ctr = dev->rng_counter();
  Tensor a = ops::Dropout(x, 0.5, /*training=*/false);
  Tensor b = ops::Dropout(x, 0.0);
  EXPECT_EQ(a.block(), x.block());
  EXPECT_EQ(b.block(), x.block());
  EXPECT_EQ(dev->ops_run(), ops_before);  // no op ran
  EXPECT_EQ(dev->rng_counter(), ctr);     // and no numbers were drawn
  EXPECT_EQ(a.ToVector<float>(), x.ToVector<float>());
}

TEST(Dropout, Errors) {
  Tensor x = RandomTensor({3}, DType::kFloat32, 8);
  LOOM_EXPECT_THROW_MSG(ops::Dropout(x, 1.0), ValueError, "[dropout] probability 1 is outside [0, 1)");
  LOOM_EXPECT_THROW_MSG(ops::Dropout(x, -0.1), ValueError, "[dropout] probability -0.1 is outside [0, 1)");
  LOOM_EXPECT_THROW_MSG(ops::Dropout(x, 1.5, false), ValueError, "[dropout] probability 1.5 is outside [0, 1)");
  LOOM_EXPECT_THROW_MSG(Call("dropout", {x}, Attrs{{"p", 1.0}}), ValueError, "[dropout] probability 1");
  Tensor i = ops::Zeros({3}, DType::kInt32, Cpu());
  LOOM_EXPECT_THROW_MSG(ops::Dropout(i, 0.5), DTypeError, "[dropout] input must be float32 or float64, got int32");
}

}  // namespace
}  // namespace test
}  // namespace loom
