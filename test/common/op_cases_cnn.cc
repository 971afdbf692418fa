// The op-case table's rows of the convolutional-network ops: convolution and its gradients,
// pooling, normalisation, embedding (Note [The op-case table] in op_cases.h).
#include <cmath>
#include <limits>

#include "common/op_case_table.h"

namespace loom {
namespace test {
namespace table {
namespace {

// ---------------------------------------------------------------- convolution

struct Conv {
  Shape x, w;
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = false;

  Attrs attrs() const {
    Attrs a{{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}};
    if (!padding_end.empty()) a.Set("padding_end", padding_end);
    return a;
  }
  std::string Name() const {
    return "x" + S(x) + " w" + S(w) + " s" + S(stride) + " p" + S(padding) +
           (padding_end.empty() ? "" : " pe" + S(padding_end)) + " d" + S(dilation) + " g" + std::to_string(groups);
  }
  Shape y(DType dt) const { return OutShape("conv2d", {{x, dt}, {w, dt}}, attrs()); }
  // float32 rows of the larger geometries sum a few hundred products (forward, input gradient)
  // or N OH OW of them, up to a few thousand (weight gradient)
  void Tolerate(OpCase& c) const {
    if (!large || c.dtype != DType::kFloat32) return;
    double tol = c.op == "conv2d_grad_weight" ? 5e-5 : 1e-5;
    c.Tol(tol, tol);
  }
  bool large = false;
  // Note [Asymmetric padding] in core/ops_cnn.h; empty: as padding
  std::vector<int64_t> padding_end{};
};

void ConvForward(Table& t, const Conv& k, DType dt, bool with_bias) {
  OpCase& c = t.Add("conv2d", k.Name() + (with_bias ? " +bias" : ""), dt, ref::Conv2d).In(Uniform(k.x)).In(Uniform(k.w));
  if (with_bias) c.In(Uniform({k.w[0]}));
  c.attrs = k.attrs();
  k.Tolerate(c);
}

// The three gradient ops straight, against the adjoints of the definition.
void ConvGradients(Table& t, const Conv& k, DType dt) {
  const Shape y = k.y(dt);
  OpCase& dx = t.Add("conv2d_grad_input", k.Name(), dt, ref::Conv2dGradInput).In(Uniform(k.w)).In(Uniform(y));
  dx.attrs = Attrs(k.attrs()).Set("x_shape", k.x);
  k.Tolerate(dx);
  OpCase& dw = t.Add("conv2d_grad_weight", k.Name(), dt, ref::Conv2dGradWeight).In(Uniform(k.x)).In(Uniform(y));
  dw.attrs = Attrs(k.attrs()).Set("w_shape", k.w);
  k.Tolerate(dw);
  k.Tolerate(t.Add("conv2d_grad_bias", k.Name(), dt, ref::Conv2dGradBias).In(Uniform(y)));
}

void AddConv(Table& t) {
  // Small geometries, forward and gradient: stride, padding, dilation, groups, 1x1 paths.
  const std::vector<Conv> small = {
      {{2, 3, 5, 5}, {4, 3, 3, 3}},
      {{1, 2, 4, 6}, {3, 2, 2, 3}, {1, 1}, {0, 0}, {1, 1}, 1, true},       // rectangular kernel, bias
      {{2, 2, 7, 6}, {3, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, true},
      {{1, 2, 8, 7}, {2, 2, 3, 2}, {2, 1}, {0, 1}, {1, 1}},               // different strides per axis
      {{2, 2, 7, 7}, {3, 2, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 1, true},       // dilation 2
      {{1, 1, 9, 8}, {2, 1, 3, 2}, {3, 2}, {1, 0}, {2, 3}},               // all of it, asymmetric
      {{1, 2, 3, 3}, {2, 2, 3, 3}, {1, 1}, {2, 2}},                       // padding wider than needed
      {{1, 1, 4, 4}, {1, 1, 4, 4}},                                       // kernel = image: 1x1 output
      {{2, 4, 5, 5}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2, true},       // groups
      {{1, 6, 6, 5}, {6, 2, 3, 3}, {2, 1}, {1, 0}, {1, 1}, 3},
      {{2, 3, 5, 5}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {2, 2}, 3, true},       // depthwise, dilated
      {{2, 3, 4, 5}, {4, 3, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},       // 1x1 direct: no im2col
      {{2, 4, 3, 3}, {4, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 2},            // 1x1 direct, grouped
      {{1, 3, 5, 5}, {2, 3, 1, 1}, {2, 2}},                               // strided 1x1: im2col
      {{1, 3, 3, 3}, {2, 3, 1, 1}, {1, 1}, {1, 1}},                       // padded 1x1: im2col
      // Asymmetric padding (Note [Asymmetric padding] in core/ops_cnn.h): SAME_UPPER and
      // SAME_LOWER of a 3x3 stride 2 (odd total on W), a 1x1 padded at the end only (not the
      // direct path), and odd_padding with groups and per-axis strides.
      {{1, 2, 5, 6}, {3, 2, 3, 3}, {2, 2}, {1, 0}, {1, 1}, 1, true, false, {1, 1}},
      {{1, 2, 5, 6}, {3, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, false, false, {1, 0}},
      {{1, 3, 4, 5}, {4, 3, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true, false, {1, 1}},
      {{1, 4, 6, 5}, {4, 2, 3, 2}, {1, 2}, {2, 0}, {1, 1}, 2, false, false, {0, 1}},
  };
  // Larger geometries, forward and the three gradient ops: every chunking path of the im2col
  // kernels (images per chunk of about 1024 GEMM columns, chunks split across the pool when each
  // GEMM is too small for OpenBLAS to thread), the oneDNN paths (batches split evenly and
  // unevenly, one image, groups, depthwise, a negative right padding, 128+ output channels whose
  // weight reorder is split, weight gradients split by output channel), and the geometries the
  // CUDA backend's cuDNN calls are compared on.
  const std::vector<Conv> large = {
      {{2, 8, 34, 34}, {16, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},   // one image per chunk
      {{2, 16, 18, 18}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true}, // two images, one chunk
      {{7, 3, 6, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},      // seven images, one chunk
      {{5, 3, 20, 20}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},    // chunks of 2, 2, 1 split
      {{3, 4, 32, 32}, {4, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2, true},    // small GEMMs split, grouped
      {{3, 4, 24, 24}, {6, 4, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},    // 1x1 without im2col, split
      {{5, 4, 5, 5}, {4, 4, 1, 1}},                                       // 1x1 batched
      {{2, 4, 6, 5}, {6, 2, 3, 2}, {2, 1}, {1, 1}, {1, 2}, 2, true},
      {{4, 16, 8, 8}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      {{5, 8, 7, 9}, {16, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false},    // 5 images: parts of 3 and 2
      {{1, 3, 12, 12}, {8, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, true},    // one image, first layer
      {{3, 16, 8, 8}, {32, 16, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1, false},  // downsample: right pad -1
      {{2, 16, 6, 6}, {16, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 4, false},   // groups
      {{2, 16, 6, 6}, {16, 1, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 16, true},   // depthwise, dilated
      {{2, 4, 9, 8}, {8, 4, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 1, false},     // asymmetric everything
      {{2, 32, 4, 4}, {160, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false}, // 160 outputs: split reorder
      {{3, 8, 5, 5}, {112, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false},   // dw by channel: 64 + 48
      {{2, 3, 7, 6}, {4, 3, 3, 2}, {1, 1}, {1, 0}, {1, 1}, 1, true},
      {{2, 3, 9, 8}, {5, 3, 3, 3}, {2, 1}, {1, 2}, {2, 1}, 1, true},
      {{3, 4, 6, 5}, {6, 2, 3, 3}, {1, 2}, {1, 1}, {1, 1}, 2, true},
      {{2, 8, 4, 4}, {3, 8, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},
      {{2, 8, 8, 8}, {16, 8, 3, 3}, {2, 2}, {0, 0}, {1, 1}, 1, true, false, {1, 1}},   // SAME_UPPER, oneDNN
      {{3, 4, 6, 7}, {8, 4, 2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, false, false, {0, 0}},  // SAME_LOWER, k 2
  };
  for (DType dt : kFloats) {
    for (const Conv& k : small) ConvForward(t, k, dt, k.bias);
    for (Conv k : large) {
      k.large = true;
      ConvForward(t, k, dt, false);
      if (k.bias) ConvForward(t, k, dt, true);
      ConvGradients(t, k, dt);
    }
  }
  // On CUDA cuDNN writes these results in bfloat16 before widening them (Note [bfloat16
  // convolutions on cuDNN]): each differs from the CPU's float32 by that rounding, at most 2^-9
  // relative, plus float32 summation in another order; 2^-8 relative, 1e-4 absolute near zero.
  // The forward convolution rounds its result so on the CPU too (cpu/kernels/conv.cc, ConvBf16).
  constexpr double kCudnnBf16Rtol = 1.0 / 256, kCudnnBf16Atol = 1e-4;
  // bfloat16 x and w, float32 bias and result (Note [Precision policy] in core/autocast.h:
  // what the bf16 policy lowers a conv2d to; oneDNN's bf16 convolution on the CPU), against the
  // float64 convolution of the same (bfloat16) values, the forward's rounded to bfloat16 before
  // its bias as the kernels round it (ref::Conv2dBf16): within one bfloat16 step, where float32
  // summation puts a sum across a rounding boundary from float64's; the gradients, kept in
  // float32 on the CPU, within float32 summation, 1e-5 relative (2e-5 for the larger sums). Against the float32 convolution of the unrounded inputs
  // a bf16 result differs by bfloat16's rounding of the operands, up to ~2^-8 relative per product.
  for (const std::vector<Conv>* set : {&small, &large})
    for (Conv k : *set) {
      for (bool with_bias : {false, true}) {
        if (with_bias && !k.bias && set == &small) continue;
        OpCase& c = t.Add("conv2d", k.Name() + (with_bias ? " +bias" : "") + " -> float32", DType::kBFloat16,
                          ref::Conv2dBf16)
                        .In(Uniform(k.x))
                        .In(Uniform(k.w))
                        .NoGrad("a convolution of bfloat16 operands is not differentiated (Note [Precision policy])");
        if (with_bias) c.In(Uniform({k.w[0]}).As(kF32));
        c.attrs = k.attrs();
        c.attrs.Set("out_dtype", int64_t(kF32));
        // One bfloat16 step of the rounded sum (a bias added after it may leave a smaller result).
        // (2^-7 relative at the bottom of a binade).
        const double step_atol = with_bias ? 1.0 / 64 : kCudnnBf16Atol;
        c.Tol(1.0 / 128, step_atol).CudaTol(1.0 / 128, step_atol);
      }
      // Its gradients as the bf16 policy lowers them: bfloat16 w and dy -> float32 dx, bfloat16 x
      // and dy -> float32 dw, against the float64 gradients of the same values.
      const Shape y = k.y(kF32);
      const double tol = set == &large ? 2e-5 : 1e-5;
      for (const bool input : {true, false}) {  // dx from w and dy, dw from x and dy
        OpCase& c = t.Add(input ? "conv2d_grad_input" : "conv2d_grad_weight", k.Name() + " -> float32",
                          DType::kBFloat16, input ? ref::Conv2dGradInput : ref::Conv2dGradWeight)
                        .In(Uniform(input ? k.w : k.x))
                        .In(Uniform(y));
        c.attrs = Attrs(k.attrs())
                      .Set(input ? "x_shape" : "w_shape", input ? k.x : k.w)
                      .Set("out_dtype", int64_t(kF32));
        c.Tol(tol, tol).CudaTol(kCudnnBf16Rtol, kCudnnBf16Atol);
      }
    }
  // The fused convolution (Note [Fusing bias and activation] in graph/fuse_bias_act.cc):
  // relu(conv2d(...)), through oneDNN (float32) or the im2col kernels (float64),
  // with and without bias: small geometries (gradient-checked in float64), groups, the 1x1
  // direct path, and larger ones whose batches oneDNN splits.
  for (DType dt : kFloats)
    for (Conv k : {small[0], small[1], small[8], small[10], small[11], large[0], large[3], large[9]}) {
      k.large = k.x[2] * k.x[3] > 200 || k.x[0] > 3;
      for (bool with_bias : {false, true}) {
        OpCase& c = t.Add("conv2d_relu", k.Name() + (with_bias ? " +bias" : ""), dt, ref::Conv2dRelu)
                        .In(Uniform(k.x))
                        .In(Uniform(k.w));
        if (with_bias) c.In(Uniform({k.w[0]}));
        c.attrs = k.attrs();
        k.Tolerate(c);
      }
    }
}

// The in-place weight conversion of Note [Weights kept blocked] (device/cpu/passes/weight_layout.cc), float32
// only: to oneDNN's OIhw16i16o and back, a permutation.
void AddWeightLayout(Table& t) {
  for (const Shape& w : {Shape{16, 16, 1, 1}, Shape{32, 16, 3, 3}, Shape{16, 48, 2, 3}})
    for (int64_t blocked : {int64_t(1), int64_t(0)})
      t.Add("conv_weight_layout", S(w) + (blocked ? " to blocked" : " to OIHW"), kF32, ref::ConvWeightLayout)
          .In(Uniform(w))
          .Exact()
          .Attr("blocked", blocked);
}

// ---------------------------------------------------------------- pooling

struct Pool {
  Shape x;
  std::vector<int64_t> kernel, stride, padding{0, 0};
  std::vector<int64_t> padding_end{};  // Note [Asymmetric padding] in core/ops_cnn.h; empty: as padding

  Attrs attrs() const {
    Attrs a{{"kernel", kernel}, {"stride", stride.empty() ? kernel : stride}, {"padding", padding}};
    if (!padding_end.empty()) a.Set("padding_end", padding_end);
    return a;
  }
  std::string Name() const {
    return "x" + S(x) + " k" + S(kernel) + " s" + S(stride) + " p" + S(padding) +
           (padding_end.empty() ? "" : " pe" + S(padding_end));
  }
};

void AddPool(Table& t) {
  // Forward and gradient (values without ties): windows that tile, overlap, are rectangular,
  // keep the size, or cover the image.
  const std::vector<Pool> small = {{{2, 3, 4, 4}, {2, 2}, {}},
                                   {{1, 2, 5, 6}, {3, 3}, {2, 2}, {1, 1}},
                                   {{2, 2, 7, 5}, {3, 2}, {2, 1}, {1, 0}},
                                   {{1, 1, 5, 5}, {3, 3}, {1, 1}, {1, 1}},
                                   {{1, 2, 3, 3}, {3, 3}, {}},
                                   // asymmetric padding: SAME_UPPER k2 s1, SAME_LOWER and
                                   // SAME_UPPER k3 s2 (odd totals), odd_padding
                                   {{1, 2, 5, 6}, {2, 2}, {1, 1}, {0, 0}, {1, 1}},
                                   {{2, 2, 6, 6}, {3, 3}, {2, 2}, {1, 1}, {0, 0}},
                                   {{2, 2, 6, 6}, {3, 3}, {2, 2}, {0, 0}, {1, 1}},
                                   {{1, 3, 5, 7}, {3, 2}, {1, 2}, {0, 1}, {1, 0}}};
  // Values on a grid of 0.5: ties, where the first maximum takes the gradient; and the gradient
  // ops straight.
  // The last four are wide enough for the CPU's vector path (Note [Max pooling in vectors] in
  // device/cpu/kernels/pool.cc): 16 lanes and a last group moved left, stride 2 and 1, and
  // 8 lanes.
  const std::vector<Pool> ties = {{{2, 3, 7, 8}, {3, 3}, {2, 2}, {1, 1}},
                                  {{2, 2, 6, 6}, {2, 2}, {2, 2}},
                                  {{1, 2, 5, 6}, {3, 2}, {1, 1}, {1, 1}},
                                  {{2, 3, 6, 36}, {2, 2}, {2, 2}},
                                  {{1, 2, 7, 40}, {3, 3}, {2, 2}, {1, 1}},
                                  {{1, 2, 5, 20}, {3, 3}, {1, 1}, {1, 1}},
                                  {{2, 2, 8, 16}, {2, 2}, {2, 2}},
                                  {{1, 2, 7, 40}, {3, 3}, {2, 2}, {0, 0}, {1, 1}},  // vector path, end padded
                                  {{1, 2, 6, 6}, {3, 3}, {2, 2}, {1, 1}, {0, 0}}};
  for (DType dt : kFloats) {
    for (const Pool& k : small) {
      t.Add("max_pool2d", k.Name(), dt, ref::MaxPool2d).In(Uniform(k.x)).Exact().attrs = k.attrs();
      for (int64_t include : {int64_t(1), int64_t(0)})
        t.Add("avg_pool2d", k.Name() + " count_include_pad=" + std::to_string(include), dt, ref::AvgPool2d)
            .In(Uniform(k.x))
            .attrs = Attrs(k.attrs()).Set("count_include_pad", include);
    }
    for (const Pool& k : ties) {
      const Attrs a = k.attrs();
      const Shape y = OutShape("max_pool2d", {{k.x, dt}}, a);
      t.Add("max_pool2d", k.Name() + " with ties", dt, ref::MaxPool2d)
          .In(Grid(k.x))
          .Exact()
          .NoGrad("ties: the maximum is not differentiable there")
          .attrs = a;
      Shape xs = k.x;
      t.Add("max_pool2d_grad", k.Name(), dt, ref::MaxPool2dGrad)
          .In(OpOn("max_pool2d", [xs, dt] { return UniformTensor(xs, dt, -2, 2, /*grid=*/true); }, a, 1))
          .In(Uniform(y))
          .attrs = Attrs(a).Set("x_shape", k.x);
      for (int64_t include : {int64_t(1), int64_t(0)}) {
        Attrs ai = Attrs(a).Set("count_include_pad", include);
        const std::string v = k.Name() + " count_include_pad=" + std::to_string(include);
        t.Add("avg_pool2d", v, dt, ref::AvgPool2d).In(Uniform(k.x)).attrs = ai;
        t.Add("avg_pool2d_grad", v, dt, ref::AvgPool2dGrad).In(Uniform(y)).attrs = Attrs(ai).Set("x_shape", k.x);
      }
    }
    // NaN wins, the first NaN of a window: at a window's start, after a number, two in one
    // window, beside -inf; 2x2 windows over two rows of 32, so 16 outputs in one vector group.
    {
      const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
      std::vector<double> v(64);
      for (size_t i = 0; i < v.size(); ++i) v[i] = double(int(i * 7 % 11) - 5) * 0.5;  // ties too
      for (size_t i : {size_t(0), size_t(3), size_t(34), size_t(36), size_t(37), size_t(41), size_t(9), size_t(40)})
        v[i] = nan;
      v[12] = -inf;
      v[44] = inf;
      v[45] = nan;
      t.Add("max_pool2d", "NaN wins, vector group", dt, ref::MaxPool2d)
          .In(Values({1, 1, 2, 32}, v))
          .Exact()
          .NoGrad("NaN values")
          .attrs = Pool{{1, 1, 2, 32}, {2, 2}, {}}.attrs();
    }
    // All-negative values with padding: the zero padding must not win; argmax is the flat index.
    t.Add("max_pool2d", "negative values, padding", dt, ref::MaxPool2d)
        .In(Values({1, 1, 3, 3}, {-5, -1, -3, -4, -2, -6, -9, -8, -7}))
        .Exact()
        .attrs = Pool{{1, 1, 3, 3}, {2, 2}, {2, 2}, {1, 1}}.attrs();
    for (const Shape& x : {Shape{2, 3, 4, 5}, Shape{1, 2, 1, 1}, Shape{3, 4, 5, 6}, Shape{3, 70, 20, 30}})
      t.Add("global_avg_pool", S(x), dt, ref::GlobalAvgPool).In(Uniform(x));
    t.Add("global_avg_pool_grad", "(3, 4, 5, 6)", dt, ref::GlobalAvgPoolGrad)
        .In(Uniform({3, 4}))
        .Attr("x_shape", Shape{3, 4, 5, 6});
  }
}

// ---------------------------------------------------------------- normalisation

// x in [-2, 3), gamma in [0.5, 1.5), beta in [-1, 1), running mean in [-1, 1), running
// variance in [0.5, 2); the running statistics are never differentiated.
void BatchNormInputs(OpCase& c, const Shape& x) {
  const int64_t ch = x[1];
  c.In(Uniform(x, -2, 3)).In(Uniform({ch}, 0.5, 1.5)).In(Uniform({ch})).In(Uniform({ch}).Constant()).In(
      Uniform({ch}, 0.5, 2).Constant());
}

void AddNorm(Table& t) {
  for (DType dt : kFloats) {
    // batch_norm_train: y, batch mean and invstd, and the running statistics updated in place
    struct Train {
      Shape x;
      double momentum, eps;
    };
    for (const Train& k : {Train{{4, 3}, 0.3, 1e-3}, Train{{2, 3, 5}, 0.3, 1e-3}, Train{{3, 2, 4, 5}, 0.3, 1e-3},
                           Train{{1, 4, 3, 3}, 0.3, 1e-3}, Train{{2, 3, 3, 2}, 0.1, 1e-3},
                           Train{{4, 3, 5, 5}, 0.1, 1e-5}, Train{{8, 3}, 0.1, 1e-5}, Train{{2, 3, 2, 3, 2}, 0.1, 1e-5}}) {
      OpCase& c = t.Add("batch_norm_train", S(k.x) + " momentum=" + Num(k.momentum) + " eps=" + Num(k.eps), dt,
                        ref::BatchNormTrain)
                      .Attr("momentum", k.momentum)
                      .Attr("eps", k.eps);
      BatchNormInputs(c, k.x);
    }
    // With the ReLU (and residual) of graph/fuse_bn_relu.cc: made after backward, no gradient.
    for (const Shape& x : {Shape{2, 3, 4, 5}, Shape{4, 3}})
      for (bool residual : {false, true}) {
        OpCase& c = t.Add("batch_norm_train", S(x) + (residual ? " relu residual" : " relu"), dt, ref::BatchNormTrain)
                        .Attr("momentum", 0.1)
                        .Attr("eps", 1e-5)
                        .Attr("relu", int64_t(1))
                        .NoGrad("relu = 1 is made by a graph pass after the backward");
        BatchNormInputs(c, x);
        if (residual) c.In(Uniform(x, -1, 1));
      }
    // batch_norm_apply: y from the statistics batch_norm_train saved (graph/recompute.cc), with
    // and without the fused ReLU and residual
    for (const Shape& x : {Shape{2, 3, 4, 5}, Shape{4, 3}, Shape{2, 3, 2, 3, 2}})
      for (int fused : {0, 1, 2}) {
        const int64_t ch = x[1];
        auto saved = [ch, dt](size_t which) {
          return Derived([ch, dt, which](const std::vector<Tensor>& made) {
            auto full = [&](double v) { return FromDoubles(std::vector<double>(size_t(ch), v), {ch}, dt); };
            return Call("batch_norm_train", {made[0], made[1], made[2], full(0), full(1)},
                        Attrs{{"momentum", 0.1}, {"eps", 1e-5}})[which];
          });
        };
        OpCase& c = t.Add("batch_norm_apply", S(x) + (fused == 2 ? " relu residual" : fused ? " relu" : ""), dt,
                          ref::BatchNormApply)
                        .In(Uniform(x, -2, 3))
                        .In(Uniform({ch}, 0.5, 1.5))
                        .In(Uniform({ch}))
                        .In(saved(1))
                        .In(saved(2));
        if (fused) c.Attr("relu", int64_t(1));
        if (fused == 2) c.In(Uniform(x, -1, 1));
      }
    for (const auto& [x, eps] : std::vector<std::pair<Shape, double>>{{{3, 4}, 1e-5},
                                                                     {{2, 3, 4, 4}, 1e-5},
                                                                     {{4, 3}, 1e-3},
                                                                     {{2, 3, 3, 2}, 1e-3},
                                                                     {{4, 3, 5, 5}, 1e-5},
                                                                     {{8, 3}, 1e-5},
                                                                     {{2, 3, 2, 3, 2}, 1e-5}}) {
      OpCase& c = t.Add("batch_norm_infer", S(x) + " eps=" + Num(eps), dt, ref::BatchNormInfer).Attr("eps", eps);
      BatchNormInputs(c, x);
    }
    // batch_norm_grad: with the batch statistics (training), or the running ones (inference)
    for (const auto& [x, eps] : std::vector<std::pair<Shape, double>>{
             {{3, 2, 2, 3}, 1e-3}, {{4, 3, 5, 5}, 1e-5}, {{8, 3}, 1e-5}, {{2, 3, 2, 3, 2}, 1e-5}})
      for (int64_t training : {int64_t(1), int64_t(0)}) {
        const int64_t ch = x[1];
        const Attrs stats{{"momentum", 0.1}, {"eps", eps}};
        // The forward's batch statistics of (x, gamma), with running statistics of its own.
        auto batch_stat = [ch, dt, stats](size_t which) {
          return Derived([ch, dt, stats, which](const std::vector<Tensor>& made) {
            auto full = [&](double v) { return FromDoubles(std::vector<double>(size_t(ch), v), {ch}, dt); };
            return Call("batch_norm_train", {made[0], made[1], full(0), full(0), full(1)}, stats)[which];
          });
        };
        OpCase& c = t.Add("batch_norm_grad", S(x) + (training ? " training" : " inference"), dt, ref::BatchNormGrad)
                        .In(Uniform(x, -2, 3))
                        .In(Uniform({ch}, 0.5, 1.5));
        if (training) c.In(batch_stat(1)).In(batch_stat(2));
        else c.In(Uniform({ch})).In(Uniform({ch}, 0.5, 2));
        c.In(Uniform(x)).Attr("eps", eps).Attr("training", training);
      }

    // layer_norm over the last axes: y, and the mean and invstd of each row
    struct Layer {
      Shape x, norm;
    };
    for (const Layer& k : {Layer{{4, 6}, {6}}, Layer{{2, 3, 5}, {5}}, Layer{{2, 3, 4}, {3, 4}}, Layer{{7}, {7}},
                           Layer{{300, 130}, {130}}, Layer{{4, 5, 6}, {6}}, Layer{{4, 5, 6}, {5, 6}},
                           Layer{{3, 700}, {700}}}) {
      t.Add("layer_norm", S(k.x) + " over " + S(k.norm), dt, ref::LayerNorm)
          .In(Uniform(k.x, -2, 3))
          .In(Uniform(k.norm, 0.5, 1.5))
          .In(Uniform(k.norm))
          .Attr("eps", 1e-5);
      if (k.x == Shape{4, 5, 6} || k.x == Shape{3, 700} || k.x == Shape{300, 130}) {
        // (x, gamma, mean, invstd, dy) with the forward's statistics of x; 300 rows: CUDA's
        // dgamma and dbeta in 5 chunks of rows, the last one partial (cuda/transformer.cu, kLnRowChunk)
        auto stat = [k, dt](size_t which) {
          return Derived([k, dt, which](const std::vector<Tensor>& made) {
            Tensor beta = FromDoubles(std::vector<double>(size_t(NumElements(k.norm)), 0.0), k.norm, dt);
            return Call("layer_norm", {made[0], made[1], beta}, Attrs{{"eps", 1e-5}})[which];
          });
        };
        t.Add("layer_norm_grad", S(k.x) + " over " + S(k.norm), dt, ref::LayerNormGrad)
            .In(Uniform(k.x, -2, 3))
            .In(Uniform(k.norm, 0.5, 1.5))
            .In(stat(1))
            .In(stat(2))
            .In(Uniform(k.x));
      }
    }
  }
}

// ---------------------------------------------------------------- embedding

void AddEmbedding(Table& t) {
  const std::vector<double> idx6 = {4, 0, 2, 2, 1, 4};  // repeated indices: their gradients add up
  const std::vector<double> idx15 = {3, 0, 9, 3, 3, 1, 7, 9, 0, 2, 2, 5, 3, 8, 6};
  for (DType dt : kFloats)
    for (DType it : {DType::kInt64, DType::kInt32}) {
      const std::string i = std::string(" ") + Name(it);
      t.Add("embedding", "(5, 3) by (2, 3)" + i, dt, ref::Embedding).In(Uniform({5, 3})).In(Values({2, 3}, idx6, it)).Exact();
      t.Add("embedding", "(10, 4) by (3, 5)" + i, dt, ref::Embedding)
          .In(Uniform({10, 4}))
          .In(Values({3, 5}, idx15, it))
          .Exact();
      t.Add("embedding_grad", "(3, 5, 4) into 10 rows" + i, dt, ref::EmbeddingGrad)
          .In(Values({3, 5}, idx15, it))
          .In(Uniform({3, 5, 4}))
          .Attr("num_rows", int64_t(10));
    }
  // A wide table: the scatter-add split by columns.
  t.Add("embedding_grad", "(3, 50000) into 4 rows", kF32, ref::EmbeddingGrad)
      .In(Values({3}, {3, 1, 3}, DType::kInt32))
      .In(Uniform({3, 50000}))
      .Attr("num_rows", int64_t(4));
}

}  // namespace

void AddCnnCases(Table& t) {
  AddConv(t);
  AddWeightLayout(t);
  AddPool(t);
  AddNorm(t);
  AddEmbedding(t);
}

}  // namespace table
}  // namespace test
}  // namespace loom
