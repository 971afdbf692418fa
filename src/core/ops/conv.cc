// 2-D convolution (NCHW) with stride, zero padding, dilation and groups, and its gradients as
// three ops of their own. Attributes, shared by all four ops:
//   stride (sh, sw), padding (ph, pw), dilation (dh, dw), groups, and optionally padding_end
//   (ph_end, pw_end) (Note [Asymmetric padding] in core/ops_cnn.h)
// and, on the gradient ops, the shape they produce: x_shape (conv2d_grad_input) and w_shape
// (conv2d_grad_weight); a strided convolution maps several input sizes to one output size, so
// the gradient cannot infer it from dy. The layout passes (graph/layouts.cc, weight_layout.cc)
// add, for the operands the CPU kernel reads or writes in oneDNN's blocked layout (1), x_blocked,
// y_blocked and w_blocked on conv2d, dy_blocked, dx_blocked and w_blocked on conv2d_grad_input,
// x_blocked, dy_blocked and dw_blocked on conv2d_grad_weight.
#include "core/ops/common.h"
#include "core/ops_cnn.h"

LOOM_OP_KIND(conv2d_grad_bias);
LOOM_OP_KIND(conv2d_grad_input);
LOOM_OP_KIND(conv2d_grad_weight);

namespace loom {

using namespace opdecl;

namespace {

// The attributes the four convolution ops share (a function, not a table: conv2d_relu's
// declaration, in another file, may be made before this file's tables are).
std::vector<AttrDecl> ConvGeometry() {
  return {{"stride", kInts}, {"padding", kInts}, {"dilation", kInts}, {"groups", kInt}, {"padding_end", kInts}};
}

struct ConvGeom {
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int64_t peh, pew;  // padding_end
};

std::vector<int64_t> Pair(const Attrs& a, const char* key, const char* op) {
  const std::vector<int64_t>& v = a.Ints(key);
  LOOM_CHECK(v.size() == 2, ValueError, "[", op, "] ", key, " must have 2 values (height, width), got ", ToString(v));
  return v;
}

ConvGeom ReadGeom(const Attrs& a, const char* op) {
  std::vector<int64_t> s = Pair(a, "stride", op), p = Pair(a, "padding", op), d = Pair(a, "dilation", op);
  std::vector<int64_t> pe = a.Has("padding_end") ? Pair(a, "padding_end", op) : p;
  ConvGeom g{s[0], s[1], p[0], p[1], d[0], d[1], a.Int("groups"), pe[0], pe[1]};
  LOOM_CHECK(g.sh >= 1 && g.sw >= 1, ValueError, "[", op, "] stride ", ToString(s), " must be positive");
  LOOM_CHECK(g.ph >= 0 && g.pw >= 0, ValueError, "[", op, "] padding ", ToString(p), " must not be negative");
  LOOM_CHECK(g.peh >= 0 && g.pew >= 0, ValueError, "[", op, "] padding_end ", ToString(pe), " must not be negative");
  LOOM_CHECK(g.dh >= 1 && g.dw >= 1, ValueError, "[", op, "] dilation ", ToString(d), " must be positive");
  LOOM_CHECK(g.groups >= 1, ValueError, "[", op, "] groups=", g.groups, " must be positive");
  return g;
}

// The output shape of a convolution of x by w, after checking that they fit together.
Shape ConvOutShape(const char* op, const Shape& x, const Shape& w, const ConvGeom& g) {
  LOOM_CHECK(x.size() == 4, ShapeError, "[", op, "] input ", ToString(x), " must be (N, C, H, W)");
  LOOM_CHECK(w.size() == 4, ShapeError, "[", op, "] weight ", ToString(w), " must be (O, C/groups, KH, KW)");
  LOOM_CHECK(x[1] % g.groups == 0, ValueError, "[", op, "] groups=", g.groups, " does not divide the input's ", x[1],
             " channels");
  LOOM_CHECK(w[0] % g.groups == 0, ValueError, "[", op, "] groups=", g.groups, " does not divide the weight's ",
             w[0], " output channels");
  if (g.groups == 1)
    LOOM_CHECK(w[1] == x[1], ShapeError, "[", op, "] input ", ToString(x), " has ", x[1], " channels, weight ",
               ToString(w), " expects ", w[1]);
  else
    LOOM_CHECK(w[1] * g.groups == x[1], ShapeError, "[", op, "] input ", ToString(x), " has ", x[1],
               " channels, weight ", ToString(w), " with groups=", g.groups, " expects ", w[1] * g.groups);
  LOOM_CHECK(w[2] >= 1 && w[3] >= 1, ShapeError, "[", op, "] weight ", ToString(w), " has an empty kernel");
  int64_t ekh = g.dh * (w[2] - 1) + 1, ekw = g.dw * (w[3] - 1) + 1;  // dilated kernel extent
  int64_t hp = x[2] + g.ph + g.peh, wp = x[3] + g.pw + g.pew;
  LOOM_CHECK(ekh <= hp && ekw <= wp, ShapeError, "[", op, "] kernel (", w[2], ", ", w[3], ") with dilation (", g.dh,
             ", ", g.dw, ") spans (", ekh, ", ", ekw, "), larger than the padded input (", hp, ", ", wp, ") of ",
             ToString(x));
  return {x[0], w[0], (hp - ekh) / g.sh + 1, (wp - ekw) / g.sw + 1};
}

Shape ShapeAttr(const Attrs& a, const char* key, const char* op) {
  const std::vector<int64_t>& s = a.Ints(key);
  LOOM_CHECK(s.size() == 4, ValueError, "[", op, "] ", key, " ", ToString(s), " must have 4 dimensions");
  return Shape(s.begin(), s.end());
}

// dy must be what the forward produced for these shapes.
void CheckGradShape(const char* op, const Shape& dy, const Shape& want) {
  LOOM_CHECK(dy == want, ShapeError, "[", op, "] dy is ", ToString(dy), ", the convolution produces ", ToString(want));
}

// The result's dtype of a convolution pass over operands a and b: theirs, or float32 for
// bfloat16 operands, which need out_dtype float32 (Note [Precision policy] in core/autocast.h:
// what the bf16 policy lowers a float32 convolution or gradient to).
DType ConvResultDType(const char* op, const TensorMeta& a, const TensorMeta& b, const Attrs& attrs) {
  CheckSameDType(op, a, b);
  return LoweredResultDType(op, a.dtype, attrs, {DType::kBFloat16}, "the convolution");
}

}  // namespace

std::vector<AttrDecl> opdecl::Conv2dAttrs() {
  return Join(ConvGeometry(), {{"x_blocked", kInt}, {"y_blocked", kInt}, {"w_blocked", kInt}, {"out_dtype", kInt}});
}

// x: (N, C, H, W), w: (O, C/g, KH, KW) [, bias: (O)] -> y: (N, O, OH, OW)
// out_dtype (optional): float32 for bfloat16 x and w, the convolution computed in float32, its
// result rounded to bfloat16 and widened, then a float32 bias added (Note [Precision policy] in
// core/autocast.h: what the bf16 policy lowers a float32 conv2d to); bfloat16 for bfloat16 x and w
// without a bias, the same result kept in bfloat16 (Note [Convolution outputs kept in bfloat16] in
// graph/bf16_conv_outputs.cc); otherwise the operands' own dtype.
LOOM_OP(conv2d) {
  def.attrs = Conv2dAttrs();
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    LOOM_CHECK(in.size() == 2 || in.size() == 3, ValueError, "[conv2d] takes 2 or 3 inputs (x, w[, bias]), got ",
               in.size());
    if (in[0].dtype != DType::kBFloat16) {
      CheckFloat("conv2d", in[0], "input");
      CheckFloat("conv2d", in[1], "weight");
    }
    // Note [Convolution outputs kept in bfloat16] (graph/bf16_conv_outputs.cc): a bias-free
    // convolution of bfloat16 operands may keep its (bfloat16-rounded) result in bfloat16.
    const bool low_result = in[0].dtype == DType::kBFloat16 && in.size() == 2 &&
                            a.Int("out_dtype", -1) == int64_t(DType::kBFloat16);
    const DType out_dtype = low_result ? DType::kBFloat16 : ConvResultDType("conv2d", in[0], in[1], a);
    Shape y = ConvOutShape("conv2d", in[0].shape, in[1].shape, ReadGeom(a, "conv2d"));
    if (in.size() == 3) {
      LOOM_CHECK(in[2].dtype == out_dtype, DTypeError, "[conv2d] bias is ", Name(in[2].dtype), ", expected ",
                 Name(out_dtype), " (the output's dtype)");
      LOOM_CHECK(in[2].shape == Shape{y[1]}, ShapeError, "[conv2d] bias ", ToString(in[2].shape),
                 " must have shape (", y[1], ",) for weight ", ToString(in[1].shape));
    }
    return std::vector<TensorMeta>{{y, out_dtype}};
  };
  def.saved_inputs = {0, 1};  // x for the weight gradient, w for the input gradient
  def.backward = [](const BackwardArgs& a) {
    // The policy lowers below autograd (Note [Precision policy]): a differentiated conv2d is float.
    LOOM_CHECK(a.input_metas[0].dtype != DType::kBFloat16, DTypeError, "[conv2d] a convolution of bfloat16 operands ",
               "is not differentiable: compute in float32 under loom's precision policy (autocast) instead");
    const Tensor& g = a.grad_outputs[0];
    std::vector<Tensor> grads(a.input_metas.size());
    if (a.needs_input_grad[0]) {
      Attrs ga = a.attrs;  // conv2d's, for the gradient op (Note [Declared attributes])
      ga.Bind(op_kind::conv2d_grad_input).Set("x_shape", a.input_metas[0].shape);
      grads[0] = Call1(op_kind::conv2d_grad_input, {a.inputs[1], g}, ga);
    }
    if (a.needs_input_grad[1]) {
      Attrs ga = a.attrs;
      ga.Bind(op_kind::conv2d_grad_weight).Set("w_shape", a.input_metas[1].shape);
      grads[1] = Call1(op_kind::conv2d_grad_weight, {a.inputs[0], g}, ga);
    }
    if (grads.size() == 3 && a.needs_input_grad[2]) grads[2] = Call1(op_kind::conv2d_grad_bias, {g});
    return grads;
  };
}

