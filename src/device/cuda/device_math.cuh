// The CUDA kernels' device helpers that need no CUDA runtime: math overloaded on float and
// double, float16/bfloat16 conversions identical to the CPU's (core/half.h), strided indexing,
// warp and block reductions, the column slabs' totals. common.cuh includes it for the GPU; the
// CPU's emulation of CUDA kernels (test/emu, Note [CUDA kernels emulated on the CPU]) includes it
// after test/emu/cuda_emu.h, which declares the CUDA built-ins used here (thread and block
// indices, __syncthreads, the warp shuffles, __int_as_float, __longlong_as_double, the atomics
// and __threadfence of RaiseKernelError, dynamic shared memory).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "device/cuda/kernel_error.h"
#include "device/kernel_shapes.h"

namespace loom {
namespace cuda {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items (n > 0).
inline unsigned Blocks(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  return unsigned(std::min<int64_t>(std::max<int64_t>(b, 1), int64_t(1) << 20));
}

// One block per row (up to 2^20 blocks, then a block takes several rows), and the threads of a
// block for rows of n elements: a multiple of the warp size, at most 256.
inline unsigned RowBlocks(int64_t rows) {
  return unsigned(std::min<int64_t>(std::max<int64_t>(rows, 1), int64_t(1) << 20));
}
inline int RowThreads(int64_t n) { return n >= 256 ? 256 : int(std::max<int64_t>(32, (n + 31) / 32 * 32)); }

// A thread that sums a long serial run of values (column sums: reduce.cu, bias_act.cu; layer
// norm's and batch norm's chunks: transformer.cu, cnn.cu) loads kLoadsAhead of them before it
// adds any, in the same order: with one load in flight it would wait out the memory's latency
// once per value (GPT-2's bias gradients: 8,192 rows, each of a column's 8 threads adding every
// 8th; a layer-4 batch norm of ResNet-50 at batch 32: 26k threads of 128 values each). Same
// order, same bits.
constexpr int kLoadsAhead = 8;

// A kernel's dynamic shared memory (the launch's third parameter), 16-byte aligned, as `name`.
#ifndef LOOM_DYNAMIC_SHARED
#define LOOM_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

#define LOOM_GRID_STRIDE(i, n)                                                  \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(blockDim.x) * gridDim.x)

// ---- math, overloaded on float/double so templates pick the right precision (the element-wise
// ops' formulas are shared with the CPU instead: core/elementwise_formulas.h) ----
__device__ __forceinline__ int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ float Exp(float x) { return expf(x); }
__device__ __forceinline__ double Exp(double x) { return exp(x); }
__device__ __forceinline__ float Log(float x) { return logf(x); }
__device__ __forceinline__ double Log(double x) { return log(x); }
__device__ __forceinline__ float Fma(float a, float b, float c) { return fmaf(a, b, c); }  // a b + c, rounded once
__device__ __forceinline__ double Fma(double a, double b, double c) { return fma(a, b, c); }
__device__ __forceinline__ float Sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double Sqrt(double x) { return sqrt(x); }
template <typename T> __device__ __forceinline__ T Infinity();
template <> __device__ __forceinline__ float Infinity<float>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double Infinity<double>() { return __longlong_as_double(0x7ff0000000000000LL); }
template <typename T> __device__ __forceinline__ T QuietNaN();
template <> __device__ __forceinline__ float QuietNaN<float>() { return __int_as_float(0x7fc00000); }
template <> __device__ __forceinline__ double QuietNaN<double>() { return __longlong_as_double(0x7ff8000000000000LL); }
// std::max's semantics (the CPU kernels use it): the first argument unless the second is larger.
template <typename T> __device__ __forceinline__ T MaxOf(T a, T b) { return MaxNaN(a, b); }  // kernel_shapes.h

// ---- float16 / bfloat16: the host's own conversions (core/half.h), compiled for the device ----
__device__ __forceinline__ uint16_t DevFloatToHalf(float f) { return FloatToHalf(f); }
__device__ __forceinline__ float DevHalfToFloat(uint16_t h) { return HalfToFloat(h); }
__device__ __forceinline__ uint16_t DevFloatToBFloat16(float f) { return FloatToBFloat16(f); }
__device__ __forceinline__ float DevBFloat16ToFloat(uint16_t b) { return BFloat16ToFloat(b); }
// v as the cast op's kernel stores it in float16 or bfloat16 (creation.cu's StoreAs): rounded to
// odd in float32 first (exact for a float32 v). The updates' 16-bit copies of their parameters
// (elementwise.cu, Note [bfloat16 weight copies kept by the update]) call it too, so the bits agree.
__device__ __forceinline__ uint16_t DevCastTo16(double v, bool bf16) {
  const float f = RoundToOddFloat(v);
  return bf16 ? DevFloatToBFloat16(f) : DevFloatToHalf(f);
}
// A producer's result as its output stores it: itself, or (Out uint16_t) the cast op's 16-bit
// rounding of the float32 value (Note [Casts fused into their producers]).
template <typename Out, typename T>
__device__ __forceinline__ Out StoreResult(T v, bool bf16) {
  if constexpr (std::is_same<Out, uint16_t>::value) return DevCastTo16(double(v), bf16);
  else return Out(v);
}

// ---- strided / broadcast indexing ----
// Maps a linear index over `shape` (row-major) to element offsets in up to kMaxOperands
// tensors with their own strides (0 along broadcast dimensions). Built on the host with unit
// dimensions dropped and mergeable neighbours merged, so most indexers have rank 1 to 3.
constexpr int kMaxDims = 8;
constexpr int kMaxOperands = 3;
struct Indexer {
  int rank = 0;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxOperands][kMaxDims];
};

template <int N>
__device__ __forceinline__ void Offsets(const Indexer& ix, int64_t i, int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = ix.rank - 1; d >= 0; --d) {
    int64_t idx = i % ix.shape[d];
    i /= ix.shape[d];
    for (int k = 0; k < N; ++k) off[k] += idx * ix.strides[k][d];
  }
}


