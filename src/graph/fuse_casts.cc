// The pass fuse_casts: a 16-bit cast folded into the element-wise op that wrote its input.
//
// Note [Casts fused into their producers]
// Under the precision policy (Note [Precision policy] in core/autocast.h) a product's operand
// that an element-wise op wrote in float32 is cast to bfloat16 (or float16) just after: the
// float32 tensor is written, read back once and dropped. Where the cast is its only reader, this
// pass drops the cast and has the producer write the 16-bit tensor itself (attribute out_dtype):
// each result is computed in float32 as before and rounded with the cast's own function
// (FloatToBFloat16, FloatToHalf in core/half.h), so the values are bitwise those of the producer
// followed by the cast, and replay stays bitwise equal to eager, which keeps the two apart. The
// float32 tensor is gone: a write and a read of 4 bytes an element and a kernel call saved, and
// the plan holds 2 bytes an element where it held 6 while the two lived. Producers: the unary
// activations, add_bias and layer_norm's y (what a GPT and an MLP cast: a layer norm before a
// product, a GELU or a ReLU before the next layer, the qkv projection's bias before attention).
// Conditions: the cast converts float32 to bfloat16 or float16; its input is all of an
// intermediate block (not the user's, not state) that the producer alone writes, as its output
// 0, and the cast alone reads; the cast's output, of the same shape, is all of a block that only
// the cast writes; the device supports the rewritten producer (the CPU's and CUDA's kernels do:
// FusedCastSupportedCpu, FusedCastSupportedCuda). The pass runs after the capture, so no backward is
// made from a fused record; one differentiated with out_dtype is an error. Order 40: after
// autocast_bf16 and autocast_fp16 (5, 6) make the casts and bf16_relu_mask (35) moves ReLU
// masks onto the bfloat16 copies (which leaves a ReLU's cast as its float32 output's only
// reader); before the layout passes.
// A cast whose input the bias's gradient also reads (a GPT's backward: the gradient of a GELU,
// of a layer norm, of the residual stream, each summed by bias_grad and cast for the products)
// is folded into that bias_grad instead: it writes the 16-bit copy (copy_dtype, its output 1)
// as it reads the rows, with the cast's own conversion; one read of 4 bytes an element and a
// kernel call fewer, the copy made a little earlier. Conditions: the cast converts float32 to
// 16 bits, all of an intermediate block of the same shape into all of a block that only the
// cast writes; a float32 bias_grad without a copy reads all of the same block as its dy before
// the cast, with no write of it in between; the device supports the rewritten bias_grad.
#include <vector>

#include "core/device.h"
#include "graph/op_uses.h"

LOOM_OP_KIND(cast);
LOOM_OP_KIND(add_bias);
LOOM_OP_KIND(layer_norm);
LOOM_OP_KIND(relu);
LOOM_OP_KIND(leaky_relu);
LOOM_OP_KIND(sigmoid);
LOOM_OP_KIND(tanh);
LOOM_OP_KIND(gelu);
LOOM_OP_KIND(gelu_erf);
LOOM_OP_KIND(softplus);
LOOM_OP_KIND(bias_grad);

