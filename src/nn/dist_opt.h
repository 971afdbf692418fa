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
//
// Note [Sharded optimizer state]
// With `shard` (ZeRO stage 1; Rajbhandari et al., "ZeRO: memory optimizations toward training
// trillion parameter models", 2020; PyTorch's ZeroRedundancyOptimizer), each of N ranks keeps
// the optimizer state (momentum, Adam's moments) of 1/N of the parameters. The parameters are
// grouped into buckets of about `bucket_bytes`, in the order their gradients become final in the
// first step (backward's order, so the first bucket fills while backward still runs; a parameter
// first seen later opens a new bucket); each bucket is cut into N equal slots, rank r owning slot
// r (slots start on a cache line, the padding is zero). A bucket owns two persistent buffers: its
// gradients and its parameters. Each parameter's memory moves into the parameter buffer (the
// value copied, the block bound at its offset: no copy per step, GradientShards in
// nn/shards.h), and back into memory of its own when the DistOpt goes. A step, per bucket:
//   1. each gradient, when final, is copied into the gradient buffer (a copy op);
//   2. when the bucket's last gradient is in: `reducescatter` in place: slot r holds the sums;
//   3. rank r's update ops run on the pieces of the parameters that lie in slot r (views of the
//      parameters' own blocks and of slot r), with state of the pieces' size: 1/N of the state;
//   4. `allgather_shards` in place over the parameter buffer: every rank has every updated slot.
// Eager mode runs these as they come; a capture records the same ops, and since 1-4 are issued
// while backward still runs (BackwardAndUpdate hands each gradient over as it becomes final),
// the replay's collective lane overlaps them with the rest of backward, as the bucket pass does
// for all-reduces (Note [Gradient buckets] in graph/buckets.cc, which finds nothing to do here).
// Arithmetic: the reduce-scatter adds the same values in the same order as the all-reduce, and
// the update is element-wise, so N sharded ranks compute what N unsharded ranks do (the tests
// compare with 1 rank, in float64). Clipping by global norm and loss scaling need every
// gradient first: BackwardAndUpdate then collects them, 2 runs per bucket, and the updates come
// after the norm, which is the square root of the all-reduced sum of each rank's squared piece
// norms (Optimizer::SetCrossRankReduce); loss scaling's non-finite flag is all-reduced (max), so
// every rank skips the same steps. A parameter that got no gradient in a step is not updated,
// as without sharding. Rules that depend on a parameter's shape (Adam's decay on matrices only)
// see the whole parameter's. Checkpoints: every rank saves its own state (the trainer's rank
// files, Note [Checkpoints across ranks]), so a sharded run resumes on the same number of ranks
// only. Refused: Apply one parameter at a time (a bucket would never know the step ended), a
// simulated communicator (this process would have to update every rank's slot), and parameters
// that cannot move (a zero-copy numpy view, a graph's layout guard).
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
#include "nn/shards.h"

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
  // shard: each rank keeps 1/N of the optimizer state (Note [Sharded optimizer state]).
  DistOpt(std::shared_ptr<Optimizer> optimizer, std::shared_ptr<Communicator> comm,
          std::optional<Compression> compression = std::nullopt, size_t bucket_bytes = 25 << 20,
          bool shard = false);
  ~DistOpt() override;

  // All-reduces `grad` in place (blocking in eager mode), then the wrapped update.
  void Apply(const Tensor& grad, const Tensor& param, const std::string& name = "") override;
  // Every gradient all-reduced (eager: bucketed and blocking; captured: one all-reduce record per
  // gradient, for the bucket pass), then the wrapped optimizer's step on the sums.
  void StepKeyed(const std::vector<std::pair<Tensor, Tensor>>& param_grads, bool key_by_name) override;
  void StepBucketed(const std::vector<std::pair<Tensor, Tensor>>& param_grads);  // StepKeyed(pg, true)
  bool HasSlot(const std::string& slot) const override { return optimizer_->HasSlot(slot); }
  void FinishStep() override;
  void AbandonStep() override;
  // Note [Sharded optimizer state]: whether this rank keeps 1/N of the state, and (sharded) the
  // bytes of this rank's slots over all buckets and of all buckets.
  bool sharded() const { return shards_ != nullptr; }
  size_t state_bytes() const override { return optimizer_->state_bytes(); }
  size_t shard_slot_bytes() const;
  size_t shard_bucket_bytes() const;
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
  // Note [Sharded optimizer state]: bucket b's updates of this rank's pieces, then its gather.
  void UpdateAndGather(int b);
  void StepSharded(const std::vector<std::pair<Tensor, Tensor>>& param_grads, bool key_by_name);

  std::shared_ptr<Optimizer> optimizer_;
  CommunicatorId comm_;
  std::optional<Compression> compression_;
  Precision precision_ = Precision::kFloat32;
  size_t bucket_bytes_;
  std::unique_ptr<GradientShards> shards_;  // sharded only
};

}  // namespace nn
}  // namespace loom
