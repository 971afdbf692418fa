// Packing, the last part of step 3 (plan.h): lifetimes in, offsets and arena size out. A pure
// function — it never touches a device — unit-tested on synthetic lifetimes
// (test/graph/pack_test.cc).
//
// Strategies (docs/design.md, the pipeline, step 3):
//  - greedy by size: blocks in decreasing size, each at the lowest-waste gap (best fit) among
//    the blocks already placed whose lifetimes intersect it; tried under a few orderings;
//  - op order: simulate a best-fit free-list allocator with coalescing, walking the ops.
// PackLifetimes runs them all and keeps the smallest arena. LowerBound is the largest sum of sizes
// live at one step: no plan can do better, and arena / lower bound says how close we are.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace loom {

struct Lifetime {
  size_t bytes;
  int begin;  // first op that touches the block
  int end;    // last op that touches the block (inclusive)
};

struct Packing {
  std::vector<size_t> offsets;  // one per lifetime, aligned
  size_t arena_bytes = 0;
  std::string strategy;
};

size_t LowerBound(const std::vector<Lifetime>& blocks);
Packing PackGreedyBySize(const std::vector<Lifetime>& blocks, size_t alignment);
Packing PackOpOrder(const std::vector<Lifetime>& blocks, size_t alignment);
Packing PackLifetimes(const std::vector<Lifetime>& blocks, size_t alignment = 64);
// True when no two blocks with intersecting lifetimes overlap in the arena.
bool PackingIsValid(const std::vector<Lifetime>& blocks, const Packing& plan);

}  // namespace loom
