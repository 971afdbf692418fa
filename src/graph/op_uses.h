// Questions the passes (passes.h) ask of a captured op list's blocks, over the list's own index
// of who reads and writes each block (OpList::uses): the fusion passes ask the same questions of
// an intermediate before they fuse its writer with its reader, and collect their rewrites the
// same way (OpRewrites); the layout passes set layout attributes on records the same way
// (SetAttrsIfSupported).
#pragma once

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "core/device.h"
#include "graph/capture.h"
#include "graph/passes.h"

namespace loom {

// A tensor's view of its block (block, offset, shape, strides): the key under which the autocast
// passes remember a 16-bit copy of it (graph/autocast_pass.cc, graph/bf16_relu_mask.cc).
using ViewKey = std::tuple<const Block*, int64_t, Shape, Shape>;
inline ViewKey ViewOf(const Tensor& t) { return ViewKey{t.block(), t.offset(), t.shape(), t.strides()}; }

struct OpUses {
  explicit OpUses(const OpList& list) : list(list) {}
  int Block(const Tensor& t) const { return list.BlockIndex(t.block()); }
  const std::vector<int>& Readers(int b) const { return list.uses[size_t(b)].readers; }
  const std::vector<int>& Writers(int b) const { return list.uses[size_t(b)].writers; }
  // Block b is an intermediate of the list: not marked persistent (parameters, state), not held
  // by the user at the end of the capture, without memory from before it.
  bool Intermediate(int b) const {
    const BlockFacts& f = list.facts[size_t(b)];
    return !f.marked_persistent && !f.held_outside && !f.has_memory;
  }
  // t is all of its block, contiguous.
  bool Whole(const Tensor& t) const {
    return t.offset() == 0 && t.is_contiguous() && t.nbytes() == list.facts[size_t(Block(t))].bytes;
  }
  // Output `t` of op i is an intermediate that op i alone writes and one other op alone reads,
  // as a whole, and no one outside holds: returns that reader, or -1.
  int OnlyReader(const Tensor& t, int i) const {
    const int b = Block(t);
    if (!Intermediate(b) || !Whole(t)) return -1;
    if (Writers(b) != std::vector<int>{i} || Readers(b).size() != 1) return -1;
    return Readers(b)[0];
  }
  bool WrittenBetween(const Tensor& t, int i, int j) const {
    for (int w : Writers(Block(t)))
      if (w > i && w < j) return true;
    return false;
  }

  const OpList& list;
};

// A fusion pass's rewrites of a list of n ops: op i dropped, or replaced by a fused record.
struct OpRewrites {
  explicit OpRewrites(size_t n) : drop(n, false), replace(n) {}
  void Replace(int i, OpRecord fused) {
    replace[size_t(i)] = std::move(fused);
    ++count;
  }
  // The pass's result: the list with the rewrites made, and how many under `counter`.
  PassResult Result(OpList list, const char* counter) {
    PassResult r{Apply(std::move(list))};
    r.counters.Add(counter, int64_t(count));
    return r;
  }
  // The list with the rewrites made (the list itself when there are none), with `state` declared
  // (Rebuild).
  OpList Apply(OpList list, const std::vector<std::shared_ptr<loom::Block>>& state = {}) {
    if (!count) return list;
    std::vector<OpRecord> kept;
    for (size_t i = 0; i < list.size(); ++i) {
      if (drop[i]) continue;
      kept.push_back(replace[i].def ? std::move(replace[i]) : std::move(list.ops[i]));
    }
    return Rebuild(std::move(kept), list, state);
  }

  std::vector<bool> drop;
  std::vector<OpRecord> replace;  // def null: op i stays
  size_t count = 0;               // fused records made
};

// Sets attribute `attr` = value on op `op` for each (op, attr); undoes them all and returns false
// unless the device has a kernel for every changed record that knows the attributes and supports
// the record. A kernel reads the layout attributes only if it says which records it supports
// (Note [What a kernel supports] in core/op.h); one without a predicate does not know them.
inline bool SetAttrsIfSupported(OpList& list, const Device& device,
                                const std::vector<std::pair<int, const char*>>& attrs, int64_t value) {
  std::vector<std::pair<int, OpRecord>> before;
  for (const auto& [op, attr] : attrs) {
    if (before.empty() || before.back().first != op) before.emplace_back(op, list.ops[size_t(op)]);
    list.ops[size_t(op)].attrs.Set(attr, value);
  }
  bool supported = true;
  for (const auto& b : before) {
    const OpRecord& r = list.ops[size_t(b.first)];
    supported = supported && r.def->supports[int(device.type())] != nullptr && device.Supports(r);
  }
  if (supported) return true;
  for (auto it = before.rbegin(); it != before.rend(); ++it) list.ops[size_t(it->first)] = it->second;
  return false;
}

}  // namespace loom
