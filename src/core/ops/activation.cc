// Activations. Where the derivative is a function of the output (relu, sigmoid, tanh) the node
// saves the output only, so the input can be freed after the forward pass (NNlib's trick).
#include <cmath>

#include "core/ops/common.h"

namespace loom {

using namespace opdecl;

namespace {

// x -> y. out_dtype (optional): the result rounded to bfloat16 or float16 from float32 (Note
// [Casts fused into their producers] in graph/fuse_casts.cc; only that pass sets it). A GELU
// (bf16_input) also takes the bf16 policy's bfloat16 x, computes in float32 from it, and writes
// float32 (out_dtype float32) or that result's bfloat16 rounding (Note [Precision policy] in
// core/autocast.h: a GELU's input is kept in bfloat16).
std::vector<TensorMeta> ActivationInfer(const char* op, const std::vector<TensorMeta>& in, const Attrs& a,
                                        bool bf16_input) {
  if (bf16_input && in.size() == 1 && in[0].dtype == DType::kBFloat16) {
    const int64_t o = a.Int("out_dtype", -1);
    LOOM_CHECK(o == int64_t(DType::kFloat32) || o == int64_t(DType::kBFloat16), DTypeError, "[", op,
               "] a bfloat16 input needs out_dtype float32 (", int64_t(DType::kFloat32), ") or bfloat16 (",
               int64_t(DType::kBFloat16), "), got ", o, ": the bf16 policy's record (Note [Precision policy])");
    return {{in[0].shape, DType(o)}};
  }
  std::vector<TensorMeta> out = UnaryFloat(op, in);
  out[0].dtype = FusedCastDType(op, in[0].dtype, a);
  return out;
}

// (saved, dy) -> dx. A GELU's gradient (bf16_input) also takes the bf16 policy's bfloat16 x with
// a float32 dy, and gives a float32 dx; so does relu's (bf16_grad_input) with the bfloat16 copy of
// its y (Note [ReLU masks from the bfloat16 copy] in graph/bf16_relu_mask.cc).
std::vector<TensorMeta> ActivationGradInfer(const char* op, const std::vector<TensorMeta>& in, bool bf16_input) {
  if (bf16_input && in.size() == 2 && in[0].dtype == DType::kBFloat16) {
    LOOM_CHECK(in[1].dtype == DType::kFloat32, DTypeError, "[", op, "] a bfloat16 x needs a float32 dy, got ",
               Name(in[1].dtype));
    LOOM_CHECK(in[0].shape == in[1].shape, ShapeError, "[", op, "] shapes differ: ", ToString(in[0].shape), " and ",
               ToString(in[1].shape));
    return {in[1]};
  }
  return SameShapePair(op, in);
}

}  // namespace

// Declares an activation whose backward is `gradop(saved, dy)`; `saved` is its input or output.
// The gradient op comes first: the forward's backward calls it by kind (Note [Op kinds]). Both
// declare `attributes` (the gradient gets the forward's). bf16_input: ActivationInfer's (and the
// gradient's); bf16_grad_input: the gradient's alone.
#define LOOM_ACTIVATION(opname, save_output, attributes, bf16_input, bf16_grad_input)            \
  LOOM_OP(opname##_grad) {                                                                       \
    def.internal = "backward of " #opname;                                                       \
    def.attrs = attributes;                                                                      \
    def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {                            \
      return ActivationGradInfer(#opname "_grad", in, (bf16_input) || (bf16_grad_input));        \
    };                                                                                           \
    def.shareable_inputs = {0, 1};                                                               \
  }                                                                                              \
  LOOM_OP(opname) {                                                                              \
    def.attrs = Join(attributes, {{"out_dtype", kInt}});                                         \
    def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {                          \
      return ActivationInfer(#opname, in, a, bf16_input);                                        \
    };                                                                                           \
    if (save_output) def.saved_outputs = {0}; else def.saved_inputs = {0};                       \
    def.shareable_inputs = {0};                                                                  \
    def.backward = [](const BackwardArgs& a) {                                                   \
      CheckNotFusedCast(#opname, a.attrs);                                                       \
      const Tensor& s = (save_output) ? a.outputs[0] : a.inputs[0];                              \
      return std::vector<Tensor>{Call1(op_kind::opname##_grad, {s, a.grad_outputs[0]}, a.attrs)}; \
    };                                                                                           \
  }

const std::vector<AttrDecl> kSlope = {{"slope", kFloat}};

LOOM_ACTIVATION(relu, true, {}, false, true)             // relu_grad(y, dy) = dy * (y > 0)
LOOM_ACTIVATION(leaky_relu, false, kSlope, false, false)  // leaky_relu_grad(x, dy) = dy * (x > 0 ? 1 : slope)
LOOM_ACTIVATION(sigmoid, true, {}, false, false)          // sigmoid_grad(y, dy) = dy * y * (1 - y)
LOOM_ACTIVATION(tanh, true, {}, false, false)             // tanh_grad(y, dy) = dy * (1 - y^2)
LOOM_ACTIVATION(gelu, false, {}, true, true)              // gelu_grad(x, dy): derivative of the tanh approximation
LOOM_ACTIVATION(gelu_erf, false, {}, true, true)          // gelu_erf_grad(x, dy): derivative of 0.5 x (1 + erf(x / sqrt 2))
LOOM_ACTIVATION(softplus, false, {}, false, false)        // softplus_grad(x, dy) = dy * sigmoid(x)

namespace ops {
Tensor Relu(const Tensor& x) { return Call1(op_kind::relu, {x}); }
Tensor LeakyRelu(const Tensor& x, double slope) {
  LOOM_CHECK(std::isfinite(slope), ValueError, "[leaky_relu] slope must be a finite number, got ", slope);
  return Call1(op_kind::leaky_relu, {x}, Attrs{{"slope", slope}});
}
Tensor Sigmoid(const Tensor& x) { return Call1(op_kind::sigmoid, {x}); }
Tensor Tanh(const Tensor& x) { return Call1(op_kind::tanh, {x}); }
Tensor Gelu(const Tensor& x) { return Call1(op_kind::gelu, {x}); }
Tensor GeluErf(const Tensor& x) { return Call1(op_kind::gelu_erf, {x}); }
Tensor Softplus(const Tensor& x) { return Call1(op_kind::softplus, {x}); }
}  // namespace ops

}  // namespace loom
