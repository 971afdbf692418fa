// Autograd: define-by-run history and Backward.
//
// Every op called with gradients enabled on an input that requires them leaves a Node: the
// OpDef, its attributes, the inputs/outputs its backward declared it needs (and only those:
// Note [Backward keeps only what it needs]), and one edge per input to the producer's Node or
// to a leaf. Backward(loss) processes nodes in reverse creation order, once all their consumers
// are done, accumulating gradients of tensors used twice, and hands each leaf's gradient out as
// soon as it is final, so an optimizer can update that parameter while backward continues.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/op.h"

namespace loom {

struct Edge {
  std::shared_ptr<Node> node;  // producer of the input, or null
  int index = 0;               // which output of `node`
  Tensor leaf;                 // the input itself when it is a leaf that requires grad
};

struct Node {
  const OpDef* def = nullptr;
  Attrs attrs;
  uint64_t seq = 0;                 // creation order: reverse of it is a topological order
  std::vector<Tensor> inputs;       // saved inputs (others undefined)
  std::vector<Tensor> outputs;      // saved outputs (others undefined)
  std::vector<TensorMeta> input_metas;
  std::vector<TensorMeta> output_metas;
  std::vector<Edge> next;           // one per input
  bool released = false;            // saved tensors dropped after backward ran

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();  // frees the history behind it without recursing (Note [Freeing a long history])
};

// For measurements only: when set, nodes save every input and output instead of the declared
// ones, which is what a runtime without invariant 8 does. Off by default.
void SetSaveAllForBackward(bool on);
bool SaveAllForBackward();

// Records a node for an op call when autograd applies (called by Call()).
void RecordAutograd(const OpDef& def, const Attrs& attrs, const std::vector<Tensor>& inputs,
                    std::vector<Tensor>& outputs);

using GradCallback = std::function<void(const Tensor& param, const Tensor& grad)>;
// Backpropagates from `loss` (gradient `grad_loss`, ones when undefined) and calls `fn` with
// each leaf that requires grad and its gradient, as soon as that gradient is final.
void Backward(const Tensor& loss, const GradCallback& fn, const Tensor& grad_loss = Tensor());
// The same, collected: (param, grad) pairs in the order they became final.
std::vector<std::pair<Tensor, Tensor>> Backward(const Tensor& loss);

}  // namespace loom
