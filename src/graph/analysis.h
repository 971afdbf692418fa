// Step 2 of graph.h: the analysis, a pure function of which blocks each op reads and writes
// (AccessList, by the index spaces of Note [Index spaces] in capture.h) and of what the capture
// knew of each block (BlockFacts).
//
// Note [Dependencies]
// For every block, parameters and inputs included, three hazards order two ops:
//   read-after-write  (RAW)  a reader waits for the last writer;
//   write-after-read  (WAR)  a writer waits for every reader of the previous value — this is the
//                            edge SINGA missed for parameters (read by the forward pass, updated
//                            by the optimizer), letting a reordered schedule update a weight
//                            before a reader used it;
//   write-after-write (WAW)  a writer waits for the previous writer.
// Any schedule that respects these edges computes what issue order computes.
//
// Note [Block lifetime in a graph]
// A non-persistent block lives from the op that first writes it to the last op that touches it;
// its reference count at any step is the number of ops that still have to touch it. Persistent
// blocks (IsPersistent) live across replays and are never recycled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "graph/capture.h"

namespace loom {

struct BlockLife {
  int first = -1;       // first op touching the block
  int last = -1;        // last op touching the block
  int first_write = -1;
  int accessors = 0;    // ops touching it: its reference count at the start of a replay
  bool read_before_write = false;
  bool persistent = false;
};

enum class DepKind : uint8_t { kRAW = 1, kWAR = 2, kWAW = 4 };

struct Dep {
  int from;
  int to;
  uint8_t kinds;  // DepKind bits
};

struct Analysis {
  std::vector<BlockLife> blocks;
  std::vector<Dep> deps;                  // unique (from, to) pairs, from < to
  std::vector<std::vector<int>> preds;    // per op: the ops it depends on (deps, by target)
  std::vector<std::vector<int>> allocs;   // per op: non-persistent blocks first written here
  std::vector<std::vector<int>> frees;    // per op: non-persistent blocks last touched here
  std::vector<std::vector<int>> touches;  // per op: non-persistent blocks it reads or writes, once each
  size_t persistent_bytes = 0;
  size_t lower_bound_bytes = 0;           // max over ops of live non-persistent bytes
  std::vector<size_t> live_bytes;         // per op: live non-persistent bytes while it runs
};

// Note [Persistent blocks]
// What a graph must never recycle. A block persists when its creator
// marked it (parameters, optimizer state, statistics), when the graph reads it before writing
// it (its value comes from outside: inputs, parameters), when it had memory before the capture,
// or when the user still holds it at the end of the capture (the loss).
bool IsPersistent(const BlockFacts& facts, const BlockLife& life);

Analysis Analyse(const std::vector<AccessList>& ops, const std::vector<BlockFacts>& blocks);

}  // namespace loom
