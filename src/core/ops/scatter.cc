// ONNX's ScatterElements and GatherElements, and ConstantOfShape: ops whose SINGA/ONNX forms
// used to read values on the host (so they could not be captured), as device ops.
//
// Note [Element scatter and gather]
// indices and updates have x's rank and one shape E, with E[d] <= x's dim d off the axis. The
// entry at position p of E (coordinates c) names x's element c with c[axis] replaced by
// indices[p] (negative counts from the end, as ONNX's). scatter_elements writes updates[p]
// there in a copy of x; gather_elements reads it. With repeated positions along the axis the
// last update in row-major order wins, on every backend (the kernels run each line along the
// axis in order), and the gradient then routes to every repeat (it is exact only without
// repeats, as ONNX leaves repeats undefined). Indices are data: their range is checked when the
// kernel runs (ValueError on the CPU; on CUDA the line becomes NaN and the next host read
// throws, Note [Errors found on the GPU]).
#include "core/ops/common.h"
#include "core/ops.h"
#include "core/scatter_geometry.h"

LOOM_OP_KIND(gather_elements);

namespace loom {

using namespace opdecl;

namespace {

int64_t CheckAxis(const char* op, const Attrs& a, size_t rank) {
  const int64_t axis = a.Int("axis");
  LOOM_CHECK(axis >= -int64_t(rank) && axis < int64_t(rank), ValueError, "[", op, "] axis ", axis,
             " is out of range for rank ", rank);
  return axis < 0 ? axis + int64_t(rank) : axis;
}

void CheckIndexShape(const char* op, const TensorMeta& x, const TensorMeta& idx, int64_t axis) {
  LOOM_CHECK(idx.dtype == DType::kInt32 || idx.dtype == DType::kInt64, DTypeError, "[", op,
             "] indices must be int32 or int64, got ", Name(idx.dtype));
  LOOM_CHECK(x.shape.size() >= 1 && x.shape.size() <= size_t(ElementLines::kMaxRank), ShapeError, "[", op, "] x ",
             ToString(x.shape), " must have rank 1 to ", ElementLines::kMaxRank);
  LOOM_CHECK(idx.shape.size() == x.shape.size(), ShapeError, "[", op, "] indices ", ToString(idx.shape),
             " must have the rank of x ", ToString(x.shape));
  for (size_t d = 0; d < x.shape.size(); ++d)
    LOOM_CHECK(int64_t(d) == axis || idx.shape[d] <= x.shape[d], ShapeError, "[", op, "] indices ",
               ToString(idx.shape), " exceed x ", ToString(x.shape), " along axis ", d,
               " (only the scattered axis may be longer)");
}

}  // namespace

// x: (D...), indices: int32/int64 (E...), updates: (E...) -> y: (D...), Note [Element scatter and gather]
LOOM_OP(scatter_elements) {
  def.attrs = {{"axis", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("scatter_elements", in, 3);
    CheckFloat("scatter_elements", in[0], "x");
    CheckSameDType("scatter_elements", in[0], in[2]);
    const int64_t axis = CheckAxis("scatter_elements", a, in[0].shape.size());
    CheckIndexShape("scatter_elements", in[0], in[1], axis);
    LOOM_CHECK(in[2].shape == in[1].shape, ShapeError, "[scatter_elements] updates ", ToString(in[2].shape),
               " must have the indices' shape ", ToString(in[1].shape));
    return std::vector<TensorMeta>{in[0]};
  };
  def.saved_inputs = {1};  // the indices
  def.backward = [](const BackwardArgs& a) {
    std::vector<Tensor> grads(3);
    const Tensor& dy = a.grad_outputs[0];
    const Tensor& idx = a.inputs[1];
    if (a.needs_input_grad[0]) {  // the overwritten elements get none
      const TensorMeta& u = a.input_metas[2];
      grads[0] = Call1(op_kind::scatter_elements, {dy, idx, ops::Zeros(u.shape, u.dtype, dy.device_ptr())}, a.attrs);
    }
    if (a.needs_input_grad[2]) grads[2] = Call1(op_kind::gather_elements, {dy, idx}, a.attrs);
    return grads;
  };
}

// x: (D...), indices: int32/int64 (E...) -> y: (E...), Note [Element scatter and gather]
LOOM_OP(gather_elements) {
  def.internal = "backward of scatter_elements";
  def.attrs = {{"axis", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("gather_elements", in, 2);
    CheckFloat("gather_elements", in[0], "x");
    CheckIndexShape("gather_elements", in[0], in[1], CheckAxis("gather_elements", a, in[0].shape.size()));
    return std::vector<TensorMeta>{{in[1].shape, in[0].dtype}};
  };
}

// Note [ConstantOfShape in a graph]
// ONNX's ConstantOfShape makes a tensor whose shape is the *values* of a 1-D int tensor. A graph
// has static shapes, so the shape is an attribute, known when the op is recorded (loom.autograd
// reads it from the tensor eagerly, or from autograd.shape()'s static record while capturing);
// the shape tensor stays an input, and the kernel checks that it still holds that shape, so a
// replay fed another shape fails with a ValueError (on CUDA at the next host read) instead of
// producing a tensor of the old shape.
// shape: int32/int64 (R) -> y: attrs.shape, attrs.dtype, every element attrs.value
LOOM_OP(constant_of_shape) {
  def.attrs = {{"shape", kInts}, {"dtype", kInt}, {"value", kFloat}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("constant_of_shape", in, 1);
    LOOM_CHECK(in[0].dtype == DType::kInt32 || in[0].dtype == DType::kInt64, DTypeError,
               "[constant_of_shape] the shape tensor must be int32 or int64, got ", Name(in[0].dtype));
    const Shape& dims = a.Ints("shape");
    LOOM_CHECK(dims.size() <= 8, ShapeError, "[constant_of_shape] rank ", dims.size(), " is above the 8 supported");
    LOOM_CHECK(in[0].shape == Shape{int64_t(dims.size())}, ShapeError, "[constant_of_shape] the shape tensor ",
               ToString(in[0].shape), " must be 1-D with one entry per dimension of ", ToString(dims));
    for (int64_t d : dims)
      LOOM_CHECK(d >= 0, ValueError, "[constant_of_shape] dimension ", d, " of ", ToString(dims), " is negative");
    std::vector<TensorMeta> out = FromAttrs(in, a);
    CheckFillValue("constant_of_shape", out[0].dtype, a.Float("value"));
    return out;
  };
}

}  // namespace loom
