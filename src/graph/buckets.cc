// Step 1b of graph.h: gradient buckets, a pass (Note [Passes] in passes.h).
//
// Note [Gradient buckets]
// DistOpt (nn/dist_opt.h) captures what eager mode runs: after backward, for each gradient,
//     allreduce(g, token)                     then the optimizer's update reading g
// (a pure sum: the update applies 1/N, Note [Data parallelism folded into the update]).
// Correct, but every all-reduce waits for the whole backward, and N small messages cost N
// latencies. This pass rewrites those all-reduces (the ones whose buffer is a whole gradient
// block reduced in place, written earlier in the graph, read only by ops after them, and held
// by nothing outside the graph) as follows:
//   - one bucket, a new persistent block, holds the gradients back to back, in the order in
//     which they become final during backward (their last writer), each at a 64-byte aligned
//     offset (the padding is zero on every rank, so it reduces to zero);
//   - every gradient block lives in the bucket: the pass asks for it (a BufferRequest: Binding
//     allocates and zeroes the bucket before the first replay, binds each gradient at its
//     offset, and unbinds them when the graph goes), and the list it returns marks the
//     gradients persistent, so the plan no longer holds them and the backward writes straight
//     into the bucket;
//   - the bucket is cut into consecutive slices: the first `first_bucket_bytes` (small, so the
//     first all-reduce starts early), then `bucket_bytes` each; a gradient may straddle a cut;
//   - each slice gets one allreduce, with the same scale, reduce and compression, placed right
//     after the last write of any gradient it overlaps (GraphOptions::overlap_collectives; else
//     all after the last write of any of the group's gradients, each also depending on it: Note
//     [Collectives forced after backward]). The record lists those gradients as members
//     (core/collective.h), so the analysis orders it after their writers and before their
//     readers, and nothing else: backward ops of earlier layers do not wait for it, and the
//     schedule's collective lane runs it beside them;
//   - the original per-gradient all-reduces go;
//   - an op that read a gradient after its last write (its update) may now stand before the
//     bucket's all-reduce: when the optimizer runs from Backward's callback (nn::Model), each
//     update follows its own gradient, long before the bucket it lies in is full. Such an op,
//     and every later op that conflicts with one so deferred (one writes a block the other
//     reads or writes), moves to just after the all-reduce that completes its gradients, in
//     their original order. Moving an op later past ops it does not conflict with changes no
//     value.
// A gradient the user still holds at the end of the capture keeps its own all-reduce: bound
// into the bucket, it would point into memory the graph frees when it goes.
// All slices read and write the bucket and the token, so they keep issue order on every rank
// (Note [The collective token]). The arithmetic is unchanged (the same element-wise sum), so
// replay stays equal to eager.
#include <algorithm>
#include <map>
#include <tuple>

#include "core/collective.h"
#include "core/device.h"
#include "graph/passes.h"

LOOM_OP_KIND(allreduce);

namespace loom {
namespace {

constexpr size_t kAlign = 64;

struct Candidate {
  int op;          // the original allreduce
  int block;       // the gradient's block
  int last_write;  // when the gradient becomes final
};

// What must agree for all-reduces to share a bucket: comm, device, dtype, reduce, scale, compress.
using GroupKey = std::tuple<int64_t, Device*, int, int64_t, double, int64_t>;

GroupKey KeyOf(const OpRecord& op) {
  return {op.attrs.Int("comm"), op.inputs[0].device(), int(op.inputs[0].dtype()), op.attrs.Int("reduce", 0),
          op.attrs.Float("scale", 1.0), op.attrs.Int("compress", 0)};
}

// The all-reduces that may join a bucket, by group: a whole, unshared gradient block, written
// before the all-reduce, touched by nothing between its last write and the all-reduce (or the
// reduced value would move), and held by nothing outside the graph.
std::map<GroupKey, std::vector<Candidate>> FindCandidates(const OpList& list) {
  std::map<GroupKey, std::vector<Candidate>> groups;
  std::vector<char> seen(list.blocks.size(), 0);
  for (size_t i = 0; i < list.size(); ++i) {
    const OpRecord& op = list.ops[i];
    if (op.def != &op_kind::allreduce || op.inputs.size() != 2) continue;
    const Tensor& g = op.inputs[0];
    if (op.outputs[0].block() != g.block()) continue;  // out of place (SyncBatchNorm's statistics)
    const int b = list.BlockIndex(g.block());
    const BlockFacts& f = list.facts[size_t(b)];
    if (seen[size_t(b)] || f.marked_persistent || f.has_memory || f.held_outside) continue;
    if (g.offset() != 0 || !g.is_contiguous() || g.nbytes() != f.bytes) continue;
    int last_write = -1;
    bool ok = true;
    for (int w : list.uses[size_t(b)].writers) {
      if (w == int(i)) continue;
      if (w > int(i)) ok = false;
      last_write = std::max(last_write, w);
    }
    for (int r : list.uses[size_t(b)].readers)
      if (r != int(i) && r > last_write && r < int(i)) ok = false;
    if (!ok || last_write < 0) continue;
    seen[size_t(b)] = 1;
    groups[KeyOf(op)].push_back({int(i), b, last_write});
  }
  return groups;
}

// An inserted all-reduce and the gradient blocks it completes.
struct Slice {
  OpRecord op;
  std::vector<int> members;
};

class Bucketer {
 public:
  Bucketer(OpList& list, const GraphOptions& options)
      : list_(list), options_(options), final_at_(list.blocks.size(), -1), drop_(list.size(), 0) {
    cap_ = size_t(std::max(options.bucket_bytes, 1));
    first_cap_ = options.first_bucket_bytes > 0 ? std::min(cap_, size_t(options.first_bucket_bytes)) : cap_;
  }

