// Activations. Where the derivative is a function of the output (relu, sigmoid, tanh) the node
// saves the output only, so the input can be freed after the forward pass (NNlib's trick).
#include <cmath>

#include "core/ops/common.h"

namespace loom {

using namespace opdecl;

// out_dtype (optional): the result rounded to bfloat16 or float16 from float32 (Note [Casts fused
// into their producers] in graph/fuse_casts.cc; only that pass sets it).
#define LOOM_ACT_INFER(opname)                                              \
  [](const std::vector<TensorMeta>& in, const Attrs& a) {                   \
    std::vector<TensorMeta> out = UnaryFloat(#opname, in);                  \
    out[0].dtype = FusedCastDType(#opname, in[0].dtype, a);                 \
    return out;                                                             \
  }
#define LOOM_GRAD_INFER(opname) [](const std::vector<TensorMeta>& in, const Attrs&) { return SameShapePair(#opname, in); }

// Declares an activation whose backward is `gradop(saved, dy)`; `saved` is its input or output.
// The gradient op comes first: the forward's backward calls it by kind (Note [Op kinds]). Both
// declare `attributes` (the gradient gets the forward's).
#define LOOM_ACTIVATION(opname, save_output, attributes)                                         \
  LOOM_OP(opname##_grad) {                                                                       \
    def.internal = "backward of " #opname;                                                       \
    def.attrs = attributes;                                                                      \
    def.infer = LOOM_GRAD_INFER(opname##_grad);                                                  \
    def.shareable_inputs = {0, 1};                                                               \
  }                                                                                              \
  LOOM_OP(opname) {                                                                              \
    def.attrs = Join(attributes, {{"out_dtype", kInt}});                                         \
    def.infer = LOOM_ACT_INFER(opname);                                                          \
    if (save_output) def.saved_outputs = {0}; else def.saved_inputs = {0};                       \
    def.shareable_inputs = {0};                                                                  \
    def.backward = [](const BackwardArgs& a) {                                                   \
      CheckNotFusedCast(#opname, a.attrs);                                                       \
      const Tensor& s = (save_output) ? a.outputs[0] : a.inputs[0];                              \
      return std::vector<Tensor>{Call1(op_kind::opname##_grad, {s, a.grad_outputs[0]}, a.attrs)}; \
    };                                                                                           \
  }

const std::vector<AttrDecl> kSlope = {{"slope", kFloat}};

LOOM_ACTIVATION(relu, true, {})             // relu_grad(y, dy) = dy * (y > 0)
LOOM_ACTIVATION(leaky_relu, false, kSlope)  // leaky_relu_grad(x, dy) = dy * (x > 0 ? 1 : slope)
LOOM_ACTIVATION(sigmoid, true, {})          // sigmoid_grad(y, dy) = dy * y * (1 - y)
LOOM_ACTIVATION(tanh, true, {})             // tanh_grad(y, dy) = dy * (1 - y^2)
LOOM_ACTIVATION(gelu, false, {})            // gelu_grad(x, dy): derivative of the tanh approximation
LOOM_ACTIVATION(gelu_erf, false, {})        // gelu_erf_grad(x, dy): derivative of 0.5 x (1 + erf(x / sqrt 2))
LOOM_ACTIVATION(softplus, false, {})        // softplus_grad(x, dy) = dy * sigmoid(x)

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