// w: (O, C/g, KH, KW), dy: (N, O, OH, OW) -> dx: x_shape (N, C, H, W); bfloat16 w and dy with
// out_dtype float32 give a float32 dx (ConvResultDType)
LOOM_OP(conv2d_grad_input) {
  def.internal = "backward of conv2d";
  def.attrs =
      Join(ConvGeometry(), {{"x_shape", kInts}, {"dy_blocked", kInt}, {"dx_blocked", kInt}, {"w_blocked", kInt},
                            {"out_dtype", kInt}});
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const char* op = "conv2d_grad_input";
    CheckArity(op, in, 2);
    if (in[0].dtype != DType::kBFloat16) CheckFloat(op, in[0], "weight");
    const DType out_dtype = ConvResultDType(op, in[0], in[1], a);
    Shape x = ShapeAttr(a, "x_shape", op);
    CheckGradShape(op, in[1].shape, ConvOutShape(op, x, in[0].shape, ReadGeom(a, op)));
    return std::vector<TensorMeta>{{x, out_dtype}};
  };
}

// x: (N, C, H, W), dy: (N, O, OH, OW) -> dw: w_shape (O, C/g, KH, KW); bfloat16 x and dy with
// out_dtype float32 give a float32 dw (ConvResultDType)
LOOM_OP(conv2d_grad_weight) {
  def.internal = "backward of conv2d";
  def.attrs =
      Join(ConvGeometry(), {{"w_shape", kInts}, {"x_blocked", kInt}, {"dy_blocked", kInt}, {"dw_blocked", kInt},
                            {"out_dtype", kInt}});
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const char* op = "conv2d_grad_weight";
    CheckArity(op, in, 2);
    if (in[0].dtype != DType::kBFloat16) CheckFloat(op, in[0], "input");
    const DType out_dtype = ConvResultDType(op, in[0], in[1], a);
    Shape w = ShapeAttr(a, "w_shape", op);
    CheckGradShape(op, in[1].shape, ConvOutShape(op, in[0].shape, w, ReadGeom(a, op)));
    return std::vector<TensorMeta>{{w, out_dtype}};
  };
}

