// Note [Activation layouts] (graph/layouts.cc) on CUDA, where the blocked layout is NHWC (Note
// [NHWC convolutions on cuDNN] in device/cuda/cudnn.cc, Note [Batch norm in any layout] in
// device/cuda/cnn.cu):
//   - each kernel that takes an operand in NHWC computes, byte for byte, what it computes from
//     NCHW operands: batch norm and its gradient, max and global average pooling and their
//     gradients (float32 and float64), the convolutions and their gradients (float32 in TF32
//     mode and bfloat16 operands, whose plans are NHWC);
//   - batch norm with the ReLU (and residual) fuse_bn_relu folds into it computes the bytes of
//     the separate ops, in NCHW and NHWC;
//   - a graph whose layout pass keeps regions NHWC trains to eager execution's bits and to the
//     bits of a graph without the pass (the small CNN and ResNet-18; float32 and bf16, where the
//     convolutions' results are kept in bfloat16 for batch norm, graph/bf16_conv_outputs.cc).
// Which records the pass marks on a CUDA device is checked without a GPU in
// test/graph/layout_test.cc (LayoutOnCuda).
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/cnn.h"
#include "common/harness.h"
#include "core/ops_cnn.h"
#include "device/kernel_report.h"
#include "graph/graph.h"

namespace loom {
namespace test {
namespace {

// t's values in NHWC order, in a tensor of t's (N, C, H, W) shape on t's device.
Tensor Nhwc(const Tensor& t) {
  const std::vector<uint8_t> b = HostBytes(t);
  const size_t e = SizeOf(t.dtype());
  const int64_t n = t.dim(0), c = t.dim(1), hw = t.dim(2) * t.dim(3);
  std::vector<uint8_t> o(b.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < hw; ++k)
        std::memcpy(&o[size_t((i * hw + k) * c + ch) * e], &b[size_t((i * c + ch) * hw + k) * e], e);
  return TensorWithBytes(t.shape(), t.dtype(), o, t.device_ptr());
}

void ExpectSameBytes(const Tensor& want, const Tensor& got, const std::string& what) {
  EXPECT_TRUE(HostBytes(want) == HostBytes(got)) << what;
}

class NhwcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LOOM_REQUIRE_GPU();
    dev_ = CudaDevice(0);
  }
  Tensor Random(const Shape& s, DType t, uint32_t seed, double lo = -1, double hi = 1) const {
    return RandomTensor(s, t, seed, lo, hi, dev_);
  }
  std::shared_ptr<Device> dev_;
};

TEST_F(NhwcTest, BatchNormAndPoolingComputeTheNchwBytes) {
  NoGradGuard no_grad;
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    const std::string dt = std::string(" ") + Name(t);
    // 3 x 40 x 5 x 7: channels not a multiple of 32, 105 values a channel (under one chunk)
    // and, for the pooling, odd sizes.
    for (const Shape& xs : {Shape{3, 40, 5, 7}, Shape{4, 24, 31, 33}}) {
      const std::string where = " " + ToString(xs) + dt;
      const Tensor x = Random(xs, t, 1, -2, 3), dy = Random(xs, t, 2);
      const Tensor gamma = Random({xs[1]}, t, 3, 0.5, 1.5), beta = Random({xs[1]}, t, 4);
      const Attrs train{{"momentum", 0.1}, {"eps", 1e-5}};
      auto stats = [&] { return std::make_pair(Random({xs[1]}, t, 5), Random({xs[1]}, t, 6, 0.5, 2)); };
      auto [rm0, rv0] = stats();
      const std::vector<Tensor> plain = Call("batch_norm_train", {x, gamma, beta, rm0, rv0}, train);
      for (int mode = 1; mode < 4; ++mode) {  // x NHWC, y NHWC, both
        auto [rm1, rv1] = stats();
        Attrs a = train;
        if (mode & 1) a.Set("x_blocked", int64_t(1));
        if (mode & 2) a.Set("y_blocked", int64_t(1));
        const std::vector<Tensor> got = Call("batch_norm_train", {mode & 1 ? Nhwc(x) : x, gamma, beta, rm1, rv1}, a);
        const std::string what = "batch_norm_train mode " + std::to_string(mode) + where + " output ";
        ExpectSameBytes(mode & 2 ? Nhwc(plain[0]) : plain[0], got[0], what + "0");
        for (size_t i = 1; i < plain.size(); ++i) ExpectSameBytes(plain[i], got[i], what + std::to_string(i));
        ExpectSameBytes(rm0, rm1, what + "running mean");
        ExpectSameBytes(rv0, rv1, what + "running var");
      }
      const Attrs g{{"eps", 1e-5}, {"training", int64_t(1)}};
      const std::vector<Tensor> want = Call("batch_norm_grad", {x, gamma, plain[1], plain[2], dy}, g);
      for (int mode = 1; mode < 8; ++mode) {  // x, dx, dy NHWC: each set of them
        Attrs a = g;
        if (mode & 1) a.Set("x_blocked", int64_t(1));
        if (mode & 2) a.Set("dx_blocked", int64_t(1));
        if (mode & 4) a.Set("dy_blocked", int64_t(1));
        const std::vector<Tensor> got =
            Call("batch_norm_grad", {mode & 1 ? Nhwc(x) : x, gamma, plain[1], plain[2], mode & 4 ? Nhwc(dy) : dy}, a);
        const std::string what = "batch_norm_grad mode " + std::to_string(mode) + where;
        ExpectSameBytes(mode & 2 ? Nhwc(want[0]) : want[0], got[0], what + " dx");
        ExpectSameBytes(want[1], got[1], what + " dgamma");
        ExpectSameBytes(want[2], got[2], what + " dbeta");
      }
      const Tensor pooled = Call("global_avg_pool", {x}, {})[0];
      ExpectSameBytes(pooled, Call("global_avg_pool", {Nhwc(x)}, Attrs().Set("x_blocked", int64_t(1)))[0],
                      "global_avg_pool" + where);
      const Attrs pg = Attrs().Set("x_shape", xs);
      ExpectSameBytes(Nhwc(Call("global_avg_pool_grad", {pooled}, pg)[0]),
                      Call("global_avg_pool_grad", {pooled}, Attrs(pg).Set("dx_blocked", int64_t(1)))[0],
                      "global_avg_pool_grad" + where);
      // Max pooling as in a ResNet's stem (overlapping windows, padding), values with ties.
      const Attrs mp{{"kernel", std::vector<int64_t>{3, 3}}, {"stride", std::vector<int64_t>{2, 2}},
                     {"padding", std::vector<int64_t>{1, 1}}};
      std::vector<double> tied = ToDoubles(x);
      for (double& v : tied) v = double(int64_t(v * 2));
      const Tensor xt = FromDoubles(tied, xs, t, dev_);
      const std::vector<Tensor> mpw = Call("max_pool2d", {xt}, mp);
      for (int mode = 1; mode < 8; ++mode) {  // x, y, argmax NHWC
        Attrs a = mp;
        if (mode & 1) a.Set("x_blocked", int64_t(1));
        if (mode & 2) a.Set("y_blocked", int64_t(1));
        if (mode & 4) a.Set("argmax_blocked", int64_t(1));
        const std::vector<Tensor> got = Call("max_pool2d", {mode & 1 ? Nhwc(xt) : xt}, a);
        const std::string what = "max_pool2d mode " + std::to_string(mode) + where;
        ExpectSameBytes(mode & 2 ? Nhwc(mpw[0]) : mpw[0], got[0], what + " y");
        ExpectSameBytes(mode & 4 ? Nhwc(mpw[1]) : mpw[1], got[1], what + " argmax");
      }
      const Attrs mg = Attrs(mp).Set("x_shape", xs);
      const Tensor pdy = Random(mpw[0].shape(), t, 7);
      const Tensor pdx = Call("max_pool2d_grad", {mpw[1], pdy}, mg)[0];
      for (int mode = 1; mode < 8; ++mode) {  // dy, dx, argmax NHWC
        Attrs a = mg;
        if (mode & 1) a.Set("dy_blocked", int64_t(1));
        if (mode & 2) a.Set("dx_blocked", int64_t(1));
        if (mode & 4) a.Set("argmax_blocked", int64_t(1));
        ExpectSameBytes(mode & 2 ? Nhwc(pdx) : pdx,
                        Call("max_pool2d_grad", {mode & 4 ? Nhwc(mpw[1]) : mpw[1], mode & 1 ? Nhwc(pdy) : pdy}, a)[0],
                        "max_pool2d_grad mode " + std::to_string(mode) + where);
      }
    }
  }
}

