// The pass bf16_relu_mask: backward ReLU masks read from the forward's bfloat16 copy of the
// activation (Note [Precision policy] in core/autocast.h).
//
// Note [ReLU masks from the bfloat16 copy]
// Under the bf16 policy a float32 ReLU output y that a product reads is cast to bfloat16 once
// (c = cast(y), by the pass autocast_bf16 or an AutocastScope), and the weight gradient of that
// product reads c again in backward. The bias gradient of the ReLU, bias_act_grad(y, dy; relu)
// (graph/fuse_bias_act.cc), read the float32 y too, so y (4 bytes an element) and c (2) both
// lived from the forward to the backward. ReLU's gradient needs only whether y > 0 (or is NaN):
// relu_grad_f, core/elementwise_formulas.h. Rounding to nearest bfloat16 (FloatToBFloat16,
// core/half.h, the cast kernels of both backends) keeps the sign, maps zero to zero, NaN to NaN
// and every positive float32 above 2^-134 to a positive bfloat16, so bias_act_grad(c, dy; relu)
// gives bitwise the same dz and db as bias_act_grad(y, dy; relu) for every y except a positive
// subnormal float32 at or below 2^-134 (a pre-activation that small: its mask bit becomes 0).
// This pass makes that rewrite; y's last reader is then its cast, in the forward, and the plan
// reuses its memory for the rest of the step: the arena shrinks by the float32 activations whose
// only backward reader was the mask. The same holds for relu_grad(y, dy) (the ReLU after a
// convolution's batch norm, or the ReLU of a fused conv2d_relu), whose formula is the same mask
// (relu_grad_f): its kernels take a bfloat16 y with float32 dy and dx (ew::TakesBf16Input). In a
// ResNet-50 at batch 32 (bf16, planned on the CPU) that is 1.2 GB of the 3.3 GB arena.
// Conditions: the reader is a bias_act_grad with act relu, or a relu_grad, with a float32 y; an earlier record is
// cast(y) to bfloat16 of the very view (block, offset, shape, strides); neither y's nor c's block
// is written between the cast and the reader; the device supports the rewritten record.
// Only bfloat16: float16's range ends at 2^-24, so a cast to float16 maps positive float32s below
// 2^-25, normal ones included, to zero, and the masks would change; fp16 keeps the float32 y.
// Other activations' gradients (tanh, sigmoid, GELU) read the value itself, which bfloat16 rounds:
// they keep float32. The switch is on by default but the pass acts only where autocast_bf16 is on
// (a model's bf16 precision): a float32 graph keeps its arithmetic whatever it casts itself, and
// `bf16_relu_mask=off` keeps the float32 masks at bf16. Order 35: after autocast_bf16 (5), which makes the casts, and fuse_bias_act
// (30), which makes the bias_act_grad records; before the layout passes.
#include <map>

#include "core/bias_act_formulas.h"
#include "core/device.h"
#include "graph/op_uses.h"

LOOM_OP_KIND(cast);
LOOM_OP_KIND(bias_act_grad);
LOOM_OP_KIND(relu_grad);

namespace loom {
namespace {

bool IsBf16Copy(const OpRecord& op) {
  return op.def == &op_kind::cast && op.inputs[0].dtype() == DType::kFloat32 &&
         op.outputs[0].dtype() == DType::kBFloat16;
}

PassResult ReluMasksFromBf16(OpList list, const PassContext& ctx) {
  if (!ctx.options.passes.On("autocast_bf16")) return PassResult{std::move(list)};  // counter 0
  std::map<ViewKey, Tensor> copies;  // a float32 view -> its bfloat16 copy, while both are unwritten
  int64_t rewritten = 0;
  auto written = [&](const OpRecord& r) {
    for (const Tensor& t : r.outputs)
      for (auto it = copies.begin(); it != copies.end();)
        it = std::get<0>(it->first) == t.block() || it->second.block() == t.block() ? copies.erase(it) : std::next(it);
  };
  for (OpRecord& op : list.ops) {
    const bool mask = op.def == &op_kind::relu_grad ||
                      (op.def == &op_kind::bias_act_grad && op.attrs.Int("act", 0) == int64_t(BiasAct::kRelu));
    if (mask && op.inputs[0].dtype() == DType::kFloat32) {
      auto it = copies.find(ViewOf(op.inputs[0]));
      if (it != copies.end()) {
        OpRecord r = op;
        r.inputs[0] = it->second;
        if (ctx.device.Supports(r)) {  // Note [What a kernel supports]
          op = std::move(r);
          ++rewritten;
        }
      }
    }
    written(op);
    if (IsBf16Copy(op)) copies[ViewOf(op.inputs[0])] = op.outputs[0];
  }
  PassResult r{rewritten ? Rebuild(list.ops, list) : std::move(list)};
  r.counters.Add("bf16_relu_masks", rewritten);
  return r;
}

}  // namespace

LOOM_PASS(PassDef{"bf16_relu_mask", 35, kAllDevices, true, ReluMasksFromBf16,
                  "ReLU gradients (relu_grad, bias_act_grad with relu) read the forward's bfloat16 copy of the activation "
                  "instead of the float32 one, which then dies in the forward (Note [ReLU masks from the bfloat16 "
                  "copy]); acts only where autocast_bf16 is on",
                  {{"bf16_relu_masks", "the ReLU gradients that read a bfloat16 copy"}}});

}  // namespace loom
