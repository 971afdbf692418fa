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
                 std::optional<Compression> compression, size_t bucket_bytes, bool shard)
    : Optimizer(optimizer ? optimizer->learning_rate() : 0.0),
      optimizer_(std::move(optimizer)),
      comm_(Checked(optimizer_, std::move(comm))),
      compression_(compression),
      bucket_bytes_(bucket_bytes) {
  LOOM_CHECK(bucket_bytes_ > 0, ValueError, "[dist_opt] bucket_bytes must be > 0");
  // Note [Data parallelism folded into the update]: the all-reduce sums, the update divides.
  optimizer_->SetGradMultiplier(1.0 / world_size());
  if (!shard) return;
  // Sharded optimizer state: see Note [Sharded optimizer state] in dist_opt.h.
  LOOM_CHECK(std::string(comm_.comm().backend()) != "simulated", ValueError, "[dist_opt] sharded optimizer state ",
             "over a simulated communicator: this process would have to update every rank's slot");
  LOOM_CHECK(!dynamic_cast<DistOpt*>(optimizer_.get()), ValueError, "[dist_opt] a DistOpt cannot wrap another");
  shards_ = std::make_unique<GradientShards>(comm_.id(), global_rank(), world_size(), bucket_bytes_);
  const int id = comm_.id();
  optimizer_->SetCrossRankReduce([id](const Tensor& t, ReduceOp op) { ops::AllReduce(id, t, op); });
}

DistOpt::~DistOpt() = default;

size_t DistOpt::shard_slot_bytes() const { return shards_ ? shards_->slot_bytes() : 0; }
size_t DistOpt::shard_bucket_bytes() const { return shards_ ? shards_->bucket_bytes_total() : 0; }

void DistOpt::UpdateAndGather(int b) {
  for (const ShardPiece& p : shards_->Pieces(b)) {
    optimizer_->SetParameterDims(p.param.block(), p.ndim);
    optimizer_->Apply(p.grad, p.param, p.key);
  }
  shards_->Gather(b);
}

void DistOpt::FinishStep() {
  if (!shards_) return;
  for (int b : shards_->Close(compression())) UpdateAndGather(b);
}

void DistOpt::AbandonStep() {
  if (shards_) shards_->Abandon();
}

// Note [Sharded optimizer state]: every gradient in and reduce-scattered, then the wrapped
// optimizer's Step over this rank's pieces (the norm and the non-finite flag reduced over the
// ranks), then the gathers.
void DistOpt::StepSharded(const std::vector<std::pair<Tensor, Tensor>>& param_grads, bool key_by_name) {
  try {
    const Compression wire = compression();
    std::vector<int> ready;
    for (const auto& pg : param_grads)
      for (int b : shards_->Add(pg.first, pg.second, key_by_name ? pg.first.name() : "", wire)) ready.push_back(b);
    for (int b : shards_->Close(wire)) ready.push_back(b);
    std::vector<std::pair<Tensor, Tensor>> pieces;
    for (int b : ready)
      for (const ShardPiece& p : shards_->Pieces(b)) {
        optimizer_->SetParameterDims(p.param.block(), p.ndim);
        pieces.emplace_back(p.param, p.grad);
      }
    // The cross-rank reductions of clipping and loss scaling are collectives: every rank must
    // reach them, so every rank needs a piece. The layout is the same on every rank, so they
    // all decide alike.
    LOOM_CHECK(!optimizer_->needs_every_gradient() || shards_->EveryRankHasPieces(ready), ValueError,
               "[dist_opt] sharding ", param_grads.size(), " parameters over ", world_size(), " ranks leaves a rank ",
               "without any, which clipping by global norm and loss scaling cannot handle: use fewer ranks or no "
               "sharding");
    optimizer_->StepKeyed(pieces, key_by_name);
    for (int b : ready) shards_->Gather(b);
  } catch (...) {
    shards_->Abandon();
    throw;
  }
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
  if (shards_) {  // Note [Sharded optimizer state]
    LOOM_CHECK(applying_from_backward(), ValueError, "[dist_opt] with sharded optimizer state the update of ",
               param.Describe(), " goes through BackwardAndUpdate or Step (all of a step's gradients), not Apply");
    for (int b : shards_->Add(param, grad, name, compression())) UpdateAndGather(b);
    return;
  }
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
  if (shards_) return StepSharded(param_grads, key_by_name);
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