  // One group's bucket: its buffer request, and its slices placed after their anchors.
  void Bucket(std::vector<Candidate> cs) {
    std::stable_sort(cs.begin(), cs.end(),
                     [](const Candidate& a, const Candidate& b) { return a.last_write < b.last_write; });
    BufferRequest req;
    size_t total = 0;
    for (const Candidate& c : cs) {
      req.members.emplace_back(list_.blocks[size_t(c.block)], total);
      total += (list_.facts[size_t(c.block)].bytes + kAlign - 1) / kAlign * kAlign;
      drop_[size_t(c.op)] = 1;
      final_at_[size_t(c.block)] = c.last_write;
    }
    req.buffer = std::make_shared<Block>(total, list_.blocks[size_t(cs[0].block)]->device_ptr());
    int first_original = cs[0].op, group_last = -1;
    for (const Candidate& c : cs) {
      first_original = std::min(first_original, c.op);
      group_last = std::max(group_last, c.last_write);
    }
    const OpRecord& proto = list_.ops[size_t(cs[0].op)];
    const size_t esize = SizeOf(proto.inputs[0].dtype());
    size_t begin = 0;
    for (size_t s = 0; begin < total; ++s) {  // slices: [first_cap, cap, cap, ...], in whole elements
      const size_t end = std::min(total, begin + std::max(esize, (s == 0 ? first_cap_ : cap_) / esize * esize));
      Slice slice{SliceRecord(proto, req.buffer, begin, end), {}};
      int last = AddMembers(cs, req, begin, end, group_last, slice);
      // A slice of padding only follows the slice before it.
      if (last < 0) last = after_.empty() ? first_original - 1 : after_.rbegin()->first;
      after_.emplace(options_.overlap_collectives ? last : group_last, std::move(slice));
      ++made_;
      begin = end;
    }
    buffers_.push_back(std::move(req));
  }

  // The list with the original all-reduces dropped, the slices after their anchors, and every
  // op deferred that reads a gradient before its bucket's all-reduce (Note [Gradient buckets]).
  PassResult Finish() {
    std::vector<OpRecord> out = Emit();
    std::vector<std::shared_ptr<Block>> state;
    for (const BufferRequest& b : buffers_) state.push_back(b.buffer);
    PassResult r{Rebuild(std::move(out), list_, state)};
    for (const BufferRequest& b : buffers_)
      for (const auto& m : b.members) {
        BlockFacts& f = r.ops.facts[size_t(r.ops.BlockIndex(m.first.get()))];
        f.marked_persistent = f.has_memory = true;  // in the bucket, from before the first op
      }
    r.buffers = std::move(buffers_);
    r.counters.Add("bucket_allreduces", int64_t(made_));
    return r;
  }

 private:
  static OpRecord SliceRecord(const OpRecord& proto, const std::shared_ptr<Block>& bucket, size_t begin, size_t end) {
    const DType dtype = proto.inputs[0].dtype();
    const size_t esize = SizeOf(dtype);
    OpRecord ar;
    ar.def = &op_kind::allreduce;
    ar.attrs = proto.attrs;
    ar.inputs = {Tensor(bucket, {int64_t((end - begin) / esize)}, {1}, int64_t(begin / esize), dtype), proto.inputs[1]};
    return ar;
  }

  // Lists as members of the slice [begin, end) the gradients it overlaps; returns the latest of
  // their last writes (-1: none).
  int AddMembers(const std::vector<Candidate>& cs, const BufferRequest& req, size_t begin, size_t end, int group_last,
                 Slice& slice) {
    int last = -1;
    auto add = [&](size_t k) {
      slice.op.inputs.push_back(list_.ops[size_t(cs[k].op)].inputs[0]);
      slice.members.push_back(cs[k].block);
      last = std::max(last, cs[k].last_write);
    };
    for (size_t k = 0; k < cs.size(); ++k) {
      const size_t g0 = req.members[k].second, g1 = g0 + list_.facts[size_t(cs[k].block)].bytes;
      if (g0 < end && begin < g1) add(k);
    }
    // Note [Collectives forced after backward]
    // Without overlap, every slice also lists the gradient written last, so that no schedule starts it before the backward has ended (a
    // position in issue order alone would not hold the parallel replay, which runs each lane
    // op as soon as its dependencies are met).
    if (!options_.overlap_collectives)
      for (size_t k = 0; k < cs.size(); ++k)
        if (cs[k].last_write == group_last &&
            std::find(slice.members.begin(), slice.members.end(), cs[k].block) == slice.members.end())
          add(k);
    slice.op.outputs = slice.op.inputs;
    return last;
  }

