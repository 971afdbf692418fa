// The column reductions' kernel (Note [Column sums by slabs] in device/kernel_shapes.h) and its
// launch shape: sums and maxima over R of x seen as (outer, R, inner), for sum, max and
// bias_grad. A kernel source fragment: reduce.cu includes it inside its namespace after
// common.cuh; test/emu includes it after test/emu/cuda_emu.h and device_math.cuh, to run it on
// the CPU (Note [CUDA kernels emulated on the CPU]).
#pragma once

constexpr int kColX = 32, kColY = 8;  // column reductions: 32 outputs x 8 partial sums per block
constexpr unsigned kMaxGridY = 65535;

// The launch: a grid of (cols blocks of kColX columns, outer rows (a block loops over the rest),
// slabs), blocks of (kColX, kColY) threads; with several slabs, the slabs' sums go to a part of
// slabs x outer x inner accumulators that ColumnSlabsTotalKernel adds in order.
struct ColumnLaunch {
  unsigned cols, outer;
  ColumnSlabs slabs;
};
inline ColumnLaunch ColumnLaunchOf(const ReduceDims& d) {
  ColumnLaunch c;
  c.cols = unsigned((d.inner + kColX - 1) / kColX);
  c.outer = unsigned(std::min<int64_t>(d.outer, kMaxGridY));
  c.slabs = ColumnSlabsOf(d.r, int64_t(c.cols) * c.outer);
  return c;
}

// A loaded value as a number: itself, or (In uint16_t: bias_grad's bfloat16 dy, Note [Attention
// results kept in bfloat16] in graph/bf16_attention.cc) the float32 of its bfloat16 bits, so a
// sum of bfloat16 values is the sum of their float32 copies, bit for bit.
template <typename In>
__device__ __forceinline__ auto ValueOf(In v) {
  if constexpr (std::is_same<In, uint16_t>::value) return DevBFloat16ToFloat(v);
  else return v;
}

// inner > 1: block (32, 8) covers 32 adjacent outputs (coalesced reads along inner) of rows
// [blockIdx.z * slab, ...) (Note [Column sums by slabs]); its 8 rows of threads take every 8th
// k, and row 0 combines the 8 partials in order into y, or into part[(slab, o, i)] when there are
// several slabs. x's elements are In (T, or bfloat16 bits for a sum). copy (a float32 sum's,
// or null): each element of x as the cast op rounds it to 16 bits (bias_grad's copy_dtype, Note
// [Casts fused into their producers] in graph/fuse_casts.cc), written as it is read.
template <typename T, bool kMax, typename In = T>
__global__ void ColReduceKernel(const In* x, T* y, typename std::conditional<kMax, T, double>::type* part,
                                int64_t outer, int64_t r, int64_t inner, int64_t slab, uint16_t* copy,
                                bool copy_bf16) {
  static_assert(std::is_same<In, T>::value || !kMax, "a maximum of bfloat16 bits is not taken");
  using Acc = typename std::conditional<kMax, T, double>::type;
  __shared__ Acc sums[kColY][kColX + 1];
  const int64_t i = int64_t(blockIdx.x) * kColX + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.z) * slab, r1 = Min64(r, r0 + slab);
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    Acc acc = kMax ? Acc(-Infinity<T>()) : Acc(0);
    if (i < inner)
      for (int64_t k0 = r0 + threadIdx.y; k0 < r1; k0 += kColY * kLoadsAhead) {
        In v[kLoadsAhead];  // loaded together, combined in order (kLoadsAhead in common.cuh)
#pragma unroll
        for (int q = 0; q < kLoadsAhead; ++q)
          if (k0 + q * kColY < r1) v[q] = x[(o * r + k0 + q * kColY) * inner + i];
        if constexpr (std::is_same<In, float>::value && !kMax) {
          if (copy) {
#pragma unroll
            for (int q = 0; q < kLoadsAhead; ++q)
              if (k0 + q * kColY < r1) copy[(o * r + k0 + q * kColY) * inner + i] = DevCastTo16(double(v[q]), copy_bf16);
          }
        }
#pragma unroll
        for (int q = 0; q < kLoadsAhead; ++q)
          if (k0 + q * kColY < r1) acc = kMax ? Acc(MaxOf(T(acc), T(ValueOf(v[q])))) : acc + Acc(ValueOf(v[q]));
      }
    sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
      Acc a = sums[0][threadIdx.x];
      for (int j = 1; j < kColY; ++j) a = kMax ? Acc(MaxOf(T(a), T(sums[j][threadIdx.x]))) : a + sums[j][threadIdx.x];
      if (part)
        part[(int64_t(blockIdx.z) * outer + o) * inner + i] = a;
      else
        y[o * inner + i] = T(a);
    }
    __syncthreads();
  }
}