// Note [Batch norm with its ReLU] (graph/fuse_bn_relu.cc) on CUDA: batch_norm_train with
// relu = 1 (and a residual) gives the bytes of batch_norm_train (add) and relu, in NCHW and NHWC;
// batch_norm_apply from its saved statistics gives its y again.
TEST_F(NhwcTest, FusedBatchNormReluComputesTheSeparateOpsBytes) {
  NoGradGuard no_grad;
  for (DType t : {DType::kFloat32, DType::kFloat64})
    for (const Shape& xs : {Shape{3, 40, 5, 7}, Shape{4, 24, 31, 33}}) {
      const std::string where = " " + ToString(xs) + " " + Name(t);
      const Tensor x = Random(xs, t, 1, -2, 3), r = Random(xs, t, 7);
      const Tensor gamma = Random({xs[1]}, t, 3, 0.5, 1.5), beta = Random({xs[1]}, t, 4);
      auto stat = [&](uint32_t seed, double lo) { return Random({xs[1]}, t, seed, lo, lo + 1.5); };
      const Attrs train{{"momentum", 0.1}, {"eps", 1e-5}};
      for (bool residual : {false, true}) {
        const std::vector<Tensor> bn = Call("batch_norm_train", {x, gamma, beta, stat(5, -0.75), stat(6, 0.5)}, train);
        const Tensor want = Call("relu", {residual ? Call("add", {bn[0], r}, {})[0] : bn[0]}, {})[0];
        for (bool nhwc : {false, true}) {
          Attrs a = Attrs(train).Set("relu", int64_t(1));
          if (nhwc) a.Set("x_blocked", int64_t(1)).Set("y_blocked", int64_t(1));
          std::vector<Tensor> in = {nhwc ? Nhwc(x) : x, gamma, beta, stat(5, -0.75), stat(6, 0.5)};
          if (residual) in.push_back(nhwc ? Nhwc(r) : r);
          const std::vector<Tensor> got = Call("batch_norm_train", in, a);
          const std::string what = std::string("fused batch_norm_train") + (residual ? " residual" : "") +
                                   (nhwc ? " NHWC" : " NCHW") + where;
          ExpectSameBytes(nhwc ? Nhwc(want) : want, got[0], what + " y");
          for (size_t i = 1; i < 5; ++i) ExpectSameBytes(bn[i], got[i], what + " output " + std::to_string(i));
          // Note [Batch norm applied from its saved statistics]: the same y from the saved mean
          // and invstd (the memory budget's recompute).
          Attrs pa = Attrs().Set("relu", int64_t(1));
          if (nhwc) pa.Set("x_blocked", int64_t(1)).Set("y_blocked", int64_t(1));
          std::vector<Tensor> ain = {in[0], gamma, beta, got[1], got[2]};
          if (residual) ain.push_back(in[5]);
          ExpectSameBytes(got[0], Call("batch_norm_apply", ain, pa)[0], "batch_norm_apply after " + what);
        }
      }
    }
}

