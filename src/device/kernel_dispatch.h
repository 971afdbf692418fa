// From a tensor's dtype to the C++ type a kernel is instantiated for, shared by every backend:
// each calls f(T{}) with the type, or throws a DTypeError naming the op.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace loom {

// The arithmetic dtypes: T = float or double. `backend` ("CPU", "CUDA") completes the message.
template <typename F>
void DispatchFloat(DType t, const char* op, const char* backend, F&& f) {
  switch (t) {
    case DType::kFloat32: f(float{}); return;
    case DType::kFloat64: f(double{}); return;
    default: throw DTypeError(detail::Cat("[", op, "] no ", backend, " kernel for dtype ", Name(t)));
  }
}

// Index tensors (embedding): I = int32_t or int64_t.
template <typename F>
void IndexDispatch(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::kInt32: f(int32_t{}); return;
    case DType::kInt64: f(int64_t{}); return;
    default: throw DTypeError(detail::Cat("[", op, "] indices must be int32 or int64, got ", Name(t)));
  }
}

// Kernels that only move bytes serve every dtype: W = an unsigned word of the element's size.
template <typename F>
void WordDispatch(size_t elem, const char* op, F&& f) {
  switch (elem) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
  }
  LOOM_ASSERT(false, "[", op, "] element size ", elem);
}

}  // namespace loom