  // Op i reads or writes a final gradient whose all-reduce is still to come.
  bool Waits(int i) const {
    for (const auto* blocks : {&list_.access[size_t(i)].reads, &list_.access[size_t(i)].writes})
      for (int b : *blocks)
        if (final_at_[size_t(b)] >= 0 && i > final_at_[size_t(b)] && pending_[size_t(b)] > 0) return true;
    return false;
  }

  // One of ops i and j writes a block the other reads or writes.
  bool Conflict(int i, int j) const {
    auto hits = [&](int w, int o) {
      const auto& r = list_.access[size_t(o)].reads;
      const auto& x = list_.access[size_t(o)].writes;
      for (int b : list_.access[size_t(w)].writes)
        if (std::find(r.begin(), r.end(), b) != r.end() || std::find(x.begin(), x.end(), b) != x.end()) return true;
      return false;
    };
    return hits(i, j) || hits(j, i);
  }

  void EmitAfter(int i, std::vector<OpRecord>& out) {
    auto range = after_.equal_range(i);
    for (auto it = range.first; it != range.second; ++it) {
      out.push_back(std::move(it->second.op));
      for (int b : it->second.members) --pending_[size_t(b)];
    }
  }

  void EmitOp(int i, std::vector<OpRecord>& out) {
    out.push_back(std::move(list_.ops[size_t(i)]));
    EmitAfter(i, out);
  }

  // Emits the deferred ops that may go now, repeatedly, in their order.
  void Flush(std::vector<OpRecord>& out) {
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t k = 0; k < deferred_.size() && !progress; ++k) {
        bool blocked = Waits(deferred_[k]);
        for (size_t e = 0; e < k && !blocked; ++e) blocked = Conflict(deferred_[e], deferred_[k]);
        if (blocked) continue;
        const int i = deferred_[k];
        deferred_.erase(deferred_.begin() + std::ptrdiff_t(k));
        EmitOp(i, out);
        progress = true;
      }
    }
  }

  std::vector<OpRecord> Emit() {
    pending_.assign(list_.blocks.size(), 0);
    for (const auto& kv : after_)
      for (int b : kv.second.members) ++pending_[size_t(b)];
    std::vector<OpRecord> out;
    EmitAfter(-1, out);
    for (size_t i = 0; i < list_.size(); ++i) {
      if (drop_[i]) {
        EmitAfter(int(i), out);
      } else {
        bool wait = Waits(int(i));
        for (size_t k = 0; k < deferred_.size() && !wait; ++k) wait = Conflict(deferred_[k], int(i));
        if (wait) {
          deferred_.push_back(int(i));
          continue;
        }
        EmitOp(int(i), out);
      }
      Flush(out);
    }
    Flush(out);
    const size_t dropped = size_t(std::count(drop_.begin(), drop_.end(), 1));
    LOOM_ASSERT(deferred_.empty() && out.size() == list_.size() - dropped + made_, "[buckets] ", deferred_.size(),
                " ops still wait for an all-reduce at the end of graph '", list_.graph_name(), "'");
    return out;
  }

  OpList& list_;
  const GraphOptions& options_;
  size_t cap_ = 0, first_cap_ = 0;
  std::multimap<int, Slice> after_;  // inserted all-reduces, by the op they follow
  std::vector<int> final_at_;        // per block: a bucketed gradient's last write
  std::vector<char> drop_;           // per op: an original all-reduce
  std::vector<int> pending_;         // per block: a gradient's slices not yet emitted
  std::vector<int> deferred_;        // original indices, in order
  std::vector<BufferRequest> buffers_;
  size_t made_ = 0;
};

PassResult BucketGradients(OpList list, const PassContext& ctx) {
  std::map<GroupKey, std::vector<Candidate>> groups = FindCandidates(list);
  if (groups.empty()) return PassResult{std::move(list)};
  Bucketer b(list, ctx.options);
  for (auto& kv : groups) b.Bucket(std::move(kv.second));
  return b.Finish();
}

}  // namespace

LOOM_PASS(PassDef{"bucket_gradients", 10, kAllDevices, true, BucketGradients,
                  "data-parallel gradients share buckets, each slice all-reduced right after its last gradient "
                  "(Note [Gradient buckets]; sizes: bucket_bytes, first_bucket_bytes)",
                  {{"bucket_allreduces", "all-reduces of gradient bucket slices made"}}});

}  // namespace loom
