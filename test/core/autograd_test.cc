// Autograd: which (param, grad) pairs Backward hands out, gradient accumulation, NoGradGuard,
// the errors, invariant 8 (backward keeps only what it needs, measured in peak bytes) and a
// small MLP that trains.
#include <cmath>

#include "common/harness.h"
#include "common/mlp.h"

namespace loom {
namespace test {
namespace {

// Sets SetSaveAllForBackward for one scope, restoring the old value even when a check fails.
class SaveAllScope {
 public:
  explicit SaveAllScope(bool on) : prev_(SaveAllForBackward()) { SetSaveAllForBackward(on); }
  ~SaveAllScope() { SetSaveAllForBackward(prev_); }
 private:
  bool prev_;
};

TEST(Autograd, BackwardYieldsPairsForLeavesThatRequireGrad) {
  // loss = sum(x w + b): dw = x^T 1, db = N (one per row of x).
  Tensor x = ops::FromVector<double>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, Cpu());  // no grad
  Tensor w = RandomTensor({2, 3}, DType::kFloat64, 1).set_requires_grad(true).set_name("w");
  Tensor b = ops::Zeros({3}, DType::kFloat64, Cpu()).set_requires_grad(true).set_name("b");
  Tensor unused = RandomTensor({3}, DType::kFloat64, 2).set_requires_grad(true).set_name("unused");
  Tensor loss = ops::Sum(ops::AddBias(ops::MatMul(x, w), b));
  ASSERT_TRUE(loss.requires_grad());

