// DistOpt (dist_opt.h).
#include "nn/dist_opt.h"

#include <cstdlib>
#include <map>

#include "core/ops.h"
#include "core/device.h"
#include "io/comm/comm.h"

namespace loom {
namespace nn {

std::shared_ptr<Communicator> DefaultCommunicator() { return MakeCommunicator("auto"); }

static std::shared_ptr<Communicator> Checked(const std::shared_ptr<Optimizer>& opt,
                                            std::shared_ptr<Communicator> comm) {
  LOOM_CHECK(opt, ValueError, "[dist_opt] no optimizer to wrap");
  LOOM_CHECK(comm, ValueError, "[dist_opt] no communicator");
  return comm;
}

DistOpt::DistOpt(std::shared_ptr<Optimizer> optimizer, std::shared_ptr<Communicator> comm,
                 std::optional<Compression> compression, size_t bucket_bytes)
    : Optimizer(optimizer ? optimizer->learning_rate() : 0.0),
      optimizer_(std::move(optimizer)),
      comm_(Checked(optimizer_, std::move(comm))),
      compression_(compression),
      bucket_bytes_(bucket_bytes) {
  LOOM_CHECK(bucket_bytes_ > 0, ValueError, "[dist_opt] bucket_bytes must be > 0");
  // Note [Data parallelism folded into the update]: the all-reduce sums, the update divides.
  optimizer_->SetGradMultiplier(1.0 / world_size());
}

Compression DistOpt::compression() const {
  if (compression_) return *compression_;
  switch (precision_) {
    case Precision::kBFloat16: return Compression::kBFloat16;
    case Precision::kFloat16: return Compression::kFloat16;
    default: return Compression::kNone;
  }
}

int DistOpt::local_rank() const {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return global_rank();
}

void DistOpt::Apply(const Tensor& grad, const Tensor& param, const std::string& name) {
  LOOM_CHECK(grad.defined(), ValueError, "[dist_opt] gradient of ", param.Describe(), " is undefined");
  ops::AllReduce(comm_.id(), grad, ReduceOp::kSum, 1.0, compression());
  optimizer_->Apply(grad, param, name);
}

void DistOpt::SetGradClip(const GradClip& clip) {
  Optimizer::SetGradClip(clip);  // clips_by_norm(): BackwardAndUpdate then hands every gradient to StepKeyed
  optimizer_->SetGradClip(clip);
}

std::vector<std::pair<Tensor, Tensor>> DistOpt::AllReduceGradients(
    const std::vector<std::pair<Tensor, Tensor>>& param_grads) {
  for (const auto& pg : param_grads)
    LOOM_CHECK(pg.second.defined(), ValueError, "[dist_opt] gradient of ", pg.first.Describe(), " is undefined");
  if (param_grads.empty() || param_grads[0].first.device()->buffering()) {
    // Captured: one all-reduce per gradient, in place; the graph's bucket pass regroups them.
    for (const auto& pg : param_grads) ops::AllReduce(comm_.id(), pg.second, ReduceOp::kSum, 1.0, compression());
    return param_grads;
  }
  NoGradGuard no_grad;
  std::vector<std::pair<Tensor, Tensor>> reduced;
  size_t k = 0;
  while (k < param_grads.size()) {
    // One bucket: consecutive gradients of one device and dtype, up to bucket_bytes_.
    const Tensor& g0 = param_grads[k].second;
    size_t end = k, bytes = 0;
    while (end < param_grads.size() && param_grads[end].second.device() == g0.device() &&
           param_grads[end].second.dtype() == g0.dtype() &&
           (end == k || bytes + param_grads[end].second.nbytes() <= bucket_bytes_))
      bytes += param_grads[end++].second.nbytes();
    Tensor bucket(Shape{int64_t(bytes / SizeOf(g0.dtype()))}, g0.dtype(), g0.device_ptr());
    int64_t at = 0;
    for (size_t i = k; i < end; ++i) {
      const Tensor& g = param_grads[i].second;
      Tensor slice(bucket.block_ptr(), g.shape(), ContiguousStrides(g.shape()), at, g.dtype());
      ops::CopyInto(slice, g);
      reduced.emplace_back(param_grads[i].first, slice);
      at += g.numel();
    }
    ops::AllReduce(comm_.id(), bucket, ReduceOp::kSum, 1.0, compression());
    k = end;
  }
  return reduced;
}

void DistOpt::StepKeyed(const std::vector<std::pair<Tensor, Tensor>>& param_grads, bool key_by_name) {
  if (param_grads.empty()) return;
  // Every gradient reduced before the first update: clipping by global norm measures the
  // averaged gradient, the same on every rank (Note [Clipping under DistOpt]).
  optimizer_->StepKeyed(AllReduceGradients(param_grads), key_by_name);
}

void DistOpt::StepBucketed(const std::vector<std::pair<Tensor, Tensor>>& param_grads) {
  StepKeyed(param_grads, true);
}

void DistOpt::BroadcastParameters(const std::vector<Tensor>& params, int root) {
  for (const Tensor& p : params) ops::Broadcast(comm_.id(), p, root);
}

}  // namespace nn
}  // namespace loom
