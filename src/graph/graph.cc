// Capture and finalisation (steps 1-3 of graph.h).
#include "graph/graph.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/debug.h"
#include "device/device.h"
#include "graph/replay_workers.h"

namespace loom {

const char* Name(MemoryMode m) { return m == MemoryMode::kPlanned ? "planned" : "dynamic"; }

Graph::Graph(Device* device, std::string key) : device_(device), key_(std::move(key)) {}

Graph::~Graph() {
  device_->ReleaseDeviceGraph(this);  // before the arena it writes to goes back to the pool
  workers_.reset();
  // Planned blocks point into the arena: unbind them so nothing can use the freed memory.
  for (int b : planned_) blocks_[size_t(b)]->Unbind();
  if (arena_) device_->Free(arena_);
  if (options_.memory == MemoryMode::kDynamic) ReleaseDynamic();
}

int Graph::IndexOf(const std::shared_ptr<Block>& b) {
  auto it = block_index_.find(b.get());
  if (it != block_index_.end()) return it->second;
  int idx = int(blocks_.size());
  blocks_.push_back(b);
  block_index_[b.get()] = idx;
  BlockFacts f;
  f.bytes = b->bytes();
  f.has_memory = b->allocated();
  facts_.push_back(f);
  written_.push_back(0);
  return idx;
}

void Graph::Append(OpRecord op) {
  LOOM_ASSERT(!finalized_, "append to a finalized graph");
  AccessList acc;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    int b = IndexOf(op.inputs[i].block_ptr());
    LOOM_CHECK(facts_[size_t(b)].has_memory || written_[size_t(b)], GraphError, "[graph '", key_, "'] op ",
               ops_.size(), " (", op.name(), ") reads input ", i, " (", op.inputs[i].Describe(),
               ") that nothing has written: neither before the capture nor earlier in it");
    acc.reads.push_back(b);
  }
  for (const Tensor& t : op.outputs) {
    int b = IndexOf(t.block_ptr());
    written_[size_t(b)] = 1;
    acc.writes.push_back(b);
  }
  if (op.def->random_draws) {
    op.rng_offset = rng_draws_;  // relative: the replay adds the device counter (invariant 6)
    rng_draws_ += op.def->random_draws(op);
  }
  access_.push_back(std::move(acc));
  ops_.push_back(std::move(op));
}