// ---- block reductions (blockDim.x a multiple of 32, at most 1024) ----
struct SumOp {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return MaxOf(a, b); }
};
template <typename T, typename Op>
__device__ __forceinline__ T WarpReduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}
// The block's reduction of v by op (fixed association: deterministic), returned to every
// thread; `identity` fills the lanes of missing warps.
template <typename T, typename Op>
__device__ T BlockReduce(T v, Op op, T identity) {
  __shared__ T warp[32];
  __shared__ T total;
  v = WarpReduce(v, op);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  __syncthreads();  // `warp` may still be read by a previous call
  if (lane == 0) warp[w] = v;
  __syncthreads();
  if (w == 0) {
    v = lane < int(blockDim.x >> 5) ? warp[lane] : identity;
    v = WarpReduce(v, op);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}
template <typename T>
__device__ T BlockSum(T v) {
  return BlockReduce(v, SumOp{}, T(0));
}
template <typename T>
__device__ T BlockMax(T v) {
  return BlockReduce(v, MaxOp{}, -Infinity<T>());
}

// out[i] = part[i] + part[count + i] + ... (slabs terms, in order): a column's slab sums
// (Note [Column sums by slabs] in device/kernel_shapes.h), or their maximum.
template <typename Acc, typename T, bool kMax = false>
__global__ void ColumnSlabsTotalKernel(const Acc* part, T* out, int64_t slabs, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(blockDim.x) * gridDim.x) {
    Acc a = part[i];
    for (int64_t s = 1; s < slabs; ++s) a = kMax ? MaxOf(a, part[s * count + i]) : a + part[s * count + i];
    out[i] = T(a);
  }
}

// Records an error a kernel finds, keeping the first kernel's at its smallest position `a`
// (Note [Errors found on the GPU] in cuda_device.h). Errors are rare, so a spin lock is fine
// (sm_70 and newer schedule the threads of a warp independently, so the holder makes progress).
__device__ __forceinline__ void RaiseKernelError(KernelError* e, int code, int op, long long a, long long b,
                                                 long long c) {
  while (atomicCAS(&e->lock, 0, 1) != 0) {
  }
  __threadfence();
  volatile KernelError* v = e;
  if (v->code == 0 || (v->op == op && a < v->a)) {
    v->op = op;
    v->a = a;
    v->b = b;
    v->c = c;
    v->code = code;
  }
  __threadfence();
  atomicExch(&e->lock, 0);
}

}  // namespace cuda
}  // namespace loom
