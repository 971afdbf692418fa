// Blocks a graph keeps in a kernel's own layout between its replays, or whose copies it keeps
// (GuardRequest, Note [Passes] in passes.h): applied by the graph, which never needs to know what
// the blocks hold.
//
// Note [Layout guards]
// A pass may find that every reader and writer of a persistent block inside the graph would
// rather see it in a kernel's layout than in its own (the CPU keeps convolution weights blocked:
// Note [Weights kept blocked] in device/cpu/passes/weight_layout.cc). The block is the user's,
// so the graph keeps it so only while nobody else looks: it guards the block (BlockGuard in
// core/block.h). A replay first puts each guarded block into the kernel's layout (nothing to do
// when the previous replay left it so), and any access from outside the replay (Tensor::
// raw_data: an eager op, a host read, a checkpoint, another graph) first puts the values back
// in the block's own layout, in place. The outside access may write, so the next replay
// converts again. Both conversions run the kernel of the op the pass named (GuardRequest::
// convert) on the block in place. Destroying the graph puts its blocks back.
// A copy guard (GuardRequest::copy defined) keeps a copy of the block instead, one the graph's
// own ops refresh as they change the block (the update writing a weight's 16-bit copy: Note
// [bfloat16 weight copies kept by the update] in graph/weight_copies.cc). The block stays in
// its own layout. The copy is fresh while nothing outside the owning graph's replays touched the
// block: an access from outside marks it stale and converts nothing (it may write the block); a
// replay first writes the copy from the block with the convert op's kernel (`whole` in, `copy`
// out) when it is stale (it is before the first replay); a replay that threw leaves it stale
// (the ops refreshing it may have half run). Destroying the graph only removes the guard.
// A block is guarded by at most one graph, and never once Python exposed it as a zero-copy numpy
// view (Block::host_viewed: the view would show the kernel's layout, and writes through it pass
// no guard): the pass checks both.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/block.h"
#include "graph/passes.h"

namespace loom {

class LayoutGuard final : public BlockGuard {
 public:
  explicit LayoutGuard(GuardRequest request);  // installs the guard on request.whole's block
  ~LayoutGuard();  // back to the block's own layout (a layout guard); removes the guard
  LayoutGuard(const LayoutGuard&) = delete;
  LayoutGuard& operator=(const LayoutGuard&) = delete;

  // Around a replay of the owning graph: the values go into the kernel's layout, or the copy is
  // written, if they are not so already; the replay's own accesses leave them so. A replay that
  // did not complete leaves a copy stale.
  void BeginReplay();
  void EndReplay(bool completed) noexcept;
  // From outside the replay: back to the block's own layout, or the copy marked stale.
  void BeforeAccess() override;
  bool keeps_copy() const { return request_.copy.defined(); }

 private:
  // Runs the conversion kernel: on the block in place, or from the block into the copy.
  void Convert(bool to_kernel, void* scratch = nullptr, size_t scratch_bytes = 0);
  GuardRequest request_;
  std::mutex mu_;
  bool converted_ = false;              // in the kernel's layout, or the copy fresh; guarded by mu_
  std::atomic<bool> replaying_{false};  // the owning graph replays (its accesses pass)
  std::atomic<std::thread::id> converting_{};  // the thread converting (its kernel's accesses pass)
};

// The guards of one graph, begun and ended around each replay (also when it throws: a replay
// that never called Completed did not complete).
class LayoutReplayScope {
 public:
  explicit LayoutReplayScope(const std::vector<std::unique_ptr<LayoutGuard>>& guards);
  ~LayoutReplayScope();
  LayoutReplayScope(const LayoutReplayScope&) = delete;
  LayoutReplayScope& operator=(const LayoutReplayScope&) = delete;
  void Completed() { completed_ = true; }

 private:
  void End() noexcept;
  const std::vector<std::unique_ptr<LayoutGuard>>& guards_;
  size_t begun_ = 0;
  bool completed_ = false;
};

}  // namespace loom
