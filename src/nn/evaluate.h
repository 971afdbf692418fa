// Evaluation of a classifier over a data set: mean softmax cross-entropy, top-1 and top-5
// accuracy, with the network in eval mode (BatchNorm running statistics, no dropout) and no
// gradients.
//
//   io::DataLoader held_out(io::LoadMnistDir(dir, /*train=*/false), {.shuffle = false, ...});
//   nn::Evaluator eval(model);                 // keep it: its graphs are captured once
//   nn::EvalResult r = eval.Run(held_out);     // one pass: r.loss, r.top1, r.top5, r.samples
//   nn::EvalResult r = nn::Evaluate(model, held_out);   // the same, with a one-off Evaluator
//
// The eval step is the forward pass, the loss and the correct counts, added into device sums
// (MetricSums). A model compiled with use_graph runs it as a graph of its own (captured once per
// batch shape, in eval mode, without gradients); eagerly otherwise. The sums are read on the host
// once, after the pass (Note [Metrics stay on the device]).
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "nn/model.h"

namespace loom {
class CapturedStep;
namespace io {
class DataLoader;
}
namespace nn {

// logits: (N, C) float, labels: int32/int64 (N), k >= 1 -> float32 (): how many rows have their
// label among the k largest logits, strictly: fewer than k other classes have a logit >= the
// label's. So a tie at the k-th place counts as wrong (a network that outputs a constant scores
// 0, not 100%); so does a row holding a NaN and a label outside [0, C). k >= C counts every
// valid, NaN-free row.
Tensor TopKCorrect(const Tensor& logits, const Tensor& labels, int64_t k);
// TopKCorrect with k = 1: the label's logit is strictly larger than every other class's.
Tensor Top1Correct(const Tensor& logits, const Tensor& labels);

struct EvalResult {
  int64_t samples = 0;
  double loss = 0;  // mean softmax cross-entropy per sample
  double top1 = 0;  // fraction of samples whose label has the largest logit
  double top5 = 0;  // fraction of samples whose label is among the 5 largest logits
};

// Note [Metrics stay on the device]
// Sums of a classifier's metrics kept in persistent float64 device scalars. Add submits ops only
// (so it may be captured in a graph, and a replay adds into the same sums); Read is the one host
// read. A host read waits for the device, which per batch would serialise an evaluation on a
// GPU. float64: a large data set loses no counts.
class MetricSums {
 public:
  explicit MetricSums(std::shared_ptr<Device> dev);
  // Adds the batch's summed loss, top-1 and top-5 correct counts and its size. Ops only.
  void Add(const Tensor& logits, const Tensor& labels);
  void Reset();               // zeros the sums (a feed; not during a capture)
  EvalResult Read() const;    // one host read; ValueError when nothing was added

 private:
  std::shared_ptr<Device> dev_;
  Tensor loss_, top1_, top5_, samples_;  // float64 ()
};

// The eval step of one model, kept across passes so that its graphs are captured once.
class Evaluator {
 public:
  explicit Evaluator(Model& model);
  ~Evaluator();
  // One epoch of `loader` (from where it stands to the end of the epoch). The model is compiled,
  // classifies with softmax cross-entropy, and stays in the training mode it had. ValueError
  // when the loader yields no batch.
  EvalResult Run(io::DataLoader& loader);

 private:
  std::vector<Tensor> Step(const std::vector<Tensor>& in);
  Model& model_;
  std::unique_ptr<MetricSums> sums_;
  std::unique_ptr<CapturedStep> step_;
};

// Evaluator(model).Run(loader).
EvalResult Evaluate(Model& model, io::DataLoader& loader);

}  // namespace nn
}  // namespace loom
