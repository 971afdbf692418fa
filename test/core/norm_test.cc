// Normalisation beyond the op-case table (common/op_cases.cc, run by test/ops, holds every
// forward and gradient of batch_norm and layer_norm): PyTorch's defaults, evaluation after
// training, what backward saves, running statistics under graph replay, and the errors.
#include <cmath>
#include <cstring>

#include "common/graph_capture.h"
#include "common/harness.h"
#include "common/op_refs.h"
#include "core/ops_cnn.h"

namespace loom {
namespace test {
namespace {

struct BnState {
  Tensor x, gamma, beta, rm, rv;
};
BnState MakeBn(const Shape& shape, DType dt, uint32_t seed) {
  int64_t c = shape[1];
  BnState s;
  s.x = RandomTensor(shape, dt, seed, -2, 3);
  s.gamma = RandomTensor({c}, dt, seed + 1, 0.5, 1.5);
  s.beta = RandomTensor({c}, dt, seed + 2);
  s.rm = RandomTensor({c}, dt, seed + 3);
  s.rv = RandomTensor({c}, dt, seed + 4, 0.5, 2);
  return s;
}

TEST(Norm, BatchNormDefaultsMatchPyTorchConvention) {
  // momentum 0.1, eps 1e-5; from running (0, 1), one step gives 0.1 * mean and 0.9 + 0.1 * var.
  Tensor x = ops::FromVector(std::vector<double>{1, 2, 3, 4, 10, 20, 30, 40}, {4, 2}, Cpu());  // (N=4, C=2)
  Tensor rm = ops::Zeros({2}, DType::kFloat64, Cpu()), rv = ops::Ones({2}, DType::kFloat64, Cpu());
  Tensor y = ops::BatchNorm(x, ops::Ones({2}, DType::kFloat64, Cpu()), ops::Zeros({2}, DType::kFloat64, Cpu()), rm,
                            rv, true);
  // channel 0: 1, 3, 10, 30; channel 1: 2, 4, 20, 40
  double m0 = 11, m1 = 16.5;
  double v0 = (100 + 64 + 1 + 361) / 3.0, v1 = (14.5 * 14.5 + 12.5 * 12.5 + 3.5 * 3.5 + 23.5 * 23.5) / 3.0;
  ExpectClose(rm.ToVector<double>(), {0.1 * m0, 0.1 * m1}, 1e-12, 1e-12, "running_mean");
  ExpectClose(rv.ToVector<double>(), {0.9 + 0.1 * v0, 0.9 + 0.1 * v1}, 1e-12, 1e-12, "running_var");
  EXPECT_NEAR(y.ToVector<double>()[0], (1 - m0) / std::sqrt(v0 * 3 / 4 + 1e-5), 1e-12);
}

// The eval output itself is the op-case table's; here: evaluation leaves the running statistics
// alone, and after a training step it normalises with the statistics that step moved.
TEST(Norm, BatchNormEvalUsesRunningStats) {
  for (const Shape& shape : {Shape{3, 4}, Shape{2, 3, 4, 4}}) {
    BnState s = MakeBn(shape, DType::kFloat64, 17);
    const double eps = 1e-5;
    std::vector<double> rm0 = ToDoubles(s.rm), rv0 = ToDoubles(s.rv);
    Tensor y0 = ops::BatchNorm(s.x, s.gamma, s.beta, s.rm, s.rv, false, 0.5, eps);
    ExpectClose(ToDoubles(s.rm), rm0, 0, 0, "running_mean after eval");
    ExpectClose(ToDoubles(s.rv), rv0, 0, 0, "running_var after eval");
    Tensor yt = ops::BatchNorm(s.x, s.gamma, s.beta, s.rm, s.rv, true, 0.5, eps);
    std::vector<HostTensor> after;
    for (const Tensor& t : {s.x, s.gamma, s.beta, s.rm, s.rv}) after.emplace_back(t.shape(), ToDoubles(t));
    const Attrs attrs{{"eps", eps}};
    std::vector<double> want = ref::BatchNormInfer(RefArgs{after, attrs})[0].v;
    Tensor ye = ops::BatchNorm(s.x, s.gamma, s.beta, s.rm, s.rv, false, 0.5, eps);
    ExpectClose(ToDoubles(ye), want, 1e-12, 1e-12, "eval after a training step");
    EXPECT_GT(std::abs(ToDoubles(ye)[0] - ToDoubles(yt)[0]), 1e-6);
    EXPECT_GT(std::abs(ToDoubles(ye)[0] - ToDoubles(y0)[0]), 1e-6);
  }
}

TEST(Norm, BatchNormSavesOnlyWhatBackwardNeeds) {
  const OpDef& def = GetOp("batch_norm_train");
  EXPECT_EQ(def.saved_inputs, (std::vector<int>{0, 1}));   // x, gamma
  EXPECT_EQ(def.saved_outputs, (std::vector<int>{1, 2}));  // batch mean, invstd; never y
  EXPECT_EQ(def.inplace, (std::vector<std::pair<int, int>>{{3, 3}, {4, 4}}));
  EXPECT_EQ(GetOp("layer_norm").saved_outputs, (std::vector<int>{1, 2}));
}

TEST(Norm, BatchNormGraphReplayUpdatesRunningStats) {
  // Three replays of a captured training step move the running statistics exactly as three
  // eager steps do; the capture itself changes nothing (invariant 4).
  auto dev = Cpu();
  Shape shape{4, 3, 5, 5};
  BnState e = MakeBn(shape, DType::kFloat32, 47), g = MakeBn(shape, DType::kFloat32, 47);
  Tensor w = RandomTensor({3, 3, 3, 3}, DType::kFloat32, 48).Detach().set_requires_grad(true);
  ops::Conv2dOptions pad;
  pad.padding = {1, 1};
  auto step = [&](BnState& s) {
    Tensor y = ops::BatchNorm(ops::Conv2d(s.x, w, Tensor(), pad), s.gamma, s.beta, s.rm, s.rv, true);
    return ops::Sum(ops::Mul(y, y));
  };
  for (int i = 0; i < 3; ++i) step(e);
  std::vector<float> rm_before = g.rm.ToVector<float>();
  CapturedGraph graph(dev, "bn_test");
  Tensor loss = graph.Capture([&] { return step(g); });
  EXPECT_EQ(g.rm.ToVector<float>(), rm_before);
  for (int i = 0; i < 3; ++i) graph.Replay();
  std::vector<float> a = e.rm.ToVector<float>(), b = g.rm.ToVector<float>();
  std::vector<float> av = e.rv.ToVector<float>(), bv = g.rv.ToVector<float>();
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(av.data(), bv.data(), av.size() * sizeof(float)));
  EXPECT_NE(a, rm_before);
}

TEST(Norm, BatchNormErrors) {
  BnState s = MakeBn({2, 3, 4, 4}, DType::kFloat32, 57);
  Tensor c4 = RandomTensor({4}, DType::kFloat32, 58);
  LOOM_EXPECT_THROW_MSG(ops::BatchNorm(s.x, c4, s.beta, s.rm, s.rv, true), ShapeError,
                        "[batch_norm_train] input (2, 3, 4, 4) has 3 channels, gamma is (4,)");
  LOOM_EXPECT_THROW_MSG(ops::BatchNorm(s.x, s.gamma, s.beta, s.rm, c4, false), ShapeError,
                        "[batch_norm_infer] input (2, 3, 4, 4) has 3 channels, running_var is (4,)");
  Tensor rm64 = RandomTensor({3}, DType::kFloat64, 59);
  LOOM_EXPECT_THROW_MSG(ops::BatchNorm(s.x, s.gamma, s.beta, rm64, s.rv, true), DTypeError,
                        "[batch_norm_train] running_mean is float64, input is float32");
  Tensor one = RandomTensor({1, 3}, DType::kFloat32, 60);
  LOOM_EXPECT_THROW_MSG(ops::BatchNorm(one, s.gamma, s.beta, s.rm, s.rv, true), ValueError,
                        "[batch_norm_train] input (1, 3) has one value per channel");
  EXPECT_EQ(ops::BatchNorm(one, s.gamma, s.beta, s.rm, s.rv, false).shape(), (Shape{1, 3}));  // eval is fine
  LOOM_EXPECT_THROW_MSG(ops::BatchNorm(RandomTensor({3}, DType::kFloat32, 61), s.gamma, s.beta, s.rm, s.rv, true),
                        ShapeError, "[batch_norm_train] input (3,) must be (N, C, ...)");
  LOOM_EXPECT_THROW_MSG(ops::BatchNorm(s.x, s.gamma, s.beta, s.rm, s.rv, true, 1.5), ValueError,
                        "[batch_norm_train] momentum 1.5 must be in [0, 1]");
  // A running statistic that is a strided view cannot be updated in place.
  Tensor six = RandomTensor({6}, DType::kFloat32, 62);
  Tensor every_other(six.block_ptr(), {3}, {2}, 0, DType::kFloat32);
  ASSERT_FALSE(every_other.is_contiguous());
  LOOM_EXPECT_THROW_MSG(ops::BatchNorm(s.x, s.gamma, s.beta, every_other, s.rv, true), ValueError,
                        "[batch_norm_train] input 3 (float32 (3,)");
  LOOM_EXPECT_THROW_MSG(ops::BatchNorm(s.x, s.gamma, s.beta, every_other, s.rv, true), ValueError,
                        "is updated in place and must be contiguous");
}

TEST(Norm, LayerNormErrors) {
  Tensor x = RandomTensor({2, 3, 4}, DType::kFloat32, 81);
  LOOM_EXPECT_THROW_MSG(ops::LayerNorm(x, RandomTensor({3}, DType::kFloat32, 82), RandomTensor({3}, DType::kFloat32, 83)),
                        ShapeError, "[layer_norm] input (2, 3, 4) does not end with the normalised shape (3,) of gamma");
  LOOM_EXPECT_THROW_MSG(ops::LayerNorm(x, RandomTensor({4}, DType::kFloat32, 84), RandomTensor({3}, DType::kFloat32, 85)),
                        ShapeError, "[layer_norm] gamma (4,) and beta (3,) differ in shape");
  LOOM_EXPECT_THROW_MSG(ops::LayerNorm(x, RandomTensor({4}, DType::kFloat64, 86), RandomTensor({4}, DType::kFloat32, 87)),
                        DTypeError, "[layer_norm] gamma is float64, input is float32");
}

}  // namespace
}  // namespace test
}  // namespace loom
