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

// h: (N, D), w: (V, D) (tb 1, an embedding table: GPT-2's tied head) or (D, V) (tb 0), labels:
// int32/int64 (N) -> loss (); with grads 1 also dh (N, D) and dw (w's shape), the loss's gradients
// for a gradient of one. chunk: rows per chunk (0, the default: LinearCrossEntropyLayout's rule).
// Note [Cross-entropy fused with the head's product]
// softmax_cross_entropy(h w^T, labels) without the (N, V) logits: the kernel walks the rows in
// chunks (LinearCrossEntropyLayout in device/kernel_shapes.h: a fixed function of the shapes, sized
// against the traffic of adding each chunk's part into dw), and for each computes the chunk's
// logits (a GEMM into the op's scratch), their log-sum-exp, the loss terms and, with grads, the
// logits' gradient p = (softmax - onehot) / N in place, then dh's rows = p w and dw += p^T h
// (GEMMs, chunk by chunk in order: deterministic). The gradients are computed in the forward, for a
// gradient of one, and the backward only scales them by the loss's gradient (exact when that is a
// power of two, as the seed 1 and fp16's loss scales are): no logits are recomputed, and what lives
// from the forward to the backward is dh and dw, not the logits (with GPT-2's vocabulary of 50,304
// and 8,192 rows, 1.6 GB of float32 logits, 0.8 GB more for their bfloat16 copy, against 415 MB of
// scratch for a chunk). ops::LinearCrossEntropy asks for the gradients only when autograd will want
// them (grads 0: the loss alone, no GEMM beyond the logits). The bf16 policy lowers the op (h and w
// cast, out_dtype float32: the three products from bfloat16 operands, p rounded to bfloat16 for the
// two gradient products, as the unfused policy rounds the logits' gradient); fp16 does not: p / N
// of a large vocabulary is below float16's range before any loss scale reaches it. nn::Gpt's step
// uses the op when the step keeps no output (Model::set_keep_output(false): nobody reads the
// logits).
LOOM_OP(linear_cross_entropy) {
  def.attrs = {{"tb", kInt}, {"grads", kInt}, {"chunk", kInt}, {"out_dtype", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const char* op = "linear_cross_entropy";
    LOOM_CHECK(a.Int("chunk", 0) >= 0, ValueError, "[", op,
               "] chunk (rows per chunk, 0 for the default) must be >= 0, got ", a.Int("chunk", 0));
    CheckArity(op, in, 3);
    const Shape& h = in[0].shape;
    const Shape& w = in[1].shape;
    LOOM_CHECK(in[0].dtype == in[1].dtype, DTypeError, "[", op, "] h (", Name(in[0].dtype), ") and w (",
               Name(in[1].dtype), ") must have one dtype");
    const DType out = LoweredResultDType(op, in[0].dtype, a, {DType::kBFloat16}, "the loss");
    if (in[0].dtype != DType::kBFloat16) CheckFloat(op, in[0], "h");
    const int64_t tb = a.Int("tb", 1), grads = a.Int("grads", 0);
    LOOM_CHECK(tb == 0 || tb == 1, ValueError, "[", op, "] tb must be 0 or 1, got ", tb);
    LOOM_CHECK(grads == 0 || grads == 1, ValueError, "[", op, "] grads must be 0 or 1, got ", grads);
    LOOM_CHECK(h.size() == 2 && h[0] > 0 && h[1] > 0, ShapeError, "[", op, "] h must be (N, D) with N, D > 0, got ",
               ToString(h));
    LOOM_CHECK(w.size() == 2 && w[tb ? 1 : 0] == h[1] && w[tb ? 0 : 1] > 0, ShapeError, "[", op, "] h ", ToString(h),
               " needs w of shape ", tb ? "(V, " : "(", tb ? std::to_string(h[1]) + ")" : std::to_string(h[1]) + ", V)",
               " with V > 0 (tb ", tb, "), got ", ToString(w));
    LOOM_CHECK(in[2].dtype == DType::kInt32 || in[2].dtype == DType::kInt64, DTypeError, "[", op,
               "] labels must be int32 or int64 class indices, got ", Name(in[2].dtype));
    LOOM_CHECK(in[2].shape == Shape{h[0]}, ShapeError, "[", op, "] h ", ToString(h), " needs labels of shape (", h[0],
               ",), got ", ToString(in[2].shape));
    std::vector<TensorMeta> o{{{}, out}};
    if (grads) {
      o.push_back({h, out});
      o.push_back({w, out});
    }
    return o;
  };
  def.saved_outputs = {1, 2};
  def.backward = [](const BackwardArgs& a) {
    LOOM_CHECK(a.outputs.size() == 3, ValueError,
               "[linear_cross_entropy] was called with grads 0, so it has no gradients to give (ops::"
               "LinearCrossEntropy sets grads when an input requires a gradient)");
    LOOM_CHECK(a.input_metas[0].dtype != DType::kBFloat16, DTypeError,
               "[linear_cross_entropy] the bfloat16 record is not differentiated (Note [Precision policy])");
    const Tensor& g = a.grad_outputs[0];
    if (!g.defined()) return std::vector<Tensor>{Tensor(), Tensor(), Tensor()};
    return std::vector<Tensor>{a.needs_input_grad[0] ? ops::Mul(a.outputs[1], g) : Tensor(),
                               a.needs_input_grad[1] ? ops::Mul(a.outputs[2], g) : Tensor(), Tensor()};
  };
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
Tensor LinearCrossEntropy(const Tensor& h, const Tensor& w, const Tensor& labels, bool w_is_table) {
  const bool grads = GradEnabled() && (h.requires_grad() || w.requires_grad());
  return Call(op_kind::linear_cross_entropy, {h, w, labels},
              Attrs{{"tb", int64_t(w_is_table)}, {"grads", int64_t(grads)}})[0];
}
}  // namespace ops

}  // namespace loom
