// Step 3 of graph.h: intermediate blocks and scratch -> plan entries -> offsets (plan.h).
#include "graph/plan.h"

#include <algorithm>
#include <cstdint>

namespace loom {

size_t MemoryLayout::BlockOffset(int block) const {
  if (size_t(block) >= entry_of_block.size() || entry_of_block[size_t(block)] < 0) return SIZE_MAX;
  return packing.offsets[size_t(entry_of_block[size_t(block)])];
}

size_t MemoryLayout::ScratchOffset(int op) const {
  if (size_t(op) >= scratch_entry.size() || scratch_entry[size_t(op)] < 0) return SIZE_MAX;
  return packing.offsets[size_t(scratch_entry[size_t(op)])];
}

size_t MemoryLayout::ScratchBytes(int op) const {
  if (size_t(op) >= scratch_entry.size() || scratch_entry[size_t(op)] < 0) return 0;
  return entries[size_t(scratch_entry[size_t(op)])].bytes;
}

bool CanRunInPlace(const OpList& ops, const Analysis& analysis, int i, int k) {
  const OpRecord& op = ops.ops[size_t(i)];
  if (op.outputs.empty() || size_t(k) >= op.inputs.size()) return false;
  const Tensor& in = op.inputs[size_t(k)];
  const Tensor& out = op.outputs[0];
  const int bi = ops.BlockIndex(in.block()), bo = ops.BlockIndex(out.block());
  if (bi == bo) return false;
  const BlockLife &li = analysis.blocks[size_t(bi)], &lo = analysis.blocks[size_t(bo)];
  if (li.persistent || lo.persistent || li.last != i || lo.first != i) return false;
  if (in.dtype() != out.dtype() || in.shape() != out.shape()) return false;
  for (int b : ops.access[size_t(i)].writes)
    if (b == bi) return false;
  auto whole = [&](const Tensor& t, int b) {
    return t.offset() == 0 && t.is_contiguous() && t.nbytes() == ops.facts[size_t(b)].bytes;
  };
  return whole(in, bi) && whole(out, bo);
}

namespace {

// Blocks joined by in-place reuse, as a forest: root[b] is b's representative.
struct Groups {
  explicit Groups(size_t n) : root(n) {
    for (size_t b = 0; b < n; ++b) root[b] = int(b);
  }
  int Find(int b) {
    while (root[size_t(b)] != b) b = root[size_t(b)] = root[size_t(root[size_t(b)])];
    return b;
  }
  std::vector<int> root;
};

}  // namespace

MemoryLayout PlanMemory(const OpList& ops, const Analysis& analysis, const std::vector<size_t>& scratch_bytes,
                        size_t alignment) {
  const size_t n = ops.size(), nblocks = ops.blocks.size();
  MemoryLayout m;

  // Note [In-place reuse]: the first shareable input that qualifies.
  Groups groups(nblocks);
  for (size_t i = 0; i < n; ++i) {
    const OpRecord& op = ops.ops[i];
    for (int k : op.def->shareable_inputs) {
      if (!CanRunInPlace(ops, analysis, int(i), k)) continue;
      const int in = ops.BlockIndex(op.inputs[size_t(k)].block()), out = ops.BlockIndex(op.outputs[0].block());
      groups.root[size_t(out)] = groups.Find(in);
      m.inplace.push_back({int(i), in, out});
      break;
    }
  }

  // One plan entry per group of intermediate blocks, in block order.
  m.entry_of_block.assign(nblocks, -1);
  std::vector<int> entry_of_root(nblocks, -1);
  for (size_t b = 0; b < nblocks; ++b) {
    const BlockLife& l = analysis.blocks[b];
    if (l.persistent || l.first < 0) continue;
    const int r = groups.Find(int(b));
    if (entry_of_root[size_t(r)] < 0) {
      entry_of_root[size_t(r)] = int(m.entries.size());
      m.entries.push_back({0, INT32_MAX, -1});
      m.entry_ops.emplace_back();
    }
    const int e = entry_of_root[size_t(r)];
    m.entry_of_block[b] = e;
    Lifetime& life = m.entries[size_t(e)];
    life.bytes = std::max(life.bytes, ops.facts[b].bytes);
    life.begin = std::min(life.begin, l.first);
    life.end = std::max(life.end, l.last);
    const std::vector<int> touching = Touching(ops.uses[b]);
    m.entry_ops[size_t(e)].insert(m.entry_ops[size_t(e)].end(), touching.begin(), touching.end());
  }
  for (auto& t : m.entry_ops) {
    std::sort(t.begin(), t.end());
    t.erase(std::unique(t.begin(), t.end()), t.end());
  }

  // Note [Planned scratch]: one more entry per op that asks for scratch, alive at that op only.
  m.scratch_entry.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (i >= scratch_bytes.size() || !scratch_bytes[i]) continue;
    m.scratch_entry[i] = int(m.entries.size());
    m.entries.push_back({scratch_bytes[i], int(i), int(i)});
    m.entry_ops.push_back({int(i)});
  }

  m.packing = PackLifetimes(m.entries, alignment);
  m.lower_bound_bytes = LowerBound(m.entries);
  std::vector<int64_t> delta(n + 1, 0);
  for (const Lifetime& e : m.entries) {
    delta[size_t(e.begin)] += int64_t(e.bytes);
    delta[size_t(e.end) + 1] -= int64_t(e.bytes);
  }
  m.live_bytes.assign(n, 0);
  int64_t live = 0;
  for (size_t i = 0; i < n; ++i) m.live_bytes[i] = size_t(live += delta[i]);
  return m;
}

}  // namespace loom
