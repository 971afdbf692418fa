// CPU kernels for element-wise ops and activations: one kernel per row of the formula lists
// (Note [Element-wise formulas] in core/elementwise_formulas.h); the loops in common.h
// vectorise and split them across threads.
#include "device/cpu/kernels/common.h"
#include "core/elementwise_formulas.h"

namespace loom {
namespace cpu {
namespace {

// a: (A...), b: (B...) -> y: broadcast(A, B)
template <typename F>
void BinaryCpu(const OpRecord& op, const char* name, F f) {
  FloatDispatch(op.outputs[0].dtype(), name, [&](auto tag) {
    BroadcastBinary<decltype(tag)>(op.inputs[0], op.inputs[1], op.outputs[0], f);
  });
}

// The bf16 policy's GELU record (Note [Precision policy] in core/autocast.h): x bfloat16, each
// result computed in float32 from it, y float32 or (a fused cast) its bfloat16 rounding.
template <typename F>
void UnaryFromBf16(const OpRecord& op, F f) {
  const ew::Params<float> p = ew::ReadParams<float>(op.attrs);
  const uint16_t* x = op.inputs[0].data<uint16_t>();
  const bool to16 = op.outputs[0].dtype() == DType::kBFloat16;
  ParallelFor(op.outputs[0].numel(), kGrain, [&](int64_t b, int64_t e) {
    float tile[kStoreTile];
    for (int64_t i = b; i < e; i += kStoreTile) {
      const int64_t m = std::min(kStoreTile, e - i);
      float* y = to16 ? tile : op.outputs[0].data<float>() + i;
      for (int64_t k = 0; k < m; ++k) y[k] = f(BFloat16ToFloat(x[i + k]), p);
      if (to16) CastFloat32To16(tile, op.outputs[0].data<uint16_t>() + i, m, DType::kBFloat16);
    }
  });
}

// x: (...) -> y: (...); y float32's rounding to bfloat16 or float16 with out_dtype (Note [Casts
// fused into their producers] in graph/fuse_casts.cc); a bfloat16 x: UnaryFromBf16.
template <typename F>
void UnaryCpu(const OpRecord& op, const char* name, F f) {
  if constexpr (ew::TakesBf16Input<F>::value) {
    if (op.inputs[0].dtype() == DType::kBFloat16) return UnaryFromBf16(op, f);
  }
  const DType out = op.outputs[0].dtype();
  if (out != op.inputs[0].dtype()) {
    const ew::Params<float> p = ew::ReadParams<float>(op.attrs);
    UnaryLoopTo16(op.inputs[0].data<float>(), op.outputs[0].data<uint16_t>(), out, op.outputs[0].numel(),
                  [=](float x) -> float { return f(x, p); });
    return;
  }
  FloatDispatch(out, name, [&](auto tag) {
    using T = decltype(tag);
    const ew::Params<T> p = ew::ReadParams<T>(op.attrs);
    UnaryLoop<T>(op.inputs[0].data<T>(), op.outputs[0].data<T>(), op.outputs[0].numel(),
                 [=](T x) -> T { return f(x, p); });
  });
}

// (s, dy) -> dx, all (...); s is the saved input x or output y (a GELU's x may be the bf16
// policy's bfloat16 copy, dy and dx then float32)
template <typename F>
void GradCpu(const OpRecord& op, const char* name, F f) {
  if constexpr (ew::TakesBf16Input<F>::value) {
    if (op.inputs[0].dtype() == DType::kBFloat16) {
      const ew::Params<float> p = ew::ReadParams<float>(op.attrs);
      const uint16_t* s = op.inputs[0].data<uint16_t>();
      const float* dy = op.inputs[1].data<float>();
      float* dx = op.outputs[0].data<float>();
      ParallelFor(op.outputs[0].numel(), kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dx[i] = f(BFloat16ToFloat(s[i]), dy[i], p);
      });
      return;
    }
  }
  FloatDispatch(op.outputs[0].dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const ew::Params<T> p = ew::ReadParams<T>(op.attrs);
    BinaryLoop<T>(op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.outputs[0].data<T>(), op.outputs[0].numel(),
                  [=](T s, T dy) -> T { return f(s, dy, p); });
  });
}

}  // namespace

// Note [What a kernel supports]: FusedCastDTypes and ActivationDTypes (device/kernel_dispatch.h).
bool FusedCastSupportedCpu(const OpRecord& op) { return FusedCastDTypes(op.inputs[0].dtype(), op.outputs[0].dtype()); }
bool ActivationSupportedCpu(const OpRecord& op) {
  return ActivationDTypes(op.inputs[0].dtype(), op.outputs[0].dtype());
}

namespace {

#define LOOM_CPU_EW(op, runner)                                                      \
  void op##_cpu(const OpRecord& o, const KernelContext&) { runner(o, #op, ew::op##_f{}); } \
  LOOM_KERNEL(op, kCPU, op##_cpu);
#define LOOM_CPU_BINARY(op, formula) LOOM_CPU_EW(op, BinaryCpu)
#define LOOM_CPU_UNARY(op, formula) \
  LOOM_CPU_EW(op, UnaryCpu)         \
  LOOM_KERNEL_SUPPORTS(op, kCPU, ActivationSupportedCpu);
#define LOOM_CPU_GRAD(op, formula)                                                                   \
  LOOM_CPU_EW(op, GradCpu)                                                                           \
  bool op##_supports_cpu(const OpRecord& o) {                                                        \
    return ActivationGradDTypes(o.inputs[0].dtype(), o.inputs[1].dtype(), o.outputs[0].dtype(),      \
                                ew::TakesBf16Input<ew::op##_f>::value);                              \
  }                                                                                                  \
  LOOM_KERNEL_SUPPORTS(op, kCPU, op##_supports_cpu);

LOOM_BINARY_FORMULAS(LOOM_CPU_BINARY)
LOOM_UNARY_FORMULAS(LOOM_CPU_UNARY)
LOOM_GRAD_FORMULAS(LOOM_CPU_GRAD)

// cond: (C...) bool or uint8, x: (X...), y: (Y...) -> out: broadcast(C, X, Y)
void WhereCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "where", [&](auto tag) {
    using T = decltype(tag);
    const Tensor &tc = op.inputs[0], &tx = op.inputs[1], &ty = op.inputs[2], &to = op.outputs[0];
    const uint8_t* c = tc.data<uint8_t>();
    const T* x = tx.data<T>();
    const T* y = ty.data<T>();
    T* out = to.data<T>();
    const Shape& s = to.shape();
    if (tc.shape() == s && tx.shape() == s && ty.shape() == s) {
      ParallelFor(to.numel(), kGrain, [=](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = c[i] ? x[i] : y[i];
      });
      return;
    }
    const std::vector<int64_t> sc = BroadcastStrides(tc.shape(), s), sx = BroadcastStrides(tx.shape(), s),
                               sy = BroadcastStrides(ty.shape(), s);
    ParallelFor(to.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        int64_t oc = 0, ox = 0, oy = 0, rest = i;
        for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
          const int64_t idx = rest % s[size_t(d)];
          rest /= s[size_t(d)];
          oc += idx * sc[size_t(d)];
          ox += idx * sx[size_t(d)];
          oy += idx * sy[size_t(d)];
        }
        out[i] = c[oc] ? x[ox] : y[oy];
      }
    });
  });
}
LOOM_KERNEL(where, kCPU, WhereCpu);

}  // namespace
}  // namespace cpu
}  // namespace loom
