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

  offset_of_.assign(blocks_.size(), SIZE_MAX);
  std::vector<Lifetime> lifetimes;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const BlockLife& l = analysis_.blocks[b];
    if (l.persistent || l.first < 0) continue;
    planned_.push_back(int(b));
    lifetimes.push_back({facts_[b].bytes, l.first, l.last});
  }
  if (options_.memory == MemoryMode::kPlanned) {
    plan_ = PlanMemory(lifetimes, 64);
    for (size_t i = 0; i < planned_.size(); ++i) offset_of_[size_t(planned_[i])] = plan_.offsets[i];
  }

  // The parallel schedule's edges (Note [Dependencies]), plus memory-reuse edges in planned
  // mode: when two blocks share arena bytes, every op touching the earlier one finishes before
  // the later one's first writer starts.
  size_t n = ops_.size();
  std::vector<std::vector<int>> preds = analysis_.preds;
  if (options_.memory == MemoryMode::kPlanned) {
    std::vector<std::vector<int>> touching(blocks_.size());
    for (size_t i = 0; i < n; ++i) {
      for (int b : access_[i].reads) touching[size_t(b)].push_back(int(i));
      for (int b : access_[i].writes) touching[size_t(b)].push_back(int(i));
    }
    for (size_t x = 0; x < planned_.size(); ++x) {
      for (size_t y = 0; y < planned_.size(); ++y) {
        const Lifetime &a = lifetimes[x], &c = lifetimes[y];
        if (a.end >= c.begin) continue;  // a must die before c is born
        size_t a0 = plan_.offsets[x], a1 = a0 + a.bytes, c0 = plan_.offsets[y], c1 = c0 + c.bytes;
        if (!(a0 < c1 && c0 < a1)) continue;
        for (int op : touching[size_t(planned_[x])]) preds[size_t(c.begin)].push_back(op);
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
  stats_.lower_bound_bytes = analysis_.lower_bound_bytes;
  stats_.arena_bytes = options_.memory == MemoryMode::kPlanned ? plan_.arena_bytes : 0;
  stats_.plan_strategy = options_.memory == MemoryMode::kPlanned ? plan_.strategy : "dynamic";
  stats_.memory = options_.memory;
  stats_.random_draws = rng_draws_;
  finalized_ = true;
  if (DebugLevel() >= 1) std::fprintf(stderr, "[loom] %s\n", Summary().c_str());
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
  if (stats_.memory == MemoryMode::kPlanned && stats_.lower_bound_bytes) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f", double(stats_.arena_bytes) / double(stats_.lower_bound_bytes));
    o << ", arena " << Mb(stats_.arena_bytes) << " (" << ratio << "x, " << stats_.plan_strategy << ")";
  }
  o << ", persistent " << Mb(stats_.persistent_bytes);
  return o.str();
}

}  // namespace loom