TEST_F(NhwcTest, ConvolutionsComputeTheNchwBytes) {
  NoGradGuard no_grad;
  ScopedFloat32Math tf32(Float32Math::kTF32);  // float32 plans are NHWC in TF32 mode only
  const Attrs geometry{{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{1, 1}},
                       {"dilation", std::vector<int64_t>{1, 1}}, {"groups", int64_t(1)}};
  for (DType operands : {DType::kFloat32, DType::kBFloat16}) {
    const std::string dt = std::string(" ") + Name(operands);
    Attrs a = geometry;
    if (operands == DType::kBFloat16) a.Set("out_dtype", int64_t(DType::kFloat32));
    const Tensor x = Random({3, 24, 9, 11}, operands, 7), w = Random({40, 24, 3, 3}, operands, 8);
    const Tensor y = Call("conv2d", {x, w}, a)[0];
    const Tensor dy = Random(y.shape(), operands, 9);
    const Attrs gi = Attrs(a).Set("x_shape", x.shape()), gw = Attrs(a).Set("w_shape", w.shape());
    const Tensor dx = Call("conv2d_grad_input", {w, dy}, gi)[0];
    const Tensor dw = Call("conv2d_grad_weight", {x, dy}, gw)[0];
    // The NHWC plan itself against float64 on the CPU from the same values (TF32 products, or a
    // bfloat16 result: within a few hundredths of values of a few units).
    auto f64 = [](const Tensor& t) { return FromDoubles(ToDoubles(t), t.shape(), DType::kFloat64, CpuDevice()); };
    const Attrs g64 = geometry;
    ExpectClose(ToDoubles(y), ToDoubles(Call("conv2d", {f64(x), f64(w)}, g64)[0]), 1e-2, 5e-2, "conv2d" + dt);
    ExpectClose(ToDoubles(dx),
                ToDoubles(Call("conv2d_grad_input", {f64(w), f64(dy)}, Attrs(g64).Set("x_shape", x.shape()))[0]), 1e-2,
                5e-2, "conv2d_grad_input" + dt);
    ExpectClose(ToDoubles(dw),
                ToDoubles(Call("conv2d_grad_weight", {f64(x), f64(dy)}, Attrs(g64).Set("w_shape", w.shape()))[0]),
                1e-2, 5e-2, "conv2d_grad_weight" + dt);
    for (int mode = 1; mode < 4; ++mode) {  // the input-side operand NHWC, the output side, both
      const bool in = mode & 1, out = mode & 2;
      const std::string what = " mode " + std::to_string(mode) + dt;
      Attrs f = a, i = gi, k = gw;
      if (in) f.Set("x_blocked", int64_t(1)), i.Set("dy_blocked", int64_t(1)), k.Set("x_blocked", int64_t(1));
      if (out) f.Set("y_blocked", int64_t(1)), i.Set("dx_blocked", int64_t(1)), k.Set("dy_blocked", int64_t(1));
      ExpectSameBytes(out ? Nhwc(y) : y, Call("conv2d", {in ? Nhwc(x) : x, w}, f)[0], "conv2d" + what);
      ExpectSameBytes(out ? Nhwc(dx) : dx, Call("conv2d_grad_input", {w, in ? Nhwc(dy) : dy}, i)[0],
                      "conv2d_grad_input" + what);
      ExpectSameBytes(dw, Call("conv2d_grad_weight", {in ? Nhwc(x) : x, out ? Nhwc(dy) : dy}, k)[0],
                      "conv2d_grad_weight" + what);
    }
  }
  // Note [bfloat16 convolutions on cuDNN]: bf16 plans of these shapes (channels multiples of 8)
  // run on tensor ops. An H200 once ran every bf16 plan without them, 23x slower than TF32,
  // when the descriptors asked for cuDNN's default math. (Reports are process-wide, and a plan
  // of another shape may rightly pick another algorithm: each pass needs one tensor-op plan.)
  std::set<std::string> on_tensor_ops;
  for (const auto& [kind, impl] : ReportedKernels())
    if (impl.find("tensor ops") != std::string::npos) on_tensor_ops.insert(kind);
  for (const char* kind : {"conv2d forward bf16", "conv2d grad input bf16", "conv2d grad weight bf16"})
    EXPECT_EQ(on_tensor_ops.count(kind), 1u) << kind << ": no plan on tensor ops";
  // Note [Measured algorithms]: each pass's plans were measured (unless LOOM_CUDNN_FIND=0) and
  // counted, with the measured times of the chosen algorithms and of the fastest of any
  // determinism.
  const char* find = std::getenv("LOOM_CUDNN_FIND");
  if (find && std::string(find) == "0") return;
  std::map<std::string, double> counters;
  for (const auto& [name, value] : KernelCounters()) counters[name] = value;
  for (const char* pass : {"forward", "grad input", "grad weight"}) {
    const std::string what = std::string("cudnn conv ") + pass + " ";
    EXPECT_GE(counters[what + "plans measured"], 2) << pass << ": one plan for each operand type";
    EXPECT_GT(counters[what + "fastest ms, any determinism"], 0) << pass;
    EXPECT_GT(counters[what + "chosen ms"], 0) << pass;
  }
}

