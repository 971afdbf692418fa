// Step 1c of graph.h: a memory budget met by recomputing (GraphOptions::memory_budget).
//
// Note [Recomputing for a memory budget]
// The planned arena sits on the liveness bound (plan.h); the only way below it, besides storing
// less, is to keep fewer activations alive between the forward op that writes them and the
// backward op that reads them again, and to compute them anew just before that reader (Chen et
// al. 2016). A captured step knows every lifetime and every op's cost before anything runs, so
// the choice is made once, here:
//   - at the op where the planned peak sits, the candidates are the blocks live there but not
//     touched by it, written once, by an op that can run again (below); dropping block b over
//     that gap ends b at its last access before the peak op, inserts a copy of its writer's record
//     right before its first access after it, writing fresh blocks, and points the later readers
//     at the fresh block;
//   - a writer's input must still hold the same value at the insertion point: a persistent block
//     not written in between, an intermediate still live there, or else an intermediate computed
//     again the same way first (a chain from the nearest kept activation);
//   - greedy: the candidate with the most bytes per unit of cost (DenseFlops, graph/flops.h, plus
//     one per element written, so element-wise ops are not free), then analysis and plan again,
//     until arena + persistent bytes fit the budget or the peak op has no candidate left.
// Exactness (replay bitwise equal to the unbudgeted one on the CPU): a copied record keeps its
// OpRecord::rng_offset, so a recomputed dropout draws the same mask; an op that writes a block
// it reads or a persistent block is never run again, except for state it updates in place (Note
// [Outputs that are inputs] in core/op.h): batch_norm_train runs again on a private copy of its
// running statistics (a `copy` op inserted before it, dropped after), so the model's statistics
// are updated once, and the copy recomputes the batch statistics from the same input with the
// same kernel, hence the same normalised output bit for bit. (Normalising with the saved float
// mean and invstd instead would not be: the kernel scales with the statistics in double.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/analysis.h"
#include "graph/capture.h"

namespace loom {

// The peak a list would have: planned arena (or liveness bound) + persistent bytes, and per op
// the intermediate bytes live while it runs (where the peak sits).
struct PeakEstimate {
  size_t peak_bytes = 0;
  std::vector<size_t> live_bytes;
};
using PeakFn = std::function<PeakEstimate(const OpList&, const Analysis&)>;

struct RecomputeResult {
  OpList ops;
  bool met = false;            // peak_bytes <= budget
  size_t peak_bytes = 0;       // of the returned list (the smallest reached when not met)
  size_t dropped_blocks = 0;   // gaps dropped
  size_t recomputed_ops = 0;   // ops inserted
  int64_t added_flops = 0;     // DenseFlops of the inserted ops
  std::vector<std::string> choices;  // one line per dropped block (LOOM_DEBUG=1 prints them)
};

// Note [Recomputing for a memory budget]. budget 0: returns the list unchanged.
RecomputeResult RecomputeForBudget(OpList ops, size_t budget, const PeakFn& peak);

}  // namespace loom
