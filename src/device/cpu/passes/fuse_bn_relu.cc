// A CPU graph pass (Note [Passes] in graph/passes.h): training batch norm fused with the ReLU
// after it.
//
// Note [Fusing batch norm and ReLU]
// In conv-bn-relu nets the convolution cannot take the batch norm (its statistics are the
// batch's: Note [Fusing bias and activation]), but the ReLU can join the batch norm, forward and
// backward, and one pass over the activation is saved each way:
//   - forward: z = batch_norm_train(x, ...) whose z only a = relu(z) reads becomes one
//     batch_norm_train with relu = 1 at the batch norm's place, writing a (ReLU at the store);
//     z is never stored;
//   - backward: dz = relu_grad(a, da) whose dz only a batch_norm_grad reads becomes one
//     batch_norm_grad with relu = 1 at its place, reading da and a (its sixth input) and
//     forming dz on the fly in its sums and its dx pass; dz is never stored.
// The kernels compute each value with the relu and relu_grad ops' own formulas (Note [Batch
// norm with ReLU] in device/cpu/kernels/norm.cc): replay stays bitwise equal to eager.
// Conditions, each needed for the rewrite to be exact:
//   - z (dz) is written by its op alone, read by the next op alone, as the whole block, and held
//     by nothing outside the graph (a user holding it or another op reading it keeps it stored,
//     and both ops stay);
//   - forward: a is written by the relu alone and touched by no op between the batch norm and
//     the relu (it is now written at the batch norm's place);
//   - backward: no op between the relu_grad and the batch_norm_grad writes a or da (they are now
//     read at the batch_norm_grad's place);
//   - the device has a kernel for the fused record (Device::Supports, Note [What a kernel
//     supports]): on the CUDA device, none (cuDNN's batch norm is called as is).
// The layout pass runs after this one: the fused gradient's a has its own slot (a_blocked,
// layout.cc), since it is no longer tied to da by an element-wise op.
#include "core/device.h"
#include "graph/op_uses.h"
#include "graph/passes.h"

LOOM_OP_KIND(batch_norm_train);
LOOM_OP_KIND(batch_norm_grad);
LOOM_OP_KIND(relu);
LOOM_OP_KIND(relu_grad);

namespace loom {
namespace {

bool Fused(const OpRecord& op) { return op.attrs.Int("relu", 0) != 0; }

// t is read as the whole of its block, and has `like`'s shape and dtype.
bool SameWhole(const OpUses& u, const Tensor& t, const Tensor& like) {
  return u.Whole(t) && t.shape() == like.shape() && t.dtype() == like.dtype();
}

PassResult FuseBatchNormRelu(OpList list, const PassContext& ctx) {
  const OpUses u(list);
  const int n = int(list.size());
  OpRewrites rw{size_t(n)};

  // Forward: batch_norm_train, then relu of its y; the fused record at the batch norm's place.
  for (int i = 0; i < n; ++i) {
    const OpRecord& bn = list.ops[size_t(i)];
    if (bn.def != &op_kind::batch_norm_train || Fused(bn)) continue;
    const Tensor& z = bn.outputs[0];
    const int j = u.OnlyReader(z, i);
    if (j < 0) continue;
    const OpRecord& r = list.ops[size_t(j)];
    if (r.def != &op_kind::relu || r.inputs[0].block() != z.block() || !SameWhole(u, r.inputs[0], z)) continue;
    const Tensor& a = r.outputs[0];
    if (!SameWhole(u, a, z)) continue;
    const int ba = u.Block(a);
    bool touched_between = u.Writers(ba) != std::vector<int>{j};
    for (int q : u.Readers(ba)) touched_between |= q >= i && q <= j;
    if (touched_between) continue;
    OpRecord f = bn;
    f.attrs.Set("relu", int64_t(1));
    f.outputs[0] = a;
    if (!ctx.device.Supports(f)) continue;  // Note [What a kernel supports]
    rw.Replace(i, std::move(f));
    rw.drop[size_t(j)] = true;
  }

  // Backward: relu_grad, then batch_norm_grad of its dz; the fused record at the latter's place.
  for (int p = 0; p < n; ++p) {
    const OpRecord& g = list.ops[size_t(p)];
    if (g.def != &op_kind::relu_grad || rw.drop[size_t(p)]) continue;
    const Tensor& dz = g.outputs[0];
    const int q = u.OnlyReader(dz, p);
    if (q < 0) continue;
    const OpRecord& bg = list.ops[size_t(q)];
    if (bg.def != &op_kind::batch_norm_grad || Fused(bg) || bg.inputs.size() != 5 ||
        bg.inputs[4].block() != dz.block() || !SameWhole(u, bg.inputs[4], dz))
      continue;
    const Tensor &a = g.inputs[0], &da = g.inputs[1];
    if (a.shape() != dz.shape() || da.shape() != dz.shape() || a.dtype() != dz.dtype() || da.dtype() != dz.dtype() ||
        !a.is_contiguous() || !da.is_contiguous() || u.WrittenBetween(a, p, q) || u.WrittenBetween(da, p, q))
      continue;
    bool writes_operand = false;  // the batch_norm_grad would overwrite what it reads
    for (const Tensor& o : bg.outputs) writes_operand |= o.block() == a.block() || o.block() == da.block();
    if (writes_operand) continue;
    OpRecord f = bg;
    f.attrs.Set("relu", int64_t(1));
    f.inputs[4] = da;
    f.inputs.push_back(a);
    if (!ctx.device.Supports(f)) continue;  // Note [What a kernel supports]
    rw.Replace(q, std::move(f));
    rw.drop[size_t(p)] = true;
  }

  return rw.Result(std::move(list), "fused_bn_relu");
}

}  // namespace

LOOM_PASS(PassDef{"fuse_bn_relu", 40, DeviceBit(DeviceType::kCPU), false, FuseBatchNormRelu,
                  "training batch norm + relu -> batch_norm_train with relu = 1, relu_grad + batch_norm_grad -> "
                  "batch_norm_grad with relu = 1 (Note [Fusing batch norm and ReLU]); off by default",
                  {{"fused_bn_relu", "the batch norms that took their ReLU (forward and backward)"}}});

}  // namespace loom
