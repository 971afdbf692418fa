// Note [Activation layouts] (graph/layouts.cc): in a conv-bn-relu net the pass keeps every
// activation and activation gradient between the first convolution and the global pooling in
// oneDNN's blocked layout (through batch norm, relu, relu_grad), replay stays bitwise equal to
// eager (parameters, running statistics, losses), the plan does not grow, and a block that
// another op reads or the user holds stays NCHW with the region the element-wise ops tie it to.
// With max pooling after each relu (the small CNN) the regions extend through the pooling.
// The blocked kernels on their own: each is bitwise its NCHW kernel on the same values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/fake_cuda_device.h"
#include "common/harness.h"
#include "common/conv_params.h"
#include "common/mlp.h"
#include "core/backend_library.h"
#include "core/ops_cnn.h"
#include "device/cpu/kernels/conv_dnnl.h"
#include "graph/graph.h"

LOOM_OP_KIND(conv2d);
LOOM_OP_KIND(conv2d_grad_input);
LOOM_OP_KIND(conv2d_grad_weight);
LOOM_OP_KIND(batch_norm_train);
LOOM_OP_KIND(batch_norm_grad);
LOOM_OP_KIND(max_pool2d);
LOOM_OP_KIND(max_pool2d_grad);

namespace loom {
namespace test {
namespace {

constexpr int kSteps = 3;

// How the first convolution's output is used besides batch norm.
enum class Conv0 { kPlain, kReadByAnOp, kHeld };
// What follows each conv-bn-relu: nothing, then a global average pool (a ResNet's trunk); or a
// max pooling each, then a flatten (the small CNN: the first pooling 3x3 stride 2 padding 1, as
// in a ResNet stem, the second 2x2).
enum class Pooling { kGlobalAverage, kMax };

// conv(3->16) -> bn -> relu -> conv(16->32) -> bn -> relu -> global average pool -> linear, or
// conv(3->16) -> bn -> relu -> max pool -> conv(16->32) -> bn -> relu -> max pool -> linear.
struct Net {
  Pooling pooling;
  std::vector<Tensor> p;      // trained: w0, g0, b0, w1, g1, b1, fc, fc bias
  std::vector<Tensor> stats;  // running mean and variance of both batch norms
  explicit Net(const std::shared_ptr<Device>& dev, Pooling pooling_ = Pooling::kGlobalAverage) : pooling(pooling_) {
    dev->SetRandSeed(17);
    const int64_t features = pooling == Pooling::kMax ? 32 * 2 * 2 : 32;  // 9x9 -> 5x5 -> 2x2
    p = TrainableParams(dev,
                        {Shape{16, 3, 3, 3}, Shape{16}, Shape{16}, Shape{32, 16, 3, 3}, Shape{32}, Shape{32},
                         Shape{features, 10}, Shape{10}},
                        {1, 4});
    stats = RunningStats(dev, {16, 32});
  }
  Tensor Step(const Tensor& x, const Tensor& y, nn::Optimizer& opt, Conv0 how, Tensor* held = nullptr) const {
    ops::Conv2dOptions same;
    same.padding = {1, 1};
    Tensor c0 = ops::Conv2d(x, p[0], Tensor(), same);
    if (held) *held = c0;
    ops::Pool2dOptions stem, halve;
    stem.kernel = {3, 3};
    stem.stride = {2, 2};
    stem.padding = {1, 1};
    const bool max = pooling == Pooling::kMax;
    Tensor h = ops::Relu(ops::BatchNorm(c0, p[1], p[2], stats[0], stats[1], true));
    if (max) h = ops::MaxPool2d(h, stem);
    h = ops::Relu(ops::BatchNorm(ops::Conv2d(h, p[3], Tensor(), same), p[4], p[5], stats[2], stats[3], true));
    h = max ? ops::Flatten(ops::MaxPool2d(h, halve)) : ops::GlobalAvgPool(h);
    Tensor loss = ops::SoftmaxCrossEntropy(ops::AddBias(ops::MatMul(h, p[6]), p[7]), y);
    if (how == Conv0::kReadByAnOp) loss = ops::Add(loss, ops::MulScalar(ops::Sum(c0), 1e-4));
    for (auto& pg : Backward(loss)) opt.Apply(pg.second, pg.first, pg.first.name());
    return loss;
  }
  std::vector<std::vector<float>> Values() const { return HostValues(p, stats); }
};

constexpr int64_t kSide = 9;   // images kSide x kSide
constexpr uint32_t kSeed = 300;  // batch s: ImageBatch(kSide, kSeed, s)
std::pair<Tensor, Tensor> Batch(int s) { return ImageBatch(kSide, kSeed, s); }

TrainRun Eager(Conv0 how, Pooling pooling = Pooling::kGlobalAverage) {
  Net net(CpuDevice(), pooling);
  nn::SGD opt(0.05, 0.9);
  TrainRun e;
  for (int s = 0; s < kSteps; ++s) {
    auto b = Batch(s);
    e.losses.push_back(float(net.Step(b.first, b.second, opt, how).Item()));
  }
  e.params = net.Values();
  return e;
}

struct Replayed {
  TrainRun run;
  GraphStats stats;
  size_t blocked_attrs = 0;  // layout attributes set on the replayed records
  std::vector<std::string> pooling_attrs;  // per max pooling op in order, its layout attributes set
};

Replayed Replay(Conv0 how, bool plan_layouts, Pooling pooling = Pooling::kGlobalAverage) {
  Net net(CpuDevice(), pooling);
  nn::SGD opt(0.05, 0.9);
  auto b = Batch(0);
  Tensor x = b.first, y = b.second, loss, held;
  GraphOptions options;
  options.passes.Set("plan_layouts", plan_layouts);
  auto g = Graph::Capture(CpuDevice(), "layout", [&] {
    loss = net.Step(x, y, opt, how, how == Conv0::kHeld ? &held : nullptr);
  }, options);
  Replayed r;
  for (const OpRecord& op : g->ops().ops) {
    const std::string set = BlockedAttrs(op);
    if (!set.empty()) r.blocked_attrs += size_t(std::count(set.begin(), set.end(), ' ') + 1);
    if (op.def == &op_kind::max_pool2d || op.def == &op_kind::max_pool2d_grad)
      r.pooling_attrs.push_back(op.def->name + ": " + set);
  }
  r.run.losses = ReplayImageSteps(*g, x, y, loss, kSteps, kSide, kSeed);
  r.run.params = net.Values();
  r.stats = g->stats();
  return r;
}

using LayoutTest = BlockedLayoutTest;

TEST_F(LayoutTest, ConvBatchNormBlocksStayBlockedAndReplayStaysBitwiseEqualToEager) {
  const TrainRun e = Eager(Conv0::kPlain);
  const Replayed on = Replay(Conv0::kPlain, true), off = Replay(Conv0::kPlain, false);
  ExpectBitwiseRuns(e, on.run, "layouts planned");
  ExpectBitwiseRuns(e, off.run, "layouts not planned");
  // Six regions: each convolution's output (read by batch norm), each batch-norm input gradient
  // (read by the convolution gradients), and after each batch norm (which took its relu: the
  // pass fuse_bn_relu, Note [Batch norm with its ReLU]) the relu's output, and in backward the
  // gradients tied to it by relu_grad (the second convolution's dx and the first relu_grad's dx;
  // the global pooling's dx and the second relu_grad's dx): 1 + 1 + 3 + 1 + 1 + 3 blocks.
  // Without the fusion each batch norm's own output was one more (12).
  EXPECT_EQ(on.stats.counters.Get("blocked_layouts"), 10);
  // Attributes: conv0 y; bn0 x, y; conv1 x, y; bn1 x, y; pool x; pool grad dx; bn1 grad x, dy,
  // dx; conv1 grad input dy, dx; conv1 grad weight x, dy; bn0 grad x, dy, dx; conv0 grad weight
  // dy (its x is the graph's input, 3 channels).
  EXPECT_EQ(on.blocked_attrs, 1u + 2u + 2u + 2u + 1u + 1u + 3u + 2u + 2u + 3u + 1u);
  EXPECT_EQ(off.stats.counters.Get("blocked_layouts"), 0);
  EXPECT_EQ(off.blocked_attrs, 0u);
  // Channels are multiples of 16: the blocked tensors have the NCHW tensors' bytes; what goes
  // is the convolutions' staging copies of y and dy (their planned scratch).
  EXPECT_LT(on.stats.arena_bytes, off.stats.arena_bytes);
  EXPECT_LT(on.stats.lower_bound_bytes, off.stats.lower_bound_bytes);
  EXPECT_LE(on.stats.arena_bytes, on.stats.lower_bound_bytes * 105 / 100);
}

TEST_F(LayoutTest, ABlockReadByAnotherOpOrHeldByTheUserStaysNchw) {
  for (Conv0 how : {Conv0::kReadByAnOp, Conv0::kHeld}) {
    const std::string what = how == Conv0::kHeld ? "held" : "read by a sum";
    const Replayed r = Replay(how, true);
    ExpectBitwiseRuns(Eager(how), r.run, what);
    // The first convolution's output stays NCHW (of the 10 blocks above). Read by a sum, its
    // gradient is also the sum of two (batch norm's and the sum's), which an add makes: the add
    // ties the first batch norm's dx to the sum's gradient, and that region stays NCHW too.
    EXPECT_EQ(r.stats.counters.Get("blocked_layouts"), how == Conv0::kHeld ? 9 : 8) << what;
  }
}

TEST_F(LayoutTest, RegionsExtendThroughMaxPoolingAndReplayStaysBitwiseEqualToEager) {
  const TrainRun e = Eager(Conv0::kPlain, Pooling::kMax);
  const Replayed on = Replay(Conv0::kPlain, true, Pooling::kMax), off = Replay(Conv0::kPlain, false, Pooling::kMax);
  ExpectBitwiseRuns(e, on.run, "max pooling, layouts planned");
  ExpectBitwiseRuns(e, off.run, "max pooling, layouts not planned");
  // Max pooling no longer pins its region: blocked are each convolution's output (1 + 1), each
  // fused batch norm's output (its relu's) and the two gradients relu_grad ties to it (3 + 3),
  // the first pooling's output (read by the second convolution) and its gradient (the second
  // convolution's dx), each batch-norm input gradient (1 + 1), and each pooling's argmax (1 +
  // 1). Only the four convolution and batch-norm blocks were blocked while max pooling had no
  // slots. The second pooling's y (and dy) stay NCHW: the flatten's view reads it.
  EXPECT_EQ(on.stats.counters.Get("blocked_layouts"), 14);
  const std::vector<std::string> pooling = {
      "max_pool2d: x_blocked y_blocked argmax_blocked", "max_pool2d: x_blocked argmax_blocked",
      "max_pool2d_grad: dx_blocked argmax_blocked", "max_pool2d_grad: dx_blocked dy_blocked argmax_blocked"};
  EXPECT_EQ(on.pooling_attrs, pooling);
  EXPECT_EQ(off.stats.counters.Get("blocked_layouts"), 0);
  EXPECT_EQ(off.blocked_attrs, 0u);
  EXPECT_LE(on.stats.arena_bytes, off.stats.arena_bytes);
  EXPECT_LE(on.stats.arena_bytes, on.stats.lower_bound_bytes * 105 / 100);
}

// Each blocked kernel against its NCHW kernel on the same values, byte for byte: batch norm's
// forward and gradient with x and dx blocked, and the three convolution passes with y or dy
// blocked. Blocked operands are made with the same reorder oneDNN uses (a (N, C, H, W) tensor
// with C a multiple of 16, element (n, c, h, w) at ((n C/16 + c/16) H W + h W + w) 16 + c % 16).
template <typename T>
std::vector<T> ToBlocked(const std::vector<T>& v, const Shape& s) {
  std::vector<T> b(v.size());
  const int64_t c = s[1], hw = s[2] * s[3];
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < hw; ++k) b[size_t(((n * (c / 16) + ch / 16) * hw + k) * 16 + ch % 16)] = v[size_t((n * c + ch) * hw + k)];
  return b;
}
Tensor Blocked(const Tensor& t) {
  if (t.dtype() == DType::kInt32)  // max pooling's argmax
    return ops::FromVector(ToBlocked(t.ToVector<int32_t>(), t.shape()), t.shape(), CpuDevice());
  return ops::FromVector(ToBlocked(t.ToVector<float>(), t.shape()), t.shape(), CpuDevice());
}
void ExpectSameBytes(const Tensor& a, const Tensor& b, const std::string& what) {
  EXPECT_TRUE(HostBytes(a) == HostBytes(b)) << what;
}

TEST_F(LayoutTest, BlockedKernelsAreBitwiseTheirNchwKernels) {
  NoGradGuard no_grad;
  const Shape xs{3, 32, 5, 7};
  const Tensor x = RandomTensor(xs, DType::kFloat32, 1, -2, 3), dy = RandomTensor(xs, DType::kFloat32, 2);
  const Tensor gamma = RandomTensor({32}, DType::kFloat32, 3, 0.5, 1.5), beta = RandomTensor({32}, DType::kFloat32, 4);
  const Attrs train{{"momentum", 0.1}, {"eps", 1e-5}};
  auto stats = [] { return std::make_pair(RandomTensor({32}, DType::kFloat32, 5), RandomTensor({32}, DType::kFloat32, 6, 0.5, 2)); };
  auto [rm0, rv0] = stats();
  std::vector<Tensor> plain = Call("batch_norm_train", {x, gamma, beta, rm0, rv0}, train);
  for (int mode = 1; mode < 4; ++mode) {  // x blocked, y blocked, both
    auto [rm1, rv1] = stats();
    Attrs ab = train;
    if (mode & 1) ab.Set("x_blocked", int64_t(16));
    if (mode & 2) ab.Set("y_blocked", int64_t(16));
    std::vector<Tensor> blocked = Call("batch_norm_train", {mode & 1 ? Blocked(x) : x, gamma, beta, rm1, rv1}, ab);
    const std::string what = "batch_norm_train mode " + std::to_string(mode) + " output ";
    ExpectSameBytes(mode & 2 ? Blocked(plain[0]) : plain[0], blocked[0], what + "0");
    for (size_t i = 1; i < plain.size(); ++i) ExpectSameBytes(plain[i], blocked[i], what + std::to_string(i));
  }
  for (int64_t training : {1, 0}) {
    const Attrs a{{"eps", 1e-5}, {"training", training}};
    const Tensor mean = training ? plain[1] : rm0, stat = training ? plain[2] : rv0;
    std::vector<Tensor> want = Call("batch_norm_grad", {x, gamma, mean, stat, dy}, a);
    for (int mode = 1; mode < 8; ++mode) {  // x, dx, dy blocked: each set of them
      Attrs ab = a;
      if (mode & 1) ab.Set("x_blocked", int64_t(16));
      if (mode & 2) ab.Set("dx_blocked", int64_t(16));
      if (mode & 4) ab.Set("dy_blocked", int64_t(16));
      std::vector<Tensor> got =
          Call("batch_norm_grad", {mode & 1 ? Blocked(x) : x, gamma, mean, stat, mode & 4 ? Blocked(dy) : dy}, ab);
      const std::string what = "batch_norm_grad training " + std::to_string(training) + " mode " + std::to_string(mode);
      ExpectSameBytes(mode & 2 ? Blocked(want[0]) : want[0], got[0], what + " dx");
      ExpectSameBytes(want[1], got[1], what + " dgamma");
      ExpectSameBytes(want[2], got[2], what + " dbeta");
    }
  }

  // Global average pooling and its gradient.
  const Tensor pooled = Call("global_avg_pool", {x}, {})[0];
  ExpectSameBytes(pooled, Call("global_avg_pool", {Blocked(x)}, Attrs().Set("x_blocked", int64_t(16)))[0], "global_avg_pool");
  const Attrs pg = Attrs().Set("x_shape", xs);
  ExpectSameBytes(Blocked(Call("global_avg_pool_grad", {pooled}, pg)[0]),
                  Call("global_avg_pool_grad", {pooled}, Attrs(pg).Set("dx_blocked", int64_t(16)))[0], "global_avg_pool_grad");

  // Convolutions: 32 output channels, 1 to 5 images (one part per image and uneven parts), and
  // a weight gradient split by channel (few output positions); 16 input channels, so that x and
  // dx can be blocked too.
  for (int64_t n : {1, 5}) {
    const Tensor cx = RandomTensor({n, 16, 6, 6}, DType::kFloat32, 7), w = RandomTensor({32, 16, 3, 3}, DType::kFloat32, 8);
    const Attrs a{{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{1, 1}},
                  {"dilation", std::vector<int64_t>{1, 1}}, {"groups", int64_t(1)}};
    const Tensor y = Call("conv2d", {cx, w}, a)[0];
    ExpectSameBytes(Blocked(y), Call("conv2d", {cx, w}, Attrs(a).Set("y_blocked", int64_t(16)))[0], "conv2d y");
    const Tensor cdy = RandomTensor(y.shape(), DType::kFloat32, 9);
    const Attrs gi = Attrs(a).Set("x_shape", cx.shape()), gw = Attrs(a).Set("w_shape", w.shape());
    ExpectSameBytes(Call("conv2d_grad_input", {w, cdy}, gi)[0],
                    Call("conv2d_grad_input", {w, Blocked(cdy)}, Attrs(gi).Set("dy_blocked", int64_t(16)))[0],
                    "conv2d_grad_input");
    ExpectSameBytes(Call("conv2d_grad_weight", {cx, cdy}, gw)[0],
                    Call("conv2d_grad_weight", {cx, Blocked(cdy)}, Attrs(gw).Set("dy_blocked", int64_t(16)))[0],
                    "conv2d_grad_weight");
    // x (dx) blocked, alone and with y (dy).
    for (bool both : {false, true}) {
      const std::string what = both ? " x and y blocked" : " x blocked";
      Attrs fa = Attrs(a).Set("x_blocked", int64_t(16)), ia = Attrs(gi).Set("dx_blocked", int64_t(16)),
            wa = Attrs(gw).Set("x_blocked", int64_t(16));
      if (both) {
        fa.Set("y_blocked", int64_t(16));
        ia.Set("dy_blocked", int64_t(16));
        wa.Set("dy_blocked", int64_t(16));
      }
      ExpectSameBytes(both ? Blocked(y) : y, Call("conv2d", {Blocked(cx), w}, fa)[0], "conv2d" + what);
      ExpectSameBytes(Blocked(Call("conv2d_grad_input", {w, cdy}, gi)[0]),
                      Call("conv2d_grad_input", {w, both ? Blocked(cdy) : cdy}, ia)[0], "conv2d_grad_input" + what);
      ExpectSameBytes(Call("conv2d_grad_weight", {cx, cdy}, gw)[0],
                      Call("conv2d_grad_weight", {Blocked(cx), both ? Blocked(cdy) : cdy}, wa)[0],
                      "conv2d_grad_weight" + what);
    }
  }
}

// Max pooling and its gradient with each mix of blocked operands against the NCHW kernels, byte
// for byte (Note [Blocked max pooling] in device/cpu/kernels/pool.cc): kernels 2 and 3, strides
// 1 and 2, padding 0 and 1 (and more at the end than at the start), odd sizes, output rows
// longer and shorter than a tile of 16 pixels. x holds few distinct values, so most windows
// tie (the argmax must be the NCHW kernel's first maximum), and a few NaNs, which win; dy is
// random, and with stride 1 windows overlap, so dx adds several dy in the NCHW kernel's order.
Tensor Ties(const Shape& s, uint32_t seed) {
  std::vector<float> v = RandomTensor(s, DType::kFloat32, seed, 0, 3).ToVector<float>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 97 == 5 ? std::nanf("") : std::floor(v[i]) - 1;
  return ops::FromVector(v, s, CpuDevice());
}

TEST_F(LayoutTest, BlockedMaxPoolingIsBitwiseTheNchwKernel) {
  NoGradGuard no_grad;
  struct Geometry {
    Shape x;
    std::vector<int64_t> kernel, stride, padding, padding_end;
  };
  const Geometry geometries[] = {
      {{2, 32, 8, 8}, {2, 2}, {2, 2}, {0, 0}, {}},    // the small CNN's
      {{2, 32, 7, 9}, {2, 2}, {2, 2}, {0, 0}, {}},    // odd sizes: the last row and column dropped
      {{1, 16, 9, 37}, {3, 3}, {2, 2}, {1, 1}, {}},   // the ResNet stem's
      {{2, 16, 7, 5}, {3, 3}, {1, 1}, {1, 1}, {}},    // overlapping windows, clipped at every border
      {{1, 32, 6, 19}, {2, 3}, {1, 2}, {1, 0}, {}},   // kernel 2 with padding 1
      {{3, 16, 5, 7}, {3, 2}, {1, 1}, {0, 0}, {}},
      {{1, 16, 11, 10}, {3, 3}, {2, 1}, {1, 1}, {0, 1}},  // asymmetric padding
  };
  uint32_t seed = 40;
  for (const Geometry& g : geometries) {
    Attrs a{{"kernel", g.kernel}, {"stride", g.stride}, {"padding", g.padding}};
    if (!g.padding_end.empty()) a.Set("padding_end", g.padding_end);
    const std::string where = ToString(g.x) + " kernel " + ToString(g.kernel) + " stride " + ToString(g.stride) +
                              " padding " + ToString(g.padding);
    const Tensor x = Ties(g.x, seed++);
    const std::vector<Tensor> want = Call("max_pool2d", {x}, a);
    for (int mode = 1; mode < 8; ++mode) {  // x, y, argmax blocked: each set of them
      Attrs ab = a;
      if (mode & 1) ab.Set("x_blocked", int64_t(16));
      if (mode & 2) ab.Set("y_blocked", int64_t(16));
      if (mode & 4) ab.Set("argmax_blocked", int64_t(16));
      const std::vector<Tensor> got = Call("max_pool2d", {mode & 1 ? Blocked(x) : x}, ab);
      const std::string what = "max_pool2d " + where + " mode " + std::to_string(mode);
      ExpectSameBytes(mode & 2 ? Blocked(want[0]) : want[0], got[0], what + " y");
      ExpectSameBytes(mode & 4 ? Blocked(want[1]) : want[1], got[1], what + " argmax");
    }
    const Attrs ga = Attrs(a).Set("x_shape", g.x);
    const Tensor dy = RandomTensor(want[0].shape(), DType::kFloat32, seed++);
    const Tensor dx = Call("max_pool2d_grad", {want[1], dy}, ga)[0];
    for (int mode = 1; mode < 8; ++mode) {  // dy, dx, argmax blocked: each set of them
      Attrs ab = ga;
      if (mode & 1) ab.Set("dy_blocked", int64_t(16));
      if (mode & 2) ab.Set("dx_blocked", int64_t(16));
      if (mode & 4) ab.Set("argmax_blocked", int64_t(16));
      const Tensor arg = mode & 4 ? Blocked(want[1]) : want[1];
      ExpectSameBytes(mode & 2 ? Blocked(dx) : dx, Call("max_pool2d_grad", {arg, mode & 1 ? Blocked(dy) : dy}, ab)[0],
                      "max_pool2d_grad " + where + " mode " + std::to_string(mode));
    }
  }
  // A blocked operand needs C a multiple of 16 (and float32): a typed error, not a wrong result.
  const Tensor x8 = RandomTensor({1, 8, 4, 4}, DType::kFloat32, 1);
  const Attrs a{{"kernel", std::vector<int64_t>{2, 2}}, {"stride", std::vector<int64_t>{2, 2}},
                {"padding", std::vector<int64_t>{0, 0}}};
  EXPECT_THROW(Call("max_pool2d", {x8}, Attrs(a).Set("y_blocked", int64_t(16))), ValueError);
  const Tensor x64 = RandomTensor({1, 16, 4, 4}, DType::kFloat64, 1);
  EXPECT_THROW(Call("max_pool2d", {x64}, Attrs(a).Set("x_blocked", int64_t(16))), DTypeError);
}

// On a CUDA device the same pass plans NHWC (Note [NHWC convolutions on cuDNN] in
// device/cuda/cudnn.cc). Read without a GPU: the CUDA kernels' predicates register whenever the
// CUDA backend is built, and the pass only asks them. The net's captured op list, planned for a
// CUDA-typed device, gets the CPU plan's attributes except around the first convolution, whose 3
// input channels keep its cuDNN plan NCHW: its output (batch norm's input) and, in backward, the
// region of batch norm's dx and the weight gradient's dy stay NCHW. In full float32 the
// convolutions' plans are NCHW, so no convolution takes an NHWC operand.

// The layout attributes set on each record of `list`, as "op: attrs" lines.
std::vector<std::string> LayoutAttrs(const OpList& list) {
  std::vector<std::string> out;
  for (const OpRecord& op : list.ops) {
    const std::string set = BlockedAttrs(op);
    if (!set.empty()) out.push_back(op.def->name + ": " + set);
  }
  return out;
}

TEST(LayoutOnCuda, TheCudaKernelsTakeTheCpusRegionsButAnRgbConvolutions) {
#ifndef LOOM_WITH_CUDA
  GTEST_SKIP() << "loom was built without the CUDA backend";
#endif
  if (!cpu::HaveDnnl()) GTEST_SKIP() << "loom was built without oneDNN: no CPU plan to compare with";
  LoadCudaBackend();  // its kernels register as it opens (Note [Backends loaded on first use])
  ScopedFloat32Math tf32(Float32Math::kTF32);
  FakeCudaDevice cuda;
  for (Pooling pooling : {Pooling::kGlobalAverage, Pooling::kMax}) {
    Net net(CpuDevice(), pooling);
    nn::SGD opt(0.05, 0.9);
    auto b = Batch(0);
    GraphOptions raw;
    raw.run_passes = false;
    auto g = Graph::Capture(CpuDevice(), "layout", [&] { net.Step(b.first, b.second, opt, Conv0::kPlain); }, raw);
    const PassResult on_cpu = RunPasses(g->ops(), *CpuDevice(), GraphOptions());
    const PassResult planned = RunPasses(g->ops(), cuda, GraphOptions());
    const bool max = pooling == Pooling::kMax;
    const std::string what = max ? "max pooling" : "global average pooling";
    std::vector<std::string> want = LayoutAttrs(on_cpu.ops);  // the CPU's, less the first convolution's regions
    auto edit = [&](const std::string& from, const std::string& to, bool first) {
      auto it = first ? std::find(want.begin(), want.end(), from) : std::find(want.rbegin(), want.rend(), from).base() - 1;
      ASSERT_TRUE(it >= want.begin() && it < want.end() && *it == from) << what << ": " << from;
      if (to.empty()) want.erase(it); else *it = to;
    };
    edit("conv2d: y_blocked", "", true);
    edit("batch_norm_train: x_blocked y_blocked", "batch_norm_train: y_blocked", true);
    edit("batch_norm_grad: x_blocked dx_blocked dy_blocked", "batch_norm_grad: dy_blocked", false);
    edit("conv2d_grad_weight: dy_blocked", "", false);
    EXPECT_EQ(LayoutAttrs(planned.ops), want) << what;
    EXPECT_EQ(planned.counters.Get("blocked_layouts"), on_cpu.counters.Get("blocked_layouts") - 2) << what;
    EXPECT_EQ(planned.counters.Get("blocked_layouts"), max ? 12 : 8) << what;  // 10 and 14 on the CPU
    ScopedFloat32Math full(Float32Math::kFull);
    for (const std::string& line : LayoutAttrs(RunPasses(g->ops(), cuda, GraphOptions()).ops))
      EXPECT_NE(line.rfind("conv2d", 0), 0u) << what << ": " << line;
  }
  // The predicates on their own: 4-D operands; batch norm's inference gradient NCHW only.
  for (const char* name : {"batch_norm_train", "batch_norm_grad", "max_pool2d", "global_avg_pool"}) {
    bool (*supports)(const OpRecord&) = GetOp(name).supports[int(DeviceType::kCUDA)];
    ASSERT_NE(supports, nullptr) << name << ": without a predicate every record is supported";
  }
  OpRecord r;
  r.def = &GetOp("batch_norm_grad");
  r.inputs = {RandomTensor({2, 16, 3, 3}, DType::kFloat32, 1)};
  r.attrs.Set("training", int64_t(1)).Set("x_blocked", int64_t(1));
  EXPECT_TRUE(GetOp("batch_norm_grad").supports[int(DeviceType::kCUDA)](r));
  r.attrs.Set("training", int64_t(0));
  EXPECT_FALSE(GetOp("batch_norm_grad").supports[int(DeviceType::kCUDA)](r));
  r.inputs = {RandomTensor({2, 16, 9}, DType::kFloat32, 1)};
  r.attrs.Set("training", int64_t(1));
  EXPECT_FALSE(GetOp("batch_norm_grad").supports[int(DeviceType::kCUDA)](r));
  // A convolution takes NHWC operands where its plan is NHWC: channels in multiples of 8, TF32.
  for (int64_t c : {16, 3}) {
    OpRecord conv;
    conv.def = &GetOp("conv2d");
    conv.inputs = {RandomTensor({2, c, 5, 5}, DType::kFloat32, 1), RandomTensor({32, c, 3, 3}, DType::kFloat32, 2)};
    conv.outputs = {RandomTensor({2, 32, 5, 5}, DType::kFloat32, 3)};
    conv.attrs.Set("stride", std::vector<int64_t>{1, 1}).Set("padding", std::vector<int64_t>{1, 1});
    conv.attrs.Set("dilation", std::vector<int64_t>{1, 1}).Set("groups", int64_t(1)).Set("y_blocked", int64_t(1));
    bool (*supports)(const OpRecord&) = GetOp("conv2d").supports[int(DeviceType::kCUDA)];
    EXPECT_EQ(supports(conv), c == 16) << c << " channels";
    ScopedFloat32Math full(Float32Math::kFull);
    EXPECT_FALSE(supports(conv)) << c << " channels, full float32";
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
