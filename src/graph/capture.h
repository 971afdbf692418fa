// Step 1 of graph.h: the captured op list, and the index spaces every later step uses.
//
// Note [Index spaces]
// A graph numbers three kinds of things, each once, here and in plan.h:
//   op          position in OpList::ops: issue order (after the passes, the rewritten order).
//               OpList::access, Analysis::allocs/frees/live_bytes/touches, Schedule and the
//               profile have one entry per op, in this order.
//   block       position in OpList::blocks: the order in which the ops first touch a block.
//               OpList::facts, Analysis::blocks and MemoryLayout::entry_of_block have one
//               entry per block.
//   plan entry  position in MemoryLayout::entries (plan.h): one per group of intermediate
//               blocks that share memory (in-place reuse), then one per op with scratch.
// Analysis and planning see only these integers; the Block objects stay here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/op.h"

namespace loom {

// One op as the analysis sees it: the blocks it reads and writes, by block index.
struct AccessList {
  std::vector<int> reads;
  std::vector<int> writes;
};

// Who touches a block, by op index in issue order: the index every later step reads (passes,
// recompute, plan, schedule), kept by the list as ops are appended.
struct BlockUses {
  std::vector<int> readers;  // an op reading the block twice appears twice
  std::vector<int> writers;
};

// The ops touching a block (reading or writing it), ascending, each once.
std::vector<int> Touching(const BlockUses& uses);

// What the capture knows of a block besides its accesses.
struct BlockFacts {
  size_t bytes = 0;
  bool marked_persistent = false;  // parameters, optimizer state, running statistics
  bool held_outside = false;       // the user still holds a handle at the end of capture (the loss)
  bool has_memory = false;         // had memory before the capture (an input or other state)
};

class OpList {
 public:
  explicit OpList(std::string graph_name = "") : graph_name_(std::move(graph_name)) {}

  // Adds a captured op: indexes the blocks it touches and gives a random op its offset in the
  // replay's Philox counters. Throws GraphError for an input that nothing has written, neither
  // before the capture nor earlier in it.
  void Append(OpRecord op);
  // Before the first Append: `b` will have memory before the list runs, and keeps it (a pass's
  // new persistent buffer, Note [Passes] in passes.h), though nothing allocated it yet.
  void DeclareState(std::shared_ptr<Block> b);
  // At the end of a capture: which blocks are marked persistent, and which the user still holds
  // (a handle the op records and this list do not account for).
  void NoteHolders();
  int BlockIndex(const Block* b) const;  // -1 when no op touches b
  size_t size() const { return ops.size(); }
  const std::string& graph_name() const { return graph_name_; }

  std::vector<OpRecord> ops;                    // per op
  std::vector<AccessList> access;               // per op
  std::vector<std::shared_ptr<Block>> blocks;   // per block
  std::vector<BlockFacts> facts;                // per block
  std::vector<BlockUses> uses;                  // per block
  uint64_t random_draws = 0;                    // Philox counters one run of the list draws

 private:
  int Index(const std::shared_ptr<Block>& b);
  std::string graph_name_;
  std::unordered_map<const Block*, int> index_;
  std::vector<std::shared_ptr<Block>> state_;  // DeclareState
  const OpList* rebuilt_from_ = nullptr;        // during Rebuild: the list whose facts carry over
  friend OpList Rebuild(std::vector<OpRecord>, const OpList&, const std::vector<std::shared_ptr<Block>>&);
  std::vector<char> written_;  // per block: written by an earlier op of the list
};

// The list a pass returns: `ops` (rewritten records) indexed afresh, as if the user had issued
// them, keeping what `from` knew of each block (its facts from the end of the capture); a block
// the pass made itself is held by no one outside, and persists if it is among `state`
// (DeclareState: memory before the list runs).
OpList Rebuild(std::vector<OpRecord> ops, const OpList& from, const std::vector<std::shared_ptr<Block>>& state = {});

}  // namespace loom
