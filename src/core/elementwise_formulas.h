// The element-wise ops' scalar formulas, forward and derivative, written once for every backend:
// the CPU kernels (cpu/kernels/elementwise.cc) and the CUDA kernels (cuda/elementwise.cu) both
// expand the lists below, so the two cannot drift apart.
//
// Note [Element-wise formulas]
// Each list is an X-macro: one row X(op, formula) per op kind, where `formula` is an expression
// in the element type T. A backend passes its own X, which turns the row into a kernel
// registered for `op`; the formula itself becomes the functor ew::op_f below, compiled by nvcc
// as __host__ __device__, so both backends evaluate the same expression in the same type.
//   LOOM_BINARY_FORMULAS  sees a, b: y = f(a, b) with numpy broadcasting.
//   LOOM_UNARY_FORMULAS   sees x and the op's attributes s, lo, hi, slope (converted to T on the
//                         host, 0 when the op has none): y = f(x).
//   LOOM_GRAD_FORMULAS    sees s (the input x or the output y that the op's backward saved, see
//                         its declaration in core/ops/), dy and the attributes lo, hi, slope:
//                         dx = f(s, dy).
// Math functions are spelled std::exp, std::tanh, ...: on the host they are the C library's; in
// device code nvcc resolves them to CUDA's expf/exp (float/double), tanhf/tanh, and so on.
// Adding an element-wise op is one row here for its forward and one for its derivative.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/attrs.h"
#include "core/host_device.h"

namespace loom {
namespace ew {

template <typename T>
LOOM_HD T SigmoidOf(T x) {
  return x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
}
template <typename T>
LOOM_HD T SoftplusOf(T x) {
  return x > T(20) ? x : (x < T(-20) ? std::exp(x) : std::log1p(std::exp(x)));
}
// Note [Exponentials the compiler vectorises]
// A loop that calls std::exp or std::tanh per element runs the C library's scalar function
// (GCC vectorises those calls only under -ffast-math): the tanh-form GELU took 16 ns an element,
// half of a small GPT's step. ExpOf(float) is e^x in plain float arithmetic, which the loops
// vectorise: x = n ln2 + r with |r| <= ln2 / 2 (n rounded by adding and subtracting 1.5 2^23,
// which the default rounding mode rounds to an integer: no call, no conversion), e^r by Cephes'
// expf polynomial (within 2 ulp of std::exp), times 2^n built in the exponent bits; 0 below
// -87.3, +inf above 88, selects rather than branches, so GCC vectorises the loops that call it
// (checked with -fopt-info-vec). double keeps std::exp. Formulas built on it avoid cancellation
// (gelu through a sigmoid, not 1 + tanh). A loop that also sums the results is a reduction GCC
// will not reorder: compute the exponentials in one loop, sum them in another.
LOOM_HD float FloatFromBits(int32_t bits) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}
LOOM_HD float ExpOf(float x) {
  float xc = x < -87.3f ? -87.3f : x;
  xc = xc > 88.0f ? 88.0f : xc;
  xc = x != x ? 0.f : xc;  // NaN: computed from 0 (n stays in range), NaN returned below
  const float n = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  float y = p * FloatFromBits((int32_t(n) + 127) << 23);  // n in [-126, 127]: a normal power of 2
  y = x < -87.3f ? 0.f : y;
  y = x > 88.0f ? INFINITY : y;
  return x != x ? x : y;
}
LOOM_HD double ExpOf(double x) { return std::exp(x); }

// gelu(x) = 0.5 x (1 + tanh(u)), u = k (x + 0.044715 x^3), k = sqrt(2/pi), computed as
// x sigmoid(2u) = x / (1 + e^{-2u}) (the same function, without tanh's cancellation near 0).
template <typename T>
LOOM_HD T GeluOf(T x) {
  const T k = T(0.7978845608028654);
  const T u = k * (x + T(0.044715) * x * x * x);
  return x / (T(1) + ExpOf(T(-2) * u));
}
// d/dx: 0.5 (1 + t) + 0.5 x (1 - t^2) u', with 0.5 (1 + t) = s = sigmoid(2u) and
// 0.5 (1 - t^2) = 2 s (1 - s), 1 - s = e s for e = e^{-2u}.
template <typename T>
LOOM_HD T GeluGradOf(T x) {
  const T k = T(0.7978845608028654);
  const T u = k * (x + T(0.044715) * x * x * x);
  const T e = ExpOf(T(-2) * u);
  const T s = T(1) / (T(1) + e);
  const T ds = e * s * s;  // s (1 - s), finite where e overflows (s = 0)
  return s + T(2) * x * (e > T(0) && s > T(0) ? ds : T(0)) * k * (T(1) + T(3) * T(0.044715) * x * x);
}
// gelu_erf(x) = 0.5 x (1 + erf(x / sqrt(2))), the exact form (PyTorch's approximate="none")
template <typename T>
LOOM_HD T GeluErfOf(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
}
// d/dx = 0.5 (1 + erf(x / sqrt(2))) + x exp(-x^2 / 2) / sqrt(2 pi)
template <typename T>
LOOM_HD T GeluErfGradOf(T x) {
  return T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476))) + x * std::exp(T(-0.5) * x * x) * T(0.3989422804014327);
}

}  // namespace ew
}  // namespace loom

