// Step 1b of graph.h: a pass (Note [Passes] in passes.h).
//
// Note [Weight gradient into the update]
// At a small batch a linear layer's step is bound by memory traffic over its weights: the
// backward writes the weight gradient dW = x^T dy (one pass the size of W) and SGD then reads it
// back with W and the momentum (Note [Skinny GEMM]). Eager execution cannot avoid the stored
// gradient: the optimizer is called after backward has made it. A captured step can: the pass
// below replaces
//     g = matmul(x, dy, ta=1)            (g read by nothing but the update)
//     sgd_update(W, g, lr[, v][, s]) -> W[, v]
// by one matmul_sgd_update(W, x, dy, lr[, v][, s]) at the update's place, whose kernel computes
// the gradient a few rows at a time in cache and applies them, with the same gradient transform
// (clip scale s, clip value, multiplier: the Notes in core/ops/optimizer.cc). g is never
// stored; the plan no longer holds its bytes. The fused kernel promises the same sums in the same order as the two
// ops it replaces only for some shapes (on the CPU: where that matmul takes the skinny TN
// kernel), and says which through its supports predicate, so the pass fires only there and
// replay stays bitwise equal to eager (docs/design.md invariant 5).
// Conditions, each needed for the rewrite to be exact:
//   - g is written by that matmul alone, read by that update alone, and held by nothing outside
//     the graph (a user holding the gradient still sees it stored);
//   - no op between the two writes x or dy (they are now read at the update's place).
#include "core/device.h"
#include "graph/op_uses.h"
#include "graph/passes.h"

LOOM_OP_KIND(matmul);
LOOM_OP_KIND(sgd_update);
LOOM_OP_KIND(matmul_sgd_update);

namespace loom {
namespace {

PassResult FuseWeightGradientsIntoUpdates(OpList list, const PassContext& ctx) {
  const OpUses u(list);
  const int n = int(list.size());
  OpRewrites rw{size_t(n)};
  for (int j = 0; j < n; ++j) {
    const OpRecord& up = list.ops[size_t(j)];
    // An update writing a 16-bit copy (Note [bfloat16 weight copies kept by the update]) stays.
    if (up.def != &op_kind::sgd_update || up.attrs.Has("copy_dtype")) continue;
    const int g = u.Block(up.inputs[1]);
    if (u.Writers(g).size() != 1 || u.Readers(g) != std::vector<int>{j}) continue;
    if (list.facts[size_t(g)].marked_persistent || list.facts[size_t(g)].held_outside) continue;
    const int i = u.Writers(g)[0];
    const OpRecord& mm = list.ops[size_t(i)];
    if (i >= j || mm.def != &op_kind::matmul || mm.attrs.Int("ta", 0) != 1 || mm.attrs.Int("tb", 0) != 0 ||
        mm.attrs.Int("sum_batch", 0) != 0 || mm.outputs[0].shape() != up.inputs[0].shape())
      continue;
    // A lowered product (16-bit operands, Note [Precision policy] in core/autocast.h) stays apart.
    if (mm.inputs[0].dtype() != mm.outputs[0].dtype()) continue;
    const Tensor &x = mm.inputs[0], &dy = mm.inputs[1];
    if (u.WrittenBetween(x, i, j) || u.WrittenBetween(dy, i, j)) continue;
    OpRecord f;
    f.def = &op_kind::matmul_sgd_update;
    f.attrs = up.attrs;  // with the gradient transform (Note [Clipping folded into the update])
    f.inputs = {up.inputs[0], x, dy};
    f.inputs.insert(f.inputs.end(), up.inputs.begin() + 2, up.inputs.end());  // lr [, buffer] [, scale]
    f.outputs = up.outputs;
    if (!ctx.device.Supports(f)) continue;  // Note [What a kernel supports]
    rw.Replace(j, std::move(f));
    rw.drop[size_t(i)] = true;
  }
  return rw.Result(std::move(list), "fused_weight_grad_updates");
}

}  // namespace

LOOM_PASS(PassDef{"fuse_weight_grad_update", 20, kAllDevices, true, FuseWeightGradientsIntoUpdates,
                  "a weight gradient matmul read only by its SGD update -> matmul_sgd_update, where a kernel "
                  "computes it into the update in cache (Note [Weight gradient into the update])",
                  {{"fused_weight_grad_updates", "SGD updates that computed their weight gradient themselves"}}});

}  // namespace loom
