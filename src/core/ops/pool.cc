// 2-D pooling (NCHW): max, average and global average. Attributes of max/avg pooling and their
// gradients: kernel (kh, kw), stride (sh, sw), padding (ph, pw), optionally padding_end
// (ph_end, pw_end) (Note [Asymmetric padding] in core/ops_cnn.h); avg_pool2d also
// count_include_pad (0/1); the gradients also x_shape, the input shape they produce. The layout
// pass (graph/layouts.cc) adds, for operands in the blocked layout, x_blocked, y_blocked and
// argmax_blocked on max_pool2d, argmax_blocked, dy_blocked and dx_blocked on its gradient,
// x_blocked on global_avg_pool and dx_blocked on its gradient.
//
// Each padding is at most half the kernel, so every window holds a pixel. avg_pool2d's
// count_include_pad = 1 divides by kh * kw: every window lies inside the padded image, so this
// is the count of the padded window at the borders too, whichever end is padded more.
//
// max_pool2d backward uses saved argmax indices rather than recomputation: the op has a second,
// int32 output holding, for every output element, the flat index (ih * W + iw) in its input
// plane of the first maximum of its window. Backward keeps only those indices (4 bytes per
// output element) instead of x and y, and the gradient is a plain scatter-add with no ties to
// resolve. ops::MaxPool2d returns the pooled values only.
#include "core/ops/common.h"
#include "core/ops_cnn.h"

LOOM_OP_KIND(avg_pool2d_grad);
LOOM_OP_KIND(global_avg_pool_grad);
LOOM_OP_KIND(max_pool2d_grad);

namespace loom {

using namespace opdecl;

namespace {

const std::vector<AttrDecl> kPoolGeometry = {
    {"kernel", kInts}, {"stride", kInts}, {"padding", kInts}, {"padding_end", kInts}};

struct PoolGeom {
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t peh, pew;  // padding_end
};

PoolGeom ReadPool(const Attrs& a, const char* op) {
  auto pair = [&](const char* key) {
    const std::vector<int64_t>& v = a.Ints(key);
    LOOM_CHECK(v.size() == 2, ValueError, "[", op, "] ", key, " must have 2 values (height, width), got ",
               ToString(v));
    return v;
  };
  std::vector<int64_t> k = pair("kernel"), s = pair("stride"), p = pair("padding");
  std::vector<int64_t> pe = a.Has("padding_end") ? pair("padding_end") : p;
  PoolGeom g{k[0], k[1], s[0], s[1], p[0], p[1], pe[0], pe[1]};
  LOOM_CHECK(g.kh >= 1 && g.kw >= 1, ValueError, "[", op, "] kernel ", ToString(k), " must be positive");
  LOOM_CHECK(g.sh >= 1 && g.sw >= 1, ValueError, "[", op, "] stride ", ToString(s), " must be positive");
  LOOM_CHECK(g.ph >= 0 && g.pw >= 0 && 2 * g.ph <= g.kh && 2 * g.pw <= g.kw, ValueError, "[", op, "] padding ",
             ToString(p), " must be between 0 and half the kernel ", ToString(k));
  LOOM_CHECK(g.peh >= 0 && g.pew >= 0 && 2 * g.peh <= g.kh && 2 * g.pew <= g.kw, ValueError, "[", op,
             "] padding_end ", ToString(pe), " must be between 0 and half the kernel ", ToString(k));
  return g;
}

Shape PoolOutShape(const char* op, const Shape& x, const PoolGeom& g) {
  LOOM_CHECK(x.size() == 4, ShapeError, "[", op, "] input ", ToString(x), " must be (N, C, H, W)");
  int64_t hp = x[2] + g.ph + g.peh, wp = x[3] + g.pw + g.pew;
  LOOM_CHECK(g.kh <= hp && g.kw <= wp, ShapeError, "[", op, "] kernel (", g.kh, ", ", g.kw,
             ") is larger than the padded input (", hp, ", ", wp, ") of ", ToString(x));
  return {x[0], x[1], (hp - g.kh) / g.sh + 1, (wp - g.kw) / g.sw + 1};
}

std::vector<TensorMeta> InferPool(const char* op, const std::vector<TensorMeta>& in, const Attrs& a) {
  CheckArity(op, in, 1);
  CheckFloat(op, in[0]);
  return {{PoolOutShape(op, in[0].shape, ReadPool(a, op)), in[0].dtype}};
}

// (saved..., dy) -> dx of x_shape, with dy checked against the forward's output shape.
std::vector<TensorMeta> InferPoolGrad(const char* op, const TensorMeta& dy, const Attrs& a) {
  CheckFloat(op, dy, "dy");
  const std::vector<int64_t>& xs = a.Ints("x_shape");
  Shape x(xs.begin(), xs.end());
  Shape want = PoolOutShape(op, x, ReadPool(a, op));
  LOOM_CHECK(dy.shape == want, ShapeError, "[", op, "] dy is ", ToString(dy.shape), ", the pooling produces ",
             ToString(want));
  return {{x, dy.dtype}};
}

// The gradient op `grad` on `in`, with the forward's attributes and the input shape it produces.
Tensor PoolGrad(const OpDef& grad, const std::vector<Tensor>& in, const BackwardArgs& a) {
  Attrs ga = a.attrs;
  ga.Bind(grad).Set("x_shape", a.input_metas[0].shape);  // Note [Declared attributes]
  return Call1(grad, in, ga);
}

Attrs PoolAttrs(const ops::Pool2dOptions& o, const char* op) {
  LOOM_CHECK(o.kernel.size() == 2, ValueError, "[", op, "] kernel must have 2 values (height, width), got ",
             ToString(o.kernel));
  Attrs a{{"kernel", o.kernel}, {"stride", o.stride.empty() ? o.kernel : o.stride}, {"padding", o.padding}};
  if (!o.padding_end.empty() && o.padding_end != o.padding) a.Set("padding_end", o.padding_end);
  return a;
}

}  // namespace

// x: (N, C, H, W) -> y: (N, C, OH, OW), argmax: int32 (N, C, OH, OW) (flat index in the plane)
LOOM_OP(max_pool2d) {
  def.attrs = Join(kPoolGeometry, {{"x_blocked", kInt}, {"y_blocked", kInt}, {"argmax_blocked", kInt}});
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    std::vector<TensorMeta> out = InferPool("max_pool2d", in, a);
    LOOM_CHECK(in[0].shape[2] * in[0].shape[3] <= int64_t(INT32_MAX), ShapeError, "[max_pool2d] input ",
               ToString(in[0].shape), " has planes too large for int32 indices");
    out.push_back({out[0].shape, DType::kInt32});
    return out;
  };
  def.saved_outputs = {1};
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{PoolGrad(op_kind::max_pool2d_grad, {a.outputs[1], a.grad_outputs[0]}, a)};
  };
}
// argmax: int32 (N, C, OH, OW), dy: (N, C, OH, OW) -> dx: x_shape (N, C, H, W)
LOOM_OP(max_pool2d_grad) {
  def.internal = "backward of max_pool2d";
  def.attrs =
      Join(kPoolGeometry, {{"x_shape", kInts}, {"argmax_blocked", kInt}, {"dy_blocked", kInt}, {"dx_blocked", kInt}});
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("max_pool2d_grad", in, 2);
    LOOM_CHECK(in[0].dtype == DType::kInt32 && in[0].shape == in[1].shape, ShapeError,
               "[max_pool2d_grad] argmax must be int32 of dy's shape ", ToString(in[1].shape));
    return InferPoolGrad("max_pool2d_grad", in[1], a);
  };
}