// a: (A...), b: (B...) -> y: broadcast(A, B)
#define LOOM_BINARY_FORMULAS(X) \
  X(add, a + b)                 \
  X(sub, a - b)                 \
  X(mul, a * b)                 \
  X(div, a / b)                 \
  X(pow, std::pow(a, b))

// x: (...) -> y: (...)
#define LOOM_UNARY_FORMULAS(X)                           \
  X(add_scalar, x + s)                                   \
  X(mul_scalar, x * s)                                   \
  X(rsub_scalar, s - x)                                  \
  X(rdiv_scalar, s / x)                                  \
  X(pow_scalar, s == T(2) ? x * x : std::pow(x, s))      \
  X(neg, -x)                                             \
  X(exp, std::exp(x))                                    \
  X(log, std::log(x))                                    \
  X(sqrt, std::sqrt(x))                                  \
  X(abs, std::abs(x))                                    \
  X(erf, std::erf(x))                                    \
  X(clamp, x < lo ? lo : (x > hi ? hi : x))              \
  X(relu, x > T(0) || x != x ? x : T(0)) /* NaN stays NaN */ \
  X(leaky_relu, x > T(0) ? x : slope * x)                \
  X(sigmoid, ew::SigmoidOf(x))                           \
  X(tanh, std::tanh(x))                                  \
  X(gelu, ew::GeluOf(x))                                 \
  X(gelu_erf, ew::GeluErfOf(x))                          \
  X(softplus, ew::SoftplusOf(x))                         \
  X(sin, std::sin(x))                                    \
  X(cos, std::cos(x))                                    \
  X(tan, std::tan(x))                                    \
  X(asin, std::asin(x))                                  \
  X(acos, std::acos(x))                                  \
  X(atan, std::atan(x))                                  \
  X(sinh, std::sinh(x))                                  \
  X(cosh, std::cosh(x))                                  \
  X(asinh, std::asinh(x))                                \
  X(acosh, std::acosh(x))                                \
  X(atanh, std::atanh(x))                                \
  X(ceil, std::ceil(x))                                  \
  X(floor, std::floor(x))                                \
  X(round, std::round(x)) /* halves away from zero */    \
  X(rounde, std::rint(x)) /* halves to even */           \
  X(sign, x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)))

// (s, dy) -> dx, all (...)
#define LOOM_GRAD_FORMULAS(X)                                  \
  X(abs_grad, s > T(0) ? dy : (s < T(0) ? -dy : T(0)))         \
  X(erf_grad, dy * T(1.1283791670955126) * std::exp(-s * s))   \
  X(clamp_grad, (s >= lo && s <= hi) ? dy : T(0))              \
  X(relu_grad, s > T(0) || s != s ? dy : T(0))                \
  X(leaky_relu_grad, s > T(0) ? dy : slope * dy)               \
  X(sigmoid_grad, dy * s * (T(1) - s))                         \
  X(tanh_grad, dy * (T(1) - s * s))                            \
  X(gelu_grad, dy * ew::GeluGradOf(s))                         \
  X(gelu_erf_grad, dy * ew::GeluErfGradOf(s))                  \
  X(softplus_grad, dy * ew::SigmoidOf(s))                      \
  X(sin_grad, dy * std::cos(s))                                \
  X(cos_grad, -dy * std::sin(s))                               \
  X(tan_grad, dy / (std::cos(s) * std::cos(s)))                \
  X(asin_grad, dy / std::sqrt(T(1) - s * s))                   \
  X(acos_grad, -dy / std::sqrt(T(1) - s * s))                  \
  X(atan_grad, dy / (T(1) + s * s))                            \
  X(sinh_grad, dy * std::cosh(s))                              \
  X(cosh_grad, dy * std::sinh(s))                              \
  X(asinh_grad, dy / std::sqrt(s * s + T(1)))                  \
  X(acosh_grad, dy / std::sqrt(s * s - T(1)))                  \
  X(atanh_grad, dy / (T(1) - s * s))

