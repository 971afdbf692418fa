// Normalisation: batch norm (training and inference forms) and layer norm, each with one
// gradient op that returns (dx, dgamma, dbeta) together, since all three come from the same
// per-channel (or per-row) sums. Attribute eps everywhere; batch_norm_train also momentum.
//
// Note [Running statistics are updated in place]
// batch_norm_train reads running_mean/running_var (inputs 3, 4) and writes them back as its
// outputs 3 and 4, which ARE those tensors (OpDef::inplace, Note [Outputs that are inputs] in
// core/op.h): the record shows the write, so a captured graph orders it against every other
// reader, and the blocks persist across replays (they are read before they are written). The
// momentum follows PyTorch: running = (1 - momentum) running + momentum batch, and running_var
// takes the unbiased batch variance (divided by M - 1, M = N x spatial size).
//
// The layout pass (graph/layouts.cc) sets, for operands in the blocked layout,
// x_blocked and y_blocked on batch_norm_train, x_blocked, dy_blocked and dx_blocked on
// batch_norm_grad. batch_norm_grad's training (0/1) is set by the backward that makes it.
// The pass fuse_bn_relu (graph/fuse_bn_relu.cc, Note [Batch norm with its ReLU]) sets relu = 1:
// batch_norm_train then returns y = relu(bn(x) [+ residual]), the residual an optional input 5 of
// y's shape and dtype, in y's layout. Such records exist only in captured graphs, after backward.
#include <algorithm>

#include "core/ops/common.h"
#include "core/ops_cnn.h"

LOOM_OP_KIND(batch_norm_grad);
LOOM_OP_KIND(layer_norm_grad);

