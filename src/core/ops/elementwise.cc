// Element-wise arithmetic: binary ops with numpy broadcasting, scalar forms, unary math.
#include <cmath>

#include "core/ops/common.h"

LOOM_OP_KIND(abs_grad);
LOOM_OP_KIND(clamp_grad);
LOOM_OP_KIND(erf_grad);

namespace loom {

using namespace opdecl;

static std::vector<TensorMeta> ScalarForm(const std::string& op, const std::vector<TensorMeta>& in, const Attrs&) {
  return UnaryFloat(op, in);
}
#define LOOM_UNARY_INFER(opname) \
  [](const std::vector<TensorMeta>& in, const Attrs&) { return UnaryFloat(#opname, in); }
#define LOOM_SCALAR_INFER(opname) \
  [](const std::vector<TensorMeta>& in, const Attrs& a) { return ScalarForm(#opname, in, a); }
#define LOOM_BINARY_INFER(opname) \
  [](const std::vector<TensorMeta>& in, const Attrs&) { return BinaryBroadcast(#opname, in); }
#define LOOM_PAIR_INFER(opname) \
  [](const std::vector<TensorMeta>& in, const Attrs&) { return SameShapePair(#opname, in); }

// clamp's bounds; clamp_grad gets them from clamp's backward.
const std::vector<AttrDecl> kClampAttrs = {{"lo", kFloat}, {"hi", kFloat}};

// Gradient of a broadcast input: the output gradient summed down to the input's shape.
static Tensor Unbroadcast(const Tensor& g, const TensorMeta& in) {
  return g.shape() == in.shape ? g : ops::SumTo(g, in.shape);
}

LOOM_OP(add) {
  def.shareable_inputs = {0, 1};
  def.infer = LOOM_BINARY_INFER(add);
  def.backward = [](const BackwardArgs& a) {
    const Tensor& g = a.grad_outputs[0];
    return std::vector<Tensor>{Unbroadcast(g, a.input_metas[0]), Unbroadcast(g, a.input_metas[1])};
  };
}
LOOM_OP(sub) {
  def.shareable_inputs = {0, 1};
  def.infer = LOOM_BINARY_INFER(sub);
  def.backward = [](const BackwardArgs& a) {
    const Tensor& g = a.grad_outputs[0];
    return std::vector<Tensor>{Unbroadcast(g, a.input_metas[0]),
                               a.needs_input_grad[1] ? Unbroadcast(ops::Neg(g), a.input_metas[1]) : Tensor()};
  };
}
LOOM_OP(mul) {
  def.shareable_inputs = {0, 1};
  def.infer = LOOM_BINARY_INFER(mul);
  def.saved_inputs = {0, 1};
  def.backward = [](const BackwardArgs& a) {
    const Tensor& g = a.grad_outputs[0];
    Tensor ga, gb;
    if (a.needs_input_grad[0]) ga = Unbroadcast(ops::Mul(g, a.inputs[1]), a.input_metas[0]);
    if (a.needs_input_grad[1]) gb = Unbroadcast(ops::Mul(g, a.inputs[0]), a.input_metas[1]);
    return std::vector<Tensor>{ga, gb};
  };
}
LOOM_OP(div) {
  def.shareable_inputs = {0, 1};
  def.infer = LOOM_BINARY_INFER(div);
  def.saved_inputs = {1};
  def.saved_outputs = {0};
  def.backward = [](const BackwardArgs& a) {
    const Tensor& g = a.grad_outputs[0];
    Tensor ga_full = ops::Div(g, a.inputs[1]);  // d(a/b)/da = 1/b
    Tensor ga, gb;
    if (a.needs_input_grad[0]) ga = Unbroadcast(ga_full, a.input_metas[0]);
    // d(a/b)/db = -(a/b)/b = -y/b
    if (a.needs_input_grad[1]) gb = Unbroadcast(ops::Neg(ops::Mul(ga_full, a.outputs[0])), a.input_metas[1]);
    return std::vector<Tensor>{ga, gb};
  };
}
LOOM_OP(pow) {
  def.infer = LOOM_BINARY_INFER(pow);
  def.saved_inputs = {0, 1};
  def.saved_outputs = {0};
  def.backward = [](const BackwardArgs& a) {
    const Tensor& g = a.grad_outputs[0];
    Tensor ga, gb;
    // d(x^p)/dx = p x^(p-1) = p y / x is undefined at x = 0; use x^(p-1) directly.
    if (a.needs_input_grad[0])
      ga = Unbroadcast(ops::Mul(g, ops::Mul(a.inputs[1], ops::Pow(a.inputs[0], ops::AddScalar(a.inputs[1], -1)))),
                       a.input_metas[0]);
    if (a.needs_input_grad[1])  // d(x^p)/dp = y ln x
      gb = Unbroadcast(ops::Mul(g, ops::Mul(a.outputs[0], ops::Log(a.inputs[0]))), a.input_metas[1]);
    return std::vector<Tensor>{ga, gb};
  };
}

LOOM_OP(add_scalar) {
  def.attrs = {{"s", kFloat}};
  def.shareable_inputs = {0};
  def.infer = LOOM_SCALAR_INFER(add_scalar);
  def.backward = [](const BackwardArgs& a) { return std::vector<Tensor>{a.grad_outputs[0]}; };
}
LOOM_OP(mul_scalar) {
  def.attrs = {{"s", kFloat}};
  def.shareable_inputs = {0};
  def.infer = LOOM_SCALAR_INFER(mul_scalar);
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{ops::MulScalar(a.grad_outputs[0], a.attrs.Float("s"))};
  };
}
LOOM_OP(rsub_scalar) {
  def.attrs = {{"s", kFloat}};
  def.shareable_inputs = {0};
  def.infer = LOOM_SCALAR_INFER(rsub_scalar);
  def.backward = [](const BackwardArgs& a) { return std::vector<Tensor>{ops::Neg(a.grad_outputs[0])}; };
}
LOOM_OP(rdiv_scalar) {  // y = s / x, dy/dx = -y / x
  def.attrs = {{"s", kFloat}};
  def.infer = LOOM_SCALAR_INFER(rdiv_scalar);
  def.saved_inputs = {0};
  def.saved_outputs = {0};
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{ops::Neg(ops::Div(ops::Mul(a.grad_outputs[0], a.outputs[0]), a.inputs[0]))};
  };
}
LOOM_OP(pow_scalar) {  // y = x^p, dy/dx = p x^(p-1)
  def.attrs = {{"s", kFloat}};
  def.infer = LOOM_SCALAR_INFER(pow_scalar);
  def.saved_inputs = {0};
  def.backward = [](const BackwardArgs& a) {
    double p = a.attrs.Float("s");
    Tensor d = p == 2 ? ops::MulScalar(a.inputs[0], 2) : ops::MulScalar(ops::PowScalar(a.inputs[0], p - 1), p);
    return std::vector<Tensor>{ops::Mul(a.grad_outputs[0], d)};
  };
}

LOOM_OP(neg) {
  def.shareable_inputs = {0};
  def.infer = LOOM_UNARY_INFER(neg);
  def.backward = [](const BackwardArgs& a) { return std::vector<Tensor>{ops::Neg(a.grad_outputs[0])}; };
}
LOOM_OP(exp) {
  def.infer = LOOM_UNARY_INFER(exp);
  def.saved_outputs = {0};
  def.backward = [](const BackwardArgs& a) { return std::vector<Tensor>{ops::Mul(a.grad_outputs[0], a.outputs[0])}; };
}
LOOM_OP(log) {
  def.infer = LOOM_UNARY_INFER(log);
  def.saved_inputs = {0};
  def.backward = [](const BackwardArgs& a) { return std::vector<Tensor>{ops::Div(a.grad_outputs[0], a.inputs[0])}; };
}
LOOM_OP(sqrt) {  // dy/dx = 1 / (2 y)
  def.infer = LOOM_UNARY_INFER(sqrt);
  def.saved_outputs = {0};
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{ops::Div(ops::MulScalar(a.grad_outputs[0], 0.5), a.outputs[0])};
  };
}
LOOM_OP(abs) {
  def.infer = LOOM_UNARY_INFER(abs);
  def.saved_inputs = {0};
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{Call1(op_kind::abs_grad, {a.inputs[0], a.grad_outputs[0]})};
  };
}
LOOM_OP(abs_grad) {
  def.internal = "backward of abs";
  def.infer = LOOM_PAIR_INFER(abs_grad);
  def.shareable_inputs = {0, 1};
}  // (x, dy) -> dy * sign(x)
LOOM_OP(clamp) {
  def.attrs = kClampAttrs;
  def.infer = LOOM_SCALAR_INFER(clamp);
  def.saved_inputs = {0};
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{Call1(op_kind::clamp_grad, {a.inputs[0], a.grad_outputs[0]}, a.attrs)};
  };
}
LOOM_OP(clamp_grad) {
  def.internal = "backward of clamp";
  def.attrs = kClampAttrs;
  def.infer = LOOM_PAIR_INFER(clamp_grad);
  def.shareable_inputs = {0, 1};
}  // (x, dy) -> dy where lo <= x <= hi
LOOM_OP(erf) {  // d erf(x) / dx = 2 / sqrt(pi) exp(-x^2)
  def.infer = LOOM_UNARY_INFER(erf);
  def.saved_inputs = {0};
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{Call1(op_kind::erf_grad, {a.inputs[0], a.grad_outputs[0]})};
  };
}
LOOM_OP(erf_grad) {
  def.internal = "backward of erf";
  def.infer = LOOM_PAIR_INFER(erf_grad);
  def.shareable_inputs = {0, 1};
}  // (x, dy) -> dy * 2 / sqrt(pi) exp(-x^2)

// cond: bool or uint8 (nonzero: true), x, y: one float dtype -> broadcast(cond, x, y), x where
// cond holds, else y. The gradient reaches x where cond holds and y elsewhere.
LOOM_OP(where) {
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    CheckArity("where", in, 3);
    LOOM_CHECK(in[0].dtype == DType::kBool || in[0].dtype == DType::kUInt8, DTypeError,
               "[where] the condition must be bool or uint8, got ", Name(in[0].dtype));
    CheckFloat("where", in[1], "x");
    CheckFloat("where", in[2], "y");
    CheckSameDType("where", in[1], in[2]);
    const Shape s = BroadcastShapes(BroadcastShapes(in[0].shape, in[1].shape, "where"), in[2].shape, "where");
    return std::vector<TensorMeta>{{s, in[1].dtype}};
  };
  def.saved_inputs = {0};
  def.backward = [](const BackwardArgs& a) {
    const Tensor& g = a.grad_outputs[0];
    const Tensor zero = ops::Zeros({}, g.dtype(), g.device_ptr());
    Tensor gx, gy;
    if (a.needs_input_grad[1]) gx = Unbroadcast(ops::Where(a.inputs[0], g, zero), a.input_metas[1]);
    if (a.needs_input_grad[2]) gy = Unbroadcast(ops::Where(a.inputs[0], zero, g), a.input_metas[2]);
    return std::vector<Tensor>{Tensor(), gx, gy};
  };
}

namespace ops {

Tensor Add(const Tensor& a, const Tensor& b) { return Call1(op_kind::add, {a, b}); }
Tensor Sub(const Tensor& a, const Tensor& b) { return Call1(op_kind::sub, {a, b}); }
Tensor Mul(const Tensor& a, const Tensor& b) { return Call1(op_kind::mul, {a, b}); }
Tensor Div(const Tensor& a, const Tensor& b) { return Call1(op_kind::div, {a, b}); }
Tensor Pow(const Tensor& x, const Tensor& p) { return Call1(op_kind::pow, {x, p}); }
Tensor AddScalar(const Tensor& x, double s) { return Call1(op_kind::add_scalar, {x}, Attrs{{"s", s}}); }
Tensor MulScalar(const Tensor& x, double s) { return Call1(op_kind::mul_scalar, {x}, Attrs{{"s", s}}); }
Tensor SubScalar(const Tensor& x, double s) { return AddScalar(x, -s); }
Tensor RSubScalar(const Tensor& x, double s) { return Call1(op_kind::rsub_scalar, {x}, Attrs{{"s", s}}); }
Tensor DivScalar(const Tensor& x, double s) {
  LOOM_CHECK(s != 0, ValueError, "[div_scalar] division by zero");
  return MulScalar(x, 1.0 / s);
}
Tensor RDivScalar(const Tensor& x, double s) { return Call1(op_kind::rdiv_scalar, {x}, Attrs{{"s", s}}); }
Tensor PowScalar(const Tensor& x, double p) { return Call1(op_kind::pow_scalar, {x}, Attrs{{"s", p}}); }
Tensor Neg(const Tensor& x) { return Call1(op_kind::neg, {x}); }
Tensor Exp(const Tensor& x) { return Call1(op_kind::exp, {x}); }
Tensor Log(const Tensor& x) { return Call1(op_kind::log, {x}); }
Tensor Sqrt(const Tensor& x) { return Call1(op_kind::sqrt, {x}); }
Tensor Abs(const Tensor& x) { return Call1(op_kind::abs, {x}); }
Tensor Erf(const Tensor& x) { return Call1(op_kind::erf, {x}); }
Tensor Where(const Tensor& cond, const Tensor& x, const Tensor& y) { return Call1(op_kind::where, {cond, x, y}); }
Tensor Clamp(const Tensor& x, double lo, double hi) {
  LOOM_CHECK(lo <= hi, ValueError, "[clamp] low ", lo, " is above high ", hi);
  return Call1(op_kind::clamp, {x}, Attrs{{"lo", lo}, {"hi", hi}});
}

}  // namespace ops
}  // namespace loom
