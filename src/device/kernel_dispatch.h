// From a tensor's dtype to the C++ type a kernel is instantiated for, shared by every backend:
// each calls f(T{}) with the type, or throws a DTypeError naming the op.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/attrs.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/op.h"

namespace loom {

// Note [What a kernel supports], the dtypes every backend's producers take: a result of the
// input's dtype, or a float32 result rounded to bfloat16 or float16 (Note [Casts fused into their
// producers] in graph/fuse_casts.cc); any other pair is out_dtype's error, not a kernel's.
inline bool FusedCastDTypes(DType in, DType out) {
  return in == out || (in == DType::kFloat32 && (out == DType::kBFloat16 || out == DType::kFloat16));
}
// ... and bias_grad's copy of its dy (copy_dtype): a float32 dy and sums, a contiguous 16-bit
// copy of dy's shape in the attribute's dtype, and nothing more.
inline bool BiasGradCopySupported(const OpRecord& op) {
  if (op.outputs.size() != 2 || op.inputs.size() != 1 || !op.attrs.Has("copy_dtype")) return false;
  const Tensor &dy = op.inputs[0], &copy = op.outputs[1];
  return dy.dtype() == DType::kFloat32 && op.outputs[0].dtype() == DType::kFloat32 && copy.dtype() != dy.dtype() &&
         FusedCastDTypes(dy.dtype(), copy.dtype()) && int64_t(copy.dtype()) == op.attrs.Int("copy_dtype") &&
         copy.shape() == dy.shape() && copy.is_contiguous() && dy.is_contiguous();
}
// ... and an activation also the bf16 policy's bfloat16 x with a float32 or bfloat16 result (which
// activations take one is their shape inference's business: the GELUs; Note [Precision policy]).
inline bool ActivationDTypes(DType in, DType out) {
  return FusedCastDTypes(in, out) || (in == DType::kBFloat16 && (out == DType::kFloat32 || out == DType::kBFloat16));
}

// ... and an activation's gradient (saved, dy) -> dx: one dtype, or, for the formulas that take
// a bfloat16 saved value (ew::TakesBf16Input: the GELUs' x, relu's y), that with float32 dy and dx.
inline bool ActivationGradDTypes(DType saved, DType dy, DType dx, bool bf16_saved) {
  return (saved == dy && dy == dx) ||
         (bf16_saved && saved == DType::kBFloat16 && dy == DType::kFloat32 && dx == DType::kFloat32);
}

// Whether the layout pass (Note [Activation layouts] in graph/layouts.cc) marked any operand of
// op as held in the device's blocked layout: an attribute x_blocked, y_blocked, dx_blocked,
// dy_blocked or argmax_blocked that the op declares, nonzero.
inline bool AnyBlockedOperand(const OpRecord& op) {
  for (const char* k : {"x_blocked", "y_blocked", "dx_blocked", "dy_blocked", "argmax_blocked"})
    if (FindAttrDecl(*op.def, k) && op.attrs.Int(k, 0) != 0) return true;
  return false;
}

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
