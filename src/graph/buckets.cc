// Step 1b of graph.h: gradient buckets (passes.h), and the check that every rank captured the
// same graph.
//
// Note [Gradient buckets]
// DistOpt (nn/dist_opt.h) captures what eager mode runs: after backward, for each gradient,
//     allreduce(g, token)                     then the optimizer's update reading g
// (a pure sum: the update applies 1/N, Note [Data parallelism folded into the update]).
// Correct, but every all-reduce waits for the whole backward, and N small messages cost N
// latencies. This pass rewrites those all-reduces (the ones whose buffer is a whole gradient
// block reduced in place, written earlier in the graph, read only by ops after them) as follows:
//   - one persistent bucket block holds the gradients back to back, in the order in which they
//     become final during backward (their last writer), each at a 64-byte aligned offset (the
//     padding is zero on every rank, so it reduces to zero);
//   - every gradient block is bound into it (it becomes persistent: the plan no longer holds
//     it, and the backward writes straight into the bucket);
//   - the bucket is cut into consecutive slices: the first `first_bucket_bytes` (small, so the
//     first all-reduce starts early), then `bucket_bytes` each; a gradient may straddle a cut;
//   - each slice gets one allreduce, with the same scale, reduce and compression, placed right
//     after the last write of any gradient it overlaps (GraphOptions::overlap_collectives; else
//     all after the last write of any of the group's gradients, each also depending on it: Note
//     [Collectives forced after backward]). The record lists those gradients as members (core/collective.h), so the
//     analysis orders it after their writers and before their readers, and nothing else:
//     backward ops of earlier layers do not wait for it, and the schedule's collective lane runs
//     it beside them;
//   - the original per-gradient all-reduces go;
//   - an op that read a gradient after its last write (its update) may now stand before the
//     bucket's all-reduce: when the optimizer runs from Backward's callback (nn::Model), each
//     update follows its own gradient, long before the bucket it lies in is full. Such an op,
//     and every later op that conflicts with one so deferred (one writes a block the other
//     reads or writes), moves to just after the all-reduce that completes its gradients, in
//     their original order. Moving an op later past ops it does not conflict with changes no
//     value.
// All slices read and write the bucket and the token, so they keep issue order on every rank
// (Note [The collective token]). The arithmetic is unchanged — the same element-wise sum — so
// replay stays equal to eager.
#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "core/collective.h"
#include "core/ops.h"
#include "core/comm_registry.h"
#include "core/device.h"
#include "graph/passes.h"

LOOM_OP_KIND(allreduce);
LOOM_OP_KIND(allgather);
LOOM_OP_KIND(broadcast);

