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
// How far from the best plan over these moves the greedy one lands is measured by
// tools/recompute_study against RecomputeExhaustive (below) on graphs small enough to enumerate:
// on five small MLPs and CNNs under budgets from 90% to 40% of the arena, greedy met every budget
// the enumeration met, at equal cost in 13 of 15 cases; the worst was 1.59x the added cost (a
// 9-layer MLP at 50%), and one floor was higher (46% of the arena against 43%).
// Exactness (replay bitwise equal to the unbudgeted one on the CPU): a copied record keeps its
// OpRecord::rng_offset, so a recomputed dropout draws the same mask; an op that writes a block
// it reads or a persistent block is never run again, except for state it updates in place (Note
// [Outputs that are inputs] in core/op.h). A batch norm's y comes again from the batch mean and
// invstd it saved, by batch_norm_apply (Note [Batch norm applied from its saved statistics] in
// core/ops/norm.cc), when both are still live where it is needed (its gradient reads them after):
// one pass over x instead of three, and the bits of batch_norm_train's y, which scales with those
// saved statistics. Where they are not, batch_norm_train runs again on a private copy of its
// running statistics (a `copy` op inserted before it, dropped after), so the model's statistics
// are updated once, and recomputes the batch statistics from the same input with the same kernel,
// hence the same normalised output bit for bit.
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
  int64_t added_cost = 0;      // the search's cost of them: FLOPs plus one per element written
  std::vector<std::string> choices;  // one line per dropped block (LOOM_DEBUG=1 prints them)
};

// Note [Recomputing for a memory budget]. budget 0: returns the list unchanged.
RecomputeResult RecomputeForBudget(OpList ops, size_t budget, const PeakFn& peak);

// The reference the greedy search is measured against (tools/recompute_study): every sequence of
// helpful drops, the same moves as RecomputeForBudget's (a dropped gap at the op where the peak
// sits, recomputed by the chain from the nearest kept blocks), searched depth first for the
// smallest added cost that meets the budget. Exponential: for small graphs only. After
// `max_states` candidate drops it stops with the best plan so far and sets *complete to false.
// When no plan meets the budget, the result is the list unchanged and peak_bytes the lowest peak
// any searched sequence reached (the floor over these moves).
RecomputeResult RecomputeExhaustive(OpList ops, size_t budget, const PeakFn& peak, size_t max_states,
                                    bool* complete = nullptr);

}  // namespace loom
