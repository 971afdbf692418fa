// DistOpt: data-parallel training over a communicator, SINGA's `opt.DistOpt`.
// Wraps an optimizer: every gradient is all-reduced (summed over ranks) before the wrapped
// update reads it, and the update scales it by 1/N as it reads it (each rank's loss is the mean
// over its shard of the global batch, so the sum over N is the gradient of the global mean).
// The all-reduce carries no scale: DistOpt sets the wrapped optimizer's gradient multiplier to
// 1/N (Note [Data parallelism folded into the update] in core/ops/optimizer.cc), so that
// optimizer, once wrapped, expects summed gradients.
//
//   eager     Apply: a blocking all-reduce of that gradient, then the update. Step: the
//             gradients packed into buckets of `bucket_bytes`, one blocking all-reduce per
//             bucket, the updates reading their gradient from the bucket.
//   captured  the same ops are recorded (per-gradient all-reduces after backward); the graph's
//             bucket pass then regroups them into persistent buckets all-reduced while backward
//             runs (Note [Gradient buckets] in graph/buckets.cc). Same arithmetic, same numbers.
//
// Note [Clipping under DistOpt]
// Clipping by global norm takes the norm of the averaged gradient (1/N times the all-reduced
// sum), which is the same on every rank, so every rank computes the same clip scale and the
// ranks stay equal: the norm and the scale are ops after the all-reduces (Step, or
// BackwardAndUpdate, which then collects every gradient first). In a captured step the bucket
// pass moves the norm after the last bucket's all-reduce, since it reads every gradient; the
// all-reduces of the buckets still overlap the backward. Clipping by value clamps the averaged
// gradient.
// The communicator stays registered while the DistOpt lives: a graph captured with it refers to
// it by id, so keep the DistOpt as long as the graph (a replay after it is gone raises CommError).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/collective.h"
#include "core/comm_registry.h"
#include "nn/optimizer.h"

namespace loom {
namespace nn {

// Note [The default communicator]
// The communicator DistOpt and SyncBatchNorm2d take when the caller gives none (Python's
// opt.DistOpt(opt.SGD())): MakeCommunicator("auto") of io/comm/comm.h — MPI's world (a 1-rank
// world when started alone, without the launcher), or a DeviceError saying what to install
// when loom was built without MPI.
std::shared_ptr<Communicator> DefaultCommunicator();

class DistOpt : public Optimizer {
 public:
  DistOpt(std::shared_ptr<Optimizer> optimizer, std::shared_ptr<Communicator> comm,
          Compression compression = Compression::kNone, size_t bucket_bytes = 25 << 20);

  // All-reduces `grad` in place (blocking in eager mode), then the wrapped update.
  void Apply(const Tensor& grad, const Tensor& param, const std::string& name = "") override;
  // Every gradient all-reduced (eager: bucketed and blocking; captured: one all-reduce record per
  // gradient, for the bucket pass), then the wrapped optimizer's step on the sums.
  void StepKeyed(const std::vector<std::pair<Tensor, Tensor>>& param_grads, bool key_by_name) override;
  void StepBucketed(const std::vector<std::pair<Tensor, Tensor>>& param_grads);  // StepKeyed(pg, true)
  bool HasSlot(const std::string& slot) const override { return optimizer_->HasSlot(slot); }
  // The wrapped optimizer computes the rate and clips, after the all-reduce (Note [Clipping
  // under DistOpt]).
  void SetSchedule(const Schedule& schedule) override { optimizer_->SetSchedule(schedule); }
  void SetLearningRate(double lr) override {
    Optimizer::SetLearningRate(lr);
    optimizer_->SetLearningRate(lr);
  }
  void SetGradClip(const GradClip& clip) override;
  const Tensor& last_grad_norm() const override { return optimizer_->last_grad_norm(); }
  // Loss scaling (Note [Loss scaling]): the wrapped optimizer keeps the scale and unscales the
  // all-reduced gradients, so every rank finds the same found_inf and skips the same steps.
  void SetLossScaling(const LossScaling& s) override;
  void ClearLossScaling() override;
  Tensor ScaleLoss(const Tensor& loss) override { return optimizer_->ScaleLoss(loss); }
  LossScaleReading loss_scale(const std::shared_ptr<Device>& dev) override { return optimizer_->loss_scale(dev); }
  LossScaleReading loss_scale() override { return optimizer_->loss_scale(); }
  void SetLossScale(const std::shared_ptr<Device>& dev, const LossScaleReading& r) override {
    optimizer_->SetLossScale(dev, r);
  }

  // Every rank ends with root's values of `params` (start from the same weights).
  void BroadcastParameters(const std::vector<Tensor>& params, int root = 0);

  int world_size() const { return comm_.comm().size(); }
  int global_rank() const { return comm_.comm().rank(); }
  int local_rank() const;  // the rank among the ranks of this host (LOCAL_RANK variables; else global)
  int comm_id() const { return comm_.id(); }
  Communicator& communicator() const { return comm_.comm(); }
  Optimizer& optimizer() const { return *optimizer_; }

 private:
  // The pairs with their gradients summed over the ranks (eager: slices of the buckets).
  std::vector<std::pair<Tensor, Tensor>> AllReduceGradients(const std::vector<std::pair<Tensor, Tensor>>& param_grads);

  std::shared_ptr<Optimizer> optimizer_;
  CommunicatorId comm_;
  Compression compression_;
  size_t bucket_bytes_;
};

}  // namespace nn
}  // namespace loom