namespace loom {

namespace {

constexpr size_t kAlign = 64;

struct Candidate {
  int op;           // the original allreduce
  int block;        // the gradient's block
  int last_write;   // when the gradient becomes final
};

// What must agree for all-reduces to share a bucket.
// comm, device, dtype, reduce, scale, compress
using GroupKey = std::tuple<int64_t, Device*, int, int64_t, double, int64_t>;

GroupKey KeyOf(const OpRecord& op) {
  return {op.attrs.Int("comm"), op.inputs[0].device(), int(op.inputs[0].dtype()), op.attrs.Int("reduce", 0),
          op.attrs.Float("scale", 1.0), op.attrs.Int("compress", 0)};
}

}  // namespace

bool IsCollective(const OpRecord& op) {
  return op.def == &op_kind::allreduce || op.def == &op_kind::allgather || op.def == &op_kind::broadcast;
}

PassResult BucketGradients(OpList list, const GraphOptions& options) {
  const size_t n = list.size();
  std::vector<std::vector<int>> readers(list.blocks.size()), writers(list.blocks.size());
  for (size_t i = 0; i < n; ++i) {
    for (int b : list.access[i].reads) readers[size_t(b)].push_back(int(i));
    for (int b : list.access[i].writes) writers[size_t(b)].push_back(int(i));
  }
  // Candidates: a whole, unshared gradient block, written before the all-reduce and touched by
  // nothing between its last write and the all-reduce (or the reduced value would move).
  std::map<GroupKey, std::vector<Candidate>> groups;
  std::vector<char> seen(list.blocks.size(), 0);
  for (size_t i = 0; i < n; ++i) {
    const OpRecord& op = list.ops[i];
    if (op.def != &op_kind::allreduce || op.inputs.size() != 2) continue;
    const Tensor& g = op.inputs[0];
    if (op.outputs[0].block() != g.block()) continue;  // out of place (SyncBatchNorm's statistics)
    const int b = list.BlockIndex(g.block());
    const BlockFacts& f = list.facts[size_t(b)];
    if (seen[size_t(b)] || f.marked_persistent || f.has_memory || g.block()->allocated()) continue;
    if (g.offset() != 0 || !g.is_contiguous() || g.nbytes() != g.block()->bytes()) continue;
    int last_write = -1;
    bool ok = true;
    for (int w : writers[size_t(b)]) {
      if (w == int(i)) continue;
      if (w > int(i)) ok = false;
      last_write = std::max(last_write, w);
    }
    for (int r : readers[size_t(b)])
      if (r != int(i) && r > last_write && r < int(i)) ok = false;
    if (!ok || last_write < 0) continue;
    seen[size_t(b)] = 1;
    groups[KeyOf(op)].push_back({int(i), b, last_write});
  }
  if (groups.empty()) return {std::move(list), 0};

  const size_t cap = size_t(std::max(options.bucket_bytes, 1));
  const size_t first_cap = options.first_bucket_bytes > 0 ? std::min(cap, size_t(options.first_bucket_bytes)) : cap;
  // Inserted all-reduces, by the op they follow, with their gradients' blocks; original
  // all-reduces to drop.
  struct Slice {
    OpRecord op;
    std::vector<int> members;
  };
  std::multimap<int, Slice> after;
  std::vector<int> final_at(list.blocks.size(), -1);  // a bucketed gradient's last write
  std::vector<char> drop(n, 0);
  size_t made = 0;
  for (auto& kv : groups) {
    std::vector<Candidate>& cs = kv.second;
    std::stable_sort(cs.begin(), cs.end(),
                     [](const Candidate& a, const Candidate& b) { return a.last_write < b.last_write; });
    const OpRecord& proto = list.ops[size_t(cs[0].op)];
    const DType dtype = proto.inputs[0].dtype();
    const size_t esize = SizeOf(dtype);
    std::vector<size_t> offsets;
    size_t total = 0;
    for (const Candidate& c : cs) {
      offsets.push_back(total);
      total += (list.blocks[size_t(c.block)]->bytes() + kAlign - 1) / kAlign * kAlign;
    }
    // The bucket: persistent state, made (and zeroed) once, like an optimizer's moments.
    const std::shared_ptr<Device>& dev = list.blocks[size_t(cs[0].block)]->device_ptr();
    auto bucket = std::make_shared<Block>(total, dev);
    bucket->set_persistent(true);
    bucket->Allocate();
    {
      std::vector<char> zeros(total, 0);
      dev->MemcpyFromHost(bucket->ptr(), zeros.data(), total);
    }
    for (size_t k = 0; k < cs.size(); ++k) {
      Block& g = *list.blocks[size_t(cs[k].block)];
      g.Bind(static_cast<char*>(bucket->ptr()) + offsets[k]);
      g.set_persistent(true);
      drop[size_t(cs[k].op)] = 1;
    }
    // Slices: [first_cap, cap, cap, ...], in whole elements.
    int first_original = cs[0].op, group_last = -1;
    for (const Candidate& c : cs) {
      first_original = std::min(first_original, c.op);
      group_last = std::max(group_last, c.last_write);
      final_at[size_t(c.block)] = c.last_write;
    }
    size_t begin = 0;
    for (size_t s = 0; begin < total; ++s) {
      const size_t want = std::max(esize, (s == 0 ? first_cap : cap) / esize * esize);
      const size_t end = std::min(total, begin + want);
      OpRecord ar;
      ar.def = &op_kind::allreduce;
      ar.attrs = proto.attrs;
      ar.inputs = {Tensor(bucket, {int64_t((end - begin) / esize)}, {1}, int64_t(begin / esize), dtype),
                   proto.inputs[1]};
      int last = -1;
      std::vector<int> members;
      for (size_t k = 0; k < cs.size(); ++k) {
        const size_t g0 = offsets[k], g1 = g0 + list.blocks[size_t(cs[k].block)]->bytes();
        if (g0 < end && begin < g1) {
          ar.inputs.push_back(list.ops[size_t(cs[k].op)].inputs[0]);
          members.push_back(cs[k].block);
          last = std::max(last, cs[k].last_write);
        }
      }
      // Note [Collectives forced after backward]: without overlap, every slice also lists the
      // gradient written last, so that no schedule starts it before the backward has ended (a
      // position in issue order alone would not hold the parallel replay, which runs each lane
      // op as soon as its dependencies are met).
      if (!options.overlap_collectives)
        for (size_t k = 0; k < cs.size(); ++k)
          if (cs[k].last_write == group_last &&
              std::find(members.begin(), members.end(), cs[k].block) == members.end()) {
            ar.inputs.push_back(list.ops[size_t(cs[k].op)].inputs[0]);
            members.push_back(cs[k].block);
            last = std::max(last, cs[k].last_write);
          }
      ar.outputs = ar.inputs;
      // A slice of padding only follows the slice before it.
      if (last < 0) last = after.empty() ? first_original - 1 : after.rbegin()->first;
      const int at = options.overlap_collectives ? last : group_last;
      after.emplace(at, Slice{std::move(ar), std::move(members)});
      ++made;
      begin = end;
    }
  }
  // Emission in the original order, all-reduces after their anchors, deferring what reads a
  // gradient whose all-reduce is still to come (and what conflicts with a deferred op).
  std::vector<int> pending(list.blocks.size(), 0);  // a gradient's slices not yet emitted
  for (const auto& kv : after)
    for (int b : kv.second.members) ++pending[size_t(b)];
  auto waits = [&](int i) {  // op i reads or writes a final gradient not yet reduced
    for (const auto* blocks : {&list.access[size_t(i)].reads, &list.access[size_t(i)].writes})
      for (int b : *blocks)
        if (final_at[size_t(b)] >= 0 && i > final_at[size_t(b)] && pending[size_t(b)] > 0) return true;
    return false;
  };
  auto conflict = [&](int i, int j) {  // one writes a block the other reads or writes
    auto hits = [&](int w, int o) {
      for (int b : list.access[size_t(w)].writes) {
        const auto& r = list.access[size_t(o)].reads;
        const auto& x = list.access[size_t(o)].writes;
        if (std::find(r.begin(), r.end(), b) != r.end() || std::find(x.begin(), x.end(), b) != x.end()) return true;
      }
      return false;
    };
    return hits(i, j) || hits(j, i);
  };
  std::vector<OpRecord> out;
  std::vector<int> deferred;  // original indices, in order
  auto emit_after = [&](int i) {
    auto range = after.equal_range(i);
    for (auto it = range.first; it != range.second; ++it) {
      out.push_back(std::move(it->second.op));
      for (int b : it->second.members) --pending[size_t(b)];
    }
  };
  auto emit = [&](int i) {
    out.push_back(std::move(list.ops[size_t(i)]));
    emit_after(i);
  };
  auto blocked = [&](size_t k) {  // deferred[k] must stay deferred
    if (waits(deferred[k])) return true;
    for (size_t e = 0; e < k; ++e)
      if (conflict(deferred[e], deferred[k])) return true;
    return false;
  };
  auto flush = [&] {  // emits the deferred ops that may go now, repeatedly
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t k = 0; k < deferred.size(); ++k)
        if (!blocked(k)) {
          const int i = deferred[k];
          deferred.erase(deferred.begin() + std::ptrdiff_t(k));
          emit(i);
          progress = true;
          break;
        }
    }
  };
  emit_after(-1);
  for (size_t i = 0; i < n; ++i) {
    if (drop[i]) {
      emit_after(int(i));
    } else {
      bool wait = waits(int(i));
      for (size_t k = 0; k < deferred.size() && !wait; ++k) wait = conflict(deferred[k], int(i));
      if (wait) {
        deferred.push_back(int(i));
        continue;
      }
      emit(int(i));
    }
    flush();
  }
  flush();
  LOOM_ASSERT(deferred.empty() && out.size() == n - size_t(std::count(drop.begin(), drop.end(), 1)) + made,
              "[buckets] ", deferred.size(), " ops still wait for an all-reduce at the end of graph '",
              list.graph_name(), "'");
  OpList rebuilt = Rebuild(std::move(out), list);
  for (size_t b = 0; b < rebuilt.blocks.size(); ++b)
    if (rebuilt.blocks[b]->persistent() && rebuilt.blocks[b]->allocated()) {
      rebuilt.facts[b].marked_persistent = true;
      rebuilt.facts[b].has_memory = true;
    }
  return {std::move(rebuilt), made};
}