void Graph::Finalize(const GraphOptions& options) {
  LOOM_ASSERT(!finalized_, "graph finalized twice");
  options_ = options;
  if (DebugLevel() >= 2) options_.profile = true;
  if (options_.fuse) stats_.fused_ops = FuseWeightGradientsIntoUpdates();

  // Who else holds each block? The graph's own handles are its op records and blocks_.
  std::vector<long> own(blocks_.size(), 1);
  for (const OpRecord& op : ops_) {
    for (const Tensor& t : op.inputs) own[size_t(block_index_[t.block()])]++;
    for (const Tensor& t : op.outputs) own[size_t(block_index_[t.block()])]++;
  }
  for (size_t b = 0; b < blocks_.size(); ++b) {
    facts_[b].marked_persistent = blocks_[b]->persistent();
    facts_[b].held_outside = blocks_[b].use_count() > own[b];
  }
  analysis_ = Analyse(access_, facts_);

  // ---- plan ----
  offset_of_.assign(blocks_.size(), SIZE_MAX);
  for (size_t b = 0; b < blocks_.size(); ++b)
    if (!analysis_.blocks[b].persistent && analysis_.blocks[b].first >= 0) planned_.push_back(int(b));
  size_t n = ops_.size();
  std::vector<std::vector<int>> touching(blocks_.size());
  for (size_t i = 0; i < n; ++i) {
    for (int b : access_[i].reads) touching[size_t(b)].push_back(int(i));
    for (int b : access_[i].writes) touching[size_t(b)].push_back(int(i));
  }
  // Dynamic parallel replay drops one reference per op and block: which blocks, computed once.
  recycled_by_.assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    std::vector<int>& t = recycled_by_[i];
    for (int b : access_[i].reads) t.push_back(b);
    for (int b : access_[i].writes) t.push_back(b);
    std::sort(t.begin(), t.end());
    t.erase(std::unique(t.begin(), t.end()), t.end());
    t.erase(std::remove_if(t.begin(), t.end(), [&](int b) { return analysis_.blocks[size_t(b)].persistent; }),
            t.end());
  }
  // The parallel schedule's edges start from the analysis (Note [Dependencies]).
  std::vector<std::vector<int>> preds = analysis_.preds;
  size_t lower_bound = analysis_.lower_bound_bytes;
  planned_live_bytes_ = analysis_.live_bytes;
  if (options_.memory == MemoryMode::kPlanned) {
    // Note [In-place reuse]: an op's output takes over the memory of an input that dies at this
    // op. Blocks that share memory this way form one group, planned as one lifetime. Under the
    // parallel schedule the op must also wait for every other user of that input.
    std::vector<int> root(blocks_.size());
    for (size_t b = 0; b < root.size(); ++b) root[b] = int(b);
    auto find = [&](int b) {
      while (root[size_t(b)] != b) b = root[size_t(b)] = root[size_t(root[size_t(b)])];
      return b;
    };
    for (size_t i = 0; i < n; ++i) {
      for (int k : ops_[i].def->shareable_inputs) {
        if (size_t(k) >= ops_[i].inputs.size() || !CanRunInPlace(int(i), k)) continue;
        int in = block_index_[ops_[i].inputs[size_t(k)].block()];
        root[size_t(block_index_[ops_[i].outputs[0].block()])] = find(in);
        preds[i].insert(preds[i].end(), touching[size_t(in)].begin(), touching[size_t(in)].end());
        stats_.inplace_ops++;
        break;
      }
    }
    std::vector<int> group_of(blocks_.size(), -1);
    std::vector<Lifetime> groups;
    std::vector<std::vector<int>> group_touching;
    for (int b : planned_) {
      int r = find(b);
      if (group_of[size_t(r)] < 0) {
        group_of[size_t(r)] = int(groups.size());
        groups.push_back({0, INT32_MAX, -1});
        group_touching.emplace_back();
      }
      int g = group_of[size_t(r)];
      group_of[size_t(b)] = g;
      const BlockLife& l = analysis_.blocks[size_t(b)];
      groups[size_t(g)].bytes = std::max(groups[size_t(g)].bytes, facts_[size_t(b)].bytes);
      groups[size_t(g)].begin = std::min(groups[size_t(g)].begin, l.first);
      groups[size_t(g)].end = std::max(groups[size_t(g)].end, l.last);
      auto& t = group_touching[size_t(g)];
      t.insert(t.end(), touching[size_t(b)].begin(), touching[size_t(b)].end());
    }
    // Note [Planned scratch]: a kernel's scratch is one more lifetime, alive at its op only.
    scratch_offset_.assign(n, SIZE_MAX);
    scratch_size_.assign(n, 0);
    std::vector<std::pair<size_t, size_t>> scratch_groups;  // (op, group)
    for (size_t i = 0; i < n; ++i) {
      auto fn = ops_[i].def->scratch[int(device_->type())];
      size_t bytes = fn ? fn(ops_[i]) : 0;
      if (!bytes) continue;
      scratch_size_[i] = bytes;
      scratch_groups.emplace_back(i, groups.size());
      groups.push_back({bytes, int(i), int(i)});
      group_touching.push_back({int(i)});
    }
    plan_ = PlanMemory(groups, 64);
    for (auto& sg : scratch_groups) scratch_offset_[sg.first] = plan_.offsets[sg.second];
    for (int b : planned_) offset_of_[size_t(b)] = plan_.offsets[size_t(group_of[size_t(b)])];
    lower_bound = LowerBound(groups);
    std::vector<int64_t> delta(n + 1, 0);
    for (const Lifetime& g : groups) {
      delta[size_t(g.begin)] += int64_t(g.bytes);
      delta[size_t(g.end) + 1] -= int64_t(g.bytes);
    }
    int64_t live = 0;
    for (size_t i = 0; i < n; ++i) planned_live_bytes_[i] = size_t(live += delta[i]);
    // Memory-reuse edges: when two groups share arena bytes, every op touching the earlier one
    // finishes before the later one's first op starts.
    for (size_t x = 0; x < groups.size(); ++x) {
      for (size_t y = 0; y < groups.size(); ++y) {
        const Lifetime &a = groups[x], &c = groups[y];
        if (a.end >= c.begin) continue;  // a must die before c is born
        size_t a0 = plan_.offsets[x], a1 = a0 + a.bytes, c0 = plan_.offsets[y], c1 = c0 + c.bytes;
        if (!(a0 < c1 && c0 < a1)) continue;
        preds[size_t(c.begin)].insert(preds[size_t(c.begin)].end(), group_touching[x].begin(),
                                      group_touching[x].end());
      }
    }
  }
  sched_succs_.assign(n, {});
  sched_npreds_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    std::sort(preds[i].begin(), preds[i].end());
    preds[i].erase(std::unique(preds[i].begin(), preds[i].end()), preds[i].end());
    for (int p : preds[i]) {
      if (p == int(i)) continue;
      sched_succs_[size_t(p)].push_back(int(i));
      sched_npreds_[i]++;
    }
  }

  stats_.num_ops = n;
  stats_.num_blocks = blocks_.size();
  stats_.num_intermediate = planned_.size();
  stats_.persistent_bytes = analysis_.persistent_bytes;
  stats_.lower_bound_bytes = lower_bound;
  stats_.lower_bound_no_inplace_bytes = analysis_.lower_bound_bytes;
  stats_.arena_bytes = options_.memory == MemoryMode::kPlanned ? plan_.arena_bytes : 0;
  stats_.plan_strategy = options_.memory == MemoryMode::kPlanned ? plan_.strategy : "dynamic";
  stats_.memory = options_.memory;
  stats_.random_draws = rng_draws_;
  finalized_ = true;
  if (DebugLevel() >= 1) std::fprintf(stderr, "[loom] %s\n", Summary().c_str());
}

