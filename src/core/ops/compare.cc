// Comparisons: element-wise, with numpy broadcasting, to a bool tensor; not differentiable
// (Note [Comparisons] in device/compare_formulas.h).
#include "core/ops/common.h"
#include "device/compare_formulas.h"

namespace loom {

using namespace opdecl;

namespace {

// Two inputs of one comparable dtype -> bool of their broadcast shape.
std::vector<TensorMeta> InferCompare(const std::string& op, const std::vector<TensorMeta>& in) {
  CheckArity(op, in, 2);
  CheckSameDType(op, in[0], in[1]);
  LOOM_CHECK(ew::IsComparable(in[0].dtype), DTypeError, "[", op, "] cannot compare ", Name(in[0].dtype),
             " tensors; cast them to float32 first");
  return {{BroadcastShapes(in[0].shape, in[1].shape, op.c_str()), DType::kBool}};
}

}  // namespace

// No backward: a comparison's output is a constant to autograd (Note [Comparisons]).
LOOM_OP(equal) {
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return InferCompare("equal", in); };
}
LOOM_OP(not_equal) {
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return InferCompare("not_equal", in); };
}

namespace ops {

Tensor Equal(const Tensor& a, const Tensor& b) { return Call1("equal", {a, b}); }
Tensor NotEqual(const Tensor& a, const Tensor& b) { return Call1("not_equal", {a, b}); }

}  // namespace ops
}  // namespace loom
