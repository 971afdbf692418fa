// Graph passes (step 1b of graph.h): rewrites of the captured ops, before the analysis sees them.
//
// Note [Weight gradient into the update]
// At a small batch a linear layer's step is bound by memory traffic over its weights: the
// backward writes the weight gradient dW = x^T dy (one pass the size of W) and SGD then reads it
// back with W and the momentum (Note [Skinny GEMM]). Eager execution cannot avoid the stored
// gradient: the optimizer is called after backward has made it. A captured step can: the pass
// below replaces
//     g = matmul(x, dy, ta=1)            (g read by nothing but the update)
//     sgd_update(W, g, lr[, v]) -> W[, v]
// by one matmul_sgd_update(W, x, dy, lr[, v]) at the update's place, whose kernel computes the
// gradient a few rows at a time in cache and applies them. g is never stored; the plan no
// longer holds its bytes. The kernel computes each gradient element with the same skinny kernel
// and the same summation order as the matmul op, and applies it with the same code as
// sgd_update, so replay stays bitwise equal to eager (DESIGN.md invariant 5). Hence the pass
// fires only where the matmul would take that skinny kernel: float32, batch (K) <= 16, N >= 16,
// and only on devices with the fused kernel (the CPU).
// Conditions, each needed for the rewrite to be exact:
//   - g is written by that matmul alone, read by that update alone, and held by nothing outside
//     the graph (a user holding the gradient still sees it stored);
//   - no op between the two writes x or dy (they are now read at the update's place).
#include <algorithm>

#include "device/device.h"
#include "graph/graph.h"

namespace loom {

namespace {
constexpr int64_t kFuseMaxBatch = 16;  // K of the skinny TN kernel (device/cpu/skinny_gemm.h)
constexpr int64_t kFuseMinColumns = 16;

bool Plain2D(const Tensor& t) {
  return t.dtype() == DType::kFloat32 && t.shape().size() == 2 && t.is_contiguous();
}
}  // namespace

size_t Graph::FuseWeightGradientsIntoUpdates() {
  const OpDef& fused_def = GetOp("matmul_sgd_update");
  if (!device_->HasKernel(fused_def)) return 0;
  const size_t n = ops_.size();
  std::vector<std::vector<int>> readers(blocks_.size()), writers(blocks_.size());
  std::vector<long> refs(blocks_.size(), 1);  // the graph's own handles: blocks_ and op records
  for (size_t i = 0; i < n; ++i) {
    for (int b : access_[i].reads) readers[size_t(b)].push_back(int(i));
    for (int b : access_[i].writes) writers[size_t(b)].push_back(int(i));
    for (const Tensor& t : ops_[i].inputs) refs[size_t(block_index_[t.block()])]++;
    for (const Tensor& t : ops_[i].outputs) refs[size_t(block_index_[t.block()])]++;
  }
  auto written_between = [&](int b, int i, int j) {
    for (int w : writers[size_t(b)])
      if (w > i && w < j) return true;
    return false;
  };
  std::vector<bool> drop(n, false);
  size_t fused = 0;
  for (size_t j = 0; j < n; ++j) {
    const OpRecord& up = ops_[j];
    if (up.def->name != "sgd_update") continue;
    const int g = block_index_[up.inputs[1].block()];
    if (writers[size_t(g)].size() != 1 || readers[size_t(g)] != std::vector<int>{int(j)}) continue;
    if (blocks_[size_t(g)]->persistent() || blocks_[size_t(g)].use_count() > refs[size_t(g)]) continue;
    const int i = writers[size_t(g)][0];
    const OpRecord& mm = ops_[size_t(i)];
    if (i >= int(j) || mm.def->name != "matmul" || mm.attrs.Int("ta", 0) != 1 || mm.attrs.Int("tb", 0) != 0 ||
        mm.attrs.Int("sum_batch", 0) != 0)
      continue;
    const Tensor &x = mm.inputs[0], &dy = mm.inputs[1], &param = up.inputs[0];
    if (!Plain2D(x) || !Plain2D(dy) || !Plain2D(param) || !Plain2D(up.inputs[1])) continue;
    if (x.shape()[0] > kFuseMaxBatch || dy.shape()[1] < kFuseMinColumns || param.shape() != mm.outputs[0].shape())
      continue;
    if (written_between(block_index_[x.block()], i, int(j)) || written_between(block_index_[dy.block()], i, int(j)))
      continue;
    OpRecord f;
    f.def = &fused_def;
    f.attrs = up.attrs;
    f.inputs = {param, x, dy, up.inputs[2]};
    if (up.inputs.size() == 4) f.inputs.push_back(up.inputs[3]);
    f.outputs = up.outputs;
    ops_[j] = std::move(f);
    drop[size_t(i)] = true;
    ++fused;
  }
  if (!fused) return 0;
  // Capture the rewritten list afresh: blocks (the gradients are gone), access lists and random
  // offsets come out as if the user had issued these ops.
  std::vector<OpRecord> ops;
  for (size_t i = 0; i < n; ++i)
    if (!drop[i]) ops.push_back(std::move(ops_[i]));
  ops_.clear();
  access_.clear();
  blocks_.clear();
  block_index_.clear();
  facts_.clear();
  written_.clear();
  rng_draws_ = 0;
  for (OpRecord& op : ops) Append(std::move(op));
  return fused;
}

}  // namespace loom
