// The activations of the fused dense layer (Note [Dense, bias, activation] in
// core/ops/dense_bias_act.cc), forward and backward from the output, for every backend: the CPU
// kernels (cpu/kernels/dense_bias_act.cc) and the CUDA kernels (cuda/bias_act.cu) both call
// these, and they call the element-wise ops' own functors (core/elementwise_formulas.h), so a
// fused op computes each element with the very expression the unfused ops use: add_bias's
// `x + b`, then relu/tanh/sigmoid; relu_grad/tanh_grad/sigmoid_grad from the output.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/elementwise_formulas.h"
#include "core/half.h"
#include "core/host_device.h"

namespace loom {

// The `act` attribute of dense_bias_act and bias_act_grad.
enum class BiasAct : int64_t { kNone = 0, kRelu = 1, kTanh = 2, kSigmoid = 3 };
constexpr int64_t kNumBiasActs = 4;

// Calls f(std::integral_constant<BiasAct, act>{}) (host code): a backend instantiates one loop
// or kernel per activation, each specialised (and vectorised) on its own.
template <typename F>
void WithAct(BiasAct act, F&& f) {
  switch (act) {
    case BiasAct::kRelu: return f(std::integral_constant<BiasAct, BiasAct::kRelu>{});
    case BiasAct::kTanh: return f(std::integral_constant<BiasAct, BiasAct::kTanh>{});
    case BiasAct::kSigmoid: return f(std::integral_constant<BiasAct, BiasAct::kSigmoid>{});
    default: return f(std::integral_constant<BiasAct, BiasAct::kNone>{});
  }
}

// bias_act_grad's saved output y: of dy's dtype, or a bfloat16 or float16 copy of a float32 y
// (Note [ReLU masks from the bfloat16 copy] in graph/bf16_relu_mask.cc), read widened to float.
struct SavedBFloat16 {
  const uint16_t* p;
  LOOM_HD float operator[](int64_t i) const { return BFloat16ToFloat(p[i]); }
};
struct SavedFloat16 {
  const uint16_t* p;
  LOOM_HD float operator[](int64_t i) const { return HalfToFloat(p[i]); }
};
// Calls f(y) (host code) with a reader of the saved output's elements as T: y's own pointer, or
// at T = float a widening reader of its 16-bit copy.
template <typename T, typename F>
void WithSavedOutput(DType saved, const void* y, F&& f) {
  if constexpr (std::is_same<T, float>::value) {
    if (saved == DType::kBFloat16) return f(SavedBFloat16{static_cast<const uint16_t*>(y)});
    if (saved == DType::kFloat16) return f(SavedFloat16{static_cast<const uint16_t*>(y)});
  }
  f(static_cast<const T*>(y));
}

namespace ew {

// y = act(z)
template <typename T>
LOOM_HD T ApplyAct(BiasAct act, T z) {
  const Params<T> p{T(0), T(0), T(0), T(0)};
  switch (act) {
    case BiasAct::kRelu: return relu_f{}(z, p);
    case BiasAct::kTanh: return tanh_f{}(z, p);
    case BiasAct::kSigmoid: return sigmoid_f{}(z, p);
    default: return z;
  }
}

// dz = dy * act'(z), computed from the output y = act(z)
template <typename T>
LOOM_HD T ActGradFromOutput(BiasAct act, T y, T dy) {
  const Params<T> p{T(0), T(0), T(0), T(0)};
  switch (act) {
    case BiasAct::kRelu: return relu_grad_f{}(y, dy, p);
    case BiasAct::kTanh: return tanh_grad_f{}(y, dy, p);
    case BiasAct::kSigmoid: return sigmoid_grad_f{}(y, dy, p);
    default: return dy;
  }
}

}  // namespace ew
}  // namespace loom
