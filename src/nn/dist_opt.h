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
//
// Note [Gradients on the wire]
// What a gradient is all-reduced in (the allreduce op's compress attribute) follows the model's
// precision unless set: bf16 -> bfloat16, fp16 -> float16, fp32 -> float32 (Model::set_precision
// and Python's Model.compile hand the precision over; Compression::kNone, "fp32", keeps float32
// in any precision, and an explicit fp16 or bf16 applies in any precision). In a 16-bit type the
// sum is exactly this:
//  1. each rank rounds its float32 gradient g_r (under fp16 loss scaling, S g_r: the scale puts it
//     in float16's range) to the 16-bit type, to nearest even (float16: above 65504 it is inf);
//  2. the 16-bit values are added in float32: the in-process communicator adds them in rank order
//     and rounds the total once; MPI (Note [MPI types and reductions]) and NCCL round every
//     partial sum back to 16 bits, so N ranks take up to N - 1 roundings, in the library's order;
//  3. every rank receives the same 16-bit sum, widened exactly to float32 into its gradient, and
//     the update applies 1/N as it reads it (Note [Data parallelism folded into the update]).
// So the ranks stay identical, and under loss scaling an overflow anywhere (in a rank's rounding
// or in the sum) is an infinity on every rank: all of them skip the step together.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/autocast.h"
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
  // compression: the wire type (Note [Gradients on the wire]); none: the model's precision's.
  DistOpt(std::shared_ptr<Optimizer> optimizer, std::shared_ptr<Communicator> comm,
          std::optional<Compression> compression = std::nullopt, size_t bucket_bytes = 25 << 20);

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
  // Loss scaling (Note [Loss scaling]) is the wrapped optimizer's, set there or through here: it
  // keeps the scale and unscales the all-reduced gradients, so every rank finds the same
  // found_inf and skips the same steps.
  void SetLossScaling(const LossScaling& s) override { optimizer_->SetLossScaling(s); }
  void ClearLossScaling() override { optimizer_->ClearLossScaling(); }
  bool scales_losses() const override { return optimizer_->scales_losses(); }
  const LossScaling* loss_scaling() const override { return optimizer_->loss_scaling(); }
  Tensor ScaleLoss(const Tensor& loss) override { return optimizer_->ScaleLoss(loss); }
  LossScaleReading loss_scale(const std::shared_ptr<Device>& dev) override { return optimizer_->loss_scale(dev); }
  LossScaleReading loss_scale() override { return optimizer_->loss_scale(); }
  void SetLossScale(const std::shared_ptr<Device>& dev, const LossScaleReading& r) override {
    optimizer_->SetLossScale(dev, r);
  }

  // Every rank ends with root's values of `params` (start from the same weights).
  void BroadcastParameters(const std::vector<Tensor>& params, int root = 0);

  // Note [Gradients on the wire]: the model's precision (Model::set_precision hands it over) and
  // an explicit wire type (none: follow the precision). Both apply from the next step (a graph
  // keeps what it captured).
  void SetModelPrecision(Precision p) { precision_ = p; }
  void SetCompression(std::optional<Compression> c) { compression_ = c; }
  Compression compression() const;  // what the next all-reduces use

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
  std::optional<Compression> compression_;
  Precision precision_ = Precision::kFloat32;
  size_t bucket_bytes_;
};

}  // namespace nn
}  // namespace loom
