// Step 1b of graph.h: the dense-layer fusion pass (Note [Passes] in passes.h; Note [Dense, bias,
// activation] in core/ops/dense_bias_act.cc).
//
// Note [Fusing bias and activation]
// Forward: a chain
//     c = matmul(x, W)  (2-D W, no transposes)  ->  z = add_bias(c, b)  [->  y = act(z)]
// with act relu, tanh or sigmoid becomes y = dense_bias_act(x, W, b; act) at the chain's last op.
// Backward: dz = act_grad(y, dy) whose dz a bias_grad reads becomes (dz, db) = bias_act_grad(y, dy;
// act) at the act_grad's place.
// Convolutions: c = conv2d(x, w[, b]) -> y = relu(c) becomes y = conv2d_relu(x, w[, b]) (ReLU on
// each part of the output right after oneDNN stores it, cpu/kernels/conv_dnnl.cc), and relu_grad
// with the conv2d_grad_bias of its dz a bias_act_grad with channels = 1. Training batch norm between the two cannot fold into the convolution (its
// statistics are the batch's): conv-bn-relu nets keep their ops.
// Conditions, each needed for the rewrite to be exact:
//   - each intermediate (c, and z when the activation joins) is written by its op alone, read by
//     the next op of the chain alone, as the whole block, and held by nothing outside the graph
//     (a user holding the pre-activation, or another op reading it, keeps it stored: the chain
//     then stops before it);
//   - no op between the chain's first and last writes x, W or b (they are now read at the last);
//   - backward: dz is written by the act_grad alone; db is written by the bias_grad alone and
//     read by nothing before it (it is now written earlier). Both stay stored (the fused op
//     writes them), so a user holding either still sees its value after the step: unlike the
//     forward intermediates, they need not be free of holders outside the graph;
//   - the device has a kernel for the fused record (Device::Supports).
// The fused kernels keep the arithmetic (core/ops/dense_bias_act.cc): on the CPU replay stays
// bitwise equal to eager.
#include "core/bias_act_formulas.h"
#include "core/device.h"
#include "graph/op_uses.h"
#include "graph/passes.h"

LOOM_OP_KIND(matmul);
LOOM_OP_KIND(add_bias);
LOOM_OP_KIND(bias_grad);
LOOM_OP_KIND(relu);
LOOM_OP_KIND(tanh);
LOOM_OP_KIND(sigmoid);
LOOM_OP_KIND(relu_grad);
LOOM_OP_KIND(tanh_grad);
LOOM_OP_KIND(sigmoid_grad);
LOOM_OP_KIND(conv2d);
LOOM_OP_KIND(conv2d_grad_bias);
LOOM_OP_KIND(conv2d_relu);
LOOM_OP_KIND(dense_bias_act);
LOOM_OP_KIND(bias_act_grad);

