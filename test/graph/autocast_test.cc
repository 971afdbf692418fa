// Note [Precision policy] (core/autocast.h): float32 matrix products computed from bfloat16 or
// float16 operands, eagerly inside an AutocastScope and in graphs (captured in the scope, or
// lowered by the pass autocast_bf16 / autocast_fp16), with graph == eager bitwise and the
// weights' master copies float32.
#include <gtest/gtest.h>

#include <map>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/cnn.h"
#include "common/harness.h"
#include "common/mlp.h"
#include "core/autocast.h"
#include "core/ops_cnn.h"
#include "graph/graph.h"
#include "nn/layer.h"
#include "nn/model.h"
#include "nn/models.h"

LOOM_OP_KIND(cast);
LOOM_OP_KIND(conv2d);
LOOM_OP_KIND(conv2d_grad_input);
LOOM_OP_KIND(conv2d_grad_weight);
LOOM_OP_KIND(matmul);
LOOM_OP_KIND(dense_bias_act);
LOOM_OP_KIND(bias_act_grad);

namespace loom {
namespace test {
namespace {

const std::vector<int64_t> kDims = {24, 32, 16, 5};

std::vector<std::vector<float>> Values(const Mlp& m) {
  std::vector<std::vector<float>> v;
  for (const Tensor& p : m.params) v.push_back(p.ToVector<float>());
  return v;
}

struct Batch {
  Tensor x, y;
};
Batch MakeBatch(const std::shared_ptr<Device>& dev) {
  return {RandomTensor({8, kDims[0]}, DType::kFloat32, 21, -1, 1, dev),
          ops::FromVector(std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2}, {8}, dev)};
}

TEST(Precision, NamesAndTypedErrors) {
  EXPECT_EQ(PrecisionFromName("bf16"), Precision::kBFloat16);
  EXPECT_EQ(PrecisionFromName("bfloat16"), Precision::kBFloat16);
  EXPECT_EQ(PrecisionFromName("fp32"), Precision::kFloat32);
  EXPECT_EQ(PrecisionFromName("fp16"), Precision::kFloat16);
  EXPECT_EQ(PrecisionFromName("float16"), Precision::kFloat16);
  EXPECT_STREQ(Name(Precision::kBFloat16), "bf16");
  EXPECT_STREQ(Name(Precision::kFloat16), "fp16");
  EXPECT_EQ(OperandType(Precision::kFloat16), DType::kFloat16);
  EXPECT_EQ(OperandType(Precision::kBFloat16), DType::kBFloat16);
  LOOM_EXPECT_THROW_MSG(PrecisionFromName("fp8"), ValueError, "[precision] 'fp8': expected 'fp32'");
  EXPECT_EQ(AutocastPrecision(), Precision::kFloat32);
  {
    AutocastScope s(Precision::kBFloat16);
    EXPECT_EQ(AutocastPrecision(), Precision::kBFloat16);
  }
  EXPECT_EQ(AutocastPrecision(), Precision::kFloat32);
}

// Eagerly, a product in the scope is the product of the operands rounded to bfloat16, computed
// and kept in float32: bit for bit what the explicit casts and matmul give.
TEST(Precision, AnEagerProductInTheScopeIsTheProductOfBfloat16Operands) {
  auto dev = CpuDevice();
  Tensor a = RandomTensor({9, 70}, DType::kFloat32, 1, -1, 1, dev), b = RandomTensor({70, 11}, DType::kFloat32, 2, -1, 1, dev);
  Tensor lowered;
  {
    AutocastScope s(Precision::kBFloat16);
    lowered = ops::MatMul(a, b);
  }
  EXPECT_EQ(lowered.dtype(), DType::kFloat32);
  Tensor explicit_ = Call1(op_kind::matmul, {ops::Cast(a, DType::kBFloat16), ops::Cast(b, DType::kBFloat16)},
                           Attrs{{"out_dtype", int64_t(DType::kFloat32)}});
  const std::vector<float> u = lowered.ToVector<float>(), v = explicit_.ToVector<float>(),
                           f = ops::MatMul(a, b).ToVector<float>();
  ASSERT_EQ(u.size(), v.size());
  EXPECT_EQ(std::memcmp(u.data(), v.data(), u.size() * sizeof(float)), 0);
  double apart = 0;
  for (size_t i = 0; i < u.size(); ++i) apart = std::max(apart, double(std::abs(u[i] - f[i])));
  EXPECT_GT(apart, 1e-4) << "the scope did not lower the product";
  EXPECT_LT(apart, 0.2);  // sums of 70 products of bfloat16 roundings of numbers in [-1, 1]
  // A bfloat16 product is not differentiated: the policy lowers below autograd.
  Tensor wa = ops::Cast(a, DType::kBFloat16).Detach(), wb = ops::Cast(b, DType::kBFloat16).Detach();
  EXPECT_THROW(Call1(op_kind::matmul, {wa, wb}, Attrs{{"out_dtype", int64_t(DType::kFloat64)}}), DTypeError);
  EXPECT_THROW(Call1(op_kind::matmul, {wa, wb}), DTypeError);  // out_dtype is required
}

enum class How { kEagerInScope, kCapturedInScope, kCapturedThenPass };

// Five steps of the MLP from the same weights, trained as `how` says at precision `p`; the final
// weights.
std::vector<std::vector<float>> Train(How how, GraphStats* stats = nullptr, Precision p = Precision::kBFloat16) {
  auto dev = CpuDevice();
  Mlp m(kDims, 7, dev);
  nn::SGD opt(0.05, 0.9);
  Batch b = MakeBatch(dev);
  if (how == How::kEagerInScope) {
    AutocastScope s(p);
    for (int i = 0; i < 5; ++i) m.Step(b.x, b.y, opt);
    return Values(m);
  }
  GraphOptions o;
  if (how == How::kCapturedThenPass) o.passes.Set(p == Precision::kBFloat16 ? "autocast_bf16" : "autocast_fp16", true);
  CapturedGraph g(dev, "autocast", o);
  {
    std::unique_ptr<AutocastScope> s;
    if (how == How::kCapturedInScope) s = std::make_unique<AutocastScope>(p);
    g.Capture([&] { m.Step(b.x, b.y, opt); });
  }
  for (int i = 0; i < 5; ++i) g.Replay();
  if (stats) *stats = g.graph().stats();
  return Values(m);
}

TEST(Precision, GraphsEqualEagerBitwiseWhetherCapturedInTheScopeOrLoweredByThePass) {
  GraphStats passed;
  const auto eager = Train(How::kEagerInScope), in_scope = Train(How::kCapturedInScope),
             by_pass = Train(How::kCapturedThenPass, &passed);
  for (const auto* other : {&in_scope, &by_pass})
    for (size_t i = 0; i < eager.size(); ++i) {
      ASSERT_EQ(eager[i].size(), (*other)[i].size());
      EXPECT_EQ(std::memcmp(eager[i].data(), (*other)[i].data(), eager[i].size() * sizeof(float)), 0) << "param " << i;
    }
  // Forward, input-gradient and weight-gradient products of 3 layers, less the first layer's
  // input gradient (x needs none): 8; each weight cast once for its forward product and its
  // input gradient.
  EXPECT_EQ(passed.counters.Get("lowered_products"), 8);
  EXPECT_LT(passed.counters.Get("bf16_casts"), 2 * 8);
  // Both hidden ReLUs' gradients read their bfloat16 copies (Note [ReLU masks from the bfloat16 copy]).
  EXPECT_EQ(passed.counters.Get("bf16_relu_masks"), 2);
  // And the float32 run differs: the policy changed the arithmetic.
  auto dev = CpuDevice();
  Mlp m(kDims, 7, dev);
  nn::SGD opt(0.05, 0.9);
  Batch b = MakeBatch(dev);
  for (int i = 0; i < 5; ++i) m.Step(b.x, b.y, opt);
  const auto f32 = Values(m);
  double apart = 0;
  for (size_t i = 0; i < f32.size(); ++i)
    for (size_t j = 0; j < f32[i].size(); ++j) apart = std::max(apart, double(std::abs(f32[i][j] - eager[i][j])));
  EXPECT_GT(apart, 0);
  EXPECT_LT(apart, 0.05);
}

// fp16: the same policy with float16 operands (oneDNN's f16 matmul, or float16 widened to float32
// where the CPU has no AVX512-FP16), graph == eager bitwise; closer to float32 than bf16 is for
// these values (10 mantissa bits against 7).
TEST(Precision, Fp16GraphsEqualEagerBitwiseAndTrackFloat32CloserThanBf16) {
  GraphStats passed;
  const auto eager = Train(How::kEagerInScope, nullptr, Precision::kFloat16),
             in_scope = Train(How::kCapturedInScope, nullptr, Precision::kFloat16),
             by_pass = Train(How::kCapturedThenPass, &passed, Precision::kFloat16);
  for (const auto* other : {&in_scope, &by_pass})
    for (size_t i = 0; i < eager.size(); ++i) {
      ASSERT_EQ(eager[i].size(), (*other)[i].size());
      EXPECT_EQ(std::memcmp(eager[i].data(), (*other)[i].data(), eager[i].size() * sizeof(float)), 0) << "param " << i;
    }
  EXPECT_EQ(passed.counters.Get("fp16_lowered_products"), 8);
  EXPECT_GT(passed.counters.Get("fp16_casts"), 0);
  EXPECT_EQ(passed.counters.Get("lowered_products"), 0);  // the bf16 pass stayed off
  EXPECT_EQ(passed.counters.Get("bf16_relu_masks"), 0);   // float16 copies would change masks
  const auto bf16 = Train(How::kEagerInScope);
  auto dev = CpuDevice();
  Mlp m(kDims, 7, dev);
  nn::SGD opt(0.05, 0.9);
  Batch b = MakeBatch(dev);
  for (int i = 0; i < 5; ++i) m.Step(b.x, b.y, opt);
  const auto f32 = Values(m);
  double fp16_gap = 0, bf16_gap = 0;
  for (size_t i = 0; i < f32.size(); ++i)
    for (size_t j = 0; j < f32[i].size(); ++j) {
      fp16_gap = std::max(fp16_gap, double(std::abs(f32[i][j] - eager[i][j])));
      bf16_gap = std::max(bf16_gap, double(std::abs(f32[i][j] - bf16[i][j])));
    }
  EXPECT_GT(fp16_gap, 0);
  EXPECT_LT(fp16_gap, bf16_gap);
}

// Note [ReLU masks from the bfloat16 copy]: with wide hidden layers the bf16 step's ReLU
// gradients read the forward's bfloat16 copies, the float32 activations die in the forward, and
// the planned arena shrinks by at least their bytes; the trained weights are bitwise those of the
// step without the pass, and of eager execution in the scope.
struct MaskRun {
  std::vector<std::vector<float>> weights;
  GraphStats stats;
  int half_masks = 0, float_masks = 0;  // bias_act_grad(relu) records reading a bfloat16 / float32 y
};
const std::vector<int64_t> kWide = {24, 256, 256, 5};
constexpr int64_t kWideBatch = 64;
MaskRun TrainWide(bool graph, bool masks) {
  auto dev = CpuDevice();
  Mlp m(kWide, 11, dev);
  nn::SGD opt(0.05, 0.9);
  Tensor x = RandomTensor({kWideBatch, kWide[0]}, DType::kFloat32, 23, -1, 1, dev);
  std::vector<int32_t> labels;
  for (int64_t i = 0; i < kWideBatch; ++i) labels.push_back(int32_t((i * 7) % kWide.back()));
  Tensor y = ops::FromVector(labels, {kWideBatch}, dev);
  MaskRun r;
  if (!graph) {
    AutocastScope s(Precision::kBFloat16);
    for (int i = 0; i < 3; ++i) m.Step(x, y, opt);
    r.weights = Values(m);
    return r;
  }
  GraphOptions o;
  o.passes.Set("autocast_bf16", true);
  if (!masks) o.passes.Set("bf16_relu_mask", false);
  CapturedGraph g(dev, "masks", o);
  g.Capture([&] { m.Step(x, y, opt); });
  for (int i = 0; i < 3; ++i) g.Replay();
  r.weights = Values(m);
  r.stats = g.graph().stats();
  for (const OpRecord& op : g.graph().ops().ops)
    if (op.def == &op_kind::bias_act_grad && op.attrs.Int("act", 0) == 1)
      (op.inputs[0].dtype() == DType::kBFloat16 ? r.half_masks : r.float_masks) += 1;
  return r;
}

TEST(Precision, Bf16ReluMasksReadTheBfloat16CopySoTheArenaShrinksByTheFloat32Activations) {
  const MaskRun on = TrainWide(true, true), off = TrainWide(true, false), eager = TrainWide(false, true);
  EXPECT_EQ(on.stats.counters.Get("bf16_relu_masks"), 2);
  EXPECT_EQ(off.stats.counters.Get("bf16_relu_masks"), 0);
  EXPECT_EQ(on.half_masks, 2);
  EXPECT_EQ(on.float_masks, 0);
  EXPECT_EQ(off.float_masks, 2);
  ASSERT_EQ(on.weights.size(), off.weights.size());
  for (size_t i = 0; i < on.weights.size(); ++i) {
    EXPECT_EQ(std::memcmp(on.weights[i].data(), off.weights[i].data(), on.weights[i].size() * sizeof(float)), 0)
        << "param " << i;
    EXPECT_EQ(std::memcmp(on.weights[i].data(), eager.weights[i].data(), on.weights[i].size() * sizeof(float)), 0)
        << "param " << i;
  }
  // The float32 outputs of the two hidden ReLUs, y1 and y2 (64, 256), now die at their
  // casts in the forward. The step's peak is in the second layer's backward, where dy1 is made
  // while y1 waits for its mask and y2 has had its own: that peak, and the arena packed around it,
  // shrink by y1's float32 bytes. A y1 kept alive (no rewrite, or the wrong one) keeps both.
  const size_t y1 = size_t(kWideBatch * kWide[1]) * sizeof(float);
  EXPECT_GE(off.stats.lower_bound_bytes, on.stats.lower_bound_bytes + y1);
  EXPECT_GE(off.stats.arena_bytes, on.stats.arena_bytes + y1)
      << "arena " << off.stats.arena_bytes << " -> " << on.stats.arena_bytes;
}

// The pass reads a copy only while neither y nor the copy was written after the cast.
TEST(Precision, AReluMaskReadsTheBfloat16CopyOnlyWhileBothAreUnwritten) {
  enum class Write { kNone, kY, kCopy };
  for (Write w : {Write::kNone, Write::kY, Write::kCopy}) {
    auto dev = CpuDevice();
    Tensor x = RandomTensor({6, 10}, DType::kFloat32, 41, -1, 1, dev), dy = RandomTensor({6, 10}, DType::kFloat32, 42, -1, 1, dev);
    x.block()->set_persistent(true);
    dy.block()->set_persistent(true);
    GraphOptions o;
    o.passes.Set("autocast_bf16", true);
    CapturedGraph g(dev, "mask", o);
    std::vector<Tensor> out;
    g.Capture([&] {
      Tensor y = ops::Relu(x), c = ops::Cast(y, DType::kBFloat16);
      if (w == Write::kY) ops::CopyInto(y, dy);
      if (w == Write::kCopy) ops::CopyInto(c, ops::Cast(dy, DType::kBFloat16));
      out = Call(op_kind::bias_act_grad, {y, dy}, Attrs{{"act", int64_t(1)}});
      out.push_back(c);
    });
    g.Replay();
    DType read = DType::kFloat64;
    for (const OpRecord& op : g.graph().ops().ops)
      if (op.def == &op_kind::bias_act_grad) read = op.inputs[0].dtype();
    EXPECT_EQ(g.graph().stats().counters.Get("bf16_relu_masks"), w == Write::kNone ? 1 : 0) << int(w);
    EXPECT_EQ(read, w == Write::kNone ? DType::kBFloat16 : DType::kFloat32) << int(w);
  }
}

// What the rewrite rests on: bias_act_grad(relu) from the bfloat16 copy of y gives dz and db
// bitwise those from y itself for every float32 y but positive subnormals at or below 2^-134,
// NaN and the infinities included; a float16 copy changes the mask of normal float32 values.
TEST(Precision, AReluMaskFromTheBfloat16CopyIsTheFloat32OnesBitForBit) {
  auto dev = CpuDevice();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> kept = {0.0f, -0.0f, 1.0f, 3e38f, inf, nan, 0x1p-126f, 0x1p-133f, 1e-30f, 0.5f, 2.0f, 7.0f};
  std::vector<float> dy;
  for (size_t i = 0; i < kept.size(); ++i) dy.push_back(0.25f + float(i));
  const Attrs relu{{"act", int64_t(1)}};
  auto masks = [&](const std::vector<float>& v, DType copy) {
    Tensor y = ops::FromVector(v, {2, int64_t(v.size()) / 2}, dev), d = ops::FromVector(dy, {2, int64_t(v.size()) / 2}, dev);
    std::vector<Tensor> from_f32 = Call(op_kind::bias_act_grad, {y, d}, relu);
    std::vector<Tensor> from_copy = Call(op_kind::bias_act_grad, {ops::Cast(y, copy), d}, relu);
    EXPECT_EQ(from_copy[0].dtype(), DType::kFloat32);
    EXPECT_EQ(from_copy[1].dtype(), DType::kFloat32);
    bool same = true;
    for (int k = 0; k < 2; ++k) {
      const std::vector<float> a = from_f32[size_t(k)].ToVector<float>(), b = from_copy[size_t(k)].ToVector<float>();
      same &= std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    }
    return same;
  };
  EXPECT_TRUE(masks(kept, DType::kBFloat16));
  std::vector<float> deep = kept;
  deep[3] = 0x1p-140f;  // a positive subnormal that bfloat16 rounds to zero: the stated exception
  EXPECT_FALSE(masks(deep, DType::kBFloat16));
  std::vector<float> small = kept;
  small[3] = 1e-8f;  // a normal float32 below float16's range: why fp16 keeps the float32 masks
  EXPECT_TRUE(masks(small, DType::kBFloat16));
  EXPECT_FALSE(masks(small, DType::kFloat16));
  // The 16-bit y must come with a float32 dy.
  Tensor yh = ops::Cast(ops::FromVector(kept, {12}, dev), DType::kBFloat16);
  LOOM_EXPECT_THROW_MSG(Call(op_kind::bias_act_grad, {yh, ops::Cast(yh, DType::kFloat64)}, relu), DTypeError,
                        "[bias_act_grad] a bfloat16 y needs a float32 dy, got float64");
}

// An eager product at fp16 is the product of the operands rounded to float16, kept in float32.
TEST(Precision, AnEagerFp16ProductIsTheProductOfFloat16Operands) {
  auto dev = CpuDevice();
  Tensor a = RandomTensor({9, 70}, DType::kFloat32, 1, -1, 1, dev), b = RandomTensor({70, 11}, DType::kFloat32, 2, -1, 1, dev);
  Tensor lowered;
  {
    AutocastScope s(Precision::kFloat16);
    lowered = ops::MatMul(a, b);
  }
  EXPECT_EQ(lowered.dtype(), DType::kFloat32);
  Tensor explicit_ = Call1(op_kind::matmul, {ops::Cast(a, DType::kFloat16), ops::Cast(b, DType::kFloat16)},
                           Attrs{{"out_dtype", int64_t(DType::kFloat32)}});
  const std::vector<float> u = lowered.ToVector<float>(), v = explicit_.ToVector<float>();
  ASSERT_EQ(u.size(), v.size());
  EXPECT_EQ(std::memcmp(u.data(), v.data(), u.size() * sizeof(float)), 0);
  Tensor wa = ops::Cast(a, DType::kFloat16).Detach(), wb = ops::Cast(b, DType::kFloat16).Detach();
  LOOM_EXPECT_THROW_MSG(Call1(op_kind::matmul, {wa, wb}), DTypeError, "[matmul] float16 operands need out_dtype float32");
  // A float16 product is not differentiated: the policy lowers below autograd.
  Tensor ra = ops::Cast(a, DType::kFloat16).Detach();
  ra.set_requires_grad(true);
  Tensor p = Call1(op_kind::matmul, {ra, wb}, Attrs{{"out_dtype", int64_t(DType::kFloat32)}});
  LOOM_EXPECT_THROW_MSG(Backward(ops::Sum(p)), DTypeError, "a product of float16 operands is not differentiable");
}

// The pass leaves the lowered products unfused (a fused dense_bias_act reads float32 operands).
TEST(Precision, TheFusionPassesLeaveLoweredProductsAlone) {
  auto dev = CpuDevice();
  Mlp m(kDims, 7, dev);
  nn::SGD opt(0.05, 0.9);
  Batch b = MakeBatch(dev);
  GraphOptions o;
  o.passes.Set("autocast_bf16", true);
  CapturedGraph g(dev, "autocast", o);
  g.Capture([&] { m.Step(b.x, b.y, opt); });
  int casts = 0, products = 0, fused = 0;
  for (const OpRecord& op : g.graph().ops().ops) {
    casts += op.def == &op_kind::cast;
    fused += op.def == &op_kind::dense_bias_act;
    if (op.def == &op_kind::matmul) {
      ++products;
      EXPECT_EQ(op.inputs[0].dtype(), DType::kBFloat16);
    }
  }
  EXPECT_EQ(products, 8);
  EXPECT_EQ(fused, 0);
  EXPECT_GT(casts, 0);
  // Masters stay float32.
  for (const Tensor& p : m.params) EXPECT_EQ(p.dtype(), DType::kFloat32);
}

// nn::Model's precision: eager steps in the scope, graph steps through the pass; the same bits.
std::vector<std::vector<float>> TrainModel(bool graph, Precision p) {
  auto dev = CpuDevice();
  dev->SetRandSeed(5);
  auto net = std::make_shared<nn::Sequential>();
  net->Add(std::make_shared<nn::Linear>(24, 32));
  net->Add(nn::ReLU());
  net->Add(std::make_shared<nn::Linear>(32, 5));
  nn::Model m(net, std::make_shared<nn::SGD>(0.05, 0.9));
  m.set_precision(p);
  Batch b = MakeBatch(dev);
  m.Compile({b.x}, true, graph);
  for (int i = 0; i < 4; ++i) m.TrainOneBatch(b.x, b.y);
  std::vector<std::vector<float>> v;
  for (const auto& kv : m.Params()) v.push_back(kv.second.ToVector<float>());
  if (graph && p == Precision::kBFloat16) {
    EXPECT_EQ(m.train_graph()->stats().counters.Get("lowered_products"), 5);  // 2 forward, 1 + 2 backward
    EXPECT_EQ(m.train_graph()->stats().counters.Get("bf16_relu_masks"), 1);  // the ReLU between them
  }
  return v;
}

// Note [ReLU masks from the bfloat16 copy] for relu_grad: in ResNet-18 at bf16 every ReLU whose
// output a convolution reads (the stem's, with the CIFAR stem that has no pooling, the first of
// each block's two, and each block's output but the last: 1 + 8 + 7) takes its mask from the
// bfloat16 copy the convolution reads, the float32 activations die in the forward, and the arena shrinks; the
// weights keep their bits.
TEST(Precision, Bf16ReluGradientsAfterBatchNormReadTheBfloat16Copy) {
  GraphOptions off;
  off.passes.Set("bf16_relu_mask", false);
  const CnnRun on = TrainSmallCnn(CpuDevice(), true, Precision::kBFloat16, {}, true);
  const CnnRun without = TrainSmallCnn(CpuDevice(), true, Precision::kBFloat16, off, true);
  EXPECT_EQ(on.stats.counters.Get("bf16_relu_masks"), 16);
  EXPECT_EQ(without.stats.counters.Get("bf16_relu_masks"), 0);
  EXPECT_TRUE(SameBits(on.params, without.params));
  EXPECT_LT(on.stats.arena_bytes, without.stats.arena_bytes);
  EXPECT_LT(on.stats.lower_bound_bytes, without.stats.lower_bound_bytes);
}

// Note [Convolution outputs kept in bfloat16]: in ResNet-18 at bf16 every convolution is read by
// batch norm alone (the stem, two a block, three 1x1 shortcuts: 20), and keeps its result in
// bfloat16 for it; the weights keep their bits, against the graph without the pass and against
// eager steps, and the arena shrinks. The small CNN's convolutions too (2). A bf16 convolution's
// bfloat16 result is the cast of its float32 one, bit for bit.
TEST(Precision, Bf16ConvolutionOutputsKeptInBfloat16ForBatchNorm) {
  GraphOptions off;
  off.passes.Set("bf16_conv_outputs", false);
  const CnnRun on = TrainSmallCnn(CpuDevice(), true, Precision::kBFloat16, {}, true);
  const CnnRun without = TrainSmallCnn(CpuDevice(), true, Precision::kBFloat16, off, true);
  const CnnRun eager = TrainSmallCnn(CpuDevice(), false, Precision::kBFloat16, {}, true);
  EXPECT_EQ(on.stats.counters.Get("bf16_conv_outputs"), 20);
  EXPECT_EQ(without.stats.counters.Get("bf16_conv_outputs"), 0);
  EXPECT_TRUE(SameBits(on.params, without.params));
  EXPECT_TRUE(SameBits(on.params, eager.params));
  EXPECT_LT(on.stats.arena_bytes, without.stats.arena_bytes);
  EXPECT_EQ(TrainSmallCnn(CpuDevice(), true, Precision::kBFloat16).stats.counters.Get("bf16_conv_outputs"), 2);

  auto dev = CpuDevice();
  const Attrs a{{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{1, 1}},
                {"dilation", std::vector<int64_t>{1, 1}}, {"groups", int64_t(1)}};
  const Tensor x = ops::Cast(RandomTensor({2, 8, 9, 9}, DType::kFloat32, 3, -1, 1, dev), DType::kBFloat16);
  const Tensor w = ops::Cast(RandomTensor({16, 8, 3, 3}, DType::kFloat32, 4, -1, 1, dev), DType::kBFloat16);
  const Tensor wide = Call1(op_kind::conv2d, {x, w}, Attrs(a).Set("out_dtype", int64_t(DType::kFloat32)));
  const Tensor low = Call1(op_kind::conv2d, {x, w}, Attrs(a).Set("out_dtype", int64_t(DType::kBFloat16)));
  EXPECT_EQ(low.dtype(), DType::kBFloat16);
  EXPECT_TRUE(HostBytes(low) == HostBytes(ops::Cast(wide, DType::kBFloat16)));
  EXPECT_TRUE(HostBytes(ops::Cast(low, DType::kFloat32)) == HostBytes(wide)) << "the float32 result is a bfloat16";
  // Batch norm from the bfloat16 x gives the bits it gives from the widened one.
  const Tensor g = RandomTensor({16}, DType::kFloat32, 5, 0.5, 1.5, dev), b = RandomTensor({16}, DType::kFloat32, 6, -1, 1, dev);
  const Attrs bn{{"momentum", 0.1}, {"eps", 1e-5}};
  auto stats = [&] { return std::make_pair(ops::Zeros({16}, DType::kFloat32, dev), ops::Ones({16}, DType::kFloat32, dev)); };
  auto [m0, v0] = stats();
  auto [m1, v1] = stats();
  const std::vector<Tensor> from_wide = Call("batch_norm_train", {wide, g, b, m0, v0}, bn);
  const std::vector<Tensor> from_low = Call("batch_norm_train", {low, g, b, m1, v1}, bn);
  for (size_t i = 0; i < from_wide.size(); ++i)
    EXPECT_TRUE(HostBytes(from_wide[i]) == HostBytes(from_low[i])) << "batch_norm_train output " << i;
  const Tensor dy = RandomTensor(wide.shape(), DType::kFloat32, 7, -1, 1, dev);
  const Attrs bg{{"eps", 1e-5}, {"training", int64_t(1)}};
  const std::vector<Tensor> gw = Call("batch_norm_grad", {wide, g, from_wide[1], from_wide[2], dy}, bg);
  const std::vector<Tensor> gl = Call("batch_norm_grad", {low, g, from_wide[1], from_wide[2], dy}, bg);
  for (size_t i = 0; i < gw.size(); ++i) EXPECT_TRUE(HostBytes(gw[i]) == HostBytes(gl[i])) << "batch_norm_grad output " << i;
  EXPECT_EQ(gl[0].dtype(), DType::kFloat32);
  LOOM_EXPECT_THROW_MSG(Call("batch_norm_train", {low, ops::Cast(g, DType::kBFloat16), b, m1, v1}, bn), DTypeError,
                        "a bfloat16 input takes float32 statistics");
}

// At bf16 the convolutions and their gradients are lowered too, where the device has bf16
// convolutions (the CPU: oneDNN's): the small CNN (common/cnn.h) trains to the same bits eagerly
// and in a graph with every default pass on (the layout passes leave the bf16 convolutions
// plain), and differently from float32.
TEST(Precision, Bf16LowersConvolutionsTooAndTheirGraphsEqualEagerBitwise) {
  const CnnRun g = TrainSmallCnn(CpuDevice(), true, Precision::kBFloat16);
  const auto eager = TrainSmallCnn(CpuDevice(), false, Precision::kBFloat16).params, graph = g.params;
  const auto f32 = TrainSmallCnn(CpuDevice(), true, Precision::kFloat32).params;
  const GraphStats& stats = g.stats;
  const std::map<std::string, int>& convs = g.bf16_convs;
  bool differs = false;
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_EQ(std::memcmp(eager[i].data(), graph[i].data(), eager[i].size() * sizeof(float)), 0) << "param " << i;
    differs |= std::memcmp(eager[i].data(), f32[i].data(), eager[i].size() * sizeof(float)) != 0;
  }
  EXPECT_TRUE(differs);
  // Both forward convolutions, both weight gradients, the second one's input gradient (the
  // first has no input to differentiate), all from bfloat16 operands with float32 results.
  EXPECT_EQ(convs, (std::map<std::string, int>{{"conv2d", 2}, {"conv2d_grad_input", 1}, {"conv2d_grad_weight", 2}}));
  EXPECT_EQ(stats.counters.Get("lowered_products"), 5 + 3);  // and the linear layer's forward, input and weight gradients
  // In the scope, an eager convolution is the one of the operands rounded to bfloat16.
  auto dev = CpuDevice();
  Tensor xx = RandomTensor({2, 3, 9, 9}, DType::kFloat32, 3, -1, 1, dev), w = RandomTensor({8, 3, 3, 3}, DType::kFloat32, 4, -1, 1, dev);
  Tensor b = RandomTensor({8}, DType::kFloat32, 5, -1, 1, dev);
  ops::Conv2dOptions o;
  o.padding = {1, 1};
  Tensor lowered;
  {
    AutocastScope s(Precision::kBFloat16);
    lowered = ops::Conv2d(xx, w, b, o);
  }
  const Attrs a{{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{1, 1}},
                {"dilation", std::vector<int64_t>{1, 1}}, {"groups", int64_t(1)}, {"out_dtype", int64_t(DType::kFloat32)}};
  Tensor explicit_ = Call1(op_kind::conv2d, {ops::Cast(xx, DType::kBFloat16), ops::Cast(w, DType::kBFloat16), b}, a);
  const std::vector<float> u = lowered.ToVector<float>(), v = explicit_.ToVector<float>(),
                           f = ops::Conv2d(xx, w, b, o).ToVector<float>();
  ASSERT_EQ(u.size(), v.size());
  EXPECT_EQ(std::memcmp(u.data(), v.data(), u.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(u.data(), f.data(), u.size() * sizeof(float)), 0);
  // A bfloat16 convolution is not differentiated, and needs its out_dtype.
  Tensor rx = ops::Cast(xx, DType::kBFloat16).Detach();
  rx.set_requires_grad(true);
  Tensor yb = Call1(op_kind::conv2d, {rx, ops::Cast(w, DType::kBFloat16)}, a);
  LOOM_EXPECT_THROW_MSG(Backward(ops::Sum(yb)), DTypeError, "[conv2d] a convolution of bfloat16 operands");
  const Attrs no_out{{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{1, 1}},
                     {"dilation", std::vector<int64_t>{1, 1}}, {"groups", int64_t(1)}};
  LOOM_EXPECT_THROW_MSG(Call1(op_kind::conv2d, {rx.Detach(), ops::Cast(w, DType::kBFloat16)}, no_out), DTypeError,
                        "[conv2d] bfloat16 operands need out_dtype float32");
  // So do the gradients; in the scope they are the ones of the operands rounded to bfloat16.
  Tensor dy = RandomTensor({2, 8, 9, 9}, DType::kFloat32, 6, -1, 1, dev);
  const Attrs gw = Attrs(no_out).Set("w_shape", w.shape()), gx = Attrs(no_out).Set("x_shape", xx.shape());
  const Attrs gw16 = Attrs(gw).Set("out_dtype", int64_t(DType::kFloat32)),
              gx16 = Attrs(gx).Set("out_dtype", int64_t(DType::kFloat32));
  Tensor dw_low, dx_low;
  {
    AutocastScope s(Precision::kBFloat16);
    dw_low = Call1(op_kind::conv2d_grad_weight, {xx, dy}, gw);
    dx_low = Call1(op_kind::conv2d_grad_input, {w, dy}, gx);
  }
  const Tensor dyb = ops::Cast(dy, DType::kBFloat16);
  const Tensor dw_explicit = Call1(op_kind::conv2d_grad_weight, {ops::Cast(xx, DType::kBFloat16), dyb}, gw16);
  const Tensor dx_explicit = Call1(op_kind::conv2d_grad_input, {ops::Cast(w, DType::kBFloat16), dyb}, gx16);
  EXPECT_EQ(dw_low.dtype(), DType::kFloat32);
  EXPECT_EQ(dw_low.ToVector<float>(), dw_explicit.ToVector<float>());
  EXPECT_EQ(dx_low.ToVector<float>(), dx_explicit.ToVector<float>());
  EXPECT_NE(dw_low.ToVector<float>(), Call1(op_kind::conv2d_grad_weight, {xx, dy}, gw).ToVector<float>());
  LOOM_EXPECT_THROW_MSG(Call1(op_kind::conv2d_grad_weight, {ops::Cast(xx, DType::kBFloat16), dyb}, gw), DTypeError,
                        "[conv2d_grad_weight] bfloat16 operands need out_dtype float32");
  LOOM_EXPECT_THROW_MSG(Call1(op_kind::conv2d_grad_input, {ops::Cast(w, DType::kBFloat16), dy}, gx16), DTypeError,
                        "[conv2d_grad_input]");
}

TEST(Precision, AModelsPrecisionGivesTheSameBitsEagerAndInAGraph) {
  const auto eager = TrainModel(false, Precision::kBFloat16), graph = TrainModel(true, Precision::kBFloat16);
  const auto f32 = TrainModel(true, Precision::kFloat32);
  bool differs = false;
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_EQ(std::memcmp(eager[i].data(), graph[i].data(), eager[i].size() * sizeof(float)), 0) << "param " << i;
    differs |= std::memcmp(eager[i].data(), f32[i].data(), eager[i].size() * sizeof(float)) != 0;
  }
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace test
}  // namespace loom
