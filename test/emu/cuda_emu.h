// CUDA kernels run on the CPU, for the tests of kernel logic that CPU CI can run (it has no GPU).
//
// Note [CUDA kernels emulated on the CPU]
// A kernel written against the few CUDA built-ins declared here (thread and block indices,
// __syncthreads, __syncwarp, the warp shuffles, __int_as_float, __longlong_as_double, the
// atomics of RaiseKernelError, __align__ and dynamic shared memory), and the helpers of
// device/cuda/device_math.cuh, compiles as host code in a test that includes this first: Launch
// runs each block's threads as fibers (ucontext) on the calling thread, one at a time, each until
// it reaches a barrier or returns; a warp's barrier lets its lanes go on once every live lane of
// the warp has reached it, a block's barrier once every live thread of the block has, and a state
// where neither can happen (threads of a block waiting at different barriers: a divergent
// __syncthreads) fails the launch with a message instead of hanging. Blocks run one after
// another. Threads and blocks run in index order, or in reverse with LOOM_EMU_ORDER=reverse
// (ctest runs the suite both ways): a thread that reads what another writes with no barrier
// between them sees the write in one order and not in the other. A launch outside CUDA's limits
// (threads, grid, Hopper's 227 KB of dynamic shared memory) throws; dynamic shared memory starts
// each block as NaN bits, and a shuffle from a lane that has returned or does not exist gives NaN
// bits. __shared__ variables are function statics: one copy, zero at the start and kept from
// block to block (no poison: their addresses are unknown here), so a kernel that reads shared
// memory it did not write in the block is caught only when the values left differ.
// What it checks: the index arithmetic, the masks, the tiling, the barriers' placement, every
// output written, results against a reference. What it cannot: the memory model beyond
// barriers (no reordering, every access is sequentially consistent), warp-synchronous code
// without __syncwarp, timing, occupancy, registers, and anything from cuDNN, cuBLAS or CUB.
// The arithmetic is the host compiler's: where it contracts a b + c into a fused multiply-add
// is its choice, as nvcc's is on the GPU, so two kernels that must agree bit for bit pin such
// formulas (Fma in device_math.cuh): batch norm's two apply kernels disagreed here until they did.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace loom {
namespace emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// Runs kernel (a call of one __global__ function with its arguments) over grid x block threads,
// each block with `dynamic_shared` bytes of dynamic shared memory (LOOM_DYNAMIC_SHARED). Throws
// std::runtime_error when the block's threads cannot all reach their barriers.
void Launch(Dim3 grid, Dim3 block, const std::function<void()>& kernel, size_t dynamic_shared = 0);
// The running block's dynamic shared memory.
unsigned char* DynamicShared();

// The emulated built-ins' state: the thread running now.
struct Running {
  Dim3 thread, block, block_dim, grid_dim;
};
extern Running running;

void SyncThreads();
void SyncWarp();
// Lane `from`'s value of the calling warp's exchange (every lane writes its own first); NaN
// bits from a lane that has returned or does not exist.
uint64_t Exchange(uint64_t bits, int from);
// The running thread's lane: its linear index in the block (x fastest) modulo 32, as on CUDA.
int Lane();
// Runs later launches' threads and blocks in reverse order (or not); returns the order before.
bool SetReverseOrder(bool reverse);

}  // namespace emu
}  // namespace loom

#define threadIdx (::loom::emu::running.thread)
#define blockIdx (::loom::emu::running.block)
#define blockDim (::loom::emu::running.block_dim)
#define gridDim (::loom::emu::running.grid_dim)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

#define __align__(n) __attribute__((aligned(n)))
struct alignas(16) float4 {
  float x, y, z, w;
};
#define LOOM_DYNAMIC_SHARED(name) unsigned char* name = ::loom::emu::DynamicShared()

inline void __syncthreads() { ::loom::emu::SyncThreads(); }
// One thread runs at a time, to its next barrier: atomics are plain reads and writes.
inline void __threadfence() {}
inline int atomicCAS(int* at, int compare, int value) {
  const int old = *at;
  if (old == compare) *at = value;
  return old;
}
inline int atomicExch(int* at, int value) {
  const int old = *at;
  *at = value;
  return old;
}
inline float __int_as_float(int i) {
  float f;
  __builtin_memcpy(&f, &i, sizeof f);
  return f;
}
inline double __longlong_as_double(long long i) {
  double d;
  __builtin_memcpy(&d, &i, sizeof d);
  return d;
}
inline void __syncwarp(unsigned = 0xffffffffu) { ::loom::emu::SyncWarp(); }

namespace loom {
namespace emu {
template <typename T>
T Shuffle(T v, int from) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffled value fits 64 bits");
  uint64_t bits = 0;
  __builtin_memcpy(&bits, &v, sizeof(T));
  bits = Exchange(bits, from);
  T out;
  __builtin_memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace emu
}  // namespace loom

template <typename T>
T __shfl_xor_sync(unsigned, T v, int mask, int = 32) {
  return ::loom::emu::Shuffle(v, ::loom::emu::Lane() ^ mask);
}
template <typename T>
T __shfl_sync(unsigned, T v, int src, int = 32) {
  return ::loom::emu::Shuffle(v, src & 31);
}
template <typename T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int = 32) {
  const int from = ::loom::emu::Lane() + int(delta);
  return ::loom::emu::Shuffle(v, from < 32 ? from : ::loom::emu::Lane());
}
