// Element-wise math (core/ops/math.h). Each differentiable function f saves its input and has a
// gradient op f_grad(x, dy) = dy * f'(x); the rounding functions have no backward.
#include "core/ops/math.h"

#include "core/ops/common.h"

namespace loom {

using namespace opdecl;

#define LOOM_MATH_INFER(opname) [](const std::vector<TensorMeta>& in, const Attrs&) { return UnaryFloat(#opname, in); }

// f(x) with f_grad(x, dy) = dy * f'(x) (core/elementwise_formulas.h). The gradient op comes
// first: the forward's backward calls it by kind (Note [Op kinds]).
#define LOOM_DIFFERENTIABLE_MATH(opname)                                                          \
  LOOM_OP(opname##_grad) {                                                                        \
    def.internal = "backward of " #opname;                                                        \
    def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {                             \
      return SameShapePair(#opname "_grad", in);                                                  \
    };                                                                                            \
    def.shareable_inputs = {0, 1};                                                                \
  }                                                                                               \
  LOOM_OP(opname) {                                                                               \
    def.infer = LOOM_MATH_INFER(opname);                                                          \
    def.saved_inputs = {0};                                                                       \
    def.shareable_inputs = {0};                                                                   \
    def.backward = [](const BackwardArgs& a) {                                                    \
      return std::vector<Tensor>{Call1(op_kind::opname##_grad, {a.inputs[0], a.grad_outputs[0]})}; \
    };                                                                                            \
  }

// A piecewise-constant f(x): its derivative is zero wherever it exists, so no backward.
#define LOOM_STEP_MATH(opname)                 \
  LOOM_OP(opname) {                            \
    def.infer = LOOM_MATH_INFER(opname);       \
    def.shareable_inputs = {0};                \
  }

LOOM_DIFFERENTIABLE_MATH(sin)
LOOM_DIFFERENTIABLE_MATH(cos)
LOOM_DIFFERENTIABLE_MATH(tan)
LOOM_DIFFERENTIABLE_MATH(asin)
LOOM_DIFFERENTIABLE_MATH(acos)
LOOM_DIFFERENTIABLE_MATH(atan)
LOOM_DIFFERENTIABLE_MATH(sinh)
LOOM_DIFFERENTIABLE_MATH(cosh)
LOOM_DIFFERENTIABLE_MATH(asinh)
LOOM_DIFFERENTIABLE_MATH(acosh)
LOOM_DIFFERENTIABLE_MATH(atanh)
LOOM_STEP_MATH(ceil)
LOOM_STEP_MATH(floor)
LOOM_STEP_MATH(round)
LOOM_STEP_MATH(rounde)
LOOM_STEP_MATH(sign)

namespace ops {
Tensor Sin(const Tensor& x) { return Call1(op_kind::sin, {x}); }
Tensor Cos(const Tensor& x) { return Call1(op_kind::cos, {x}); }
Tensor Tan(const Tensor& x) { return Call1(op_kind::tan, {x}); }
Tensor Asin(const Tensor& x) { return Call1(op_kind::asin, {x}); }
Tensor Acos(const Tensor& x) { return Call1(op_kind::acos, {x}); }
Tensor Atan(const Tensor& x) { return Call1(op_kind::atan, {x}); }
Tensor Sinh(const Tensor& x) { return Call1(op_kind::sinh, {x}); }
Tensor Cosh(const Tensor& x) { return Call1(op_kind::cosh, {x}); }
Tensor Asinh(const Tensor& x) { return Call1(op_kind::asinh, {x}); }
Tensor Acosh(const Tensor& x) { return Call1(op_kind::acosh, {x}); }
Tensor Atanh(const Tensor& x) { return Call1(op_kind::atanh, {x}); }
Tensor Ceil(const Tensor& x) { return Call1(op_kind::ceil, {x}); }
Tensor Floor(const Tensor& x) { return Call1(op_kind::floor, {x}); }
Tensor Round(const Tensor& x) { return Call1(op_kind::round, {x}); }
Tensor Rounde(const Tensor& x) { return Call1(op_kind::rounde, {x}); }
Tensor Sign(const Tensor& x) { return Call1(op_kind::sign, {x}); }
}  // namespace ops

}  // namespace loom