// Note [In-place reuse]: output 0 of op i may take over input k's memory when the op kind
// allows it (OpDef::shareable_inputs), the input dies at this op (so backward does not need it:
// it would have a later reader), the output is born here, neither persists, and both are whole,
// contiguous blocks of the same shape and dtype.
bool Graph::CanRunInPlace(int i, int k) const {
  const OpRecord& op = ops_[size_t(i)];
  if (op.outputs.empty()) return false;
  const Tensor& in = op.inputs[size_t(k)];
  const Tensor& out = op.outputs[0];
  int bi = block_index_.at(in.block()), bo = block_index_.at(out.block());
  if (bi == bo) return false;
  const BlockLife &li = analysis_.blocks[size_t(bi)], &lo = analysis_.blocks[size_t(bo)];
  if (li.persistent || lo.persistent || li.last != i || lo.first != i) return false;
  if (in.dtype() != out.dtype() || in.shape() != out.shape()) return false;
  auto whole = [&](const Tensor& t, int b) {
    return t.offset() == 0 && t.is_contiguous() && t.nbytes() == facts_[size_t(b)].bytes;
  };
  for (int b : access_[size_t(i)].writes)
    if (b == bi) return false;
  return whole(in, bi) && whole(out, bo);
}

size_t Graph::PlannedOffset(int b) const { return offset_of_.empty() ? SIZE_MAX : offset_of_[size_t(b)]; }

static std::string Mb(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MB", double(bytes) / 1e6);
  return buf;
}

std::string Graph::Summary() const {
  std::ostringstream o;
  o << "graph '" << key_ << "' on " << device_->name() << ": " << stats_.num_ops << " ops, " << stats_.num_blocks
    << " blocks (" << stats_.num_intermediate << " intermediate), memory " << Name(stats_.memory)
    << ", lower bound " << Mb(stats_.lower_bound_bytes);
  if (stats_.inplace_ops)
    o << " (" << Mb(stats_.lower_bound_no_inplace_bytes) << " without the " << stats_.inplace_ops << " in-place ops)";
  if (stats_.memory == MemoryMode::kPlanned && stats_.lower_bound_bytes) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f", double(stats_.arena_bytes) / double(stats_.lower_bound_bytes));
    o << ", arena " << Mb(stats_.arena_bytes) << " (" << ratio << "x, " << stats_.plan_strategy << ")";
  }
  o << ", persistent " << Mb(stats_.persistent_bytes);
  if (stats_.fused_ops) o << ", " << stats_.fused_ops << " weight gradients computed into their updates";
  return o.str();
}

}  // namespace loom
