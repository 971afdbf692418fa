// Note [Layout guards] (layout_guard.h).
#include "graph/layout_guard.h"

#include <vector>

#include "core/device.h"

namespace loom {

LayoutGuard::LayoutGuard(GuardRequest request) : request_(std::move(request)) {
  Block& b = *request_.whole.block();
  LOOM_ASSERT(request_.convert && !b.guard(), "a block guarded twice, or without a conversion: ",
              request_.whole.Describe());
  b.set_guard(this);
}

LayoutGuard::~LayoutGuard() {
  std::lock_guard<std::mutex> l(mu_);
  if (converted_ && !keeps_copy()) {
    try {
      Convert(false);
    } catch (...) {
      // Scratch from the device pool failed: the kernel takes host memory of this thread instead.
      std::vector<char> scratch(request_.whole.nbytes());
      Convert(false, scratch.data(), scratch.size());
    }
  }
  request_.whole.block()->set_guard(nullptr);
}

void LayoutGuard::Convert(bool to_kernel, void* scratch, size_t scratch_bytes) {
  OpRecord op;
  op.def = request_.convert;
  op.attrs = to_kernel ? request_.to_kernel : request_.to_own;
  op.attrs.Bind(*op.def);  // Note [Declared attributes]
  op.inputs = {request_.whole};
  op.outputs = {keeps_copy() ? request_.copy : request_.whole};
  KernelContext ctx;
  ctx.device = request_.whole.device();
  ctx.scratch = scratch;  // null: the kernel takes its scratch from the device pool
  ctx.scratch_bytes = scratch_bytes;
  // The kernel's own accesses to the block pass the guard (this thread, while converting).
  converting_.store(std::this_thread::get_id(), std::memory_order_release);
  try {
    op.def->kernels[int(ctx.device->type())](op, ctx);
  } catch (...) {
    converting_.store(std::thread::id(), std::memory_order_release);
    throw;
  }
  converting_.store(std::thread::id(), std::memory_order_release);
  converted_ = to_kernel;
}

void LayoutGuard::BeginReplay() {
  std::lock_guard<std::mutex> l(mu_);
  if (!converted_) Convert(true);
  replaying_.store(true, std::memory_order_release);
}

void LayoutGuard::EndReplay(bool completed) noexcept {
  if (!completed && keeps_copy()) {
    std::lock_guard<std::mutex> l(mu_);
    converted_ = false;
  }
  replaying_.store(false, std::memory_order_release);
}

void LayoutGuard::BeforeAccess() {
  if (replaying_.load(std::memory_order_acquire)) return;  // the owning graph's replay
  if (converting_.load(std::memory_order_acquire) == std::this_thread::get_id()) return;
  std::lock_guard<std::mutex> l(mu_);
  if (keeps_copy()) converted_ = false;  // the access may write the block: its copy is stale
  else if (converted_) Convert(false);
}

LayoutReplayScope::LayoutReplayScope(const std::vector<std::unique_ptr<LayoutGuard>>& guards) : guards_(guards) {
  try {
    for (; begun_ < guards_.size(); ++begun_) guards_[begun_]->BeginReplay();
  } catch (...) {
    End();
    throw;
  }
}

LayoutReplayScope::~LayoutReplayScope() { End(); }

void LayoutReplayScope::End() noexcept {
  for (size_t i = 0; i < begun_; ++i) guards_[i]->EndReplay(completed_);
  begun_ = 0;
}

}  // namespace loom