  std::vector<std::pair<Tensor, Tensor>> pairs = Backward(loss);
  ASSERT_EQ(pairs.size(), 2u) << "one pair per leaf that requires grad and reached the loss";
  bool saw_w = false, saw_b = false;
  for (auto& [p, g] : pairs) {
    EXPECT_NE(p.block(), x.block()) << "x does not require grad";
    EXPECT_NE(p.block(), unused.block()) << "'unused' did not contribute to the loss";
    EXPECT_EQ(g.shape(), p.shape()) << p.name();
    EXPECT_FALSE(g.requires_grad()) << "gradients carry no history";
    if (p.block() == w.block()) {
      saw_w = true;
      EXPECT_EQ(p.name(), "w");
      ExpectClose(ToDoubles(g), {16, 16, 16, 20, 20, 20}, 1e-12, 1e-12, "dw = x^T 1");
    } else if (p.block() == b.block()) {
      saw_b = true;
      EXPECT_EQ(p.name(), "b");
      ExpectClose(ToDoubles(g), {4, 4, 4}, 1e-12, 1e-12, "db = N");
    }
  }
  EXPECT_TRUE(saw_w && saw_b);
}

TEST(Autograd, AccumulatesGradientOfTensorUsedTwice) {
  // loss = sum(x * x + 3 x): x feeds three inputs; dloss/dx = 2 x + 3.
  Tensor x = ops::FromVector<double>({1, -2, 0.5}, {3}, Cpu()).set_requires_grad(true);
  Tensor loss = ops::Sum(ops::Add(ops::Mul(x, x), ops::MulScalar(x, 3)));
  EXPECT_DOUBLE_EQ(loss.Item(), (1 + 3) + (4 - 6) + (0.25 + 1.5));
  auto pairs = Backward(loss);
  ASSERT_EQ(pairs.size(), 1u) << "one pair for x, however many times it was used";
  ExpectClose(ToDoubles(pairs[0].second), {5, -1, 4}, 1e-12, 1e-12, "2 x + 3");

  // Through an intermediate used twice: loss = sum(e * e), e = exp(x): dloss/dx = 2 e^2.
  Tensor y = ops::FromVector<double>({0.5, -1}, {2}, Cpu()).set_requires_grad(true);
  Tensor e = ops::Exp(y);
  auto pairs2 = Backward(ops::Sum(ops::Mul(e, e)));
  ASSERT_EQ(pairs2.size(), 1u);
  ExpectClose(ToDoubles(pairs2[0].second), {2 * std::exp(1.0), 2 * std::exp(-2.0)}, 1e-12, 1e-12, "2 e^2");
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor w = RandomTensor({3}, DType::kFloat32, 3).set_requires_grad(true);
  EXPECT_TRUE(GradEnabled());
  {
    NoGradGuard guard;
    EXPECT_FALSE(GradEnabled());
    Tensor y = ops::Mul(w, w);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    {
      NoGradGuard nested;
      EXPECT_FALSE(GradEnabled());
    }
    EXPECT_FALSE(GradEnabled()) << "a nested guard restores the outer state, not 'enabled'";
  }
  EXPECT_TRUE(GradEnabled());
  Tensor z = ops::Mul(w, w);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_NE(z.grad_fn(), nullptr);
}

TEST(Autograd, Errors) {
  Tensor i = ops::Zeros({2}, DType::kInt32, Cpu());
  LOOM_EXPECT_THROW_MSG(i.set_requires_grad(true), DTypeError, "[requires_grad] only floating tensors");

  Tensor w = RandomTensor({2}, DType::kFloat32, 4).set_requires_grad(true);
  Tensor y = ops::Mul(w, w);
  LOOM_EXPECT_THROW_MSG(y.set_requires_grad(true), ValueError, "[requires_grad] can only be set on leaf tensors");

  Tensor c = RandomTensor({2}, DType::kFloat32, 5);
  LOOM_EXPECT_THROW_MSG(Backward(ops::Sum(ops::Mul(c, c))), ValueError, "does not require grad");
  LOOM_EXPECT_THROW_MSG(Backward(Tensor()), ValueError, "[backward] loss is undefined");

  Tensor loss = ops::Sum(y);
  EXPECT_EQ(Backward(loss).size(), 1u);
  LOOM_EXPECT_THROW_MSG(Backward(loss), GraphError, "already used by an earlier backward");
}

// Peak bytes of one forward + backward above what was live before it. Gradients are dropped as
// soon as Backward hands them out, so what the step keeps alive is activations and temporaries.
size_t StepPeakBytes(const Mlp& m, const Tensor& x, const Tensor& y, bool save_all) {
  SaveAllScope scope(save_all);
  auto dev = Cpu();
  size_t live_before = dev->stats().live_bytes;
  dev->ResetPeak();
  int grads = 0;
  {
    Tensor loss = ops::SoftmaxCrossEntropy(m.Logits(x), y);
    Backward(loss, [&](const Tensor&, const Tensor&) { ++grads; });
  }
  EXPECT_EQ(grads, int(m.params.size()));
  EXPECT_EQ(dev->stats().live_bytes, live_before) << "the step left tensors alive";
  return dev->stats().peak_bytes - live_before;
}

// docs/design.md invariant 8, Note [Backward keeps only what it needs].
TEST(Autograd, BackwardKeepsOnlyWhatItNeeds) {
  const int64_t kBatch = 64, kIn = 256, kHidden = 512, kClasses = 10;
  Mlp m({kIn, kHidden, kHidden, kClasses}, 10);
  auto [x, y] = Blobs(kIn, kClasses).Batch(kBatch, 5);

  size_t declared = StepPeakBytes(m, x, y, false);
  size_t save_all = StepPeakBytes(m, x, y, true);
  size_t declared_again = StepPeakBytes(m, x, y, false);
  EXPECT_EQ(declared, declared_again) << "the measurement is not repeatable: something else holds tensors";

  // With the declared tensors a layer keeps only relu's output (for relu and the next matmul);
  // saving everything also keeps the matmul output and the add_bias output of each hidden
  // layer. The declared run peaks while backward computes the (512, 512) weight gradient; at
  // that moment save-all still holds layer 1's matmul and add_bias outputs and layer 2's matmul
  // output: three (batch, hidden) float32 activations.
  const size_t activation = size_t(kBatch * kHidden) * sizeof(float);
  const size_t expected_margin = 3 * activation;
  std::cout << "[invariant 8] MLP " << kIn << "-" << kHidden << "-" << kHidden << "-" << kClasses << " batch "
            << kBatch << ": step peak " << declared << " bytes with declared saved tensors, " << save_all
            << " bytes saving all; margin " << (save_all > declared ? save_all - declared : 0) << " bytes, expected "
            << expected_margin << " (3 activations of " << activation << ")" << std::endl;
  RecordProperty("peak_declared_bytes", std::to_string(declared));
  RecordProperty("peak_save_all_bytes", std::to_string(save_all));
  ASSERT_GT(save_all, declared);
  EXPECT_GE(save_all - declared, expected_margin / 2)
      << "saving only the declared tensors should lower the step's peak by about " << expected_margin << " bytes";
}

TEST(Autograd, SmallMlpTrains) {
  const int64_t kBatch = 32, kIn = 64, kClasses = 10;
  Mlp m({kIn, 64, 64, kClasses}, 20);
  Blobs data(kIn, kClasses);
  nn::SGD sgd(0.05, 0.9);
  double first = 0;
  for (uint32_t step = 0; step < 30; ++step) {
    auto [x, y] = data.Batch(kBatch, 100 + step);
    Tensor loss = ops::SoftmaxCrossEntropy(m.Logits(x), y);
    if (step == 0) first = loss.Item();
    sgd.Step(Backward(loss));
  }
  auto [x, y] = data.Batch(kBatch, 999);  // a batch it has not seen
  double after;
  {
    NoGradGuard no_grad;
    after = ops::SoftmaxCrossEntropy(m.Logits(x), y).Item();
  }
  std::cout << "[mlp trains] loss " << first << " at step 1, " << after << " after 30 SGD steps" << std::endl;
  EXPECT_GT(first, 1.0) << "an untrained 10-class model should start well above 0";
  EXPECT_LT(after, 0.5 * first) << "loss went from " << first << " to " << after << " in 30 SGD steps";
}

// A running loss summed over many steps, or an RNN unrolled over a long sequence, leaves a history
// as deep as the number of ops. Backward walks it with a queue and the nodes free their chain
// with a worklist (Note [Freeing a long history] in core/autograd.cc); freeing it used to recurse
// once per node and died of SIGSEGV.
TEST(Autograd, HundredThousandOpChainBackwardAndRelease) {
  constexpr int kOps = 100000;
  std::vector<double> grad, value;
  RunOnSmallStack([&] {
    Tensor w = FromDoubles({0.5}, {1}, DType::kFloat64);
    w.set_requires_grad(true);
    {
      // An RNN-like unroll: h = h * 1 + w, so dh/dw = kOps.
      Tensor h = w, one = FromDoubles({1.0}, {1}, DType::kFloat64);
      for (int i = 0; i < kOps; ++i) h = ops::Add(ops::Mul(h, one), w);
      auto grads = Backward(ops::Sum(h));
      if (grads.size() == 1) grad = ToDoubles(grads[0].second);
    }
    // A chain dropped without a backward: only the destructors run.
    Tensor h = w;
    for (int i = 0; i < kOps; ++i) h = ops::AddScalar(h, 1.0);
    value = ToDoubles(h);
  });
  EXPECT_EQ(grad, std::vector<double>{kOps + 1.0});
  EXPECT_EQ(value, std::vector<double>{0.5 + kOps});
}

}  // namespace
}  // namespace test
}  // namespace loom
