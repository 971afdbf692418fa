// A graph pass (Note [Passes] in graph/passes.h): batch norm fused with the ReLU after it.
//
// Note [Batch norm with its ReLU]
// Forward: a chain
//     z = batch_norm_train(x, gamma, beta, rm, rv)  [->  s = add(z, r)]  ->  y = relu(s or z)
// becomes (y, mean, invstd, rm, rv) = batch_norm_train(x, gamma, beta, rm, rv [, r]; relu = 1)
// at the ReLU's place: a ResNet's conv -> bn -> relu, and the end of its residual blocks,
// bn -> add(shortcut) -> relu. The kernel applies the residual and the ReLU to each value of y
// before it stores it, so z (and s) are neither written nor read again: on a GPU, where these
// element-wise passes over the largest activations are bound by memory, that is two passes of
// four (conv -> bn -> relu) or four of seven (with the shortcut) fewer.
// Backward keeps relu_grad: folded into batch_norm_grad (dy masked as it is read), it saved one
// pass of eight over the activation but kept the ReLU's y alive until the batch norm's gradient
// instead of dying at relu_grad, one more activation live there: the small CNN's planned arena
// grew 6% and its CPU step slowed 30% (the blocked kernels' direct paths took no mask).
// Conditions, each needed for the rewrite to be exact:
//   - each intermediate (z, s) is written by its op alone, read by the next op of the chain
//     alone, as the whole block, and held by nothing outside the graph (OpUses::OnlyReader);
//   - the batch norm moves to the ReLU's place: no op between them writes a block it reads (x,
//     gamma, beta, the running statistics) or reads or writes one it writes besides z (the batch
//     statistics, the running statistics); the residual r is not written between the add and
//     the fused op;
//   - the dtypes are the chain's own (a ReLU with a fused cast, or an add that changes dtype,
//     stays apart), the add's operands have z's shape, and the device supports the fused record
//     (Device::Supports).
// The kernels compute what the separate ops compute, in the same order and rounding: v =
// x scale + shift rounded to T, then v + r rounded to T (the add kernel's a + b; addition is
// commutative in floating point, so add(r, z) gives the same bits), then relu_f. Replay stays bitwise equal to eager (test/graph/fuse_bn_relu_test.cc).
// Order 36: after fuse_bias_act (30) and bf16_relu_mask (35), before bf16_conv_outputs (38), which
// keeps a batch norm's x in bfloat16 whatever its attributes, and the layout pass (50), which
// ties the residual to y (the slots of graph/layouts.cc).
#include "core/device.h"
#include "graph/op_uses.h"
#include "graph/passes.h"

LOOM_OP_KIND(batch_norm_train);
LOOM_OP_KIND(relu);
LOOM_OP_KIND(add);

namespace loom {
namespace {

// Op i may run at `to` instead (to > i): no op in between writes a block it reads, or reads or
// writes a block it writes, other than the chain's own ops and intermediates (`skip`: those ops).
bool MovesTo(const OpList& list, int i, int to, const std::vector<int>& skip) {
  auto skipped = [&](int k) {
    for (int s : skip)
      if (s == k) return true;
    return false;
  };
  const AccessList& a = list.access[size_t(i)];
  for (int b : a.reads)
    for (int w : list.uses[size_t(b)].writers)
      if (w > i && w < to && !skipped(w)) return false;
  for (int b : a.writes) {
    const BlockUses& bu = list.uses[size_t(b)];
    for (const std::vector<int>* ops : {&bu.readers, &bu.writers})
      for (int k : *ops)
        if (k > i && k < to && !skipped(k)) return false;
  }
  return true;
}

bool SameMeta(const Tensor& a, const Tensor& b) { return a.shape() == b.shape() && a.dtype() == b.dtype(); }

PassResult FuseBatchNormRelu(OpList list, const PassContext& ctx) {
  const OpUses u(list);
  const int n = int(list.size());
  OpRewrites rw{size_t(n)};

  // Forward: batch_norm_train [-> add] -> relu, fused at the ReLU.
  for (int i = 0; i < n; ++i) {
    const OpRecord& bn = list.ops[size_t(i)];
    if (bn.def != &op_kind::batch_norm_train || bn.attrs.Int("relu", 0) || bn.inputs.size() != 5) continue;
    const Tensor& z = bn.outputs[0];
    const int j = u.OnlyReader(z, i);
    if (j < 0) continue;
    const OpRecord& next = list.ops[size_t(j)];
    int last = j;
    Tensor residual;
    if (next.def == &op_kind::add) {
      if (next.inputs.size() != 2 || !SameMeta(next.inputs[0], z) || !SameMeta(next.inputs[1], z) ||
          !SameMeta(next.outputs[0], z))
        continue;
      const bool first = next.inputs[0].block() == z.block();
      residual = next.inputs[first ? 1 : 0];
      if ((first ? next.inputs[0] : next.inputs[1]).offset() != z.offset() || residual.block() == z.block() ||
          !residual.is_contiguous())
        continue;
      last = u.OnlyReader(next.outputs[0], j);
      if (last < 0) continue;
    }
    const OpRecord& r = list.ops[size_t(last)];
    const Tensor& in = last == j ? z : next.outputs[0];
    if (r.def != &op_kind::relu || r.inputs[0].block() != in.block() || !SameMeta(r.inputs[0], in) ||
        !SameMeta(r.outputs[0], z))
      continue;
    // Both operands of the add may be batch norms (a shortcut with its own, downsampling, batch
    // norm): the first one takes the chain, the other stays its residual.
    if (rw.drop[size_t(j)] || rw.replace[size_t(last)].def) continue;
    if (!MovesTo(list, i, last, {j, last})) continue;
    if (residual.defined() && u.WrittenBetween(residual, j, last)) continue;
    OpRecord f;
    f.def = &op_kind::batch_norm_train;
    f.attrs = bn.attrs;
    f.attrs.Set("relu", int64_t(1));
    f.inputs = bn.inputs;
    if (residual.defined()) f.inputs.push_back(residual);
    f.outputs = bn.outputs;
    f.outputs[0] = r.outputs[0];
    if (!ctx.device.Supports(f)) continue;  // Note [What a kernel supports]
    rw.Replace(last, std::move(f));
    rw.drop[size_t(i)] = true;
    if (last != j) rw.drop[size_t(j)] = true;
  }

  return rw.Result(std::move(list), "fused_bn_relu");
}

}  // namespace

LOOM_PASS(PassDef{"fuse_bn_relu", 36, kAllDevices, true, FuseBatchNormRelu,
                  "batch_norm_train [+ add] + relu -> batch_norm_train with relu = 1 (and the residual as input 5) "
                  "(Note [Batch norm with its ReLU])",
                  {{"fused_bn_relu", "the batch norms that took their ReLU"}}});

}  // namespace loom
