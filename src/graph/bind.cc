// Step 5 of graph.h: binding blocks to memory before the first replay (bind.h).
#include "graph/bind.h"

#include <algorithm>
#include <vector>

#include "core/device.h"

namespace loom {

void Binding::Bind(Device& device, const OpList& ops, const Analysis& analysis, const MemoryLayout& layout,
                   MemoryMode memory, const std::vector<BufferRequest>& buffers) {
  LOOM_ASSERT(!bound_, "graph memory bound twice");
  device_ = &device;
  planned_ = memory == MemoryMode::kPlanned;
  bound_ = true;  // from here on, Release undoes whatever this got to
  try {
    for (const BufferRequest& r : buffers) {
      Block& buffer = *r.buffer;
      buffer.Allocate();
      buffers_.push_back(&buffer);
      std::vector<char> zeros(buffer.bytes(), 0);
      device.MemcpyFromHost(buffer.ptr(), zeros.data(), zeros.size());
      for (const auto& [member, offset] : r.members) {
        LOOM_ASSERT(!member->allocated() && offset + member->bytes() <= buffer.bytes(), "block ", member->id(),
                    " cannot join a buffer of ", buffer.bytes(), " bytes at offset ", offset);
        member->Bind(static_cast<char*>(buffer.ptr()) + offset);
        members_.push_back(member.get());
      }
    }
    BindBlocks(device, ops, analysis, layout);
  } catch (...) {
    Release();
    throw;
  }
}

void Binding::BindBlocks(Device& device, const OpList& ops, const Analysis& analysis, const MemoryLayout& layout) {
  for (size_t b = 0; b < ops.blocks.size(); ++b) {
    const BlockLife& l = analysis.blocks[b];
    if (l.first < 0) continue;
    if (l.persistent) ops.blocks[b]->Allocate();
    else intermediates_.push_back(ops.blocks[b].get());
  }
  if (planned_ && layout.packing.arena_bytes > 0) {
    arena_ = device.Malloc(std::max<size_t>(layout.packing.arena_bytes, 1));
    for (size_t b = 0; b < ops.blocks.size(); ++b) {
      const size_t offset = layout.BlockOffset(int(b));
      if (offset == SIZE_MAX) continue;
      Block& blk = *ops.blocks[b];
      LOOM_ASSERT(!blk.allocated(), "intermediate block ", blk.id(), " already has memory");
      blk.Bind(static_cast<char*>(arena_) + offset);
    }
  }
}

void* Binding::Scratch(const MemoryLayout& layout, int op) const {
  const size_t offset = layout.ScratchOffset(op);
  return offset == SIZE_MAX || !arena_ ? nullptr : static_cast<char*>(arena_) + offset;
}

void Binding::ReleaseIntermediates() noexcept {
  if (planned_) return;
  for (Block* b : intermediates_) b->Release();
}

void Binding::Release() noexcept {
  if (!bound_) return;
  if (planned_) {
    for (Block* b : intermediates_)
      if (arena_) b->Unbind();
  } else {
    ReleaseIntermediates();
  }
  if (arena_) device_->Free(arena_);
  arena_ = nullptr;
  intermediates_.clear();
  for (Block* b : members_) b->Unbind();
  for (Block* b : buffers_) b->Release();
  members_.clear();
  buffers_.clear();
  bound_ = false;
}

}  // namespace loom
