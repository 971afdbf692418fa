// Comparisons: element-wise, with numpy broadcasting, to a bool tensor; not differentiable
// (Note [Comparisons] in core/compare_formulas.h).
#include "core/ops/common.h"
#include "core/compare_formulas.h"

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

// One op per row of LOOM_COMPARE_FORMULAS. No backward: a comparison's output is a constant to
// autograd (Note [Comparisons]).
#define LOOM_DEFINE_COMPARE_OP(op, formula)                                                               \
  LOOM_OP(op) {                                                                                           \
    def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return InferCompare(#op, in); }; \
  }
LOOM_COMPARE_FORMULAS(LOOM_DEFINE_COMPARE_OP)
#undef LOOM_DEFINE_COMPARE_OP

namespace ops {

Tensor Equal(const Tensor& a, const Tensor& b) { return Call1(op_kind::equal, {a, b}); }
Tensor NotEqual(const Tensor& a, const Tensor& b) { return Call1(op_kind::not_equal, {a, b}); }
Tensor Greater(const Tensor& a, const Tensor& b) { return Call1(op_kind::greater, {a, b}); }
Tensor Less(const Tensor& a, const Tensor& b) { return Call1(op_kind::less, {a, b}); }
Tensor GreaterEqual(const Tensor& a, const Tensor& b) { return Call1(op_kind::greater_equal, {a, b}); }
Tensor LessEqual(const Tensor& a, const Tensor& b) { return Call1(op_kind::less_equal, {a, b}); }

}  // namespace ops
}  // namespace loom
