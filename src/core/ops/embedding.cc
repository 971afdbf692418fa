// Embedding lookup: rows of a (V, D) table gathered by integer indices; its gradient
// scatter-adds the output gradient back into a (V, D) table gradient.
//
// Indices are data, so their range can only be checked when the kernel runs: the kernel checks
// every index, serially, before any parallel work (an exception escaping a pool task would end
// the process), and throws ValueError naming the op, the position and the value.
#include <algorithm>

#include "core/ops/common.h"
#include "core/ops_cnn.h"

LOOM_OP_KIND(embedding_grad);

namespace loom {

using namespace opdecl;

namespace {
void CheckIndices(const char* op, const TensorMeta& idx) {
  LOOM_CHECK(idx.dtype == DType::kInt32 || idx.dtype == DType::kInt64, DTypeError, "[", op,
             "] indices must be int32 or int64, got ", Name(idx.dtype));
}
}  // namespace

// table: (V, D), indices: int32/int64 (...) -> y: (..., D)
LOOM_OP(embedding) {
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    CheckArity("embedding", in, 2);
    CheckFloat("embedding", in[0], "table");
    CheckIndices("embedding", in[1]);
    LOOM_CHECK(in[0].shape.size() == 2, ShapeError, "[embedding] table ", ToString(in[0].shape), " must be (V, D)");
    Shape y = in[1].shape;
    y.push_back(in[0].shape[1]);
    return std::vector<TensorMeta>{{y, in[0].dtype}};
  };
  def.saved_inputs = {1};  // the indices; the table itself is not needed
  def.backward = [](const BackwardArgs& a) {
    std::vector<Tensor> grads(2);
    if (a.needs_input_grad[0])
      grads[0] = Call1(op_kind::embedding_grad, {a.inputs[1], a.grad_outputs[0]},
                       Attrs{{"num_rows", a.input_metas[0].shape[0]}});
    return grads;
  };
}

// indices: int32/int64 (...), dy: (..., D) -> dtable: (num_rows, D)
LOOM_OP(embedding_grad) {
  def.internal = "backward of embedding";
  def.attrs = {{"num_rows", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("embedding_grad", in, 2);
    CheckIndices("embedding_grad", in[0]);
    CheckFloat("embedding_grad", in[1], "dy");
    const Shape& i = in[0].shape;
    const Shape& g = in[1].shape;
    LOOM_CHECK(g.size() == i.size() + 1 && std::equal(i.begin(), i.end(), g.begin()), ShapeError,
               "[embedding_grad] dy ", ToString(g), " must be the indices' shape ", ToString(i), " plus (D,)");
    return std::vector<TensorMeta>{{{a.Int("num_rows"), g.back()}, in[1].dtype}};
  };
}

namespace ops {
Tensor Embedding(const Tensor& table, const Tensor& indices) { return Call1(op_kind::embedding, {table, indices}); }
}  // namespace ops

}  // namespace loom