// Note [Ranks capture the same graph]
// Replays on different ranks meet only in their collectives; if the ranks captured different
// steps (a data-dependent branch, another model), the first mismatched collective would hang or
// reduce unrelated buffers. So at the end of a capture with collectives, the ranks all-gather
// one hash of the op kinds and collective shapes, per communicator, and every rank throws the
// same GraphError when they differ. It runs before the passes (which are deterministic: equal
// captures give equal buckets), so a refused capture has bound no gradient into a bucket.
void CheckRanksCapturedTheSame(const OpList& list, Device& device) {
  std::map<int64_t, uint64_t> hashes;  // communicator -> hash
  for (const OpRecord& op : list.ops)
    if (IsCollective(op)) hashes.emplace(op.attrs.Int("comm"), 1469598103934665603ull);
  if (hashes.empty()) return;
  auto mix = [](uint64_t& h, const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  for (auto& kv : hashes) {
    uint64_t& h = kv.second;
    for (const OpRecord& op : list.ops) {
      mix(h, op.name());
      if (IsCollective(op) && op.attrs.Int("comm") == kv.first) {
        mix(h, ToString(op.inputs[0].shape()));
        mix(h, Name(op.inputs[0].dtype()));
        Attrs a = op.attrs;
        a.Set("comm", int64_t(0));  // a registry id: a process's own numbering
        mix(h, a.ToString());
      }
    }
  }
  for (const auto& kv : hashes) {
    const std::shared_ptr<Communicator> comm = FindCommunicator(int(kv.first));
    auto dev = device.shared_from_this();
    Tensor mine = ops::FromVector(std::vector<int64_t>{int64_t(kv.second)}, {1}, dev);
    std::vector<int64_t> all = ops::AllGather(int(kv.first), mine).ToVector<int64_t>();
    std::string diff;
    for (size_t r = 0; r < all.size(); ++r) diff += detail::Cat(r ? ", " : "", "rank ", r, ": ", uint64_t(all[r]));
    for (size_t r = 1; r < all.size(); ++r)
      LOOM_CHECK(all[r] == all[0], GraphError, "[graph '", list.graph_name(), "'] the ", comm->size(),
                 " ranks captured different graphs (hashes of op kinds and collectives: ", diff,
                 "); every rank must capture the same step (Note [Ranks capture the same graph])");
  }
}

}  // namespace loom
