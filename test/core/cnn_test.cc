// conv2d (stride, padding, dilation, groups, bias, the 1x1 fast path, the per-image parallel
// path), max/avg/global-average pooling and embedding: forward against plain double loops,
// gradients by finite differences, and the errors.
#include <cmath>
#include <limits>

#include "common/harness.h"
#include "core/ops_cnn.h"
#include "device/cpu/kernels/conv_dnnl.h"
#include "device/cpu/parallel.h"

namespace loom {
namespace test {
namespace {

// ---------------------------------------------------------------- conv2d

struct ConvCase {
  Shape x, w;
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = false;
  std::string Name() const {
    return "conv2d x" + ToString(x) + " w" + ToString(w) + " s" + ToString(stride) + " p" + ToString(padding) +
           " d" + ToString(dilation) + " g" + std::to_string(groups) + (bias ? " +bias" : "");
  }
  ops::Conv2dOptions Options() const {
    ops::Conv2dOptions o;
    o.stride = stride;
    o.padding = padding;
    o.dilation = dilation;
    o.groups = groups;
    return o;
  }
};

// The definition: y[n, o, i, j] = b[o] + sum over the group's channels c and kernel taps (p, q)
// of x[n, c, i*sh - ph + p*dh, j*sw - pw + q*dw] w[o, c - group start, p, q], zero outside x.
std::vector<double> RefConv(const ConvCase& k, const std::vector<double>& x, const std::vector<double>& w,
                            const std::vector<double>& b, Shape* out) {
  int64_t n = k.x[0], c = k.x[1], h = k.x[2], wd = k.x[3];
  int64_t o = k.w[0], cg = k.w[1], kh = k.w[2], kw = k.w[3];
  int64_t oh = (h + 2 * k.padding[0] - k.dilation[0] * (kh - 1) - 1) / k.stride[0] + 1;
  int64_t ow = (wd + 2 * k.padding[1] - k.dilation[1] * (kw - 1) - 1) / k.stride[1] + 1;
  int64_t og = o / k.groups;
  *out = {n, o, oh, ow};
  std::vector<double> y(size_t(n * o * oh * ow), 0.0);
  for (int64_t in = 0; in < n; ++in)
    for (int64_t io = 0; io < o; ++io)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = b.empty() ? 0.0 : b[size_t(io)];
          int64_t g = io / og;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t p = 0; p < kh; ++p)
              for (int64_t q = 0; q < kw; ++q) {
                int64_t yy = i * k.stride[0] - k.padding[0] + p * k.dilation[0];
                int64_t xx = j * k.stride[1] - k.padding[1] + q * k.dilation[1];
                if (yy < 0 || yy >= h || xx < 0 || xx >= wd) continue;
                int64_t cc = g * cg + ic;
                s += x[size_t(((in * c + cc) * h + yy) * wd + xx)] * w[size_t(((io * cg + ic) * kh + p) * kw + q)];
              }
          y[size_t(((in * o + io) * oh + i) * ow + j)] = s;
        }
  return y;
}

void CheckConv(const ConvCase& k, bool grad = true) {
  std::string what = k.Name();
  Tensor x = RandomTensor(k.x, DType::kFloat64, 11);
  Tensor w = RandomTensor(k.w, DType::kFloat64, 12);
  Tensor b = k.bias ? RandomTensor({k.w[0]}, DType::kFloat64, 13) : Tensor();
  Shape want_shape;
  std::vector<double> want =
      RefConv(k, x.ToVector<double>(), w.ToVector<double>(), k.bias ? b.ToVector<double>() : std::vector<double>(),
              &want_shape);
  ops::Conv2dOptions opt = k.Options();
  auto f = [&](const std::vector<Tensor>& in) {
    return ops::Conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), opt);
  };
  std::vector<Tensor> inputs{x, w};
  if (k.bias) inputs.push_back(b);
  EXPECT_EQ(f(inputs).shape(), want_shape) << what;
  CheckForward32(f, inputs, want, 1e-5, 1e-5, what);
  if (grad) GradCheck(f, inputs, 1e-6, 1e-6, what);
}

