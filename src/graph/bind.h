// Step 5 of graph.h: binding — memory for the graph's blocks, once, before its first replay.
//  - Buffers the passes asked for (BufferRequest, Note [Passes] in passes.h: gradient buckets)
//    are allocated and zeroed, and their member blocks point into them.
//  - Persistent blocks born in the capture (the loss, gradients the user kept) take memory from
//    the device pool and keep it.
//  - Planned memory: the arena is one allocation, and each intermediate block points at its
//    offset in it (Block::Bind: the block does not own that memory; Note [Block lifetime]).
//  - Dynamic memory: nothing more; the replay takes and returns intermediate blocks itself.
// Release undoes it: planned blocks and buffer members are unbound (nothing can reach the freed
// arena or buffer through them), dynamic ones given back, the arena and the buffers freed.
#pragma once

#include <vector>

#include "graph/analysis.h"
#include "graph/capture.h"
#include "graph/options.h"
#include "graph/passes.h"
#include "graph/plan.h"

namespace loom {

class Device;

class Binding {
 public:
  Binding() = default;
  ~Binding() { Release(); }
  Binding(const Binding&) = delete;
  Binding& operator=(const Binding&) = delete;

  void Bind(Device& device, const OpList& ops, const Analysis& analysis, const MemoryLayout& layout,
            MemoryMode memory, const std::vector<BufferRequest>& buffers);
  void Release() noexcept;
  // Dynamic memory, after a replay that failed half-way: intermediates still holding memory
  // give it back.
  void ReleaseIntermediates() noexcept;
  bool bound() const { return bound_; }
  // The scratch an op's kernel gets in a planned graph (Note [Planned scratch]), or null.
  void* Scratch(const MemoryLayout& layout, int op) const;

 private:
  void BindBlocks(Device& device, const OpList& ops, const Analysis& analysis, const MemoryLayout& layout);
  Device* device_ = nullptr;
  std::vector<Block*> intermediates_;  // the non-persistent blocks the ops touch
  std::vector<Block*> buffers_, members_;  // BufferRequests: the buffers and the blocks in them
  bool planned_ = false;
  void* arena_ = nullptr;
  bool bound_ = false;
};

}  // namespace loom