namespace loom {
namespace {

bool TakesFusedCast(const OpDef* d) {
  for (const OpDef* k : {&op_kind::add_bias, &op_kind::layer_norm, &op_kind::relu, &op_kind::leaky_relu,
                         &op_kind::sigmoid, &op_kind::tanh, &op_kind::gelu, &op_kind::gelu_erf, &op_kind::softplus})
    if (d == k) return true;
  return false;
}

bool IsNarrowingCast(const OpRecord& op) {
  if (op.def != &op_kind::cast || op.inputs[0].dtype() != DType::kFloat32) return false;
  const DType to = op.outputs[0].dtype();
  return to == DType::kBFloat16 || to == DType::kFloat16;
}

// The producer of cast j's input, when the cast may be fused into it (the Note's conditions but
// the device's answer), or -1.
int FusableProducer(const OpList& list, const OpUses& u, const OpRewrites& rw, int j) {
  const OpRecord& c = list.ops[size_t(j)];
  const Tensor &y = c.inputs[0], &to = c.outputs[0];
  if (!u.Whole(y) || !u.Whole(to) || to.shape() != y.shape()) return -1;
  const std::vector<int>& writers = u.Writers(u.Block(y));
  if (writers.size() != 1 || writers[0] >= j) return -1;
  const int i = writers[0];
  const OpRecord& p = list.ops[size_t(i)];
  if (rw.replace[size_t(i)].def || !TakesFusedCast(p.def) || p.outputs.empty() || p.outputs[0].block() != y.block())
    return -1;
  if (u.OnlyReader(p.outputs[0], i) != j) return -1;
  if (u.Writers(u.Block(to)) != std::vector<int>{j}) return -1;
  return i;
}

// The bias_grad before cast j that reads all of its input as dy and may write its copy (the
// Note's conditions but the device's answer), or -1.
int CopyingBiasGrad(const OpList& list, const OpUses& u, const OpRewrites& rw, int j) {
  const OpRecord& c = list.ops[size_t(j)];
  const Tensor &x = c.inputs[0], &to = c.outputs[0];
  const int b = u.Block(x);
  const BlockFacts& f = list.facts[size_t(b)];
  if (f.marked_persistent || f.has_memory || !u.Whole(x) || !u.Whole(to) || to.shape() != x.shape()) return -1;
  const BlockFacts& t = list.facts[size_t(u.Block(to))];
  if (u.Writers(u.Block(to)) != std::vector<int>{j} || t.marked_persistent || t.has_memory) return -1;
  for (int r : u.Readers(b)) {
    const OpRecord& g = list.ops[size_t(r)];
    if (r >= j || rw.replace[size_t(r)].def || g.def != &op_kind::bias_grad || g.outputs.size() != 1 ||
        g.inputs[0].block() != x.block() || !u.Whole(g.inputs[0]) || g.inputs[0].shape() != x.shape() ||
        g.outputs[0].dtype() != DType::kFloat32 || u.WrittenBetween(x, r, j))
      continue;
    return r;
  }
  return -1;
}

PassResult FuseCasts(OpList list, const PassContext& ctx) {
  OpUses u(list);
  OpRewrites rw(list.size());
  int64_t into_bias_grads = 0;
  for (size_t j = 0; j < list.size(); ++j) {
    if (!IsNarrowingCast(list.ops[j])) continue;
    const int i = FusableProducer(list, u, rw, int(j));
    if (i < 0) {
      const int g = CopyingBiasGrad(list, u, rw, int(j));
      if (g < 0) continue;
      OpRecord fused = list.ops[size_t(g)];
      fused.outputs.push_back(list.ops[j].outputs[0]);
      fused.attrs.Set("copy_dtype", int64_t(list.ops[j].outputs[0].dtype()));
      if (!ctx.device.Supports(fused)) continue;  // Note [What a kernel supports]
      rw.replace[size_t(g)] = std::move(fused);
      ++rw.count;
      ++into_bias_grads;
      rw.drop[j] = true;
      continue;
    }
    OpRecord fused = list.ops[size_t(i)];
    fused.outputs[0] = list.ops[j].outputs[0];
    fused.attrs.Set("out_dtype", int64_t(fused.outputs[0].dtype()));
    if (!ctx.device.Supports(fused)) continue;  // Note [What a kernel supports]
    rw.Replace(i, std::move(fused));
    rw.drop[j] = true;
  }
  PassResult r{rw.Apply(std::move(list))};
  r.counters.Add("fused_casts", int64_t(rw.count) - into_bias_grads);
  r.counters.Add("casts_into_bias_grads", into_bias_grads);
  return r;
}

}  // namespace

LOOM_PASS(PassDef{"fuse_casts", 40, kAllDevices, true, FuseCasts,
                  "a cast of a float32 result to bfloat16 or float16 that is its only reader is folded into the "
                  "element-wise op that wrote it (activations, add_bias, layer_norm), which then writes the 16-bit "
                  "tensor itself, bitwise the same; one whose input a bias_grad also reads is folded into that "
                  "bias_grad, which writes the copy (Note [Casts fused into their producers])",
                  {{"fused_casts", "the casts folded into the op that wrote their input"},
                   {"casts_into_bias_grads", "the casts folded into a bias_grad that reads their input"}}});

}  // namespace loom