// x: (N, C, H, W) -> y: (N, C, OH, OW)
LOOM_OP(avg_pool2d) {
  def.attrs = Join(kPoolGeometry, {{"count_include_pad", kInt}});
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) { return InferPool("avg_pool2d", in, a); };
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{PoolGrad(op_kind::avg_pool2d_grad, {a.grad_outputs[0]}, a)};
  };
}
// dy: (N, C, OH, OW) -> dx: x_shape (N, C, H, W)
LOOM_OP(avg_pool2d_grad) {
  def.internal = "backward of avg_pool2d";
  def.attrs = Join(kPoolGeometry, {{"count_include_pad", kInt}, {"x_shape", kInts}});
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("avg_pool2d_grad", in, 1);
    return InferPoolGrad("avg_pool2d_grad", in[0], a);
  };
}

// x: (N, C, H, W) -> y: (N, C)
LOOM_OP(global_avg_pool) {
  def.attrs = {{"x_blocked", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    CheckArity("global_avg_pool", in, 1);
    CheckFloat("global_avg_pool", in[0]);
    const Shape& x = in[0].shape;
    LOOM_CHECK(x.size() == 4, ShapeError, "[global_avg_pool] input ", ToString(x), " must be (N, C, H, W)");
    LOOM_CHECK(x[2] * x[3] > 0, ShapeError, "[global_avg_pool] input ", ToString(x), " has empty planes");
    return std::vector<TensorMeta>{{{x[0], x[1]}, in[0].dtype}};
  };
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{PoolGrad(op_kind::global_avg_pool_grad, {a.grad_outputs[0]}, a)};
  };
}
// dy: (N, C) -> dx: x_shape (N, C, H, W) = dy / (H W) everywhere in the plane
LOOM_OP(global_avg_pool_grad) {
  def.internal = "backward of global_avg_pool";
  def.attrs = {{"x_shape", kInts}, {"dx_blocked", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("global_avg_pool_grad", in, 1);
    CheckFloat("global_avg_pool_grad", in[0], "dy");
    const std::vector<int64_t>& xs = a.Ints("x_shape");
    LOOM_CHECK(xs.size() == 4 && in[0].shape == (Shape{xs[0], xs[1]}), ShapeError, "[global_avg_pool_grad] dy ",
               ToString(in[0].shape), " does not match the input ", ToString(xs));
    return std::vector<TensorMeta>{{Shape(xs.begin(), xs.end()), in[0].dtype}};
  };
}

namespace ops {
Tensor MaxPool2d(const Tensor& x, const Pool2dOptions& opt) {
  return Call(op_kind::max_pool2d, {x}, PoolAttrs(opt, "max_pool2d"))[0];
}
Tensor AvgPool2d(const Tensor& x, const Pool2dOptions& opt) {
  Attrs a = PoolAttrs(opt, "avg_pool2d");
  a.Set("count_include_pad", int64_t(opt.count_include_pad));
  return Call1(op_kind::avg_pool2d, {x}, a);
}
Tensor GlobalAvgPool(const Tensor& x) { return Call1(op_kind::global_avg_pool, {x}); }
}  // namespace ops

}  // namespace loom
