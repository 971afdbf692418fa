// Note [Fusing batch norm and ReLU] (graph/fuse_bn_relu.cc): in a conv-bn-relu net with a
// ResNet-style block the pass makes each batch norm followed by a ReLU one batch_norm_train with
// relu = 1 and each relu_grad feeding a batch_norm_grad alone one batch_norm_grad with relu = 1;
// replay stays bitwise equal to eager with the pass and the blocked layouts on or off; the pass
// leaves the ops alone where z is read by another op or held by the user, or dz is read twice.
// The fused kernels on their own (Note [Batch norm with ReLU] in device/cpu/kernels/norm.cc):
// byte for byte the unfused ops, NCHW and blocked. The CUDA kernels refuse the fused records.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/harness.h"
#include "common/conv_params.h"
#include "common/mlp.h"
#include "core/ops_cnn.h"
#include "device/cpu/kernels/conv_dnnl.h"
#include "graph/graph.h"

LOOM_OP_KIND(batch_norm_train);
LOOM_OP_KIND(batch_norm_grad);
LOOM_OP_KIND(relu);
LOOM_OP_KIND(relu_grad);

namespace loom {
namespace test {
namespace {

constexpr int kSteps = 3;

// conv(3->16) -> bn -> relu = h
// -> [conv(16->16) -> bn -> add(h) -> relu]                 (a ResNet block: its last batch
//                                                           norm feeds the add, not a ReLU)
// -> conv(16->32) -> bn -> relu -> global average pool -> linear.
// Forward, batch norms 0 and 2 take their ReLU; backward, their relu_grads join their
// batch_norm_grads. The block's ReLU gradient goes to the add's two branches: it stays.
struct Net {
  std::vector<Tensor> p;      // w0, g0, b0, w1, g1, b1, w2, g2, b2, fc, fc bias
  std::vector<Tensor> stats;  // running mean and variance of the three batch norms
  explicit Net(const std::shared_ptr<Device>& dev) {
    dev->SetRandSeed(23);
    p = TrainableParams(dev,
                        {Shape{16, 3, 3, 3}, Shape{16}, Shape{16}, Shape{16, 16, 3, 3}, Shape{16}, Shape{16},
                         Shape{32, 16, 3, 3}, Shape{32}, Shape{32}, Shape{32, 10}, Shape{10}},
                        {1, 4, 7});
    stats = RunningStats(dev, {16, 16, 32});
  }
  Tensor Bn(const Tensor& x, int k) const {
    return ops::BatchNorm(x, p[size_t(3 * k + 1)], p[size_t(3 * k + 2)], stats[size_t(2 * k)], stats[size_t(2 * k + 1)],
                          true);
  }
  Tensor Step(const Tensor& x, const Tensor& y, nn::Optimizer& opt) const {
    ops::Conv2dOptions same;
    same.padding = {1, 1};
    Tensor h = ops::Relu(Bn(ops::Conv2d(x, p[0], Tensor(), same), 0));
    h = ops::Relu(ops::Add(Bn(ops::Conv2d(h, p[3], Tensor(), same), 1), h));
    h = ops::Relu(Bn(ops::Conv2d(h, p[6], Tensor(), same), 2));
    Tensor loss = ops::SoftmaxCrossEntropy(ops::AddBias(ops::MatMul(ops::GlobalAvgPool(h), p[9]), p[10]), y);
    for (auto& pg : Backward(loss)) opt.Apply(pg.second, pg.first, pg.first.name());
    return loss;
  }
  std::vector<std::vector<float>> Values() const { return HostValues(p, stats); }
};

constexpr int64_t kSide = 8;   // images kSide x kSide
constexpr uint32_t kSeed = 400;  // batch s: ImageBatch(kSide, kSeed, s)
std::pair<Tensor, Tensor> Batch(int s) { return ImageBatch(kSide, kSeed, s); }

TrainRun Eager() {
  Net net(CpuDevice());
  nn::SGD opt(0.05, 0.9);
  TrainRun e;
  for (int s = 0; s < kSteps; ++s) {
    auto b = Batch(s);
    e.losses.push_back(float(net.Step(b.first, b.second, opt).Item()));
  }
  e.params = net.Values();
  return e;
}

// The ops of a replayed graph this test cares about.
struct Counts {
  size_t fused_train = 0, fused_grad = 0, relu = 0, relu_grad = 0, a_blocked = 0;
};
Counts Count(const Graph& g) {
  Counts c;
  for (const OpRecord& op : g.ops().ops) {
    c.fused_train += op.def == &op_kind::batch_norm_train && op.attrs.Int("relu", 0) == 1;
    c.fused_grad += op.def == &op_kind::batch_norm_grad && op.attrs.Int("relu", 0) == 1;
    c.relu += op.def == &op_kind::relu;
    c.relu_grad += op.def == &op_kind::relu_grad;
    c.a_blocked += IntAttrOrZero(op, "a_blocked") != 0;
  }
  return c;
}

struct Replayed {
  TrainRun run;
  GraphStats stats;
  Counts counts;
};

Replayed Replay(bool fuse, bool plan_layouts) {
  Net net(CpuDevice());
  nn::SGD opt(0.05, 0.9);
  auto b = Batch(0);
  Tensor x = b.first, y = b.second, loss;
  GraphOptions options;
  options.fuse_bn_relu = fuse;
  options.plan_layouts = plan_layouts;
  auto g = Graph::Capture(CpuDevice(), "bn_relu", [&] { loss = net.Step(x, y, opt); }, options);
  Replayed r;
  r.counts = Count(*g);
  r.run.losses = ReplayImageSteps(*g, x, y, loss, kSteps, kSide, kSeed);
  r.run.params = net.Values();
  r.stats = g->stats();
  return r;
}

TEST(FuseBnReluTest, ConvBnReluNetAndResidualBlockReplayBitwiseEqualToEager) {
  const TrainRun e = Eager();
  GraphStats on_nchw, off_nchw;
  for (bool layouts : {false, true})
    for (bool fuse : {false, true}) {
      const std::string what = std::string(fuse ? "fused" : "unfused") + (layouts ? ", layouts" : ", NCHW");
      const Replayed r = Replay(fuse, layouts);
      ExpectBitwiseRuns(e, r.run, what);
      EXPECT_EQ(r.stats.fused_bn_relu, fuse ? 4u : 0u) << what;
      EXPECT_EQ(r.counts.fused_train, fuse ? 2u : 0u) << what;
      EXPECT_EQ(r.counts.fused_grad, fuse ? 2u : 0u) << what;
      EXPECT_EQ(r.counts.relu, fuse ? 1u : 3u) << what;  // the block's ReLU stays
      EXPECT_EQ(r.counts.relu_grad, fuse ? 1u : 3u) << what;
      // With layouts, the fused gradients' a is blocked with its region (Note [Activation layouts]).
      if (layouts && cpu::HaveDnnl()) EXPECT_GT(r.stats.blocked_layouts, 0u) << what;
      if (layouts && fuse) EXPECT_EQ(r.counts.a_blocked, cpu::HaveDnnl() ? 2u : 0u) << what;
      if (!layouts) (fuse ? on_nchw : off_nchw) = r.stats;
    }
  // z and dz are no longer stored, but the planned arena already kept the ReLU's output (its
  // gradient) in its input's memory (Note [In-place reuse]): the plan must not grow.
  EXPECT_LE(on_nchw.arena_bytes, off_nchw.arena_bytes);
  EXPECT_LE(on_nchw.lower_bound_bytes, off_nchw.lower_bound_bytes);
  std::printf("arena %zu -> %zu bytes, lower bound %zu -> %zu, without in-place reuse %zu -> %zu\n",
              off_nchw.arena_bytes, on_nchw.arena_bytes, off_nchw.lower_bound_bytes, on_nchw.lower_bound_bytes,
              off_nchw.lower_bound_no_inplace_bytes, on_nchw.lower_bound_no_inplace_bytes);
}

// One batch norm and its ReLU, forward and backward, written out as ops (no autograd), so that
// each intermediate can be given another use: z read by another op, z held by the user, dz read
// by a second op. Outputs: a, dx, dgamma, dbeta, and the extra op's result.
enum class Use { kPlain, kZReadByAnOp, kZHeld, kDzReadTwice };

struct Chain {
  Tensor x = RandomTensor({4, 16, 5, 5}, DType::kFloat32, 31, -2, 2);
  Tensor gamma = RandomTensor({16}, DType::kFloat32, 32, 0.5, 1.5), beta = RandomTensor({16}, DType::kFloat32, 33);
  Tensor da = RandomTensor({4, 16, 5, 5}, DType::kFloat32, 34);
  Tensor rm = ops::Zeros({16}, DType::kFloat32, CpuDevice()), rv = ops::Ones({16}, DType::kFloat32, CpuDevice());

