// The comparison ops' scalar formulas and the dtypes they compare, written once for every
// backend: the CPU kernels (cpu/kernels/compare.cc) and the CUDA kernels (cuda/compare.cu) both
// expand the list below (Note [Element-wise formulas] in core/elementwise_formulas.h is the
// same pattern for arithmetic).
//
// Note [Comparisons]
// A comparison reads two tensors of one dtype (any dtype with a C++ element type: float32,
// float64, int32, int64, uint8, bool) with numpy broadcasting and writes a bool tensor (one byte
// per element, 0 or 1). Its formula sees a, b of the element type T; bool is compared as its
// uint8 storage (false < true). NaN is unequal to everything and neither greater nor less than
// anything, as in IEEE 754 and numpy. Comparisons have no gradient (their OpDef has no backward), like numpy's.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/host_device.h"

// a: (A...), b: (B...) -> y: broadcast(A, B), bool
#define LOOM_COMPARE_FORMULAS(X) \
  X(equal, a == b)               \
  X(not_equal, a != b)           \
  X(greater, a > b)              \
  X(less, a < b)                 \
  X(greater_equal, a >= b)       \
  X(less_equal, a <= b)

namespace loom {
namespace ew {

// One functor per row: ew::equal_f{}(a, b) -> bool.
#define LOOM_EW_COMPARE_FUNCTOR(op, formula) \
  struct op##_f {                            \
    template <typename T>                    \
    LOOM_HD bool operator()(T a, T b) const { \
      return formula;                        \
    }                                        \
  };
LOOM_COMPARE_FORMULAS(LOOM_EW_COMPARE_FUNCTOR)
#undef LOOM_EW_COMPARE_FUNCTOR

// Whether a comparison kernel exists for `t`; shape inference refuses the others.
inline bool IsComparable(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt8:
    case DType::kBool: return true;
    default: return false;
  }
}

// Calls f(T{}) with the element type comparisons read for `t` (bool as its uint8 storage).
template <typename F>
void DispatchComparable(DType t, const char* op, const char* backend, F&& f) {
  switch (t) {
    case DType::kFloat32: f(float{}); return;
    case DType::kFloat64: f(double{}); return;
    case DType::kInt32: f(int32_t{}); return;
    case DType::kInt64: f(int64_t{}); return;
    case DType::kUInt8:
    case DType::kBool: f(uint8_t{}); return;
    default: throw DTypeError(detail::Cat("[", op, "] no ", backend, " kernel for dtype ", Name(t)));
  }
}

}  // namespace ew
}  // namespace loom
