// SyncBatchNorm2d: batch normalisation over the global batch of a data-parallel job.
//
// Note [SyncBatchNorm]
// Forward: each rank sums its per-channel [Σx, Σx², count] in float64, one all-reduce makes them
// global, and mean and variance follow from them (float64), exactly as one BatchNorm over the
// ranks' batches together would see them (running statistics included, with the unbiased
// variance over the global count).
// Backward: the all-reduce is differentiable (Note [A differentiable all-reduce]), so autograd
// makes one all-reduce of the gradient of the three per-channel sums: the per-channel
// combinations of [Σdy, Σdy·x̂] that the backward of the statistics needs, again in float64.
// gamma and beta are ordinary local parameters: their gradients are this rank's share only and
// the optimizer's gradient all-reduce (DistOpt, the bucket pass) reduces them, once. (nnabla
// 1.32 fixed a SyncBN whose dgamma/dbeta were all-reduced here as well: N times too large.)
#pragma once

#include <memory>

#include "core/comm_registry.h"
#include "nn/layer.h"

namespace loom {
namespace nn {

class SyncBatchNorm2d : public Layer {
 public:
  SyncBatchNorm2d(int64_t channels, std::shared_ptr<Communicator> comm, double momentum = 0.1, double eps = 1e-5,
                  LayerOptions o = {});
  Tensor Forward(const Tensor& x) override;
  std::string TypeName() const override { return "SyncBatchNorm2d"; }
  Tensor gamma, beta, running_mean, running_var;

 private:
  int64_t channels_;
  double momentum_, eps_;
  CommunicatorId comm_;
};

}  // namespace nn
}  // namespace loom
