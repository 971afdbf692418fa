// Convolution, pooling and embedding beyond the op-case table (common/op_cases_cnn.cc, run by
// test/ops, holds every forward and gradient): the convolution rows again under the im2col
// implementation, oneDNN really taken, scratch counted and returned, what backward saves, and
// the errors.
#include <cmath>
#include <limits>

#include "common/harness.h"
#include "common/op_check.h"
#include "core/ops_cnn.h"
#include "device/cpu/kernels/conv_dnnl.h"
#include "device/cpu/parallel.h"
#include "device/kernel_report.h"

namespace loom {
namespace test {
namespace {

// ---------------------------------------------------------------- conv2d

TEST(Conv, BackwardSavesOnlyInputAndWeight) {
  // Invariant 8: the node keeps x and w (for the two gradients), never the output.
  const OpDef& def = GetOp("conv2d");
  EXPECT_EQ(def.saved_inputs, (std::vector<int>{0, 1}));
  EXPECT_TRUE(def.saved_outputs.empty());
  EXPECT_TRUE(GetOp("max_pool2d").saved_inputs.empty());
  EXPECT_EQ(GetOp("max_pool2d").saved_outputs, (std::vector<int>{1}));
  EXPECT_TRUE(GetOp("avg_pool2d").saved_inputs.empty());
  EXPECT_EQ(GetOp("embedding").saved_inputs, (std::vector<int>{1}));
}

// Selects the CPU convolution for one scope (Note [oneDNN convolution]).
class ConvImplScope {
 public:
  explicit ConvImplScope(cpu::CpuConvImpl impl) : prev_(cpu::GetCpuConvImpl()) { cpu::SetCpuConvImpl(impl); }
  ~ConvImplScope() { cpu::SetCpuConvImpl(prev_); }

