// The fused convolution layer, made by the graph pass in graph/fuse_bias_act.cc (Note [Fusing
// bias and activation]): conv2d(x, w[, bias]) followed by relu, as one op whose kernel applies
// ReLU to each result while it is in cache (ConvDims::relu in cpu/kernels/conv_dnnl.h). The
// backward of relu from the output and the bias gradient over (N, H, W) are one bias_act_grad
// with channels = 1 (core/ops/dense_bias_act.cc).
#include "core/ops/common.h"

LOOM_OP_KIND(conv2d);
LOOM_OP_KIND(relu_grad);

namespace loom {

// x: (N, C, H, W), w: (O, C/g, KH, KW) [, bias: (O)] -> y: (N, O, OH, OW) = relu(conv2d(...));
// attrs: conv2d's (stride, padding, dilation, groups)
LOOM_OP(conv2d_relu) {
  def.internal = "made only by the graph pass in graph/fuse_bias_act.cc";
  def.attrs = opdecl::Conv2dAttrs();
  // conv2d's checks and shapes (its messages name conv2d: the pass makes this op from a conv2d).
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) { return op_kind::conv2d.infer(in, a); };
  def.saved_inputs = {0, 1};
  def.saved_outputs = {0};
  // dz = relu_grad(y, dy), then conv2d's own backward from dz.
  def.backward = [](const BackwardArgs& a) {
    const std::vector<Tensor> dz = {Call1(op_kind::relu_grad, {a.outputs[0], a.grad_outputs[0]})};
    return op_kind::conv2d.backward(
        BackwardArgs{a.attrs, a.inputs, a.outputs, a.input_metas, dz, a.needs_input_grad});
  };
}

}  // namespace loom
