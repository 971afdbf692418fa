// CPU kernels for element-wise ops and activations: one kernel per row of the formula lists
// (Note [Element-wise formulas] in device/elementwise_formulas.h); the loops in common.h
// vectorise and split them across threads.
#include "device/cpu/kernels/common.h"
#include "device/elementwise_formulas.h"

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

// x: (...) -> y: (...)
template <typename F>
void UnaryCpu(const OpRecord& op, const char* name, F f) {
  FloatDispatch(op.outputs[0].dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const ew::Params<T> p = ew::ReadParams<T>(op.attrs);
    UnaryLoop<T>(op.inputs[0].data<T>(), op.outputs[0].data<T>(), op.outputs[0].numel(),
                 [=](T x) -> T { return f(x, p); });
  });
}

// (s, dy) -> dx, all (...); s is the saved input x or output y
template <typename F>
void GradCpu(const OpRecord& op, const char* name, F f) {
  FloatDispatch(op.outputs[0].dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const ew::Params<T> p = ew::ReadParams<T>(op.attrs);
    BinaryLoop<T>(op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.outputs[0].data<T>(), op.outputs[0].numel(),
                  [=](T s, T dy) -> T { return f(s, dy, p); });
  });
}

#define LOOM_CPU_EW(op, runner)                                                      \
  void op##_cpu(const OpRecord& o, const KernelContext&) { runner(o, #op, ew::op##_f{}); } \
  LOOM_KERNEL(op, kCPU, op##_cpu);
#define LOOM_CPU_BINARY(op, formula) LOOM_CPU_EW(op, BinaryCpu)
#define LOOM_CPU_UNARY(op, formula) LOOM_CPU_EW(op, UnaryCpu)
#define LOOM_CPU_GRAD(op, formula) LOOM_CPU_EW(op, GradCpu)

LOOM_BINARY_FORMULAS(LOOM_CPU_BINARY)
LOOM_UNARY_FORMULAS(LOOM_CPU_UNARY)
LOOM_GRAD_FORMULAS(LOOM_CPU_GRAD)

}  // namespace
}  // namespace cpu
}  // namespace loom