namespace loom {

using namespace opdecl;

namespace {

// x: (N, C, ...), the four per-channel tensors (C); all of x's dtype, or float32 with a
// bfloat16 x (Note [Convolution outputs kept in bfloat16] in graph/bf16_conv_outputs.cc).
// Returns the dtype of the statistics and of y.
// Inputs 3 and 4 are the running statistics, or (saved_stats: batch_norm_apply) the batch mean and
// invstd batch_norm_train saved.
DType CheckBatchNormInputs(const char* op, const std::vector<TensorMeta>& in, size_t arity = 5,
                           bool saved_stats = false) {
  CheckArity(op, in, arity);
  const DType t = in[0].dtype == DType::kBFloat16 ? DType::kFloat32 : in[0].dtype;
  if (in[0].dtype != DType::kBFloat16) CheckFloat(op, in[0]);
  const Shape& x = in[0].shape;
  LOOM_CHECK(x.size() >= 2 && x[1] > 0, ShapeError, "[", op, "] input ", ToString(x),
             " must be (N, C, ...) with at least one channel");
  static const char* running[] = {"x", "gamma", "beta", "running_mean", "running_var"};
  static const char* saved[] = {"x", "gamma", "beta", "mean", "invstd"};
  const char* const* names = saved_stats ? saved : running;
  for (size_t i = 1; i < 5; ++i) {
    LOOM_CHECK(in[i].dtype == t, DTypeError, "[", op, "] ", names[i], " is ", Name(in[i].dtype), ", input is ",
               Name(in[0].dtype), t != in[0].dtype ? " (a bfloat16 input takes float32 statistics)" : "");
    LOOM_CHECK(in[i].shape == Shape{x[1]}, ShapeError, "[", op, "] input ", ToString(x), " has ", x[1],
               " channels, ", names[i], " is ", ToString(in[i].shape));
  }
  return t;
}

}  // namespace

// x: (N, C, ...), gamma, beta, running_mean, running_var: (C)
//   -> y: (N, C, ...), batch mean (C), batch invstd (C), running_mean, running_var (in place)
LOOM_OP(batch_norm_train) {
  def.internal = "made by ops::BatchNorm (loom.autograd.batchnorm) in training mode";
  def.attrs = {{"momentum", kFloat}, {"eps", kFloat}, {"x_blocked", kInt}, {"y_blocked", kInt}, {"relu", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    // relu = 1 (fuse_bn_relu): y = relu(bn(x) [+ residual]), the residual an optional input 5.
    const bool relu = a.Int("relu", 0) != 0;
    LOOM_CHECK(relu || in.size() <= 5, ValueError, "[batch_norm_train] a residual (input 5) needs relu = 1");
    const DType t = CheckBatchNormInputs("batch_norm_train", in, relu && in.size() == 6 ? 6 : 5);
    const Shape& x = in[0].shape;
    if (in.size() == 6)
      LOOM_CHECK(in[5].shape == x && in[5].dtype == t, ShapeError, "[batch_norm_train] residual ",
                 ToString(in[5].shape), " ", Name(in[5].dtype), " must be y's shape ", ToString(x), " and dtype ",
                 Name(t));
    LOOM_CHECK(NumElements(x) / x[1] > 1, ValueError, "[batch_norm_train] input ", ToString(x),
               " has one value per channel: batch statistics need more than one");
    double m = a.Float("momentum");
    LOOM_CHECK(m >= 0 && m <= 1, ValueError, "[batch_norm_train] momentum ", m, " must be in [0, 1]");
    LOOM_CHECK(a.Float("eps") >= 0, ValueError, "[batch_norm_train] eps must not be negative");
    return std::vector<TensorMeta>{{x, t}, in[1], in[1], in[3], in[4]};
  };
  def.inplace = {{3, 3}, {4, 4}};  // Note [Running statistics are updated in place]
  def.saved_inputs = {0, 1};
  def.saved_outputs = {1, 2};
  def.backward = [](const BackwardArgs& a) {
    LOOM_CHECK(a.attrs.Int("relu", 0) == 0, ValueError, "[batch_norm_train] relu = 1 is made by the graph pass ",
               "fuse_bn_relu after the backward; it has no backward of its own");
    std::vector<Tensor> grads(5);
    if (!a.grad_outputs[0].defined()) return grads;  // only the statistics were used
    Attrs ga{{"eps", a.attrs.Float("eps")}, {"training", int64_t(1)}};
    std::vector<Tensor> g =
        Call(op_kind::batch_norm_grad, {a.inputs[0], a.inputs[1], a.outputs[1], a.outputs[2], a.grad_outputs[0]}, ga);
    for (size_t i = 0; i < 3; ++i)
      if (a.needs_input_grad[i]) grads[i] = g[i];
    return grads;
  };
}

// x: (N, C, ...), gamma, beta, mean, invstd: (C) [, residual: x's shape] -> y: (N, C, ...)
//
// Note [Batch norm applied from its saved statistics]
// batch_norm_apply gives batch_norm_train's y again, from the batch mean and invstd it saved
// (its outputs 1 and 2, rounded to their dtype), without the passes over x that computed them and
// without touching the running statistics. batch_norm_train scales with those rounded statistics
// (cpu/kernels/norm.cc, cuda/cnn.cu: BnScaleShift), so the bits are its own. Made only by the
// memory budget's recompute (graph/recompute.cc), with the record's relu, residual and layout
// attributes (x_blocked, y_blocked).
LOOM_OP(batch_norm_apply) {
  def.internal = "made only by the memory budget's recompute (graph/recompute.cc)";
  def.attrs = {{"x_blocked", kInt}, {"y_blocked", kInt}, {"relu", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const bool residual = in.size() == 6;
    LOOM_CHECK(!residual || a.Int("relu", 0) != 0, ValueError, "[batch_norm_apply] a residual (input 5) needs relu = 1");
    const DType t = CheckBatchNormInputs("batch_norm_apply", in, residual ? 6 : 5, true);
    if (residual)
      LOOM_CHECK(in[5].shape == in[0].shape && in[5].dtype == t, ShapeError, "[batch_norm_apply] residual ",
                 ToString(in[5].shape), " ", Name(in[5].dtype), " must be y's shape ", ToString(in[0].shape),
                 " and dtype ", Name(t));
    return std::vector<TensorMeta>{{in[0].shape, t}};
  };
}

// x: (N, C, ...), gamma, beta, running_mean, running_var: (C) -> y: (N, C, ...)
LOOM_OP(batch_norm_infer) {
  def.internal = "made by ops::BatchNorm (loom.autograd.batchnorm) in inference mode";
  def.attrs = {{"eps", kFloat}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    LOOM_CHECK(in.empty() || in[0].dtype != DType::kBFloat16, DTypeError,
               "[batch_norm_infer] takes no bfloat16 input: compute in float32");
    CheckBatchNormInputs("batch_norm_infer", in);
    return std::vector<TensorMeta>{in[0]};
  };
  def.saved_inputs = {0, 1, 3, 4};
  def.backward = [](const BackwardArgs& a) {
    Attrs ga{{"eps", a.attrs.Float("eps")}, {"training", int64_t(0)}};
    std::vector<Tensor> g =
        Call(op_kind::batch_norm_grad, {a.inputs[0], a.inputs[1], a.inputs[3], a.inputs[4], a.grad_outputs[0]}, ga);
    std::vector<Tensor> grads(5);
    for (size_t i = 0; i < 3; ++i)
      if (a.needs_input_grad[i]) grads[i] = g[i];
    return grads;
  };
}

// x: (N, C, ...), gamma: (C), mean: (C), s: (C), dy: (N, C, ...)
//   -> dx, dgamma (C), dbeta (C)
// training = 1: mean and s are the batch mean and invstd, and dx includes the gradient through
// the batch statistics. training = 0: they are the running mean and variance, constants.
LOOM_OP(batch_norm_grad) {
  def.internal = "backward of batch_norm_train";
  def.attrs = {{"eps", kFloat}, {"training", kInt}, {"x_blocked", kInt}, {"dy_blocked", kInt}, {"dx_blocked", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    CheckArity("batch_norm_grad", in, 5);
    // x may be bfloat16 with float32 for the rest (Note [Convolution outputs kept in bfloat16]).
    const bool low = in[0].dtype == DType::kBFloat16;
    const DType t = low ? DType::kFloat32 : in[0].dtype;
    if (!low) CheckFloat("batch_norm_grad", in[0]);
    LOOM_CHECK(in[4].shape == in[0].shape, ShapeError, "[batch_norm_grad] dy ", ToString(in[4].shape),
               " does not match the input ", ToString(in[0].shape));
    for (size_t i = 1; i < 5; ++i)
      LOOM_CHECK(in[i].dtype == t, DTypeError, "[batch_norm_grad] input ", i, " is ", Name(in[i].dtype),
                 ", expected ", Name(t), low ? " (a bfloat16 x takes float32 for the rest)" : "");
    return std::vector<TensorMeta>{{in[0].shape, t}, in[1], in[1]};
  };
}

// x: (..., D1..Dk), gamma, beta: (D1..Dk) -> y: x's shape, mean, invstd: (...) (the leading axes)
// out_dtype (optional): y rounded to bfloat16 or float16 from float32, the statistics float32
// (Note [Casts fused into their producers] in graph/fuse_casts.cc).
LOOM_OP(layer_norm) {
  def.attrs = {{"eps", kFloat}, {"out_dtype", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("layer_norm", in, 3);
    CheckFloat("layer_norm", in[0]);
    const Shape& x = in[0].shape;
    const Shape& g = in[1].shape;
    for (size_t i = 1; i < 3; ++i)
      LOOM_CHECK(in[i].dtype == in[0].dtype, DTypeError, "[layer_norm] ", i == 1 ? "gamma" : "beta", " is ",
                 Name(in[i].dtype), ", input is ", Name(in[0].dtype));
    LOOM_CHECK(in[2].shape == g, ShapeError, "[layer_norm] gamma ", ToString(g), " and beta ", ToString(in[2].shape),
               " differ in shape");
    LOOM_CHECK(!g.empty() && g.size() <= x.size() && std::equal(g.begin(), g.end(), x.end() - g.size()), ShapeError,
               "[layer_norm] input ", ToString(x), " does not end with the normalised shape ", ToString(g),
               " of gamma");
    LOOM_CHECK(NumElements(g) > 0, ShapeError, "[layer_norm] normalised shape ", ToString(g), " is empty");
    LOOM_CHECK(a.Float("eps") >= 0, ValueError, "[layer_norm] eps must not be negative");
    Shape lead(x.begin(), x.end() - g.size());
    return std::vector<TensorMeta>{{x, FusedCastDType("layer_norm", in[0].dtype, a)}, {lead, in[0].dtype},
                                   {lead, in[0].dtype}};
  };
  def.saved_inputs = {0, 1};
  def.saved_outputs = {1, 2};
  def.backward = [](const BackwardArgs& a) {
    CheckNotFusedCast("layer_norm", a.attrs);
    std::vector<Tensor> grads(3);
    if (!a.grad_outputs[0].defined()) return grads;
    std::vector<Tensor> g =
        Call(op_kind::layer_norm_grad, {a.inputs[0], a.inputs[1], a.outputs[1], a.outputs[2], a.grad_outputs[0]});
    for (size_t i = 0; i < 3; ++i)
      if (a.needs_input_grad[i]) grads[i] = g[i];
    return grads;
  };
}

// x: (..., D), gamma: (D), mean, invstd: (...), dy: (..., D) -> dx, dgamma (D), dbeta (D)
// (D stands for the normalised axes, flattened)
LOOM_OP(layer_norm_grad) {
  def.internal = "backward of layer_norm";
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    CheckArity("layer_norm_grad", in, 5);
    CheckFloat("layer_norm_grad", in[0]);
    LOOM_CHECK(in[4].shape == in[0].shape && in[4].dtype == in[0].dtype, ShapeError, "[layer_norm_grad] dy ",
               ToString(in[4].shape), " does not match the input ", ToString(in[0].shape));
    return std::vector<TensorMeta>{in[0], in[1], in[1]};
  };
}

namespace ops {
Tensor BatchNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                 const Tensor& running_var, bool training, double momentum, double eps) {
  if (training)
    return Call(op_kind::batch_norm_train, {x, gamma, beta, running_mean, running_var},
                Attrs{{"momentum", momentum}, {"eps", eps}})[0];
  return Call1(op_kind::batch_norm_infer, {x, gamma, beta, running_mean, running_var}, Attrs{{"eps", eps}});
}
Tensor LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  return Call(op_kind::layer_norm, {x, gamma, beta}, Attrs{{"eps", eps}})[0];
}
}  // namespace ops

}  // namespace loom
