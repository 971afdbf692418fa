// Model: a network, a loss and an optimizer, trained one batch at a time, eagerly or as a
// replayed graph with one flag (SINGA's Model.compile(use_graph=...)).
//
//   nn::Model m(net, std::make_shared<nn::SGD>(0.05, 0.9));
//   m.Compile({x}, /*is_train=*/true, /*use_graph=*/true, /*sequential=*/true);
//   for (...) { auto r = m.TrainOneBatch(x, y); ... r.loss.Item() ... }
//
// With use_graph the first TrainOneBatch captures forward, backward and the updates and every
// later call replays them with the new batch copied in. Evaluation (Forward in eval mode) has
// graphs of its own, so training and evaluation alternate freely. A batch of another shape gets a
// graph of its own, as in Python (at most GraphOptions::max_step_graphs per step, the least
// recently used dropped: Note [Bounded recapture] in graph/step.h); with set_recapture(false) it
// is an error that shows the difference.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/autocast.h"
#include "graph/step.h"
#include "nn/layer.h"
#include "nn/optimizer.h"

namespace loom {
class Graph;
namespace nn {

enum class LossKind { kSoftmaxCrossEntropy, kMse };

class Model {
 public:
  Model(std::shared_ptr<Layer> net, std::shared_ptr<Optimizer> optimizer,
        LossKind loss = LossKind::kSoftmaxCrossEntropy);

  // Validates the network against example inputs (shape inference only: a capture that runs
  // nothing), and chooses the execution mode.
  // options: for the graphs of use_graph (memory mode, workers, passes...).
  void Compile(const std::vector<Tensor>& inputs, bool is_train = true, bool use_graph = false,
               bool sequential = true, const GraphOptions& options = {});

  struct StepResult {
    Tensor output;  // the network's output for the batch (with micro-batches: the last one's);
                    // undefined with set_keep_output(false)
    Tensor loss;    // shape (); with micro-batches their mean
  };
  StepResult TrainOneBatch(const Tensor& x, const Tensor& y);
  // Inference in eval mode (BatchNorm running statistics, no dropout), without gradients.
  Tensor Forward(const Tensor& x);

  void Train(bool on = true) { net_->Train(on); }
  void Eval() { net_->Train(false); }
  NamedTensors Params() const { return net_->Params(); }  // names are full paths: "layer1.0.conv1.weight"
  NamedTensors States() const { return net_->States(); }
  Layer& net() { return *net_; }
  Optimizer& optimizer() { return *opt_; }
  bool compiled() const { return compiled_; }
  bool use_graph() const { return use_graph_; }
  const GraphOptions& graph_options() const { return graph_options_; }
  void set_recapture(bool on);
  // Note [Micro-batches in one step]
  // Gradient accumulation: TrainOneBatch splits its batch into n equal micro-batches along axis
  // 0 (x and y; n must divide both), runs forward and backward on each in turn with the loss
  // scaled by 1/n, sums the gradients and updates once: the update of the whole batch at the
  // activation memory of one micro-batch. In graph mode all n are one captured step, so the plan
  // reuses one micro-batch's activation memory for the next. 1 (the default) is the plain step.
  // Set before the first step of a graph model (its graph keeps what it captured).
  void set_micro_batches(int64_t n);
  int64_t micro_batches() const { return micro_batches_; }
  // Note [A step that keeps no output]
  // Whether TrainOneBatch hands back the network's output (on by default: SINGA's
  // train_one_batch returns (out, loss)). Off, StepResult::output is undefined, and in a graph
  // the output is an intermediate like any other: a language model's logits ((B T, V) float32,
  // 1.65 GB for GPT-2 at batch 8 x 1024 tokens) go back to the memory plan once the loss's
  // backward has read them, instead of staying outside it for the whole step (a tensor the user
  // still holds at the end of a capture is persistent: BlockFacts::held_outside). A training loop
  // that reads only the loss loses nothing. Better still, with the softmax cross-entropy loss a
  // network that can compute the loss without its output (Layer::ForwardCrossEntropy: nn::Gpt,
  // whose head's product is fused with the loss, Note [Cross-entropy fused with the head's
  // product] in core/ops/loss.cc) never makes the logits at all; set_fused_loss(false) keeps the
  // plain product and loss (for comparison). Set both before the first step of a graph model.
  void set_keep_output(bool on);
  bool keep_output() const { return keep_output_; }
  void set_fused_loss(bool on);
  bool fused_loss() const { return fused_loss_; }
  // Note [Precision policy] (core/autocast.h): eager TrainOneBatch runs in an AutocastScope of
  // this precision, and a graph step is lowered by the pass autocast_bf16 or autocast_fp16 (the
  // same arithmetic). kFloat16 also turns on the optimizer's dynamic loss scaling with
  // GradScaler's defaults (Note [Loss scaling] in nn/loss_scale.h), unless it scales losses
  // already (SetLossScaling before, for other settings). A DistOpt all-reduces its gradients in
  // the precision's 16-bit type unless told otherwise (Note [Gradients on the wire] in
  // nn/dist_opt.h). kFloat32 by default; set before the first step of a graph model (its graph
  // keeps what it captured).
  void set_precision(Precision p);
  Precision precision() const { return precision_; }
  // The optimizer's loss scale and its counts of good and skipped steps (a host read; ValueError
  // when it does not scale losses): Optimizer::loss_scale.
  LossScaleReading loss_scale() { return opt_->loss_scale(); }
  int64_t steps() const { return steps_; }
  // Graph mode: the training graph's input tensors for batches shaped like (x, y), once that
  // graph exists (empty otherwise). Fill them with the next batch (CopyFromHost, a DataLoader's
  // NextInto) and pass them to TrainOneBatch: no copy, no second input buffer.
  std::vector<Tensor> GraphInputs(const Tensor& x, const Tensor& y) const;
  // The graph of the most recent graph-mode training step (throws if none).
  const std::shared_ptr<Graph>& train_graph() const;

 private:
  void CheckCompiled(const char* what) const;
  std::vector<Tensor> Step(const std::vector<Tensor>& in);
  std::vector<Tensor> MicroBatchStep(const std::vector<Tensor>& in);
  Tensor ComputeLoss(const Tensor& out, const Tensor& y) const;
  // The network's output (undefined when the loss was fused with it: keep_output off) and loss.
  std::pair<Tensor, Tensor> ForwardAndLoss(const Tensor& x, const Tensor& y);

  std::shared_ptr<Layer> net_;
  std::shared_ptr<Optimizer> opt_;
  LossKind loss_;
  bool compiled_ = false, is_train_ = true, use_graph_ = false, sequential_ = true, recapture_ = true;
  GraphOptions graph_options_;
  std::shared_ptr<Device> device_;
  std::unique_ptr<CapturedStep> train_step_, eval_step_;
  int64_t steps_ = 0;
  Precision precision_ = Precision::kFloat32;
  int64_t micro_batches_ = 1;
  bool keep_output_ = true, fused_loss_ = true;
  static std::atomic<int> next_id_;  // models are made on several threads (in-process ranks)
  int id_;
};

}  // namespace nn
}  // namespace loom
