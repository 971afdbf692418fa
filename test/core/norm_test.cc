// batch_norm (training with in-place running statistics, inference) and layer_norm: forward
// against plain double loops, running-statistic updates, gradients by finite differences,
// eager against a replayed graph, and the errors.
#include <cmath>
#include <cstring>

#include "common/graph_capture.h"
#include "common/harness.h"
#include "core/ops_cnn.h"

namespace loom {
namespace test {
namespace {

struct BnRef {
  std::vector<double> y, mean, var_biased, var_unbiased;
};

// x: (N, C, S...) with per-channel statistics over N and S. training: batch statistics;
// otherwise the given running mean and variance.
BnRef RefBatchNorm(const Shape& shape, const std::vector<double>& x, const std::vector<double>& gamma,
                   const std::vector<double>& beta, const std::vector<double>& rm, const std::vector<double>& rv,
                   bool training, double eps) {
  int64_t n = shape[0], c = shape[1], s = 1;
  for (size_t i = 2; i < shape.size(); ++i) s *= shape[i];
  BnRef r;
  r.y.resize(x.size());
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) sum += x[size_t((i * c + ch) * s + k)];
    double mean = sum / double(n * s);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) sq += std::pow(x[size_t((i * c + ch) * s + k)] - mean, 2);
    r.mean.push_back(mean);
    r.var_biased.push_back(sq / double(n * s));
    r.var_unbiased.push_back(sq / double(n * s - 1));
    double m = training ? mean : rm[size_t(ch)];
    double v = training ? r.var_biased.back() : rv[size_t(ch)];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) {
        size_t at = size_t((i * c + ch) * s + k);
        r.y[at] = (x[at] - m) / std::sqrt(v + eps) * gamma[size_t(ch)] + beta[size_t(ch)];
      }
  }
  return r;
}

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