TEST(Conv, Basic) {
  CheckConv({{2, 3, 5, 5}, {4, 3, 3, 3}});
  CheckConv({{1, 2, 4, 6}, {3, 2, 2, 3}, {1, 1}, {0, 0}, {1, 1}, 1, true});  // rectangular kernel, bias
}

TEST(Conv, StridePaddingDilation) {
  CheckConv({{2, 2, 7, 6}, {3, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, true});
  CheckConv({{1, 2, 8, 7}, {2, 2, 3, 2}, {2, 1}, {0, 1}, {1, 1}});      // different strides per axis
  CheckConv({{2, 2, 7, 7}, {3, 2, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 1, true});  // dilation 2
  CheckConv({{1, 1, 9, 8}, {2, 1, 3, 2}, {3, 2}, {1, 0}, {2, 3}});      // all of it, asymmetric
  CheckConv({{1, 2, 3, 3}, {2, 2, 3, 3}, {1, 1}, {2, 2}});               // padding wider than needed
  CheckConv({{1, 1, 4, 4}, {1, 1, 4, 4}});                               // kernel = image: 1x1 output
}

TEST(Conv, Groups) {
  CheckConv({{2, 4, 5, 5}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2, true});
  CheckConv({{1, 6, 6, 5}, {6, 2, 3, 3}, {2, 1}, {1, 0}, {1, 1}, 3});
  CheckConv({{2, 3, 5, 5}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {2, 2}, 3, true});  // depthwise, dilated
}

TEST(Conv, OneByOne) {
  CheckConv({{2, 3, 4, 5}, {4, 3, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true});  // direct: no im2col
  CheckConv({{2, 4, 3, 3}, {4, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 2});         // direct, grouped
  CheckConv({{1, 3, 5, 5}, {2, 3, 1, 1}, {2, 2}});                             // strided 1x1: im2col
  CheckConv({{1, 3, 3, 3}, {2, 3, 1, 1}, {1, 1}, {1, 1}});                     // padded 1x1: im2col
}

TEST(Conv, LargerShapesEveryChunkingPath) {
  // The kernels group images into chunks of about 1024 GEMM columns, and split chunks across
  // the pool when each GEMM is too small for OpenBLAS to thread (kernels/conv.cc). Forward and
  // the two gradient ops against the reference, via the gradient of sum(y * r), for:
  for (const ConvCase& k : {
           // one image per chunk (34 x 34 output), chunks in order
           ConvCase{{2, 8, 34, 34}, {16, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
           // two images per chunk, one chunk, big GEMM
           ConvCase{{2, 16, 18, 18}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
           // all seven images in one small chunk
           ConvCase{{7, 3, 6, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
           // chunks of 2, 2, 1 images split across the pool, partial weight gradients
           ConvCase{{5, 3, 20, 20}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
           // one image per chunk, small GEMMs split across the pool, grouped
           ConvCase{{3, 4, 32, 32}, {4, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2, true},
           // 1x1 without im2col (one image per chunk), split across the pool
           ConvCase{{3, 4, 24, 24}, {6, 4, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},
           // 1x1 batched: im2col is a copy
           ConvCase{{5, 4, 5, 5}, {4, 4, 1, 1}}}) {
    CheckConv(k, false);
    // Gradients of L = sum(y * r) are conv2d_grad_*(r); compare with the reference by the
    // identity dL/dx . dx = L(x + dx) - L(x) for the linear map (exact up to rounding).
    Tensor x = RandomTensor(k.x, DType::kFloat64, 21);
    Tensor w = RandomTensor(k.w, DType::kFloat64, 22);
    Tensor b = k.bias ? RandomTensor({k.w[0]}, DType::kFloat64, 23) : Tensor();
    Tensor xr = x.Detach().set_requires_grad(true), wr = w.Detach().set_requires_grad(true);
    Tensor br = k.bias ? b.Detach().set_requires_grad(true) : Tensor();
    Tensor y = ops::Conv2d(xr, wr, br, k.Options());
    Tensor r = RandomTensor(y.shape(), DType::kFloat64, 24);
    std::vector<double> gx, gw, gb;
    Backward(y, [&](const Tensor& p, const Tensor& g) {
      if (p.block() == xr.block()) gx = g.ToVector<double>();
      if (p.block() == wr.block()) gw = g.ToVector<double>();
      if (k.bias && p.block() == br.block()) gb = g.ToVector<double>();
    }, r);
    std::vector<double> rv = r.ToVector<double>();
    std::vector<double> dx = RandomTensor(k.x, DType::kFloat64, 25).ToVector<double>();
    std::vector<double> dw = RandomTensor(k.w, DType::kFloat64, 26).ToVector<double>();
    Shape s;
    std::vector<double> none;
    // L is bilinear in (x, w): L(dx, w) = <dL/dx, dx> and L(x, dw) = <dL/dw, dw>.
    auto dot = [](const std::vector<double>& a, const std::vector<double>& c) {
      double t = 0;
      for (size_t i = 0; i < a.size(); ++i) t += a[i] * c[i];
      return t;
    };
    double lx = dot(RefConv(k, dx, w.ToVector<double>(), none, &s), rv);
    double lw = dot(RefConv(k, x.ToVector<double>(), dw, none, &s), rv);
    EXPECT_NEAR(dot(gx, dx), lx, 1e-9 * (1 + std::abs(lx))) << k.Name();
    EXPECT_NEAR(dot(gw, dw), lw, 1e-9 * (1 + std::abs(lw))) << k.Name();
    if (k.bias) {
      double rs = 0;
      for (size_t i = 0; i < rv.size(); ++i) {
        if (size_t(i / size_t(s[2] * s[3])) % size_t(k.w[0]) == 0) rs += rv[i];
      }
      EXPECT_NEAR(gb[0], rs, 1e-9) << k.Name() << " bias gradient of channel 0";
    }
  }
}

TEST(Conv, GradOpsDirectly) {
  // conv2d_grad_input/weight/bias against their definitions as sums, with float32 too.
  ConvCase k{{2, 4, 6, 5}, {6, 2, 3, 2}, {2, 1}, {1, 1}, {1, 2}, 2, true};
  Tensor x = RandomTensor(k.x, DType::kFloat64, 31);
  Tensor w = RandomTensor(k.w, DType::kFloat64, 32);
  Shape ys;
  RefConv(k, x.ToVector<double>(), w.ToVector<double>(), {}, &ys);
  Tensor dy = RandomTensor(ys, DType::kFloat64, 33);
  std::vector<double> xv = x.ToVector<double>(), wv = w.ToVector<double>(), dyv = dy.ToVector<double>();
  // Each gradient entry is the reference output with a unit input at that position, dotted with dy.
  auto grad_of = [&](bool of_x) {
    std::vector<double> base = of_x ? xv : wv, out(base.size());
    for (size_t i = 0; i < base.size(); ++i) {
      std::vector<double> e(base.size(), 0.0);
      e[i] = 1;
      Shape s;
      std::vector<double> y = of_x ? RefConv(k, e, wv, {}, &s) : RefConv(k, xv, e, {}, &s);
      double t = 0;
      for (size_t j = 0; j < y.size(); ++j) t += y[j] * dyv[j];
      out[i] = t;
    }
    return out;
  };
  Attrs a{{"stride", k.stride}, {"padding", k.padding}, {"dilation", k.dilation}, {"groups", k.groups}};
  Attrs ai = a, aw = a;
  ai.Set("x_shape", k.x);
  aw.Set("w_shape", k.w);
  CheckForward32([&](const std::vector<Tensor>& in) { return Call1("conv2d_grad_input", {in[0], in[1]}, ai); },
                 {w, dy}, grad_of(true), 1e-5, 1e-5, "conv2d_grad_input");
  CheckForward32([&](const std::vector<Tensor>& in) { return Call1("conv2d_grad_weight", {in[0], in[1]}, aw); },
                 {x, dy}, grad_of(false), 1e-5, 1e-5, "conv2d_grad_weight");
  std::vector<double> db(size_t(ys[1]), 0.0);
  for (size_t i = 0; i < dyv.size(); ++i) db[(i / size_t(ys[2] * ys[3])) % size_t(ys[1])] += dyv[i];
  CheckForward32([&](const std::vector<Tensor>& in) { return Call1("conv2d_grad_bias", {in[0]}); }, {dy}, db, 1e-5,
                 1e-5, "conv2d_grad_bias");
}

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

// The three float32 passes (forward, input and weight gradient) against float64 references,
// under oneDNN and under im2col, for geometries that take each path of conv_dnnl.cc: batches
// split evenly and unevenly across the pool (two primitives), one image, groups, depthwise,
// dilation, strides that leave a negative right padding (1x1 stride 2), bias, and weights with
// 128+ output channels (the reorder of the shared weights split across the pool), and weight
// gradients split by output channel (few output positions, many channels).
TEST(Conv, Float32BothImplementations) {
  const std::vector<ConvCase> cases{
      ConvCase{{4, 16, 8, 8}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      ConvCase{{5, 8, 7, 9}, {16, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false},  // 5 images: parts of 3 and 2
      ConvCase{{1, 3, 12, 12}, {8, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, true},  // one image, first layer
      ConvCase{{3, 16, 8, 8}, {32, 16, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1, false},  // downsample: right pad -1
      ConvCase{{2, 16, 6, 6}, {16, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 4, false},   // groups
      ConvCase{{2, 16, 6, 6}, {16, 1, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 16, true},   // depthwise, dilated
      ConvCase{{2, 4, 9, 8}, {8, 4, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 1, false},     // asymmetric everything
      ConvCase{{2, 32, 4, 4}, {160, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false},  // 160 outputs: split reorder
      ConvCase{{3, 8, 5, 5}, {112, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false},    // dw by channel: 64 + 48
  };
  for (cpu::CpuConvImpl impl : {cpu::CpuConvImpl::kAuto, cpu::CpuConvImpl::kIm2col}) {
    ConvImplScope scope(impl);
    const std::string which = impl == cpu::CpuConvImpl::kAuto ? " [auto]" : " [im2col]";
    for (const ConvCase& k : cases) {
      const std::string what = k.Name() + which;
      Tensor x = RandomTensor(k.x, DType::kFloat64, 51), w = RandomTensor(k.w, DType::kFloat64, 52);
      Tensor b = k.bias ? RandomTensor({k.w[0]}, DType::kFloat64, 53) : Tensor();
      Shape ys;
      std::vector<double> y = RefConv(k, x.ToVector<double>(), w.ToVector<double>(),
                                      k.bias ? b.ToVector<double>() : std::vector<double>(), &ys);
      Tensor dy = RandomTensor(ys, DType::kFloat64, 54);
      Attrs a{{"stride", k.stride}, {"padding", k.padding}, {"dilation", k.dilation}, {"groups", k.groups}};
      Attrs ai = a, aw = a;
      ai.Set("x_shape", k.x);
      aw.Set("w_shape", k.w);
      // float64 runs im2col under either setting: the gradients' reference.
      std::vector<double> dx = Call1("conv2d_grad_input", {w, dy}, ai).ToVector<double>();
      std::vector<double> dw = Call1("conv2d_grad_weight", {x, dy}, aw).ToVector<double>();
      auto f32 = [](const Tensor& t) { return ops::Cast(t, DType::kFloat32); };
      // Sums of up to a few hundred products of values in [-1, 1]: float32 keeps about 1e-5.
      ExpectClose(ToDoubles(ops::Conv2d(f32(x), f32(w), k.bias ? f32(b) : Tensor(), k.Options())), y, 1e-4, 1e-4,
                  what + " forward");
      ExpectClose(ToDoubles(Call1("conv2d_grad_input", {f32(w), f32(dy)}, ai)), dx, 1e-4, 1e-4, what + " dx");
      ExpectClose(ToDoubles(Call1("conv2d_grad_weight", {f32(x), f32(dy)}, aw)), dw, 1e-4, 1e-4, what + " dw");
    }
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

struct PoolCase {
  Shape x;
  std::vector<int64_t> kernel, stride, padding{0, 0};
  std::string Name() const {
    return "pool x" + ToString(x) + " k" + ToString(kernel) + " s" + ToString(stride) + " p" + ToString(padding);
  }
  ops::Pool2dOptions Options(bool include_pad = true) const {
    ops::Pool2dOptions o;
    o.kernel = kernel;
    o.stride = stride;
    o.padding = padding;
    o.count_include_pad = include_pad;
    return o;
  }
};

// mode 0: max (padding never wins), 1: average counting padding, 2: average over pixels inside.
std::vector<double> RefPool(const PoolCase& k, const std::vector<double>& x, int mode, Shape* out) {
  int64_t n = k.x[0], c = k.x[1], h = k.x[2], w = k.x[3];
  std::vector<int64_t> s = k.stride.empty() ? k.kernel : k.stride;
  int64_t oh = (h + 2 * k.padding[0] - k.kernel[0]) / s[0] + 1;
  int64_t ow = (w + 2 * k.padding[1] - k.kernel[1]) / s[1] + 1;
  *out = {n, c, oh, ow};
  std::vector<double> y;
  for (int64_t p = 0; p < n * c; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double m = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t inside = 0;
        for (int64_t a = 0; a < k.kernel[0]; ++a)
          for (int64_t b = 0; b < k.kernel[1]; ++b) {
            int64_t yy = i * s[0] - k.padding[0] + a, xx = j * s[1] - k.padding[1] + b;
            if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
            double v = x[size_t((p * h + yy) * w + xx)];
            m = std::max(m, v);
            sum += v;
            ++inside;
          }
        y.push_back(mode == 0 ? m : sum / double(mode == 1 ? k.kernel[0] * k.kernel[1] : inside));
      }
  return y;
}

std::vector<PoolCase> PoolCases() {
  return {{{2, 3, 4, 4}, {2, 2}, {}},                // the classic 2x2/2
          {{1, 2, 5, 6}, {3, 3}, {2, 2}, {1, 1}},    // overlapping windows, padding
          {{2, 2, 7, 5}, {3, 2}, {2, 1}, {1, 0}},    // rectangular everything
          {{1, 1, 5, 5}, {3, 3}, {1, 1}, {1, 1}},    // stride 1, same size
          {{1, 2, 3, 3}, {3, 3}, {}}};               // window = image
}

TEST(Pool, MaxForwardAndGradient) {
  for (const PoolCase& k : PoolCases()) {
    Tensor x = RandomTensor(k.x, DType::kFloat64, 51);
    Shape s;
    std::vector<double> want = RefPool(k, x.ToVector<double>(), 0, &s);
    auto f = [&](const std::vector<Tensor>& in) { return ops::MaxPool2d(in[0], k.Options()); };
    EXPECT_EQ(f({x}).shape(), s) << k.Name();
    CheckForward32(f, {x}, want, 1e-6, 1e-6, "max " + k.Name());
    GradCheck(f, {x}, 1e-6, 1e-6, "max " + k.Name());
  }
}

TEST(Pool, MaxArgmaxOutputAndNegativeInputs) {
  // All-negative input with padding: the zero padding must not win; argmax is the flat index.
  std::vector<double> v{-5, -1, -3, -4, -2, -6, -9, -8, -7};
  Tensor x = ops::FromVector(v, {1, 1, 3, 3}, Cpu());
  std::vector<Tensor> out = Call("max_pool2d", {x}, Attrs{{"kernel", std::vector<int64_t>{2, 2}},
                                                          {"stride", std::vector<int64_t>{2, 2}},
                                                          {"padding", std::vector<int64_t>{1, 1}}});
  ExpectClose(ToDoubles(out[0]), {-5, -1, -4, -2}, 0, 0, "max with padding");
  EXPECT_EQ(out[1].dtype(), DType::kInt32);
  EXPECT_EQ(out[1].ToVector<int32_t>(), (std::vector<int32_t>{0, 1, 3, 4}));
}

TEST(Pool, AvgForwardAndGradient) {
  for (const PoolCase& k : PoolCases())
    for (bool include_pad : {true, false}) {
      std::string what = std::string("avg ") + (include_pad ? "count_include_pad " : "") + k.Name();
      Tensor x = RandomTensor(k.x, DType::kFloat64, 52);
      Shape s;
      std::vector<double> want = RefPool(k, x.ToVector<double>(), include_pad ? 1 : 2, &s);
      auto f = [&](const std::vector<Tensor>& in) { return ops::AvgPool2d(in[0], k.Options(include_pad)); };
      EXPECT_EQ(f({x}).shape(), s) << what;
      CheckForward32(f, {x}, want, 1e-6, 1e-6, what);
      GradCheck(f, {x}, 1e-6, 1e-6, what);
    }
}

TEST(Pool, GlobalAvg) {
  for (const Shape& sx : {Shape{2, 3, 4, 5}, Shape{1, 2, 1, 1}, Shape{3, 70, 20, 30}}) {
    Tensor x = RandomTensor(sx, DType::kFloat64, 53);
    std::vector<double> xv = x.ToVector<double>(), want;
    int64_t hw = sx[2] * sx[3];
    for (int64_t p = 0; p < sx[0] * sx[1]; ++p) {
      double s = 0;
      for (int64_t i = 0; i < hw; ++i) s += xv[size_t(p * hw + i)];
      want.push_back(s / double(hw));
    }
    auto f = [](const std::vector<Tensor>& in) { return ops::GlobalAvgPool(in[0]); };
    EXPECT_EQ(f({x}).shape(), (Shape{sx[0], sx[1]}));
    CheckForward32(f, {x}, want, 1e-5, 1e-6, "global_avg_pool " + ToString(sx));
    if (NumElements(sx) < 1000) GradCheck(f, {x}, 1e-6, 1e-6, "global_avg_pool " + ToString(sx));
  }
}

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

TEST(Embedding, ForwardAndGradient) {
  Tensor table = RandomTensor({5, 3}, DType::kFloat64, 61);
  std::vector<double> tv = table.ToVector<double>();
  // Repeated indices: their gradients add up in the table gradient.
  std::vector<int64_t> idx{4, 0, 2, 2, 1, 4};
  for (DType it : {DType::kInt64, DType::kInt32}) {
    Tensor i64 = ops::FromVector(idx, {2, 3}, Cpu());
    Tensor indices = it == DType::kInt64 ? i64 : ops::Cast(i64, DType::kInt32);
    std::vector<double> want;
    for (int64_t k : idx)
      for (int64_t j = 0; j < 3; ++j) want.push_back(tv[size_t(k * 3 + j)]);
    auto f = [&](const std::vector<Tensor>& in) { return ops::Embedding(in[0], in[1]); };
    EXPECT_EQ(f({table, indices}).shape(), (Shape{2, 3, 3}));
    CheckForward32(f, {table, indices}, want, 1e-7, 0, std::string("embedding ") + Name(it));
    GradCheck(f, {table, indices}, 1e-6, 1e-6, std::string("embedding ") + Name(it));
  }
  // The gradient is the scatter-add of dy rows, also for a wide table (split by columns).
  Tensor wide = RandomTensor({4, 50000}, DType::kFloat32, 62).Detach().set_requires_grad(true);
  Tensor ind = ops::FromVector(std::vector<int32_t>{3, 1, 3}, {3}, Cpu());
  Tensor y = ops::Embedding(wide, ind);
  Tensor dy = RandomTensor({3, 50000}, DType::kFloat32, 63);
  std::vector<float> g;
  Backward(y, [&](const Tensor&, const Tensor& gr) { g = gr.ToVector<float>(); }, dy);
  std::vector<float> dv = dy.ToVector<float>();
  for (int64_t j : {int64_t(0), int64_t(12345), int64_t(49999)}) {
    EXPECT_EQ(g[size_t(0 * 50000 + j)], 0.0f);
    EXPECT_EQ(g[size_t(1 * 50000 + j)], dv[size_t(1 * 50000 + j)]);
    EXPECT_EQ(g[size_t(3 * 50000 + j)], dv[size_t(0 * 50000 + j)] + dv[size_t(2 * 50000 + j)]);
  }
}

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
