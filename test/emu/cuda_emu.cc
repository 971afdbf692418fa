// Note [CUDA kernels emulated on the CPU] (cuda_emu.h): a block's threads as fibers.
#include "emu/cuda_emu.h"

#include <ucontext.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define LOOM_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_EMU_ASAN 1
#endif
#endif
#ifdef LOOM_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace loom {
namespace emu {

Running running;

namespace {

enum class At { kReady, kBlockBarrier, kWarpBarrier, kDone };

constexpr size_t kStackBytes = size_t(256) << 10;
constexpr uint64_t kPoison = ~uint64_t(0);  // NaN as a float or a double, -1 as an integer
constexpr unsigned char kPoisonByte = 0xff;
// Hopper's opt-in shared memory a block (227 KB): a launch asking for more fails there.
constexpr size_t kMaxDynamicShared = 232448;

// Note [CUDA kernels emulated on the CPU]: the order threads and blocks run in, forward or
// (LOOM_EMU_ORDER=reverse) reverse, so that a read another thread's write must precede without
// a barrier between them fails in one of the two orders.
int order = -1;  // -1: LOOM_EMU_ORDER's, read at the first launch; 0 forward, 1 reverse
bool Reverse() {
  if (order < 0) {
    const char* v = std::getenv("LOOM_EMU_ORDER");
    order = v && std::string(v) == "reverse" ? 1 : 0;
  }
  return order == 1;
}

struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  At at = At::kReady;
  Dim3 thread;
};

struct Block {
  ucontext_t scheduler;
  std::vector<Fiber> fibers;
  std::vector<uint64_t> slots;  // each thread's value in a warp exchange
  size_t current = 0;
  const std::function<void()>* kernel = nullptr;
  std::unique_ptr<unsigned char[]> dynamic_shared;  // poisoned before each block
  size_t dynamic_bytes = 0;
  const void* scheduler_stack = nullptr;  // its bounds, for AddressSanitizer
  size_t scheduler_stack_bytes = 0;
};
Block* block = nullptr;

// A switch to the context `to`, which runs on the stack [stack, stack + bytes), told to
// AddressSanitizer (its fake stacks and shadow follow the switch).
void Switch(ucontext_t* from, ucontext_t* to, const void* stack, size_t bytes) {
#ifdef LOOM_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, stack, bytes);
  swapcontext(from, to);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)stack;
  (void)bytes;
  swapcontext(from, to);
#endif
}

// Back to the scheduler, waiting at `at`.
void Wait(At at) {
  Fiber& f = block->fibers[block->current];
  f.at = at;
  Switch(&f.context, &block->scheduler, block->scheduler_stack, block->scheduler_stack_bytes);
}

void Entry() {
#ifdef LOOM_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &block->scheduler_stack, &block->scheduler_stack_bytes);
#endif
  (*block->kernel)();
  block->fibers[block->current].at = At::kDone;
  block->slots[block->current] = kPoison;  // a shuffle from an exited lane reads NaN bits
#ifdef LOOM_EMU_ASAN
  // to the scheduler's stack; this fiber's (nullptr: no fake stack kept) is done with
  __sanitizer_start_switch_fiber(nullptr, block->scheduler_stack, block->scheduler_stack_bytes);
#endif
  setcontext(&block->scheduler);
}

// Lets the waiting threads that may go on go; false when none may (all done, or a deadlock).
bool Release(Block& b) {
  const size_t n = b.fibers.size();
  bool released = false, live = false, all_at_block = true;
  for (size_t w = 0; w < n; w += 32) {
    const size_t end = std::min(n, w + 32);
    bool warp_live = false, warp_waits = true;
    for (size_t t = w; t < end; ++t) {
      const At at = b.fibers[t].at;
      if (at == At::kDone) continue;
      warp_live = live = true;
      warp_waits = warp_waits && at == At::kWarpBarrier;
      all_at_block = all_at_block && at == At::kBlockBarrier;
    }
    if (warp_live && warp_waits) {
      for (size_t t = w; t < end; ++t)
        if (b.fibers[t].at == At::kWarpBarrier) b.fibers[t].at = At::kReady;
      released = true;
    }
  }
  if (released || !live) return released;
  if (!all_at_block) {
    std::string where;
    for (size_t t = 0; t < n; ++t) {
      const At at = b.fibers[t].at;
      if (t == 0 || at != b.fibers[t - 1].at)
        where += " from thread " + std::to_string(t) + ": " +
                 (at == At::kDone ? "returned" : at == At::kWarpBarrier ? "at a warp barrier" : "at __syncthreads");
    }
    throw std::runtime_error("emulated CUDA block (" + std::to_string(running.block.x) + ", " +
                             std::to_string(running.block.y) + ", " + std::to_string(running.block.z) +
                             "): its threads wait at different barriers:" + where);
  }
  for (Fiber& f : b.fibers) f.at = At::kReady;
  return true;
}

