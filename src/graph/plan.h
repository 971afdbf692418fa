// Step 3 of graph.h: the memory plan. Which bytes of one arena each intermediate block and each
// op's scratch occupy, for planned memory. A pure function of the op list, its analysis and the
// scratch each op's kernel declares: it never touches a device (test/graph/plan_test.cc).
//
//   intermediate blocks --in-place groups--> plan entries (+ one per op with scratch)
//                       --lifetimes--> PackLifetimes (pack.h) --> offsets in the arena
//
// Note [In-place reuse]
// Output 0 of an op may take over the memory of input k when the op kind allows it
// (OpDef::shareable_inputs), the input dies at this op (so backward does not need it: it would
// have a later reader), the output is born here, neither persists, and both are whole,
// contiguous blocks of the same shape and dtype (CanRunInPlace). Blocks that share memory this
// way form one group, planned as one lifetime. Under the parallel schedule the op must also wait
// for every other user of that input (schedule.h).
//
// Note [Planned scratch]
// A kernel's scratch (OpDef::scratch: oneDNN reorders, cuDNN workspaces) is one more lifetime,
// alive at its op only, packed with the blocks; the replay hands the kernel its bytes
// (KernelContext::scratch). Eager kernels take scratch from the device pool instead.
#pragma once

#include <cstddef>
#include <vector>

#include "graph/analysis.h"
#include "graph/capture.h"
#include "graph/pack.h"

namespace loom {

// Op `op`'s output block `out` takes over the memory of its input block `in`.
struct InPlace {
  int op;
  int in;
  int out;
};

struct MemoryLayout {
  std::vector<Lifetime> entries;           // per plan entry (Note [Index spaces] in capture.h)
  std::vector<std::vector<int>> entry_ops;  // per plan entry: the ops touching it, ascending
  std::vector<int> entry_of_block;         // per block: its plan entry, -1 when not planned
  std::vector<int> scratch_entry;          // per op: the plan entry of its scratch, -1 if none
  std::vector<InPlace> inplace;            // in op order
  Packing packing;                         // per plan entry: its offset; the arena's size
  size_t lower_bound_bytes = 0;            // liveness bound of the entries (with in-place reuse)
  std::vector<size_t> live_bytes;          // per op: planned bytes live while it runs

  bool empty() const { return entries.empty(); }
  size_t BlockOffset(int block) const;  // SIZE_MAX when the block is not planned
  size_t ScratchOffset(int op) const;   // SIZE_MAX when the op has no scratch
  size_t ScratchBytes(int op) const;
};

// Note [In-place reuse]: may output 0 of `op` take over input `k`'s memory?
bool CanRunInPlace(const OpList& ops, const Analysis& analysis, int op, int k);

// scratch_bytes: per op, the bytes its kernel asks for (0: none).
MemoryLayout PlanMemory(const OpList& ops, const Analysis& analysis, const std::vector<size_t>& scratch_bytes,
                        size_t alignment = 64);

}  // namespace loom