namespace loom {
namespace ew {

// The attributes a unary or gradient formula may read, converted to T once, on the host.
template <typename T>
struct Params {
  T s, lo, hi, slope;
};
// Those the record has, 0 for the others: each op declares only the ones its formula reads, and
// asking relu for a slope would read a key relu does not declare (Note [Declared attributes]).
template <typename T>
Params<T> ReadParams(const Attrs& a) {
  Params<T> p{T(0), T(0), T(0), T(0)};
  for (const auto& kv : a.items()) {
    const std::string& k = kv.first;
    T* slot = k == "s" ? &p.s : k == "lo" ? &p.lo : k == "hi" ? &p.hi : k == "slope" ? &p.slope : nullptr;
    if (slot) *slot = T(a.Float(k));
  }
  return p;
}

// One functor per row: ew::add_f{}(a, b), ew::relu_f{}(x, params), ew::relu_grad_f{}(s, dy, params).
#define LOOM_EW_BINARY_FUNCTOR(op, formula)              \
  struct op##_f {                                        \
    template <typename T>                                \
    LOOM_HD T operator()(T a, T b) const {               \
      return formula;                                    \
    }                                                    \
  };
#define LOOM_EW_UNARY_FUNCTOR(op, formula)                                  \
  struct op##_f {                                                           \
    template <typename T>                                                   \
    LOOM_HD T operator()(T x, const Params<T>& p) const {                   \
      const T s = p.s, lo = p.lo, hi = p.hi, slope = p.slope;               \
      (void)s, (void)lo, (void)hi, (void)slope;                             \
      return formula;                                                       \
    }                                                                       \
  };
#define LOOM_EW_GRAD_FUNCTOR(op, formula)                                   \
  struct op##_f {                                                           \
    template <typename T>                                                   \
    LOOM_HD T operator()(T s, T dy, const Params<T>& p) const {             \
      const T lo = p.lo, hi = p.hi, slope = p.slope;                        \
      (void)lo, (void)hi, (void)slope;                                      \
      return formula;                                                       \
    }                                                                       \
  };
LOOM_BINARY_FORMULAS(LOOM_EW_BINARY_FUNCTOR)
LOOM_UNARY_FORMULAS(LOOM_EW_UNARY_FUNCTOR)
LOOM_GRAD_FORMULAS(LOOM_EW_GRAD_FUNCTOR)
#undef LOOM_EW_BINARY_FUNCTOR
#undef LOOM_EW_UNARY_FUNCTOR
#undef LOOM_EW_GRAD_FUNCTOR

// The formulas whose ops also take the bf16 policy's bfloat16 x (Note [Precision policy] in
// core/autocast.h): the GELUs and their gradients, and relu's gradient, whose mask may come from
// the bfloat16 copy of y (Note [ReLU masks from the bfloat16 copy] in graph/bf16_relu_mask.cc).
// The kernels build that path for these only, and their supports predicates say so.
template <typename F>
struct TakesBf16Input {
  static constexpr bool value = false;
};
template <> struct TakesBf16Input<gelu_f> { static constexpr bool value = true; };
template <> struct TakesBf16Input<gelu_erf_f> { static constexpr bool value = true; };
template <> struct TakesBf16Input<gelu_grad_f> { static constexpr bool value = true; };
template <> struct TakesBf16Input<gelu_erf_grad_f> { static constexpr bool value = true; };
template <> struct TakesBf16Input<relu_grad_f> { static constexpr bool value = true; };

}  // namespace ew
}  // namespace loom