 private:
  cpu::CpuConvImpl prev_;
};

// The op-case table's convolution rows run under the default CPU convolution (oneDNN for
// float32 where built with it) in test/ops; here the float32 forward, input and weight
// gradient rows run again under im2col, against the same float64 references.
TEST(Conv, Float32CasesUnderIm2col) {
  ConvImplScope scope(cpu::CpuConvImpl::kIm2col);
  int checked = 0;
  for (const std::string op : {"conv2d", "conv2d_grad_input", "conv2d_grad_weight"})
    for (const OpCase* c : CasesOf(op))
      if (c->dtype == DType::kFloat32) {
        CheckForward(*c);
        ++checked;
      }
  EXPECT_GT(checked, 30);
}

// Note [Winograd] (device/cpu/kernels/conv_dnnl.h): the float32 rows again under the opt-in
// Winograd kernels, against the same float64 references at Winograd's looser tolerance, with
// replay still writing eager's bytes; and on a CPU with AVX-512 the Winograd kernels really ran
// for a 3x3 stride-1 geometry (a silent fallback to direct would pass the accuracy checks).
TEST(Conv, Float32CasesUnderWinograd) {
  if (!cpu::HaveDnnl()) GTEST_SKIP() << "built without oneDNN: no Winograd kernels";
  ConvImplScope scope(cpu::CpuConvImpl::kWinograd);
  int checked = 0;
  for (const std::string op : {"conv2d", "conv2d_grad_input", "conv2d_grad_weight"})
    for (const OpCase* c : CasesOf(op))
      if (c->dtype == DType::kFloat32) {
        OpCase w = *c;
        w.Tol(std::max(c->rtol, 1e-3), std::max(c->atol, 2e-4));
        CheckForward(w);
        CheckGraphReplay(w);
        ++checked;
      }
  EXPECT_GT(checked, 30);
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (!avx512) return;  // oneDNN 2.x has Winograd kernels for AVX-512 only: direct ran, as documented
  cpu::ConvDims d{8, 32, 12, 12, 48, 3, 3, 12, 12, 1, 1, 1, 1, 1, 1, 1, false};
  for (cpu::ConvPass pass : {cpu::ConvPass::kForward, cpu::ConvPass::kGradInput, cpu::ConvPass::kGradWeight})
    ASSERT_NE(cpu::FindDnnlConv(pass, d, DType::kFloat32), nullptr);
  for (const char* kind : {"conv2d forward f32", "conv2d grad input f32", "conv2d grad weight f32"}) {
    bool wino = false;
    for (const auto& k : ReportedKernels()) wino |= k.first == kind && k.second.find("wino") != std::string::npos;
    EXPECT_TRUE(wino) << kind << ": no Winograd kernel reported";
  }
}

TEST(Conv, OneDnnRunsFloat32WhenBuiltWithIt) {
  // The fast path is really taken (a silent fallback would pass every accuracy test).
  cpu::ConvDims d{16, 64, 8, 8, 64, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 1, false};
  ConvImplScope scope(cpu::CpuConvImpl::kAuto);
  for (cpu::ConvPass pass : {cpu::ConvPass::kForward, cpu::ConvPass::kGradInput, cpu::ConvPass::kGradWeight}) {
    const cpu::DnnlConvPlan* plan = cpu::FindDnnlConv(pass, d, DType::kFloat32);
    EXPECT_EQ(plan != nullptr, cpu::HaveDnnl());
    if (plan) {
      EXPECT_GT(cpu::DnnlConvScratchBytes(*plan), 0u);  // at least the reordered activations
    }
    EXPECT_EQ(cpu::FindDnnlConv(pass, d, DType::kFloat64), nullptr);  // float64: im2col
  }
  ConvImplScope im2col(cpu::CpuConvImpl::kIm2col);
  EXPECT_EQ(cpu::FindDnnlConv(cpu::ConvPass::kForward, d, DType::kFloat32), nullptr);
  // Each pass's oneDNN implementation is reported once built (device/kernel_report.h).
  if (cpu::HaveDnnl()) {
    for (const char* kind : {"conv2d forward f32", "conv2d grad input f32", "conv2d grad weight f32"}) {
      bool found = false;
      for (const auto& k : ReportedKernels()) found |= k.first == kind && k.second.rfind("oneDNN ", 0) == 0;
      EXPECT_TRUE(found) << kind;
    }
  }
}

TEST(Conv, ScratchIsCountedAndReturned) {
  // im2col buffers come from the device pool: live bytes go back to where they were.
  ConvImplScope scope(cpu::CpuConvImpl::kIm2col);
  auto dev = Cpu();
  Tensor x = RandomTensor({2, 3, 8, 8}, DType::kFloat32, 41);
  Tensor w = RandomTensor({4, 3, 3, 3}, DType::kFloat32, 42);
  size_t live = dev->stats().live_bytes;
  dev->ResetPeak();
  {
    Tensor y = ops::Conv2d(x, w);
    EXPECT_EQ(dev->stats().live_bytes, live + y.nbytes());  // the output only; the scratch is back
    size_t col_bytes = 3 * 3 * 3 * 6 * 6 * sizeof(float);   // (C KH KW, OH OW) for one image
    EXPECT_GE(dev->stats().peak_bytes, live + y.nbytes() + col_bytes);
  }
  EXPECT_EQ(dev->stats().live_bytes, live);
}

TEST(Conv, OneDnnScratchIsCountedAndReturned) {
  // oneDNN's reordered operands and scratchpad come from the device pool too (invariant 2).
  if (!cpu::HaveDnnl()) GTEST_SKIP() << "built without oneDNN";
  ConvImplScope scope(cpu::CpuConvImpl::kAuto);
  auto dev = Cpu();
  Tensor x = RandomTensor({4, 16, 8, 8}, DType::kFloat32, 41);
  Tensor w = RandomTensor({32, 16, 3, 3}, DType::kFloat32, 42);
  cpu::ConvDims d{4, 16, 8, 8, 32, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 1, false};
  const cpu::DnnlConvPlan* plan = cpu::FindDnnlConv(cpu::ConvPass::kForward, d, DType::kFloat32);
  ASSERT_NE(plan, nullptr);
  size_t live = dev->stats().live_bytes;
  dev->ResetPeak();
  {
    ops::Conv2dOptions pad1;
    pad1.padding = {1, 1};
    Tensor y = ops::Conv2d(x, w, Tensor(), pad1);
    EXPECT_EQ(dev->stats().live_bytes, live + y.nbytes());
    EXPECT_GE(dev->stats().peak_bytes, live + y.nbytes() + cpu::DnnlConvScratchBytes(*plan));
  }
  EXPECT_EQ(dev->stats().live_bytes, live);
}

TEST(Conv, Errors) {
  Tensor x = RandomTensor({1, 3, 5, 5}, DType::kFloat32, 1);
  Tensor w4 = RandomTensor({2, 4, 3, 3}, DType::kFloat32, 2);
  LOOM_EXPECT_THROW_MSG(ops::Conv2d(x, w4), ShapeError,
                        "[conv2d] input (1, 3, 5, 5) has 3 channels, weight (2, 4, 3, 3) expects 4");
  Tensor x4 = RandomTensor({1, 4, 5, 5}, DType::kFloat32, 3);
  ops::Conv2dOptions g3;
  g3.groups = 3;
  LOOM_EXPECT_THROW_MSG(ops::Conv2d(x4, RandomTensor({3, 1, 3, 3}, DType::kFloat32, 4), Tensor(), g3), ValueError,
                        "[conv2d] groups=3 does not divide the input's 4 channels");
  ops::Conv2dOptions g2;
  g2.groups = 2;
  LOOM_EXPECT_THROW_MSG(ops::Conv2d(x4, RandomTensor({3, 2, 3, 3}, DType::kFloat32, 5), Tensor(), g2), ValueError,
                        "[conv2d] groups=2 does not divide the weight's 3 output channels");
  LOOM_EXPECT_THROW_MSG(ops::Conv2d(x4, RandomTensor({4, 4, 3, 3}, DType::kFloat32, 6), Tensor(), g2), ShapeError,
                        "[conv2d] input (1, 4, 5, 5) has 4 channels, weight (4, 4, 3, 3) with groups=2 expects 8");
  Tensor w7 = RandomTensor({2, 3, 7, 3}, DType::kFloat32, 7);
  LOOM_EXPECT_THROW_MSG(ops::Conv2d(x, w7), ShapeError,
                        "[conv2d] kernel (7, 3) with dilation (1, 1) spans (7, 3), larger than the padded input (5, 5)");
  ops::Conv2dOptions pad1;
  pad1.padding = {1, 1};
  EXPECT_EQ(ops::Conv2d(x, w7, Tensor(), pad1).shape(), (Shape{1, 2, 1, 5}));  // fits once padded
  ops::Conv2dOptions dil;
  dil.dilation = {3, 3};
  LOOM_EXPECT_THROW_MSG(ops::Conv2d(x, RandomTensor({2, 3, 3, 3}, DType::kFloat32, 8), Tensor(), dil), ShapeError,
                        "with dilation (3, 3) spans (7, 7), larger than the padded input (5, 5)");
  Tensor w = RandomTensor({2, 3, 3, 3}, DType::kFloat32, 9);
  LOOM_EXPECT_THROW_MSG(ops::Conv2d(x, w, RandomTensor({3}, DType::kFloat32, 10)), ShapeError,
                        "[conv2d] bias (3,) must have shape (2,)");
  LOOM_EXPECT_THROW_MSG(ops::Conv2d(RandomTensor({3, 5, 5}, DType::kFloat32, 11), w), ShapeError,
                        "[conv2d] input (3, 5, 5) must be (N, C, H, W)");
  LOOM_EXPECT_THROW_MSG(ops::Conv2d(x, RandomTensor({2, 3, 3}, DType::kFloat32, 12)), ShapeError,
                        "[conv2d] weight (2, 3, 3) must be (O, C/groups, KH, KW)");
  LOOM_EXPECT_THROW_MSG(ops::Conv2d(x, RandomTensor({2, 3, 3, 3}, DType::kFloat64, 13)), DTypeError,
                        "[conv2d] dtypes differ: float32 and float64");
  ops::Conv2dOptions s0;
  s0.stride = {0, 1};
  LOOM_EXPECT_THROW_MSG(ops::Conv2d(x, w, Tensor(), s0), ValueError, "[conv2d] stride (0, 1) must be positive");
  ops::Conv2dOptions bad;
  bad.padding = {1};
  LOOM_EXPECT_THROW_MSG(ops::Conv2d(x, w, Tensor(), bad), ValueError, "[conv2d] padding must have 2 values");
}

// ---------------------------------------------------------------- pooling

TEST(Pool, Errors) {
  Tensor x = RandomTensor({1, 2, 3, 3}, DType::kFloat32, 1);
  ops::Pool2dOptions big;
  big.kernel = {4, 4};
  LOOM_EXPECT_THROW_MSG(ops::MaxPool2d(x, big), ShapeError,
                        "[max_pool2d] kernel (4, 4) is larger than the padded input (3, 3) of (1, 2, 3, 3)");
  LOOM_EXPECT_THROW_MSG(ops::AvgPool2d(x, big), ShapeError, "[avg_pool2d] kernel (4, 4) is larger than the padded");
  big.padding = {1, 1};
  EXPECT_EQ(ops::MaxPool2d(x, big).shape(), (Shape{1, 2, 1, 1}));  // fits once padded
  ops::Pool2dOptions pad;
  pad.kernel = {2, 2};
  pad.padding = {2, 0};
  LOOM_EXPECT_THROW_MSG(ops::MaxPool2d(x, pad), ValueError,
                        "[max_pool2d] padding (2, 0) must be between 0 and half the kernel (2, 2)");
  ops::Pool2dOptions s0;
  s0.stride = {0, 1};
  LOOM_EXPECT_THROW_MSG(ops::AvgPool2d(x, s0), ValueError, "[avg_pool2d] stride (0, 1) must be positive");
  LOOM_EXPECT_THROW_MSG(ops::MaxPool2d(RandomTensor({2, 3, 3}, DType::kFloat32, 2)), ShapeError,
                        "[max_pool2d] input (2, 3, 3) must be (N, C, H, W)");
  LOOM_EXPECT_THROW_MSG(ops::GlobalAvgPool(RandomTensor({2, 3}, DType::kFloat32, 3)), ShapeError,
                        "[global_avg_pool] input (2, 3) must be (N, C, H, W)");
  LOOM_EXPECT_THROW_MSG(ops::MaxPool2d(ops::Zeros({1, 1, 2, 2}, DType::kInt32, Cpu())), DTypeError,
                        "[max_pool2d] input must be float32 or float64, got int32");
}

// ---------------------------------------------------------------- embedding

TEST(Embedding, Errors) {
  Tensor table = RandomTensor({5, 3}, DType::kFloat32, 71);
  Tensor bad = ops::FromVector(std::vector<int64_t>{0, 1, 2, 5, 1}, {5}, Cpu());
  LOOM_EXPECT_THROW_MSG(ops::Embedding(table, bad), ValueError,
                        "[embedding] index 5 at position 3 is out of range for a table of 5 rows");
  Tensor neg = ops::FromVector(std::vector<int32_t>{0, -1}, {2}, Cpu());
  LOOM_EXPECT_THROW_MSG(ops::Embedding(table, neg), ValueError, "[embedding] index -1 at position 1 is out of range");
  Tensor fidx = RandomTensor({2}, DType::kFloat32, 72);
  LOOM_EXPECT_THROW_MSG(ops::Embedding(table, fidx), DTypeError,
                        "[embedding] indices must be int32 or int64, got float32");
  LOOM_EXPECT_THROW_MSG(ops::Embedding(RandomTensor({5}, DType::kFloat32, 73), neg), ShapeError,
                        "[embedding] table (5,) must be (V, D)");
  // The process survives a bad index (no exception escaped a worker), and the op still works.
  Tensor big = ops::Zeros({100000}, DType::kInt64, Cpu());
  std::vector<int64_t> bv(100000, 0);
  bv[99999] = 7;
  big.CopyFrom(bv);
  LOOM_EXPECT_THROW_MSG(ops::Embedding(table, big), ValueError, "index 7 at position 99999");
  EXPECT_EQ(ops::Embedding(table, ops::Zeros({100000}, DType::kInt64, Cpu())).shape(), (Shape{100000, 3}));
}

}  // namespace
}  // namespace test
}  // namespace loom
