// Step 1b of graph.h: convolution weights kept in oneDNN's blocked layout between replays.
//
// Note [Weights kept blocked]
// oneDNN's convolution kernels want their weights blocked (OIhw16i16o on AVX-512) and loom's
// parameters are OIHW. Eager execution, and a graph that only plans activations (Note
// [Activation layouts] in layout.cc), reorder each weight into the blocked layout for the
// forward pass, again for the input gradient, and reorder each weight gradient out of it, every
// step: on ResNet-18 b16 about 30 ms of thread time per step (ONEDNN_VERBOSE=1). A captured
// step sees every reader and writer of a weight, so it can keep the weight itself blocked:
//   - the convolutions read w blocked (attribute w_blocked: the forward reorder is gone; the
//     input gradient's kernel wants another blocking, OIhw16o16i, and still reorders, from the
//     blocked copy), the weight gradient is written blocked (dw_blocked: its reorder is gone);
//   - the SGD and Adam updates are element-wise over w, dw and their state (SGD's momentum,
//     Adam's m and v), so they compute the same values when all of these share a layout: the
//     state is kept blocked too.
// The parameter and its state are the user's tensors, so the graph keeps them blocked only
// while nobody else looks. It guards their blocks (BlockGuard in core/block.h): a replay first
// puts each guarded block into the blocked layout (a no-op when the previous replay left it
// so), and any access from outside the replay (Tensor::raw_data: an eager op, a host read, a
// checkpoint, another graph) first puts the values back in OIHW, in place. The outside access
// may write, so the next replay converts again. A training loop that never looks at its
// weights between steps converts once; one that reads them every step pays two conversions per
// step (ResNet-18's 11.2 M weights take about 8 ms each way on 2 cores) and stays correct.
// Destroying the graph puts its blocks back in OIHW.
// Measured alternating against the graph without it (tools/ab_bench.py, --no-blocked-weights
// on one side): ResNet-18 b16 0.96x the step time, with 9 MiB less peak (the weight
// gradients' reorder buffers), ResNet-50 b8 0.97x. What stays is the input gradient's reorder
// into its own blocking, about 4 ms of thread time per ResNet-18 step (ONEDNN_VERBOSE=1).
// Conditions, each needed for the rewrite to be exact:
//   - the parameter is a float32 (O, C, KH, KW) tensor, O and C multiples of 16 (the blocked
//     tensor has exactly the OIHW tensor's bytes), read only by convolutions (as their weights,
//     whole: conv2d, conv2d_relu, conv2d_grad_input) and updated by one sgd_update or
//     adam_update, which alone touches its state buffers; all had memory before the capture;
//   - the weight gradient is written by one conv2d_grad_weight and read by that update alone,
//     and held by nothing outside the graph (a user holding it sees it in OIHW);
//   - no other graph guards the blocks, and Python never exposed them as a zero-copy numpy view
//     (Block::host_viewed: a view would show the blocked values);
//   - every rewritten record is supported (Device::Supports: on the CPU, a oneDNN plan exists
//     and groups is 1).
// The arithmetic is unchanged: oneDNN computes the same convolutions from the same values,
// whatever layout it is handed, and the update maps each element alone. Replay stays bitwise
// equal to eager (test/graph/weight_layout_test.cc).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/block.h"
#include "core/tensor.h"

namespace loom {

// A parameter or optimizer-state block a graph keeps blocked between its replays.
class WeightGuard final : public BlockGuard {
 public:
  // `whole`: the tensor covering the block, (O, C, KH, KW) float32. Installs the guard.
  explicit WeightGuard(Tensor whole);
  ~WeightGuard();  // back to OIHW; removes the guard
  WeightGuard(const WeightGuard&) = delete;
  WeightGuard& operator=(const WeightGuard&) = delete;

  // Around a replay of the owning graph: the values go blocked (if they are not), and the
  // replay's own accesses leave them so.
  void BeginReplay();
  void EndReplay() noexcept { replaying_.store(false, std::memory_order_release); }
  void BeforeAccess() override;  // from outside the replay: back to OIHW

 private:
  // Runs the device's conv_weight_layout kernel on the block, in place.
  void Convert(bool to_blocked, void* scratch = nullptr, size_t scratch_bytes = 0);
  Tensor whole_;
  std::mutex mu_;
  bool blocked_ = false;                // guarded by mu_
  std::atomic<bool> replaying_{false};  // the owning graph replays (its accesses pass)
  std::atomic<std::thread::id> converting_{};  // the thread converting (its kernel's accesses pass)
};

// The guards of one graph, begun and ended around each replay (also when it throws).
class WeightReplayScope {
 public:
  explicit WeightReplayScope(const std::vector<std::unique_ptr<WeightGuard>>& guards);
  ~WeightReplayScope();
  WeightReplayScope(const WeightReplayScope&) = delete;
  WeightReplayScope& operator=(const WeightReplayScope&) = delete;

 private:
  void End() noexcept;
  const std::vector<std::unique_ptr<WeightGuard>>& guards_;
  size_t begun_ = 0;
};

}  // namespace loom
