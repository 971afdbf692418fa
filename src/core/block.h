// A Block is memory that may not exist yet (docs/design.md invariant 3).
//
// Note [Block lifetime]
// A Block knows its size and device from birth; its pointer stays null until the first op that
// writes it runs (lazy allocation). Who provides the memory depends on the mode:
//  - eager: the device's caching pool, taken in Device::Submit at the first write, given back
//    when the last handle (Tensor, autograd saved tensor, op record) on the Block dies;
//  - a graph in dynamic mode: the pool again, but taken and given back by the replay at the
//    steps the analysis computed (first writer, last reader);
//  - a graph in planned mode: an offset in the graph's arena, bound before replay; the Block
//    does not own that memory and never frees it.
// Persistent blocks (parameters, optimizer state, inputs, whatever the user still holds) are
// never recycled by a graph: see IsPersistent in graph/analysis.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace loom {

class Device;

// Note [Layout guards] (graph/layout_guard.h): a graph may keep a block in a kernel's own layout
// between its replays (the CPU keeps convolution weights blocked). It then guards the block:
// every access through a Tensor (Tensor::raw_data: kernels, host reads, checkpoints, other
// graphs) first calls BeforeAccess, which puts the block's values back in its own layout.
class BlockGuard {
 public:
  virtual void BeforeAccess() = 0;

 protected:
  ~BlockGuard() = default;
};

class Block {
 public:
  Block(size_t bytes, std::shared_ptr<Device> device);
  ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  size_t bytes() const { return bytes_; }
  Device* device() const { return device_.get(); }
  const std::shared_ptr<Device>& device_ptr() const { return device_; }
  uint64_t id() const { return id_; }  // unique in the process, for dumps and diagnostics

  void* ptr() const { return ptr_; }
  bool allocated() const { return ptr_ != nullptr; }
  bool owns_memory() const { return owned_; }

  void Allocate();        // takes memory from the device pool if there is none yet
  void Release();         // gives owned memory back to the pool; the block becomes lazy again
  void Bind(void* p);     // points at memory it does not own (a planned arena)
  void Unbind();

  // Marked by whoever creates long-lived state: parameters, optimizer state, running stats.
  bool persistent() const { return persistent_; }
  void set_persistent(bool p) { persistent_ = p; }

  // Note [Layout guards]: at most one guard; null when none.
  BlockGuard* guard() const { return guard_.load(std::memory_order_acquire); }
  void set_guard(BlockGuard* g) { guard_.store(g, std::memory_order_release); }
  // Python once exposed this block's memory as a zero-copy numpy view (swig/tensor.i), which may
  // still exist: no graph may guard the block (Note [Layout guards]). Never cleared.
  bool host_viewed() const { return host_viewed_.load(std::memory_order_relaxed); }
  void set_host_viewed() { host_viewed_.store(true, std::memory_order_relaxed); }

 private:
  size_t bytes_;
  std::shared_ptr<Device> device_;
  void* ptr_ = nullptr;
  bool owned_ = false;
  bool persistent_ = false;
  std::atomic<BlockGuard*> guard_{nullptr};
  std::atomic<bool> host_viewed_{false};
  uint64_t id_;
};

}  // namespace loom
