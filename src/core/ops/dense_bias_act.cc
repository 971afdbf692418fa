// The fused dense layer and its backward, made by the graph pass in graph/fuse_bias_act.cc.
//
// Note [Dense, bias, activation]
// A linear layer followed by an activation is three ops in eager mode: matmul writes z0 = x W,
// add_bias z = z0 + b, and the activation y = act(z), each a pass over the (rows, N) result.
// Its backward is two: dz = act_grad(y, dy), which relu, tanh and sigmoid compute from the
// output (relu: y > 0, tanh: 1 - y^2, sigmoid: y (1 - y)), and db = bias_grad(dz), the column
// sums. A captured step sees the whole chain, so the pass makes
//     dense_bias_act(x, W, b; act) = act(x W + b)        (one GEMM, then one epilogue pass over
//                                                        each result while it is in cache)
//     bias_act_grad(y, dy; act)    = (dz, db)            (one pass over y and dy)
// The fused kernels compute every element with the expressions of the ops they replace (the
// element-wise functors, core/bias_act_formulas.h), the GEMM with the same call and the column
// sums in the same order; on the CPU the rewrite is therefore bitwise (docs/design.md invariant 5).
// cuBLASLt's epilogues add the bias inside the GEMM, which rounds like the separate add but is
// not promised to: on CUDA replay agrees with eager to float32 tolerance.
// act is BiasAct (core/bias_act_formulas.h): 0 none, 1 relu, 2 tanh, 3 sigmoid.
#include "core/ops/common.h"
#include "core/bias_act_formulas.h"

LOOM_OP_KIND(bias_act_grad);
LOOM_OP_KIND(matmul);

namespace loom {

using namespace opdecl;

namespace {

void CheckAct(const char* op, const Attrs& attrs) {
  const int64_t act = attrs.Int("act", 0);
  LOOM_CHECK(act >= 0 && act < kNumBiasActs, ValueError, "[", op, "] act must be 0 (none), 1 (relu), 2 (tanh) or ",
             "3 (sigmoid), got ", act);
}

}  // namespace

// x: (..., K), w: (K, N), b: (N) -> y: (..., N) = act(x w + b); attrs: act
LOOM_OP(dense_bias_act) {
  def.internal = "made only by the graph pass in graph/fuse_bias_act.cc";
  def.attrs = {{"act", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& attrs) {
    CheckArity("dense_bias_act", in, 3);
    CheckFloat("dense_bias_act", in[0], "x");
    CheckSameDType("dense_bias_act", in[0], in[1]);
    CheckSameDType("dense_bias_act", in[0], in[2]);
    CheckAct("dense_bias_act", attrs);
    const Shape &x = in[0].shape, &w = in[1].shape, &b = in[2].shape;
    LOOM_CHECK(x.size() >= 2 && w.size() == 2 && x.back() == w[0] && b.size() == 1 && b[0] == w[1], ShapeError,
               "[dense_bias_act] x ", ToString(x), ", w ", ToString(w), ", b ", ToString(b),
               ": expected x (..., K), w (K, N), b (N)");
    Shape y = x;
    y.back() = w[1];
    return std::vector<TensorMeta>{{y, in[0].dtype}};
  };
  def.saved_inputs = {0, 1};
  def.saved_outputs = {0};
  // dz, db = bias_act_grad(y, dy); dx = dz w^T; dw = x^T dz (summed over the batch dimensions).
  def.backward = [](const BackwardArgs& a) {
    const Tensor &x = a.inputs[0], &w = a.inputs[1];
    std::vector<Tensor> g = Call(op_kind::bias_act_grad, {a.outputs[0], a.grad_outputs[0]}, a.attrs);
    Tensor dx, dw;
    if (a.needs_input_grad[0]) dx = Call1(op_kind::matmul, {g[0], w}, Attrs{{"tb", int64_t(1)}});
    if (a.needs_input_grad[1])
      dw = Call1(op_kind::matmul, {x, g[0]}, Attrs{{"ta", int64_t(1)}, {"sum_batch", int64_t(x.ndim() > 2)}});
    return std::vector<Tensor>{dx, dw, a.needs_input_grad[2] ? g[1] : Tensor()};
  };
}

// y: (..., N) the output of the activation, dy: (..., N) -> dz: (..., N) = dy act'(z) computed
// from y, db: (N) the sum of dz over the leading dimensions; attrs: act. y is of dy's dtype, or a
// bfloat16 or float16 copy of it when dy is float32.
// With attribute channels = 1, the layout of a convolution's output: y, dy: (N, C, ...) -> dz,
// db: (C) the sum over N and the trailing dimensions (conv2d_grad_bias's sum).
LOOM_OP(bias_act_grad) {
  def.internal = "made by the graph pass in graph/fuse_bias_act.cc (and the backward of dense_bias_act)";
  def.attrs = {{"act", kInt}, {"channels", kInt}};
  def.shareable_inputs = {0, 1};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& attrs) {
    CheckArity("bias_act_grad", in, 2);
    // y may be a bfloat16 or float16 copy of a float32 output (Note [ReLU masks from the bfloat16
    // copy] in graph/bf16_relu_mask.cc): dz and db are then float32 as dy.
    const bool half_y = in[0].dtype == DType::kBFloat16 || in[0].dtype == DType::kFloat16;
    LOOM_CHECK(!half_y || in[1].dtype == DType::kFloat32, DTypeError, "[bias_act_grad] a ", Name(in[0].dtype),
               " y needs a float32 dy, got ", Name(in[1].dtype));
    std::vector<TensorMeta> out =
        half_y ? SameShapePair("bias_act_grad", {{in[0].shape, in[1].dtype}, in[1]}) : SameShapePair("bias_act_grad", in);
    CheckAct("bias_act_grad", attrs);
    if (attrs.Int("channels", 0)) {
      LOOM_CHECK(in[0].shape.size() >= 2, ShapeError, "[bias_act_grad] y ", ToString(in[0].shape),
                 " must have at least 2 dimensions (N, C, ...) with channels = 1");
      out.push_back({{in[0].shape[1]}, out[0].dtype});
      return out;
    }
    LOOM_CHECK(!in[0].shape.empty(), ShapeError, "[bias_act_grad] y ", ToString(in[0].shape),
               " must have at least 1 dimension (..., N)");
    out.push_back({{in[0].shape.back()}, out[0].dtype});
    return out;
  };
}

}  // namespace loom
