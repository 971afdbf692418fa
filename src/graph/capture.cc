// Step 1 of graph.h: building the op list while a device buffers (Device::Submit ->
// Graph::Append -> OpList::Append). Nothing runs and nothing is allocated.
#include "graph/capture.h"

#include <algorithm>

namespace loom {

std::vector<int> Touching(const BlockUses& uses) {
  std::vector<int> t = uses.readers;
  t.insert(t.end(), uses.writers.begin(), uses.writers.end());
  std::sort(t.begin(), t.end());
  t.erase(std::unique(t.begin(), t.end()), t.end());
  return t;
}

int OpList::Index(const std::shared_ptr<Block>& b) {
  auto it = index_.find(b.get());
  if (it != index_.end()) return it->second;
  const int idx = int(blocks.size());
  blocks.push_back(b);
  index_[b.get()] = idx;
  BlockFacts f;
  f.bytes = b->bytes();
  f.has_memory = b->allocated();
  const int old = rebuilt_from_ ? rebuilt_from_->BlockIndex(b.get()) : -1;
  if (old >= 0) f = rebuilt_from_->facts[size_t(old)];  // Rebuild: what the capture knew
  else if (rebuilt_from_) f.marked_persistent = b->persistent();  // a block the pass made
  for (const auto& s : state_)
    if (s == b) f.has_memory = f.marked_persistent = true;
  facts.push_back(f);
  uses.emplace_back();
  written_.push_back(0);
  return idx;
}

void OpList::DeclareState(std::shared_ptr<Block> b) {
  LOOM_ASSERT(ops.empty(), "[graph '", graph_name_, "'] state declared after the first op");
  state_.push_back(std::move(b));
}

int OpList::BlockIndex(const Block* b) const {
  auto it = index_.find(b);
  return it == index_.end() ? -1 : it->second;
}

void OpList::Append(OpRecord op) {
  op.BindAttrs();  // a pass's new record meets its op here (Note [Declared attributes])
  AccessList acc;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const int b = Index(op.inputs[i].block_ptr());
    LOOM_CHECK(facts[size_t(b)].has_memory || written_[size_t(b)], GraphError, "[graph '", graph_name_, "'] op ",
               ops.size(), " (", op.name(), ") reads input ", i, " (", op.inputs[i].Describe(),
               ") that nothing has written: neither before the capture nor earlier in it");
    acc.reads.push_back(b);
    uses[size_t(b)].readers.push_back(int(ops.size()));
  }
  for (const Tensor& t : op.outputs) {
    const int b = Index(t.block_ptr());
    written_[size_t(b)] = 1;
    acc.writes.push_back(b);
    uses[size_t(b)].writers.push_back(int(ops.size()));
  }
  if (op.def->random_draws) {
    op.rng_offset = random_draws;  // relative: the replay adds the device counter (invariant 6)
    random_draws += op.def->random_draws(op);
  }
  access.push_back(std::move(acc));
  ops.push_back(std::move(op));
}

void OpList::NoteHolders() {
  // The list's own handles on a block: one in `blocks`, one per appearance in an op record.
  std::vector<long> own(blocks.size(), 1);
  for (const OpRecord& op : ops) {
    for (const Tensor& t : op.inputs) own[size_t(BlockIndex(t.block()))]++;
    for (const Tensor& t : op.outputs) own[size_t(BlockIndex(t.block()))]++;
  }
  for (size_t b = 0; b < blocks.size(); ++b) {
    facts[b].marked_persistent = blocks[b]->persistent();
    facts[b].held_outside = blocks[b].use_count() > own[b];
  }
}

OpList Rebuild(std::vector<OpRecord> ops, const OpList& from, const std::vector<std::shared_ptr<Block>>& state) {
  OpList out(from.graph_name());
  for (const auto& b : state) out.DeclareState(b);
  out.rebuilt_from_ = &from;
  for (OpRecord& op : ops) out.Append(std::move(op));
  out.rebuilt_from_ = nullptr;
  return out;
}

}  // namespace loom
