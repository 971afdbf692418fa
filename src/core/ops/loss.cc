// Softmax, log-softmax and the losses. Softmax-family kernels see their input as
// (outer, axis, inner) and subtract the maximum along the axis before exponentiating.
#include "core/ops/common.h"

LOOM_OP_KIND(log_softmax_grad);
LOOM_OP_KIND(mse_grad);
LOOM_OP_KIND(softmax_cross_entropy_grad);
LOOM_OP_KIND(softmax_grad);

namespace loom {

using namespace opdecl;

namespace {

std::vector<TensorMeta> InferSoftmax(const std::string& op, const std::vector<TensorMeta>& in, const Attrs& a) {
  std::vector<TensorMeta> out = UnaryFloat(op, in);
  NormalizeAxis(a.Int("axis", -1), int64_t(in[0].shape.size()), op.c_str());
  return out;
}

// (y, dy) -> dx, with the forward's axis
std::vector<TensorMeta> InferSoftmaxGrad(const std::string& op, const std::vector<TensorMeta>& in, const Attrs& a) {
  std::vector<TensorMeta> out = SameShapePair(op, in);
  NormalizeAxis(a.Int("axis", -1), int64_t(in[0].shape.size()), op.c_str());
  return out;
}

// (saved, dy) -> dx, all of one shape; `saved` is the loss's saved input or output.
std::vector<TensorMeta> InferLossGrad(const std::string& op, const std::vector<TensorMeta>& in) {
  CheckArity(op, in, 3);
  CheckFloat(op, in[0]);
  CheckFloat(op, in[2], "dy");
  LOOM_ASSERT(in[2].shape.empty(), op, " dy must be a scalar, got ", ToString(in[2].shape));
  return {in[0]};
}

}  // namespace

// x: (...) -> y: (...), softmax along `axis`
LOOM_OP(softmax) {
  def.attrs = {{"axis", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) { return InferSoftmax("softmax", in, a); };
  def.saved_outputs = {0};
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{Call1(op_kind::softmax_grad, {a.outputs[0], a.grad_outputs[0]}, a.attrs)};
  };
}
// (y, dy) -> dx = y * (dy - sum(dy * y, axis))
LOOM_OP(softmax_grad) {
  def.internal = "backward of softmax";
  def.attrs = {{"axis", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) { return InferSoftmaxGrad("softmax_grad", in, a); };
}

// x: (...) -> y: (...), log of softmax along `axis`
LOOM_OP(log_softmax) {
  def.attrs = {{"axis", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) { return InferSoftmax("log_softmax", in, a); };
  def.saved_outputs = {0};
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{Call1(op_kind::log_softmax_grad, {a.outputs[0], a.grad_outputs[0]}, a.attrs)};
  };
}
// (y, dy) -> dx = dy - exp(y) * sum(dy, axis)
LOOM_OP(log_softmax_grad) {
  def.internal = "backward of log_softmax";
  def.attrs = {{"axis", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    return InferSoftmaxGrad("log_softmax_grad", in, a);
  };
}

// logits: (N, C), labels: int32/int64 (N) or float (N, C) -> loss: (), lse: (N)
// Note [One copy of the logits]
// The second output is each row's log-sum-exp: backward recomputes softmax = exp(logits - lse)
// from the logits it keeps, so no (N, C) tensor besides the logits lives from the forward pass to
// the backward (with a vocabulary of 50,304 and 8,192 rows, one such copy is 1.6 GB in float32),
// and the gradient may take the logits' memory (shareable_inputs) once they die there. The
// logits gradient is (softmax - labels) / N, that of float labels -(logits - lse) / N. ops::
// SoftmaxCrossEntropy returns the loss only.
LOOM_OP(softmax_cross_entropy) {
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    const char* op = "softmax_cross_entropy";
    CheckArity(op, in, 2);
    CheckFloat(op, in[0], "logits");
    const Shape& x = in[0].shape;
    const Shape& t = in[1].shape;
    LOOM_CHECK(x.size() == 2, ShapeError, "[", op, "] logits must be (N, C), got ", ToString(x));
    LOOM_CHECK(x[1] > 0, ShapeError, "[", op, "] logits ", ToString(x), " have no classes");
    LOOM_CHECK(x[0] > 0, ShapeError, "[", op, "] logits ", ToString(x),
               " have no rows: the mean loss over zero samples is undefined (as `mean` of an empty tensor)");
    DType lt = in[1].dtype;
    if (lt == DType::kInt32 || lt == DType::kInt64) {
      LOOM_CHECK(t == Shape{x[0]}, ShapeError, "[", op, "] logits ", ToString(x), " and labels ", ToString(t),
                 ": class-index labels must have shape (", x[0], ",)");
    } else if (lt == DType::kFloat32 || lt == DType::kFloat64) {
      LOOM_CHECK(lt == in[0].dtype, DTypeError, "[", op, "] float labels must have the logits' dtype ",
                 Name(in[0].dtype), ", got ", Name(lt));
      LOOM_CHECK(t == x, ShapeError, "[", op, "] logits ", ToString(x), " and labels ", ToString(t),
                 ": float labels (one-hot or probabilities) must have shape ", ToString(x));
    } else {
      throw DTypeError(detail::Cat("[", op, "] labels must be int32, int64 or float (class indices, or one-hot/"
                                   "probabilities with the logits' dtype), got ", Name(lt)));
    }
    return std::vector<TensorMeta>{{{}, in[0].dtype}, {{x[0]}, in[0].dtype}};
  };
  def.saved_inputs = {0, 1};
  def.saved_outputs = {1};
  def.backward = [](const BackwardArgs& a) {
    const Tensor& g = a.grad_outputs[0];
    if (!g.defined()) return std::vector<Tensor>{Tensor(), Tensor()};  // only lse was used
    const Tensor& logits = a.inputs[0];
    const Tensor& lse = a.outputs[1];
    const Tensor& labels = a.inputs[1];
    Tensor gx, gt;
    if (a.needs_input_grad[0]) gx = Call1(op_kind::softmax_cross_entropy_grad, {logits, labels, lse, g});
    if (a.needs_input_grad[1] && IsFloating(labels.dtype())) {
      Tensor logp = ops::Sub(logits, ops::Reshape(lse, {logits.dim(0), 1}));
      gt = ops::MulScalar(ops::Mul(logp, g), -1.0 / double(logits.dim(0)));
    }
    return std::vector<Tensor>{gx, gt};
  };
}
// (logits (N, C), labels, lse (N), dy ()) -> dlogits (N, C) = (exp(logits - lse) * sum(labels, row)
// - labels) * dy / N. Each element reads only its own logit (and per-row values): it may take over
// the logits' memory (Note [One copy of the logits]).
LOOM_OP(softmax_cross_entropy_grad) {
  def.internal = "backward of softmax_cross_entropy";
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    const char* op = "softmax_cross_entropy_grad";
    CheckArity(op, in, 4);
    CheckFloat(op, in[0], "logits");
    CheckFloat(op, in[3], "dy");
    LOOM_ASSERT(in[0].shape.size() == 2 && in[2].shape == Shape{in[0].shape[0]}, op, " lse ", ToString(in[2].shape),
                " must be one per row of the logits ", ToString(in[0].shape));
    LOOM_ASSERT(in[3].shape.empty(), op, " dy must be a scalar, got ", ToString(in[3].shape));
    return std::vector<TensorMeta>{in[0]};
  };
  def.shareable_inputs = {0};
}

// pred: (...), target: (...) -> loss: (), mean((pred - target)^2)
LOOM_OP(mse) {
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    CheckArity("mse", in, 2);
    CheckFloat("mse", in[0], "pred");
    CheckFloat("mse", in[1], "target");
    CheckSameDType("mse", in[0], in[1]);
    LOOM_CHECK(in[0].shape == in[1].shape, ShapeError, "[mse] pred ", ToString(in[0].shape), " and target ",
               ToString(in[1].shape), " must have the same shape");
    LOOM_CHECK(NumElements(in[0].shape) > 0, ShapeError, "[mse] pred ", ToString(in[0].shape),
               " is empty: the mean over zero elements is undefined (as `mean` of an empty tensor)");
    return std::vector<TensorMeta>{{{}, in[0].dtype}};
  };
  def.saved_inputs = {0, 1};
  def.backward = [](const BackwardArgs& a) {
    Tensor d = Call1(op_kind::mse_grad, {a.inputs[0], a.inputs[1], a.grad_outputs[0]});
    return std::vector<Tensor>{a.needs_input_grad[0] ? d : Tensor(), a.needs_input_grad[1] ? ops::Neg(d) : Tensor()};
  };
}
// (pred, target, dy ()) -> dpred = 2 (pred - target) * dy / numel
LOOM_OP(mse_grad) {
  def.internal = "backward of mse";
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return InferLossGrad("mse_grad", in); };
}

namespace ops {
Tensor Softmax(const Tensor& x, int64_t axis) { return Call1(op_kind::softmax, {x}, Attrs{{"axis", axis}}); }
Tensor LogSoftmax(const Tensor& x, int64_t axis) { return Call1(op_kind::log_softmax, {x}, Attrs{{"axis", axis}}); }
Tensor SoftmaxCrossEntropy(const Tensor& logits, const Tensor& labels) {
  return Call(op_kind::softmax_cross_entropy, {logits, labels})[0];
}
Tensor MseLoss(const Tensor& pred, const Tensor& target) { return Call1(op_kind::mse, {pred, target}); }
}  // namespace ops

}  // namespace loom
