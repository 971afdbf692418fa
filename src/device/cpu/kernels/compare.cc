// CPU kernels for the comparisons: one kernel per row of LOOM_COMPARE_FORMULAS (Note
// [Comparisons] in core/compare_formulas.h), on common.h's broadcasting loops.
#include "core/compare_formulas.h"
#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {
namespace {

// a: (A...), b: (B...) one dtype -> y: broadcast(A, B) bool
template <typename F>
void CompareCpu(const OpRecord& op, const char* name, F f) {
  ew::DispatchComparable(op.inputs[0].dtype(), name, "CPU", [&](auto tag) {
    using T = decltype(tag);
    BroadcastBinary<T, uint8_t>(op.inputs[0], op.inputs[1], op.outputs[0],
                                [=](T a, T b) { return uint8_t(f(a, b)); });
  });
}

#define LOOM_CPU_COMPARE(op, formula)                                                            \
  void op##_cpu(const OpRecord& o, const KernelContext&) { CompareCpu(o, #op, ew::op##_f{}); } \
  LOOM_KERNEL(op, kCPU, op##_cpu);
LOOM_COMPARE_FORMULAS(LOOM_CPU_COMPARE)
#undef LOOM_CPU_COMPARE

}  // namespace
}  // namespace cpu
}  // namespace loom
