#include "graph/flops.h"

#include <string>

namespace loom {

namespace {
// 2 x (elements of the (N, O, OH, OW) side) x (multiply-adds per element: C/groups x KH x KW,
// the weight's elements per output channel). The same for the forward and both gradients.
int64_t ConvFlops(const Tensor& w, const Tensor& y) {
  const int64_t o = w.shape().empty() ? 0 : w.shape()[0];
  return o == 0 ? 0 : 2 * y.numel() * (w.numel() / o);
}
}  // namespace

int64_t DenseFlops(const OpRecord& op) {
  const std::string& kind = op.name();
  // A (.., M, K) or (.., K, M) times (.., K, N): every element of A meets N columns, whatever
  // the transposes, batch broadcasting or summing over the batch (sum_batch).
  if ((kind == "matmul" || kind == "dense_bias_act") && op.inputs.size() >= 2 && !op.outputs.empty() && !op.outputs[0].shape().empty())
    return 2 * op.inputs[0].numel() * op.outputs[0].shape().back();
  // p (M, N) -= lr * a (K, M)^T b (K, N) (+ momentum): the product only.
  if (kind == "matmul_sgd_update" && op.inputs.size() >= 3 && !op.inputs[2].shape().empty())
    return 2 * op.inputs[1].numel() * op.inputs[2].shape().back();
  if ((kind == "conv2d" || kind == "conv2d_relu") && op.inputs.size() >= 2 && !op.outputs.empty()) return ConvFlops(op.inputs[1], op.outputs[0]);
  if (kind == "conv2d_grad_input" && op.inputs.size() >= 2) return ConvFlops(op.inputs[0], op.inputs[1]);
  if (kind == "conv2d_grad_weight" && op.inputs.size() >= 2 && !op.outputs.empty())
    return ConvFlops(op.outputs[0], op.inputs[1]);
  return 0;
}

int64_t DenseFlops(const std::vector<OpRecord>& ops) {
  int64_t total = 0;
  for (const OpRecord& op : ops) total += DenseFlops(op);
  return total;
}

}  // namespace loom