  std::vector<Tensor> Run(Use use, Tensor* held) {
    NoGradGuard no_grad;
    const Attrs train{{"momentum", 0.1}, {"eps", 1e-5}};
    std::vector<Tensor> bn = Call("batch_norm_train", {x, gamma, beta, rm, rv}, train);
    const Tensor a = Call1("relu", {bn[0]});
    const Tensor dz = Call1("relu_grad", {a, da});
    std::vector<Tensor> g =
        Call("batch_norm_grad", {x, gamma, bn[1], bn[2], dz}, Attrs{{"eps", 1e-5}, {"training", int64_t(1)}});
    Tensor extra = ops::Zeros({}, DType::kFloat32, CpuDevice());
    if (use == Use::kZReadByAnOp) extra = ops::Sum(bn[0]);
    if (use == Use::kDzReadTwice) extra = ops::Sum(dz);
    if (use == Use::kZHeld) *held = bn[0];
    return {a, g[0], g[1], g[2], extra};
  }
};

TEST(FuseBnReluTest, ThePassLeavesTheOpsWhereAnIntermediateHasAnotherUse) {
  for (Use use : {Use::kPlain, Use::kZReadByAnOp, Use::kZHeld, Use::kDzReadTwice}) {
    const std::string what = "use " + std::to_string(int(use));
    Chain eager_chain;
    Tensor eager_held;
    const std::vector<Tensor> want = eager_chain.Run(use, &eager_held);
    for (bool layouts : {false, true}) {
      Chain chain;
      std::vector<Tensor> got;
      Tensor held;
      GraphOptions options;
      options.fuse_bn_relu = true;
      options.plan_layouts = layouts;
      auto g = Graph::Capture(CpuDevice(), "chain", [&] { got = chain.Run(use, &held); }, options);
      g->Run();
      const Counts c = Count(*g);
      const bool forward = use == Use::kPlain || use == Use::kDzReadTwice;
      const bool backward = use != Use::kDzReadTwice;
      EXPECT_EQ(c.fused_train, forward ? 1u : 0u) << what;
      EXPECT_EQ(c.relu, forward ? 0u : 1u) << what;
      EXPECT_EQ(c.fused_grad, backward ? 1u : 0u) << what;
      EXPECT_EQ(c.relu_grad, backward ? 0u : 1u) << what;
      EXPECT_EQ(g->stats().fused_bn_relu, size_t(forward) + size_t(backward)) << what;
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_TRUE(HostBytes(want[i]) == HostBytes(got[i])) << what << " output " << i;
      if (use == Use::kZHeld) EXPECT_TRUE(HostBytes(eager_held) == HostBytes(held)) << what;
      EXPECT_TRUE(HostBytes(eager_chain.rm) == HostBytes(chain.rm)) << what;
      EXPECT_TRUE(HostBytes(eager_chain.rv) == HostBytes(chain.rv)) << what;
    }
  }
}

// The fused kernels against the ops they replace, byte for byte, for every layout of their
// operands: batch_norm_train with relu = 1 against batch_norm_train then relu, batch_norm_grad
// with relu = 1 against relu_grad then batch_norm_grad, with a holding NaN, -0, 0 and negative
// values (relu_grad passes da where a is NaN, and gives +0 where a is not positive).
std::vector<float> ToBlocked(const std::vector<float>& v, const Shape& s) {  // nChw16c
  std::vector<float> b(v.size());
  const int64_t c = s[1], hw = s[2] * s[3];
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < hw; ++k)
        b[size_t(((n * (c / 16) + ch / 16) * hw + k) * 16 + ch % 16)] = v[size_t((n * c + ch) * hw + k)];
  return b;
}
Tensor Blocked(const Tensor& t) { return ops::FromVector(ToBlocked(t.ToVector<float>(), t.shape()), t.shape(), CpuDevice()); }
void ExpectSameBytes(const Tensor& a, const Tensor& b, const std::string& what) {
  EXPECT_TRUE(HostBytes(a) == HostBytes(b)) << what;
}

TEST(FuseBnReluTest, FusedKernelsAreBytewiseTheUnfusedOps) {
  NoGradGuard no_grad;
  const Shape xs{3, 32, 5, 7};  // 35 pixels: tiles of 16 with a tail
  const Attrs train{{"momentum", 0.1}, {"eps", 1e-5}};
  auto stats = [](DType t) { return std::make_pair(RandomTensor({32}, t, 5), RandomTensor({32}, t, 6, 0.5, 2)); };
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    const std::string dt = t == DType::kFloat32 ? "float32" : "float64";
    const Tensor x = RandomTensor(xs, t, 1, -2, 3), da = RandomTensor(xs, t, 2);
    const Tensor gamma = RandomTensor({32}, t, 3, 0.5, 1.5), beta = RandomTensor({32}, t, 4);
    // a: the ReLU output of another batch norm, with NaN, -0 and negatives planted.
    std::vector<double> av = ToDoubles(RandomTensor(xs, t, 7, -1, 1));
    for (size_t i = 0; i < av.size(); i += 5) av[i] = std::max(av[i], 0.0);
    for (size_t i = 1; i < av.size(); i += 17) av[i] = std::numeric_limits<double>::quiet_NaN();
    for (size_t i = 2; i < av.size(); i += 13) av[i] = -0.0;
    const Tensor a = FromDoubles(av, xs, t);

    // Forward.
    auto [rm0, rv0] = stats(t);
    std::vector<Tensor> plain = Call("batch_norm_train", {x, gamma, beta, rm0, rv0}, train);
    const Tensor want_a = Call1("relu", {plain[0]});
    for (int mode = 0; mode < (t == DType::kFloat32 ? 4 : 1); ++mode) {  // x, y blocked: each set
      auto [rm1, rv1] = stats(t);
      Attrs fa = train;
      fa.Set("relu", int64_t(1));
      if (mode & 1) fa.Set("x_blocked", int64_t(16));
      if (mode & 2) fa.Set("y_blocked", int64_t(16));
      std::vector<Tensor> fused = Call("batch_norm_train", {mode & 1 ? Blocked(x) : x, gamma, beta, rm1, rv1}, fa);
      const std::string what = dt + " batch_norm_train relu mode " + std::to_string(mode) + " output ";
      ExpectSameBytes(mode & 2 ? Blocked(want_a) : want_a, fused[0], what + "0");
      for (size_t i = 1; i < plain.size(); ++i) ExpectSameBytes(plain[i], fused[i], what + std::to_string(i));
    }

    // Backward, both forms of batch_norm_grad.
    for (int64_t training : {1, 0}) {
      const Attrs ga{{"eps", 1e-5}, {"training", training}};
      const Tensor mean = training ? plain[1] : rm0, stat = training ? plain[2] : rv0;
      const Tensor dz = Call1("relu_grad", {a, da});
      std::vector<Tensor> want = Call("batch_norm_grad", {x, gamma, mean, stat, dz}, ga);
      for (int mode = 0; mode < (t == DType::kFloat32 ? 16 : 1); ++mode) {  // x, dx, da, a blocked: each set
        Attrs fa = ga;
        fa.Set("relu", int64_t(1));
        if (mode & 1) fa.Set("x_blocked", int64_t(16));
        if (mode & 2) fa.Set("dx_blocked", int64_t(16));
        if (mode & 4) fa.Set("dy_blocked", int64_t(16));
        if (mode & 8) fa.Set("a_blocked", int64_t(16));
        std::vector<Tensor> got = Call("batch_norm_grad",
                                       {mode & 1 ? Blocked(x) : x, gamma, mean, stat, mode & 4 ? Blocked(da) : da,
                                        mode & 8 ? Blocked(a) : a},
                                       fa);
        const std::string what =
            dt + " batch_norm_grad relu training " + std::to_string(training) + " mode " + std::to_string(mode);
        ExpectSameBytes(mode & 2 ? Blocked(want[0]) : want[0], got[0], what + " dx");
        ExpectSameBytes(want[1], got[1], what + " dgamma");
        ExpectSameBytes(want[2], got[2], what + " dbeta");
      }
    }
  }
  // A fused gradient without its sixth input, or with one of another shape, is a typed error.
  const Tensor x = RandomTensor(xs, DType::kFloat32, 1);
  const Tensor c = RandomTensor({32}, DType::kFloat32, 2, 0.5, 1.5);
  const Attrs fused{{"eps", 1e-5}, {"training", int64_t(1)}, {"relu", int64_t(1)}};
  LOOM_EXPECT_THROW_MSG(Call("batch_norm_grad", {x, c, c, c, x}, fused), ValueError, "[batch_norm_grad] takes 6");
  LOOM_EXPECT_THROW_MSG(Call("batch_norm_grad", {x, c, c, c, x, c}, fused), ShapeError, "the ReLU output");
}

// The CUDA kernels call cuDNN's batch norm as is: their predicate refuses the fused records (and
// the layout attributes), so that neither pass fires on a CUDA device. Read without a GPU: the
// predicate is registered whenever the CUDA backend is built.
TEST(FuseBnReluTest, CudaBatchNormRefusesTheFusedRecords) {
#ifndef LOOM_WITH_CUDA
  GTEST_SKIP() << "loom was built without the CUDA backend";
#endif
  for (const char* name : {"batch_norm_train", "batch_norm_grad"}) {
    bool (*supports)(const OpRecord&) = GetOp(name).supports[int(DeviceType::kCUDA)];
    ASSERT_NE(supports, nullptr) << name << ": without a predicate every record is supported";
    OpRecord r;
    r.def = &GetOp(name);
    EXPECT_TRUE(supports(r)) << name;
    r.attrs.Set("relu", int64_t(1));
    EXPECT_FALSE(supports(r)) << name;
    r.attrs.Set("relu", int64_t(0)).Set("x_blocked", int64_t(16));
    EXPECT_FALSE(supports(r)) << name;
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