TEST_F(NhwcTest, NhwcRegionsTrainToEagerBits) {
  ScopedFloat32Math tf32(Float32Math::kTF32);
  GraphOptions off;
  off.passes.Set("plan_layouts", false);
  for (bool resnet : {false, true})
    for (Precision p : {Precision::kFloat32, Precision::kBFloat16}) {
      const std::string what = std::string(resnet ? "ResNet-18" : "small CNN") + (p == Precision::kBFloat16 ? " bf16" : " float32");
      const CnnRun eager = TrainSmallCnn(dev_, false, p, {}, resnet);
      CnnRun planned = TrainSmallCnn(dev_, true, p, {}, resnet);
      const CnnRun nchw = TrainSmallCnn(dev_, true, p, off, resnet);
      EXPECT_GT(planned.stats.counters.Get("blocked_layouts"), 0) << what;
      // The convolutions take NHWC operands (a region of pooling indices alone would count above).
      EXPECT_GT(planned.blocked_convs["conv2d"], 0) << what;
      EXPECT_GT(planned.blocked_convs["conv2d_grad_input"], 0) << what;
      EXPECT_GT(planned.blocked_convs["conv2d_grad_weight"], 0) << what;
      EXPECT_EQ(nchw.stats.counters.Get("blocked_layouts"), 0) << what;
      // At bf16 every convolution keeps its result in bfloat16 for its batch norm (Note
      // [Convolution outputs kept in bfloat16]): the small CNN's 2, ResNet-18's 20.
      if (p == Precision::kBFloat16) {
        EXPECT_EQ(planned.stats.counters.Get("bf16_conv_outputs"), resnet ? 20 : 2) << what;
      }
      EXPECT_TRUE(SameBits(eager.params, planned.params)) << what << ": the NHWC graph against eager";
      EXPECT_TRUE(SameBits(nchw.params, planned.params)) << what << ": the NHWC graph against the NCHW one";
    }
}

}  // namespace
}  // namespace test
}  // namespace loom
