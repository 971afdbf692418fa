// CPU kernels for element-wise ops and activations. Each is one functor over T; the loops in
// common.h vectorise and split them across threads.
#include <cmath>

#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {
namespace {

// a: (A...), b: (B...) -> y: broadcast(A, B)
#define LOOM_CPU_BINARY(opname, expr)                                                    \
  void opname##_cpu(const OpRecord& op, const KernelContext&) {                          \
    FloatDispatch(op.outputs[0].dtype(), #opname, [&](auto tag) {                        \
      using T = decltype(tag);                                                           \
      BroadcastBinary<T>(op.inputs[0], op.inputs[1], op.outputs[0],                      \
                         [](T a, T b) -> T { return expr; });                            \
    });                                                                                  \
  }                                                                                      \
  LOOM_KERNEL(opname, kCPU, opname##_cpu);

// x: (...) -> y: (...), with scalar attribute s
#define LOOM_CPU_SCALAR(opname, expr)                                                    \
  void opname##_cpu(const OpRecord& op, const KernelContext&) {                          \
    FloatDispatch(op.outputs[0].dtype(), #opname, [&](auto tag) {                        \
      using T = decltype(tag);                                                           \
      const T s = T(op.attrs.Float("s"));                                                \
      UnaryLoop<T>(op.inputs[0].data<T>(), op.outputs[0].data<T>(), op.outputs[0].numel(), \
                   [s](T x) -> T { return expr; });                                      \
    });                                                                                  \
  }                                                                                      \
  LOOM_KERNEL(opname, kCPU, opname##_cpu);

// x: (...) -> y: (...); `attrs` names may be used in expr through the captured op.
#define LOOM_CPU_UNARY(opname, expr)                                                     \
  void opname##_cpu(const OpRecord& op, const KernelContext&) {                          \
    FloatDispatch(op.outputs[0].dtype(), #opname, [&](auto tag) {                        \
      using T = decltype(tag);                                                           \
      const T lo = T(op.attrs.Float("lo", 0)), hi = T(op.attrs.Float("hi", 0));          \
      const T slope = T(op.attrs.Float("slope", 0));                                     \
      (void)lo; (void)hi; (void)slope;                                                   \
      UnaryLoop<T>(op.inputs[0].data<T>(), op.outputs[0].data<T>(), op.outputs[0].numel(), \
                   [=](T x) -> T { return expr; });                                      \
    });                                                                                  \
  }                                                                                      \
  LOOM_KERNEL(opname, kCPU, opname##_cpu);

// (s, dy) -> dx, all (...); s is the saved input x or output y
#define LOOM_CPU_GRAD(opname, expr)                                                      \
  void opname##_cpu(const OpRecord& op, const KernelContext&) {                          \
    FloatDispatch(op.outputs[0].dtype(), #opname, [&](auto tag) {                        \
      using T = decltype(tag);                                                           \
      const T lo = T(op.attrs.Float("lo", 0)), hi = T(op.attrs.Float("hi", 0));          \
      const T slope = T(op.attrs.Float("slope", 0));                                     \
      (void)lo; (void)hi; (void)slope;                                                   \
      BinaryLoop<T>(op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.outputs[0].data<T>(), \
                    op.outputs[0].numel(), [=](T s, T dy) -> T { return expr; });        \
    });                                                                                  \
  }                                                                                      \
  LOOM_KERNEL(opname, kCPU, opname##_cpu);

template <typename T> T SigmoidOf(T x) { return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)); }
template <typename T> T SoftplusOf(T x) { return x > T(20) ? x : (x < T(-20) ? std::exp(x) : std::log1p(std::exp(x))); }
// gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi)
template <typename T> T GeluOf(T x) {
  const T k = T(0.7978845608028654);
  return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
}
template <typename T> T GeluGradOf(T x) {
  const T k = T(0.7978845608028654);
  T u = k * (x + T(0.044715) * x * x * x);
  T t = std::tanh(u);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * T(0.044715) * x * x);
}

LOOM_CPU_BINARY(add, a + b)
LOOM_CPU_BINARY(sub, a - b)
LOOM_CPU_BINARY(mul, a * b)
LOOM_CPU_BINARY(div, a / b)
LOOM_CPU_BINARY(pow, std::pow(a, b))

LOOM_CPU_SCALAR(add_scalar, x + s)
LOOM_CPU_SCALAR(mul_scalar, x * s)
LOOM_CPU_SCALAR(rsub_scalar, s - x)
LOOM_CPU_SCALAR(rdiv_scalar, s / x)
LOOM_CPU_SCALAR(pow_scalar, s == T(2) ? x * x : std::pow(x, s))

LOOM_CPU_UNARY(neg, -x)
LOOM_CPU_UNARY(exp, std::exp(x))
LOOM_CPU_UNARY(log, std::log(x))
LOOM_CPU_UNARY(sqrt, std::sqrt(x))
LOOM_CPU_UNARY(abs, std::abs(x))
LOOM_CPU_UNARY(clamp, x < lo ? lo : (x > hi ? hi : x))
LOOM_CPU_UNARY(relu, x > T(0) ? x : T(0))
LOOM_CPU_UNARY(leaky_relu, x > T(0) ? x : slope * x)
LOOM_CPU_UNARY(sigmoid, SigmoidOf(x))
LOOM_CPU_UNARY(tanh, std::tanh(x))
LOOM_CPU_UNARY(gelu, GeluOf(x))
LOOM_CPU_UNARY(softplus, SoftplusOf(x))

LOOM_CPU_GRAD(abs_grad, s > T(0) ? dy : (s < T(0) ? -dy : T(0)))
LOOM_CPU_GRAD(clamp_grad, (s >= lo && s <= hi) ? dy : T(0))
LOOM_CPU_GRAD(relu_grad, s > T(0) ? dy : T(0))
LOOM_CPU_GRAD(leaky_relu_grad, s > T(0) ? dy : slope * dy)
LOOM_CPU_GRAD(sigmoid_grad, dy * s * (T(1) - s))
LOOM_CPU_GRAD(tanh_grad, dy * (T(1) - s * s))
LOOM_CPU_GRAD(gelu_grad, dy * GeluGradOf(s))
LOOM_CPU_GRAD(softplus_grad, dy * SigmoidOf(s))

}  // namespace
}  // namespace cpu
}  // namespace loom
