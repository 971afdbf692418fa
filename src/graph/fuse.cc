// Step 1b of graph.h: the passes (passes.h).
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
// replay stays bitwise equal to eager (DESIGN.md invariant 5).
// Conditions, each needed for the rewrite to be exact:
//   - g is written by that matmul alone, read by that update alone, and held by nothing outside
//     the graph (a user holding the gradient still sees it stored);
//   - no op between the two writes x or dy (they are now read at the update's place).
#include "graph/passes.h"

#include "core/device.h"

LOOM_OP_KIND(matmul);
LOOM_OP_KIND(sgd_update);
LOOM_OP_KIND(matmul_sgd_update);

namespace loom {

PassResult FuseWeightGradientsIntoUpdates(OpList list, const Device& device) {
  const size_t n = list.size();
  std::vector<std::vector<int>> readers(list.blocks.size()), writers(list.blocks.size());
  for (size_t i = 0; i < n; ++i) {
    for (int b : list.access[i].reads) readers[size_t(b)].push_back(int(i));
    for (int b : list.access[i].writes) writers[size_t(b)].push_back(int(i));
  }
  auto written_between = [&](const Tensor& t, int i, int j) {
    for (int w : writers[size_t(list.BlockIndex(t.block()))])
      if (w > i && w < j) return true;
    return false;
  };
  std::vector<bool> drop(n, false);
  size_t fused = 0;
  for (size_t j = 0; j < n; ++j) {
    const OpRecord& up = list.ops[j];
    if (up.def != &op_kind::sgd_update) continue;
    const int g = list.BlockIndex(up.inputs[1].block());
    if (writers[size_t(g)].size() != 1 || readers[size_t(g)] != std::vector<int>{int(j)}) continue;
    if (list.facts[size_t(g)].marked_persistent || list.facts[size_t(g)].held_outside) continue;
    const int i = writers[size_t(g)][0];
    const OpRecord& mm = list.ops[size_t(i)];
    if (i >= int(j) || mm.def != &op_kind::matmul || mm.attrs.Int("ta", 0) != 1 || mm.attrs.Int("tb", 0) != 0 ||
        mm.attrs.Int("sum_batch", 0) != 0 || mm.outputs[0].shape() != up.inputs[0].shape())
      continue;
    const Tensor &x = mm.inputs[0], &dy = mm.inputs[1];
    if (written_between(x, i, int(j)) || written_between(dy, i, int(j))) continue;
    OpRecord f;
    f.def = &op_kind::matmul_sgd_update;
    f.attrs = up.attrs;  // with the gradient transform (Note [Clipping folded into the update])
    f.inputs = {up.inputs[0], x, dy};
    f.inputs.insert(f.inputs.end(), up.inputs.begin() + 2, up.inputs.end());  // lr [, buffer] [, scale]
    f.outputs = up.outputs;
    if (!device.Supports(f)) continue;  // Note [What a kernel supports]
    list.ops[j] = std::move(f);
    drop[size_t(i)] = true;
    ++fused;
  }
  if (!fused) return {std::move(list), 0};
  std::vector<OpRecord> kept;
  for (size_t i = 0; i < n; ++i)
    if (!drop[i]) kept.push_back(std::move(list.ops[i]));
  return {Rebuild(std::move(kept), list), fused};
}

PassResult RunPasses(OpList ops, const Device& device, const GraphOptions& options) {
  ops = BucketGradients(std::move(ops), options).ops;  // first: a bucketed gradient is not fused away
  if (!options.fuse) return {std::move(ops), 0};
  PassResult r = FuseWeightGradientsIntoUpdates(std::move(ops), device);
  if (options.fuse_bias_act) {
    PassResult b = FuseBiasActivations(std::move(r.ops), device);
    b.rewrites += r.rewrites;
    r = std::move(b);
  }
  if (options.fuse_bn_relu) {
    PassResult b = FuseBatchNormRelu(std::move(r.ops), device);
    r.ops = std::move(b.ops);
    r.rewrites += b.rewrites;
    r.bn_relu = b.bn_relu;
  }
  if (options.plan_layouts) {  // last: it sees the fused ops
    PassResult l = PlanActivationLayouts(std::move(r.ops), device);
    r.ops = std::move(l.ops);
    r.blocked_layouts = l.blocked_layouts;
  }
  if (options.keep_weights_blocked) {
    PassResult w = KeepWeightsBlocked(std::move(r.ops), device);
    r.ops = std::move(w.ops);
    r.blocked_weights = std::move(w.blocked_weights);
  }
  return r;
}

}  // namespace loom
