#include "core/block.h"

#include <atomic>

#include "core/error.h"
#include "core/device.h"

namespace loom {

static std::atomic<uint64_t> g_next_block_id{1};

Block::Block(size_t bytes, std::shared_ptr<Device> device)
    : bytes_(bytes), device_(std::move(device)), id_(g_next_block_id++) {
  LOOM_ASSERT(device_, "a block needs a device");
}

Block::~Block() { Release(); }

void Block::Allocate() {
  if (ptr_) return;
  ptr_ = device_->Malloc(bytes_);
  owned_ = true;
}

void Block::Release() {
  if (ptr_ && owned_) device_->Free(ptr_);
  if (owned_) ptr_ = nullptr;
  owned_ = false;
}

void Block::Bind(void* p) {
  LOOM_ASSERT(!owned_, "binding a block that owns pool memory");
  ptr_ = p;
}

void Block::Unbind() {
  if (!owned_) ptr_ = nullptr;
}

}  // namespace loom
