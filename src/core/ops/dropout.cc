// Dropout: y = x * mask / (1 - p) with mask ~ Bernoulli(1 - p), drawn from the device's Philox
// generator like the random fills (element i uses word i % 4 of counter i / 4), so every run
// and every replay draws fresh numbers (docs/design.md invariant 6).
//
// The mask is a second output, uint8, and the only thing backward keeps: one byte per element
// instead of the input or the output (Note [Backward keeps only what it needs]).
#include "core/ops/common.h"

LOOM_OP_KIND(dropout_grad);

namespace loom {

using namespace opdecl;

namespace {
void CheckProbability(double p) {
  LOOM_CHECK(p >= 0 && p < 1, ValueError, "[dropout] probability ", p, " is outside [0, 1)");
}
}  // namespace

// x -> (y, mask); attrs: p
LOOM_OP(dropout) {
  def.attrs = {{"p", kFloat}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    std::vector<TensorMeta> out = UnaryFloat("dropout", in);
    CheckProbability(a.Float("p"));
    out.push_back({in[0].shape, DType::kUInt8});
    return out;
  };
  def.random_draws = [](const OpRecord& op) { return uint64_t(op.outputs[0].numel() + 3) / 4; };
  def.saved_outputs = {1};
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{Call1(op_kind::dropout_grad, {a.outputs[1], a.grad_outputs[0]}, a.attrs)};
  };
}

// (mask, dy) -> dx = dy * mask / (1 - p)
LOOM_OP(dropout_grad) {
  def.internal = "backward of dropout";
  def.attrs = {{"p", kFloat}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("dropout_grad", in, 2);
    LOOM_CHECK(in[0].dtype == DType::kUInt8, DTypeError, "[dropout_grad] mask must be uint8, got ",
               Name(in[0].dtype));
    CheckFloat("dropout_grad", in[1], "gradient");
    LOOM_CHECK(in[0].shape == in[1].shape, ShapeError, "[dropout_grad] mask is ", ToString(in[0].shape),
               ", gradient is ", ToString(in[1].shape));
    CheckProbability(a.Float("p"));
    return std::vector<TensorMeta>{in[1]};
  };
  // Linear in dy, with the same mask.
  def.saved_inputs = {0};
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{Tensor(), Call1(op_kind::dropout_grad, {a.inputs[0], a.grad_outputs[0]}, a.attrs)};
  };
}

namespace ops {

Tensor Dropout(const Tensor& x, double p, bool training) {
  CheckProbability(p);
  if (!training || p == 0) return x;
  return Call(op_kind::dropout, {x}, Attrs{{"p", p}})[0];
}

}  // namespace ops
}  // namespace loom
