// Evaluation of a classifier over a data set: mean softmax cross-entropy and top-1 accuracy,
// with the network in eval mode (BatchNorm running statistics, no dropout) and no gradients.
//
//   io::DataLoader held_out(io::LoadMnistDir(dir, /*train=*/false), {.shuffle = false, ...});
//   nn::EvalResult r = nn::Evaluate(model, held_out);   // one pass: r.loss, r.top1, r.samples
//
// Each batch goes through Model::Forward, so a model compiled with use_graph replays its own eval
// graph (captured once per batch shape). The per-batch loss and count of correct rows are summed
// on the device (Note [Metrics stay on the device]) and read on the host once, after the pass.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "nn/model.h"

namespace loom {
namespace io {
class DataLoader;
}
namespace nn {

// logits: (N, C) float, labels: int32/int64 (N) -> float32 (): how many rows' label has a logit
// strictly larger than every other class's. A tie for the largest counts as wrong, so a network
// that outputs a constant scores 0, not 100%; a NaN row and a label outside [0, C) count as wrong.
Tensor Top1Correct(const Tensor& logits, const Tensor& labels);

struct EvalResult {
  int64_t samples = 0;
  double loss = 0;  // mean softmax cross-entropy per sample
  double top1 = 0;  // fraction of samples whose label has the largest logit
};

// One epoch of `loader` (from where it stands to the end of the epoch) through model.Forward.
// The model is compiled, classifies with softmax cross-entropy, and stays in the training mode
// it had. ValueError when the loader yields no batch.
EvalResult Evaluate(Model& model, io::DataLoader& loader);

}  // namespace nn
}  // namespace loom