// w: (O, C, KH, KW) -> the same values in the other layout: blocked = 1: from OIHW to oneDNN's
// OIhw16i16o, 0: back. O and C multiples of 16. The output may be the input itself. Note
// [Weights kept blocked] in device/cpu/passes/weight_layout.cc: run by a graph's guard, not by user code.
LOOM_OP(conv_weight_layout) {
  def.internal = "run by a graph that keeps convolution weights blocked (device/cpu/passes/weight_layout.cc)";
  def.attrs = {{"blocked", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const char* op = "conv_weight_layout";
    CheckArity(op, in, 1);
    LOOM_CHECK(in[0].dtype == DType::kFloat32, DTypeError, "[", op, "] weights must be float32, got ", Name(in[0].dtype));
    const Shape& w = in[0].shape;
    LOOM_CHECK(w.size() == 4 && w[0] % 16 == 0 && w[1] % 16 == 0, ShapeError, "[", op, "] weights ", ToString(w),
               ": expected (O, C, KH, KW) with O and C multiples of 16");
    const int64_t b = a.Int("blocked", -1);
    LOOM_CHECK(b == 0 || b == 1, ValueError, "[", op, "] blocked must be 0 or 1, got ", b);
    return std::vector<TensorMeta>{in[0]};
  };
}

// dy: (N, O, OH, OW) -> db: (O), the sum over N, OH and OW
LOOM_OP(conv2d_grad_bias) {
  def.internal = "backward of conv2d";
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    CheckArity("conv2d_grad_bias", in, 1);
    CheckFloat("conv2d_grad_bias", in[0], "dy");
    LOOM_CHECK(in[0].shape.size() == 4, ShapeError, "[conv2d_grad_bias] dy ", ToString(in[0].shape),
               " must be (N, O, OH, OW)");
    return std::vector<TensorMeta>{{{in[0].shape[1]}, in[0].dtype}};
  };
}

namespace ops {
Tensor Conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt) {
  Attrs a{{"stride", opt.stride}, {"padding", opt.padding}, {"dilation", opt.dilation}, {"groups", opt.groups}};
  if (!opt.padding_end.empty() && opt.padding_end != opt.padding) a.Set("padding_end", opt.padding_end);
  if (bias.defined()) return Call1(op_kind::conv2d, {x, w, bias}, a);
  return Call1(op_kind::conv2d, {x, w}, a);
}
}  // namespace ops

}  // namespace loom