TEST(Norm, BatchNormTrainForwardAndRunningStats) {
  for (const Shape& shape : {Shape{4, 3}, Shape{2, 3, 5}, Shape{3, 2, 4, 5}, Shape{1, 4, 3, 3}}) {
    for (DType dt : {DType::kFloat64, DType::kFloat32}) {
      std::string what = "batch_norm_train " + ToString(shape) + " " + Name(dt);
      BnState s = MakeBn(shape, dt, 7);
      const double momentum = 0.3, eps = 1e-3;
      std::vector<double> rm0 = ToDoubles(s.rm), rv0 = ToDoubles(s.rv);
      BnRef ref = RefBatchNorm(shape, ToDoubles(s.x), ToDoubles(s.gamma), ToDoubles(s.beta), rm0, rv0, true, eps);
      const Block* rm_block = s.rm.block();
      std::vector<Tensor> out = Call("batch_norm_train", {s.x, s.gamma, s.beta, s.rm, s.rv},
                                     Attrs{{"momentum", momentum}, {"eps", eps}});
      double tol = dt == DType::kFloat64 ? 1e-12 : 2e-5;
      ExpectClose(ToDoubles(out[0]), ref.y, tol, tol, what + " y");
      ExpectClose(ToDoubles(out[1]), ref.mean, tol, tol, what + " batch mean");
      std::vector<double> invstd;
      for (double v : ref.var_biased) invstd.push_back(1 / std::sqrt(v + eps));
      ExpectClose(ToDoubles(out[2]), invstd, tol, tol, what + " batch invstd");
      // The running statistics are the caller's tensors, updated in place (unbiased variance).
      EXPECT_EQ(out[3].block(), rm_block) << what;
      EXPECT_EQ(out[4].block(), s.rv.block()) << what;
      std::vector<double> want_rm, want_rv;
      for (size_t c = 0; c < rm0.size(); ++c) {
        want_rm.push_back((1 - momentum) * rm0[c] + momentum * ref.mean[c]);
        want_rv.push_back((1 - momentum) * rv0[c] + momentum * ref.var_unbiased[c]);
      }
      ExpectClose(ToDoubles(s.rm), want_rm, tol, tol, what + " running_mean");
      ExpectClose(ToDoubles(s.rv), want_rv, tol, tol, what + " running_var");
    }
  }
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

TEST(Norm, BatchNormEvalUsesRunningStats) {
  for (const Shape& shape : {Shape{3, 4}, Shape{2, 3, 4, 4}}) {
    BnState s = MakeBn(shape, DType::kFloat64, 17);
    const double eps = 1e-5;
    BnRef ref = RefBatchNorm(shape, ToDoubles(s.x), ToDoubles(s.gamma), ToDoubles(s.beta), ToDoubles(s.rm),
                             ToDoubles(s.rv), false, eps);
    std::vector<double> rm0 = ToDoubles(s.rm), rv0 = ToDoubles(s.rv);
    auto f = [&](const std::vector<Tensor>& in) { return ops::BatchNorm(in[0], in[1], in[2], in[3], in[4], false); };
    CheckForward32(f, {s.x, s.gamma, s.beta, s.rm, s.rv}, ref.y, 1e-5, 1e-5, "batch_norm_infer " + ToString(shape));
    // Evaluation leaves the running statistics alone.
    ExpectClose(ToDoubles(s.rm), rm0, 0, 0, "running_mean after eval");
    ExpectClose(ToDoubles(s.rv), rv0, 0, 0, "running_var after eval");
    // Train then eval: eval sees the updated statistics, and differs from the training output.
    Tensor yt = ops::BatchNorm(s.x, s.gamma, s.beta, s.rm, s.rv, true, 0.5, eps);
    BnRef after = RefBatchNorm(shape, ToDoubles(s.x), ToDoubles(s.gamma), ToDoubles(s.beta), ToDoubles(s.rm),
                               ToDoubles(s.rv), false, eps);
    Tensor ye = ops::BatchNorm(s.x, s.gamma, s.beta, s.rm, s.rv, false, 0.5, eps);
    ExpectClose(ToDoubles(ye), after.y, 1e-12, 1e-12, "eval after a training step");
    EXPECT_GT(std::abs(ToDoubles(ye)[0] - ToDoubles(yt)[0]), 1e-6);
  }
}

TEST(Norm, BatchNormGradients) {
  for (const Shape& shape : {Shape{4, 3}, Shape{2, 3, 3, 2}}) {
    for (bool training : {true, false}) {
      std::string what = std::string("batch_norm ") + (training ? "train " : "eval ") + ToString(shape);
      BnState s = MakeBn(shape, DType::kFloat64, 27);
      // The running statistics are not differentiable: they stay outside GradCheck's inputs.
      Tensor rm = s.rm, rv = s.rv;
      auto f = [&](const std::vector<Tensor>& in) {
        return ops::BatchNorm(in[0], in[1], in[2], rm, rv, training, 0.1, 1e-3);
      };
      GradCheck(f, {s.x, s.gamma, s.beta}, 1e-6, 1e-6, what);
    }
  }
}

TEST(Norm, BatchNormGradOp) {
  // batch_norm_grad against the closed form, float32 and float64, both modes.
  Shape shape{3, 2, 2, 3};
  BnState s = MakeBn(shape, DType::kFloat64, 37);
  Tensor dy = RandomTensor(shape, DType::kFloat64, 38);
  std::vector<double> x = ToDoubles(s.x), g = ToDoubles(s.gamma), d = ToDoubles(dy);
  std::vector<double> rm = ToDoubles(s.rm), rv = ToDoubles(s.rv);
  BnRef ref = RefBatchNorm(shape, x, g, ToDoubles(s.beta), rm, rv, true, 0);
  const double eps = 1e-3;
  int64_t n = 3, c = 2, sp = 6;
  double mcount = double(n * sp);
  for (bool training : {true, false}) {
    std::vector<double> mean(2), invstd(2), dx(x.size()), dg(2, 0.0), db(2, 0.0);
    for (int64_t ch = 0; ch < c; ++ch) {
      mean[size_t(ch)] = training ? ref.mean[size_t(ch)] : rm[size_t(ch)];
      invstd[size_t(ch)] = 1 / std::sqrt((training ? ref.var_biased[size_t(ch)] : rv[size_t(ch)]) + eps);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < sp; ++k) {
          size_t at = size_t((i * c + ch) * sp + k);
          db[size_t(ch)] += d[at];
          dg[size_t(ch)] += d[at] * (x[at] - mean[size_t(ch)]) * invstd[size_t(ch)];
        }
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < sp; ++k) {
          size_t at = size_t((i * c + ch) * sp + k);
          double xhat = (x[at] - mean[size_t(ch)]) * invstd[size_t(ch)];
          double gi = g[size_t(ch)] * invstd[size_t(ch)];
          dx[at] = training ? gi * (d[at] - db[size_t(ch)] / mcount - xhat * dg[size_t(ch)] / mcount) : gi * d[at];
        }
    }
    Tensor m = ops::FromVector(mean, {2}, Cpu());
    Tensor st = training ? ops::FromVector(invstd, {2}, Cpu()) : s.rv;
    Attrs a{{"eps", eps}, {"training", int64_t(training)}};
    for (int out = 0; out < 3; ++out) {
      auto f = [&](const std::vector<Tensor>& in) { return Call("batch_norm_grad", in, a)[size_t(out)]; };
      CheckForward32(f, {s.x, s.gamma, m, st, dy}, out == 0 ? dx : out == 1 ? dg : db, 1e-4, 1e-5,
                     std::string("batch_norm_grad output ") + std::to_string(out) + (training ? " train" : " eval"));
    }
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

// ---------------------------------------------------------------- layer norm

std::vector<double> RefLayerNorm(const std::vector<double>& x, const std::vector<double>& g,
                                 const std::vector<double>& b, double eps) {
  size_t d = g.size(), rows = x.size() / d;
  std::vector<double> y(x.size());
  for (size_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (size_t j = 0; j < d; ++j) mean += x[r * d + j];
    mean /= double(d);
    for (size_t j = 0; j < d; ++j) var += std::pow(x[r * d + j] - mean, 2);
    var /= double(d);
    for (size_t j = 0; j < d; ++j) y[r * d + j] = (x[r * d + j] - mean) / std::sqrt(var + eps) * g[j] + b[j];
  }
  return y;
}

TEST(Norm, LayerNorm) {
  struct Case {
    Shape x, norm;
  };
  for (const Case& k : {Case{{4, 6}, {6}}, Case{{2, 3, 5}, {5}}, Case{{2, 3, 4}, {3, 4}}, Case{{7}, {7}}}) {
    std::string what = "layer_norm " + ToString(k.x) + " over " + ToString(k.norm);
    Tensor x = RandomTensor(k.x, DType::kFloat64, 71, -2, 3);
    Tensor g = RandomTensor(k.norm, DType::kFloat64, 72, 0.5, 1.5);
    Tensor b = RandomTensor(k.norm, DType::kFloat64, 73);
    std::vector<double> want = RefLayerNorm(ToDoubles(x), ToDoubles(g), ToDoubles(b), 1e-5);
    auto f = [](const std::vector<Tensor>& in) { return ops::LayerNorm(in[0], in[1], in[2]); };
    CheckForward32(f, {x, g, b}, want, 1e-5, 1e-5, what);
    GradCheck(f, {x, g, b}, 1e-6, 1e-6, what);
    std::vector<Tensor> out = Call("layer_norm", {x, g, b}, Attrs{{"eps", 1e-5}});
    EXPECT_EQ(out[1].shape(), Shape(k.x.begin(), k.x.end() - int64_t(k.norm.size()))) << what;
  }
  // Many rows and a wide row: the parallel paths, checked against the same reference.
  Tensor x = RandomTensor({300, 130}, DType::kFloat64, 74);
  Tensor g = RandomTensor({130}, DType::kFloat64, 75), b = RandomTensor({130}, DType::kFloat64, 76);
  CheckForward32([](const std::vector<Tensor>& in) { return ops::LayerNorm(in[0], in[1], in[2]); }, {x, g, b},
                 RefLayerNorm(ToDoubles(x), ToDoubles(g), ToDoubles(b), 1e-5), 1e-4, 1e-5, "layer_norm (300, 130)");
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
