// Optimizer updates as ops: one fused, in-place kernel per parameter. The learning rate is an
// input (a device scalar), not an attribute, so a schedule changes it between replays without a
// new capture (DESIGN.md invariant 6).
#include "core/ops/common.h"

namespace loom {

using namespace opdecl;

// inputs: param, grad, lr (float64 scalar) [, momentum buffer] -> outputs: param [, buffer]
// attrs: momentum, weight_decay, nesterov (0/1), dampening
LOOM_OP(sgd_update) {
  def.internal = "the update of nn::SGD, reached through loom.opt.SGD";
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    LOOM_CHECK(in.size() == 3 || in.size() == 4, ValueError, "[sgd_update] takes 3 or 4 inputs, got ", in.size());
    CheckFloat("sgd_update", in[0], "parameter");
    CheckSameDType("sgd_update", in[0], in[1]);
    LOOM_CHECK(in[0].shape == in[1].shape, ShapeError, "[sgd_update] parameter ", ToString(in[0].shape),
               " and gradient ", ToString(in[1].shape), " differ in shape");
    LOOM_CHECK(in[2].dtype == DType::kFloat64 && NumElements(in[2].shape) == 1, DTypeError,
               "[sgd_update] learning rate must be a float64 scalar");
    std::vector<TensorMeta> out{in[0]};
    if (in.size() == 4) out.push_back(in[3]);
    return out;
  };
}

// Note [Weight gradient into the update]: made only by the graph pass in graph/fuse.cc, never
// by user code. inputs: param (M, N), a (K, M), b (K, N), lr [, momentum buffer] -> outputs:
// param [, buffer]; attrs as sgd_update. The same update as sgd_update with grad = a^T b (the
// weight gradient of a linear layer, K = batch), computed a few rows at a time and applied while
// the rows are in cache: the gradient is never stored.
LOOM_OP(matmul_sgd_update) {
  def.internal = "made only by the graph pass in graph/fuse.cc";
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    LOOM_CHECK(in.size() == 4 || in.size() == 5, ValueError, "[matmul_sgd_update] takes 4 or 5 inputs, got ",
               in.size());
    CheckFloat("matmul_sgd_update", in[0], "parameter");
    CheckSameDType("matmul_sgd_update", in[0], in[1]);
    CheckSameDType("matmul_sgd_update", in[0], in[2]);
    const Shape &p = in[0].shape, &a = in[1].shape, &b = in[2].shape;
    LOOM_CHECK(p.size() == 2 && a.size() == 2 && b.size() == 2 && a[0] == b[0] && a[1] == p[0] && b[1] == p[1],
               ShapeError, "[matmul_sgd_update] parameter ", ToString(p), " is not a^T b for a ", ToString(a),
               " and b ", ToString(b));
    LOOM_CHECK(in[3].dtype == DType::kFloat64 && NumElements(in[3].shape) == 1, DTypeError,
               "[matmul_sgd_update] learning rate must be a float64 scalar");
    std::vector<TensorMeta> out{in[0]};
    if (in.size() == 5) out.push_back(in[4]);
    return out;
  };
}

// inputs: param, grad, lr, m, v, step (float64 scalar, the step count after this update)
// -> outputs: param, m, v.  attrs: beta1, beta2, eps, weight_decay, decoupled (AdamW, 0/1)
LOOM_OP(adam_update) {
  def.internal = "the update of nn::Adam, reached through loom.opt.Adam";
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    CheckArity("adam_update", in, 6);
    CheckFloat("adam_update", in[0], "parameter");
    CheckSameDType("adam_update", in[0], in[1]);
    LOOM_CHECK(in[0].shape == in[1].shape, ShapeError, "[adam_update] parameter ", ToString(in[0].shape),
               " and gradient ", ToString(in[1].shape), " differ in shape");
    return std::vector<TensorMeta>{in[0], in[3], in[4]};
  };
}

// inputs: counter (float64 scalar) -> outputs: counter + 1, in place. Keeps the optimizer's
// step count on the device so that replays advance it.
LOOM_OP(increment) {
  def.internal = "nn::Adam's step count, reached through loom.opt.Adam";
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    CheckArity("increment", in, 1);
    return std::vector<TensorMeta>{in[0]};
  };
}

}  // namespace loom
