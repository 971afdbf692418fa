// DistOpt: data-parallel training over a communicator (issue 15), SINGA's `opt.DistOpt`.
// Wraps an optimizer: every gradient is all-reduced (summed over ranks, scaled by 1/N, so each
// rank's loss is the mean over its shard of the global batch) before the wrapped update reads it.
//
//   eager     Apply: a blocking all-reduce of that gradient, then the update. Step: the
//             gradients packed into buckets of `bucket_bytes`, one blocking all-reduce per
//             bucket, the updates reading their gradient from the bucket.
//   captured  the same ops are recorded (per-gradient all-reduces after backward); the graph's
//             bucket pass then regroups them into persistent buckets all-reduced while backward
//             runs (Note [Gradient buckets] in graph/buckets.cc). Same arithmetic, same numbers.
// The communicator stays registered while the DistOpt lives: a graph captured with it refers to
// it by id, so keep the DistOpt as long as the graph (a replay after it is gone raises CommError).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/collective.h"
#include "device/comm_registry.h"
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
  // Eager: bucketed blocking all-reduce, then the updates; captured: Apply for each pair.
  void StepBucketed(const std::vector<std::pair<Tensor, Tensor>>& param_grads);
  bool HasSlot(const std::string& slot) const override { return optimizer_->HasSlot(slot); }
  // The wrapped optimizer computes the rate and clips, after the all-reduce. Clipping by global
  // norm is refused: the norm would have to wait for every bucket's all-reduce.
  void SetSchedule(const Schedule& schedule) override { optimizer_->SetSchedule(schedule); }
  void SetLearningRate(double lr) override {
    Optimizer::SetLearningRate(lr);
    optimizer_->SetLearningRate(lr);
  }
  void SetGradClip(const GradClip& clip) override;

  // Every rank ends with root's values of `params` (start from the same weights).
  void BroadcastParameters(const std::vector<Tensor>& params, int root = 0);

  int world_size() const { return comm_.comm().size(); }
  int global_rank() const { return comm_.comm().rank(); }
  int local_rank() const;  // the rank among the ranks of this host (LOCAL_RANK variables; else global)
  int comm_id() const { return comm_.id(); }
  Communicator& communicator() const { return comm_.comm(); }
  Optimizer& optimizer() const { return *optimizer_; }

 private:
  std::shared_ptr<Optimizer> optimizer_;
  CommunicatorId comm_;
  Compression compression_;
  size_t bucket_bytes_;
};

}  // namespace nn
}  // namespace loom
