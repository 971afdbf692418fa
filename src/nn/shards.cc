// GradientShards (shards.h): Note [Sharded optimizer state] in nn/dist_opt.h.
#include "nn/shards.h"

#include <algorithm>

#include "core/device.h"
#include "core/ops.h"

namespace loom {
namespace nn {

namespace {
constexpr size_t kAlign = 64;  // bytes: each parameter, and each rank's slot, starts on a cache line

int64_t RoundUp(int64_t n, int64_t k) { return (n + k - 1) / k * k; }

// The one-dimensional view of t's block from element `at` (relative to t), `n` long.
Tensor Flat(const Tensor& t, int64_t at, int64_t n) {
  return Tensor(t.block_ptr(), {n}, {1}, t.offset() + at, t.dtype());
}
}  // namespace

GradientShards::GradientShards(int comm, int rank, int size, size_t bucket_bytes)
    : comm_(comm), rank_(rank), size_(size), cap_(std::max<size_t>(bucket_bytes, 1)) {}

GradientShards::~GradientShards() {
  // Each parameter back in memory of its own, with its value: the buckets die with this object.
  for (Bucket& b : buckets_) {
    if (b.slot == 0) continue;
    for (Member& m : b.members) {
      Block* blk = m.param.block();
      try {
        Device::SetupScope setup(m.param.device());
        blk->Unbind();
        blk->Allocate();
        ops::CopyInto(m.param, Flat(b.params, m.at, m.param.numel()).Reshape(m.param.shape()));
      } catch (...) {  // a destructor does not throw; the parameter's block stays valid only with the bucket
      }
    }
  }
}

bool GradientShards::Complete(const Bucket& b) const {
  return b.slot > 0 && b.arrived == int(b.members.size());
}

std::vector<int> GradientShards::Add(const Tensor& param, const Tensor& grad, const std::string& key,
                                     Compression wire) {
  LOOM_CHECK(param.defined() && grad.defined(), ValueError, "[dist_opt shard] parameter or gradient is undefined");
  LOOM_CHECK(param.shape() == grad.shape() && param.dtype() == grad.dtype() && param.device() == grad.device(),
             ShapeError, "[dist_opt shard] gradient ", grad.Describe(), " does not match its parameter ",
             param.Describe());
  LOOM_CHECK(param.is_contiguous() && param.offset() == 0 && param.nbytes() == param.block()->bytes(), ValueError,
             "[dist_opt shard] parameter ", param.Describe(), " must cover its storage, contiguous, to be sharded");
  std::vector<int> ready;
  auto it = where_.find(param.block());
  if (it == where_.end()) {
    // A parameter not seen before joins the open bucket (one is opened when none is).
    if (buckets_.empty() || buckets_.back().slot > 0) buckets_.emplace_back();
    Bucket& b = buckets_.back();
    if (!b.members.empty()) {
      const Tensor& first = b.members[0].param;
      LOOM_CHECK(first.dtype() == param.dtype() && first.device() == param.device(), DTypeError,
                 "[dist_opt shard] parameters ", first.Describe(), " and ", param.Describe(),
                 " differ in dtype or device: shard one kind per DistOpt");
    }
    const Block* blk = param.block();
    LOOM_CHECK(!blk->host_viewed(), ValueError, "[dist_opt shard] parameter ", param.Describe(),
               " has a zero-copy numpy view: sharding moves its memory into a bucket (copy it instead)");
    LOOM_CHECK(blk->owns_memory(), ValueError, "[dist_opt shard] parameter ", param.Describe(),
               " has no memory of its own (sharded by another DistOpt, or not yet written)");
    LOOM_CHECK(!blk->guard(), ValueError, "[dist_opt shard] parameter ", param.Describe(), " is kept in a layout ",
               "of a graph captured before sharding: destroy that graph first");
    const int64_t align = int64_t(kAlign / SizeOf(param.dtype()));
    const int64_t at = b.members.empty() ? 0 : RoundUp(b.members.back().at + b.members.back().param.numel(), align);
    where_[blk] = {int(buckets_.size()) - 1, int(b.members.size())};
    b.members.push_back(Member{param, at, key, true});
    b.waiting.emplace_back(grad, key);
    ++b.arrived;
    if (size_t(at + param.numel()) * SizeOf(param.dtype()) >= cap_) {
      LayOut(b);
      Reduce(b, wire);
      ready.push_back(int(buckets_.size()) - 1);
    }
    return ready;
  }
  Bucket& b = buckets_[size_t(it->second.first)];
  Member& m = b.members[size_t(it->second.second)];
  LOOM_CHECK(!m.arrived, ValueError, "[dist_opt shard] a second gradient for ", param.Describe(),
             " in one step: hand each parameter's gradient once per step");
  LOOM_CHECK(!b.reduced, ValueError, "[dist_opt shard] the gradient of ", param.Describe(),
             " came after its bucket was reduced this step");
  m.arrived = true;
  m.key = key;
  ++b.arrived;
  Store(b, m, grad);
  if (Complete(b)) {
    Reduce(b, wire);
    ready.push_back(it->second.first);
  }
  return ready;
}

std::vector<int> GradientShards::Close(Compression wire) {
  std::vector<int> ready;
  if (!buckets_.empty() && buckets_.back().slot == 0) LayOut(buckets_.back());
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    if (b.arrived > 0 && !b.reduced) {
      Reduce(b, wire);
      ready.push_back(int(i));
    }
  }
  return ready;
}

// The bucket's buffers, each rank's slot a multiple of a cache line, and its parameters moved
// into the parameter buffer (their values copied; the blocks bound at their offsets). Setup: it
// runs now, also inside a capture (Note [Setup inside a capture] in core/device.h).
void GradientShards::LayOut(Bucket& b) {
  const Tensor& first = b.members[0].param;
  const DType dt = first.dtype();
  const int64_t align = int64_t(kAlign / SizeOf(dt));
  const int64_t used = b.members.back().at + b.members.back().param.numel();
  b.slot = RoundUp((used + size_ - 1) / size_, align);
  {
    Device::SetupScope setup(first.device());
    b.grads = ops::Zeros({b.slot * size_}, dt, first.device_ptr());
    b.params = ops::Zeros({b.slot * size_}, dt, first.device_ptr());
    for (const Tensor* t : {&b.grads, &b.params}) t->block()->set_persistent(true);
    char* base = static_cast<char*>(b.params.raw_data());
    for (Member& m : b.members) {
      ops::CopyInto(Flat(b.params, m.at, m.param.numel()), m.param.Reshape({m.param.numel()}));
      Block* blk = m.param.block();
      blk->Release();
      blk->Bind(base + size_t(m.at) * SizeOf(dt));
    }
  }
  // The gradients that came before the layout: ops of the step (captured in a capture).
  for (size_t k = 0; k < b.members.size(); ++k) Store(b, b.members[k], b.waiting[k].first);
  b.waiting.clear();
}

void GradientShards::Store(Bucket& b, Member& m, const Tensor& grad) {
  NoGradGuard no_grad;
  ops::CopyInto(Flat(b.grads, m.at, m.param.numel()), grad.Contiguous().Reshape({grad.numel()}));
}

void GradientShards::Reduce(Bucket& b, Compression wire) {
  ops::ReduceScatter(comm_, b.grads, ReduceOp::kSum, wire);
  b.reduced = true;
}

std::vector<ShardPiece> GradientShards::Pieces(int i) const {
  const Bucket& b = buckets_[size_t(i)];
  const int64_t lo = rank_ * b.slot, hi = lo + b.slot;
  std::vector<ShardPiece> pieces;
  for (const Member& m : b.members) {
    const int64_t s = std::max(lo, m.at), e = std::min(hi, m.at + m.param.numel());
    if (!m.arrived || s >= e) continue;
    Tensor p = Flat(m.param, s - m.at, e - s);
    p.set_name(m.key);
    pieces.push_back(ShardPiece{p, Flat(b.grads, s, e - s), m.key, int(m.param.ndim())});
  }
  return pieces;
}

bool GradientShards::EveryRankHasPieces(const std::vector<int>& buckets) const {
  std::vector<char> has(size_t(size_), 0);
  for (int i : buckets) {
    const Bucket& b = buckets_[size_t(i)];
    for (const Member& m : b.members)
      if (m.arrived)
        for (int64_t r = m.at / b.slot; r < size_ && r * b.slot < m.at + m.param.numel(); ++r) has[size_t(r)] = 1;
  }
  return std::find(has.begin(), has.end(), 0) == has.end();
}

void GradientShards::Gather(int i) {
  Bucket& b = buckets_[size_t(i)];
  std::vector<Tensor> members;
  for (const Member& m : b.members) members.push_back(m.param);
  ops::AllGatherShards(comm_, b.params, members);
  for (Member& m : b.members) m.arrived = false;
  b.arrived = 0;
  b.reduced = false;
}

void GradientShards::Abandon() {
  if (!buckets_.empty() && buckets_.back().slot == 0) {
    for (const Member& m : buckets_.back().members) where_.erase(m.param.block());
    buckets_.pop_back();
  }
  for (Bucket& b : buckets_) {
    for (Member& m : b.members) m.arrived = false;
    b.arrived = 0;
    b.reduced = false;
  }
}

size_t GradientShards::slot_bytes() const {
  size_t n = 0;
  for (const Bucket& b : buckets_) n += size_t(b.slot) * SizeOf(b.members[0].param.dtype());
  return n;
}

size_t GradientShards::bucket_bytes_total() const {
  size_t n = 0;
  for (const Bucket& b : buckets_) n += size_t(b.slot * size_) * SizeOf(b.members[0].param.dtype());
  return n;
}

}  // namespace nn
}  // namespace loom
