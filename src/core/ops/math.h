// Element-wise math with SINGA's (and ONNX's) names: trigonometric and hyperbolic functions and
// their inverses, and rounding. Declarations in core/ops/math.cc; the formulas, shared by the CPU
// and CUDA kernels, in core/elementwise_formulas.h.
#pragma once

#include "core/op.h"

namespace loom {
namespace ops {

// x: float (...) -> y: (...). Differentiable; the derivative reads x.
Tensor Sin(const Tensor& x);
Tensor Cos(const Tensor& x);
Tensor Tan(const Tensor& x);
Tensor Asin(const Tensor& x);   // x in [-1, 1]
Tensor Acos(const Tensor& x);   // x in [-1, 1]
Tensor Atan(const Tensor& x);
Tensor Sinh(const Tensor& x);
Tensor Cosh(const Tensor& x);
Tensor Asinh(const Tensor& x);
Tensor Acosh(const Tensor& x);  // x >= 1
Tensor Atanh(const Tensor& x);  // x in (-1, 1)
// x: float (...) -> y: (...). Piecewise constant: no gradient flows through them.
Tensor Ceil(const Tensor& x);
Tensor Floor(const Tensor& x);
Tensor Round(const Tensor& x);   // halves away from zero (2.5 -> 3, -2.5 -> -3)
Tensor Rounde(const Tensor& x);  // halves to even (2.5 -> 2, 3.5 -> 4)
Tensor Sign(const Tensor& x);    // -1, 0 or 1

}  // namespace ops
}  // namespace loom