void RunBlock(Block& b) {
  const size_t n = b.fibers.size();
  for (size_t t = 0; t < n; ++t) {
    Fiber& f = b.fibers[t];
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, Entry, 0);
    f.at = At::kReady;
  }
  std::fill(b.dynamic_shared.get(), b.dynamic_shared.get() + b.dynamic_bytes, kPoisonByte);
  const bool reverse = Reverse();
  do {
    for (size_t i = 0; i < n; ++i) {
      const size_t t = reverse ? n - 1 - i : i;
      Fiber& f = b.fibers[t];
      if (f.at != At::kReady) continue;
      b.current = t;
      running.thread = f.thread;
      Switch(&b.scheduler, &f.context, f.stack.get(), kStackBytes);
    }
  } while (Release(b));
}

}  // namespace

void Launch(Dim3 grid, Dim3 threads, const std::function<void()>& kernel, size_t dynamic_shared) {
  const size_t n = size_t(threads.x) * threads.y * threads.z;
  if (n == 0 || n > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 ||
      threads.z > 64 || dynamic_shared > kMaxDynamicShared)
    throw std::runtime_error("emulated CUDA launch: invalid configuration (grid " + std::to_string(grid.x) + "x" +
                             std::to_string(grid.y) + "x" + std::to_string(grid.z) + ", block of " +
                             std::to_string(n) + " threads, " + std::to_string(dynamic_shared) +
                             " bytes of dynamic shared memory)");
  Block b;
  b.kernel = &kernel;
  b.dynamic_bytes = dynamic_shared;
  b.dynamic_shared.reset(new unsigned char[dynamic_shared > 0 ? dynamic_shared : 1]);  // 16-byte aligned (x86-64)
  b.fibers.resize(n);
  b.slots.assign((n + 31) / 32 * 32, kPoison);  // whole warps: a missing or exited lane's value is poison
  for (size_t t = 0; t < n; ++t) {
    b.fibers[t].stack.reset(new char[kStackBytes]);
    b.fibers[t].thread = {unsigned(t % threads.x), unsigned(t / threads.x % threads.y),
                          unsigned(t / (size_t(threads.x) * threads.y))};
  }
  Block* outer = block;
  block = &b;
  running.block_dim = threads;
  running.grid_dim = grid;
  try {
    const size_t blocks = size_t(grid.x) * grid.y * grid.z;
    for (size_t i = 0; i < blocks; ++i) {
      const size_t at = Reverse() ? blocks - 1 - i : i;
      running.block = {unsigned(at % grid.x), unsigned(at / grid.x % grid.y), unsigned(at / (size_t(grid.x) * grid.y))};
      RunBlock(b);
    }
  } catch (...) {
    block = outer;
    throw;
  }
  block = outer;
}

void SyncThreads() { Wait(At::kBlockBarrier); }
unsigned char* DynamicShared() { return block->dynamic_shared.get(); }
void SyncWarp() { Wait(At::kWarpBarrier); }

int Lane() { return int(block->current % 32); }

bool SetReverseOrder(bool reverse) {
  const bool was = Reverse();
  order = reverse ? 1 : 0;
  return was;
}

uint64_t Exchange(uint64_t bits, int from) {
  const size_t me = block->current, warp = me / 32 * 32;
  block->slots[me] = bits;
  Wait(At::kWarpBarrier);  // every lane has written
  const uint64_t got = block->slots[warp + size_t(from)];
  Wait(At::kWarpBarrier);  // every lane has read, before the next exchange writes
  return got;
}

}  // namespace emu
}  // namespace loom