namespace loom {
namespace {

// The activation an op applies (forward) or differentiates from its output (backward).
BiasAct ActOf(const OpDef* def) {
  if (def == &op_kind::relu) return BiasAct::kRelu;
  if (def == &op_kind::tanh) return BiasAct::kTanh;
  if (def == &op_kind::sigmoid) return BiasAct::kSigmoid;
  return BiasAct::kNone;
}
BiasAct ActGradOf(const OpDef* def) {
  if (def == &op_kind::relu_grad) return BiasAct::kRelu;
  if (def == &op_kind::tanh_grad) return BiasAct::kTanh;
  if (def == &op_kind::sigmoid_grad) return BiasAct::kSigmoid;
  return BiasAct::kNone;
}

PassResult FuseBiasActivations(OpList list, const PassContext& ctx) {
  const OpUses u(list);
  const int n = int(list.size());
  OpRewrites rw{size_t(n)};

  // Forward chains, each ending at its last op.
  for (int i = 0; i < n; ++i) {
    const OpRecord& mm = list.ops[size_t(i)];
    if (mm.def != &op_kind::matmul || mm.attrs.Int("ta", 0) || mm.attrs.Int("tb", 0) || mm.attrs.Int("sum_batch", 0) ||
        mm.inputs[0].ndim() < 2 || mm.inputs[1].ndim() != 2)
      continue;
    // A lowered product (16-bit operands, Note [Precision policy] in core/autocast.h) stays apart.
    if (mm.inputs[0].dtype() != mm.outputs[0].dtype()) continue;
    const int j = u.OnlyReader(mm.outputs[0], i);
    if (j < 0) continue;
    const OpRecord& ab = list.ops[size_t(j)];
    if (ab.def != &op_kind::add_bias || ab.inputs[0].block() != mm.outputs[0].block() ||
        ab.inputs[0].shape() != mm.outputs[0].shape() || ab.inputs[1].block() == mm.outputs[0].block())
      continue;
    const Tensor &x = mm.inputs[0], &w = mm.inputs[1], &b = ab.inputs[1];
    int last = j;
    BiasAct act = BiasAct::kNone;
    const int k = u.OnlyReader(ab.outputs[0], j);
    if (k >= 0) {
      const OpRecord& a = list.ops[size_t(k)];
      if (ActOf(a.def) != BiasAct::kNone && a.inputs[0].block() == ab.outputs[0].block() &&
          a.inputs[0].shape() == ab.outputs[0].shape() && !u.WrittenBetween(b, j, k)) {
        last = k;
        act = ActOf(a.def);
      }
    }
    for (;;) {  // the longest chain the device supports: with the activation, else without
      if (u.WrittenBetween(x, i, last) || u.WrittenBetween(w, i, last)) break;
      OpRecord f;
      f.def = &op_kind::dense_bias_act;
      f.attrs.Set("act", int64_t(act));
      f.inputs = {x, w, b};
      f.outputs = {list.ops[size_t(last)].outputs[0]};
      if (ctx.device.Supports(f)) {  // Note [What a kernel supports]
        rw.Replace(last, std::move(f));
        rw.drop[size_t(i)] = true;
        if (last != j) rw.drop[size_t(j)] = true;
        break;
      }
      if (last == j) break;
      last = j;
      act = BiasAct::kNone;
    }
  }

  // Convolutions: conv2d (with or without its bias) whose result only a relu reads.
  for (int i = 0; i < n; ++i) {
    const OpRecord& conv = list.ops[size_t(i)];
    if (conv.def != &op_kind::conv2d) continue;
    // A lowered convolution (bfloat16 operands, Note [Precision policy] in core/autocast.h) stays apart.
    if (conv.inputs[0].dtype() != conv.outputs[0].dtype()) continue;
    const int j = u.OnlyReader(conv.outputs[0], i);
    if (j < 0) continue;
    const OpRecord& a = list.ops[size_t(j)];
    if (a.def != &op_kind::relu || a.inputs[0].block() != conv.outputs[0].block() ||
        a.inputs[0].shape() != conv.outputs[0].shape())
      continue;
    bool moved_input_written = false;
    for (const Tensor& t : conv.inputs) moved_input_written |= u.WrittenBetween(t, i, j);
    if (moved_input_written) continue;
    OpRecord f;
    f.def = &op_kind::conv2d_relu;
    f.attrs = conv.attrs;
    f.inputs = conv.inputs;
    f.outputs = a.outputs;
    if (!ctx.device.Supports(f)) continue;  // Note [What a kernel supports]
    rw.Replace(j, std::move(f));
    rw.drop[size_t(i)] = true;
  }

  // Backward: an activation's gradient and the bias gradient of the same dz (a dense layer's
  // bias_grad, or a convolution's conv2d_grad_bias: channels = 1).
  for (int p = 0; p < n; ++p) {
    const OpRecord& g = list.ops[size_t(p)];
    const BiasAct act = ActGradOf(g.def);
    if (act == BiasAct::kNone || rw.drop[size_t(p)]) continue;
    const Tensor& dz = g.outputs[0];
    const int bz = u.Block(dz);
    if (u.Writers(bz) != std::vector<int>{p} || !u.Whole(dz)) continue;
    for (int q : u.Readers(bz)) {
      const OpRecord& bg = list.ops[size_t(q)];
      const bool channels = bg.def == &op_kind::conv2d_grad_bias;
      if ((bg.def != &op_kind::bias_grad && !channels) || rw.drop[size_t(q)] || bg.inputs[0].block() != dz.block() ||
          bg.inputs[0].shape() != dz.shape())
        continue;
      const Tensor& db = bg.outputs[0];
      const int bb = u.Block(db);
      bool early_reader = false;
      for (int r : u.Readers(bb)) early_reader |= r <= q;
      if (u.Writers(bb) != std::vector<int>{q} || early_reader) continue;
      OpRecord f;
      f.def = &op_kind::bias_act_grad;
      f.attrs.Set("act", int64_t(act));
      if (channels) f.attrs.Set("channels", int64_t(1));
      f.inputs = g.inputs;
      f.outputs = {dz, db};
      if (!ctx.device.Supports(f)) continue;  // Note [What a kernel supports]
      rw.Replace(p, std::move(f));
      rw.drop[size_t(q)] = true;
      break;
    }
  }

  return rw.Result(std::move(list), "fused_bias_act");
}

}  // namespace

LOOM_PASS(PassDef{"fuse_bias_act", 30, kAllDevices, true, FuseBiasActivations,
                  "matmul + add_bias [+ relu/tanh/sigmoid] -> dense_bias_act, conv2d + relu -> conv2d_relu, an "
                  "activation's gradient + the bias gradient -> bias_act_grad (Note [Fusing bias and activation])",
                  {{"fused_bias_act", "the dense_bias_act, conv2d_relu and bias_act_grad ops made"}}});

}  // namespace loom
