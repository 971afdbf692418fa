// The fused dense layer's element-wise kernels: the bias-and-activation epilogue, and
// bias_act_grad's dz with db summed as bias_grad sums (the column kernel's blocks, slabs and
// order: column_sums.cuh, which must be included first). A kernel source fragment: bias_act.cu
// includes it inside its namespace after common.cuh; test/emu includes it after
// test/emu/cuda_emu.h and device_math.cuh, to run it on the CPU (Note [CUDA kernels emulated on
// the CPU]).
#pragma once

// I: uint32_t below 2^31 elements (as add_bias's kernel, elementwise.cu).
template <typename I, typename T, BiasAct A>
__global__ void BiasActKernel(const T* b, T* y, I total, I n) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += I(blockDim.x) * gridDim.x)
    y[i] = ew::ApplyAct(A, b ? y[i] + b[i % n] : y[i]);
}

// y, dy, dz: (r, n), db: (n). Block (kColX, kColY): 32 columns of the rows [blockIdx.y * slab,
// ...) (Note [Column sums by slabs]), thread row ty takes every 8th row; the column's sum goes to
// db, or to part[(slab, column)] when there are several slabs.
// Y: y's pointer, or a widening reader of its 16-bit copy (WithSavedOutput, core/bias_act_formulas.h).
template <typename T, typename Y, BiasAct A>
__global__ void BiasActGradKernel(Y y, const T* dy, T* dz, T* db, double* part, int64_t r, int64_t n, int64_t slab) {
  __shared__ double sums[kColY][kColX + 1];
  const int64_t j = int64_t(blockIdx.x) * kColX + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * slab, r1 = Min64(r, r0 + slab);
  double acc = 0;
  if (j < n)
    for (int64_t k0 = r0 + threadIdx.y; k0 < r1; k0 += kColY * kLoadsAhead) {
      T ys[kLoadsAhead], gs[kLoadsAhead];  // loaded together, added in order (kLoadsAhead in common.cuh)
#pragma unroll
      for (int q = 0; q < kLoadsAhead; ++q) {
        const int64_t k = k0 + q * kColY;
        if (k < r1) ys[q] = T(y[k * n + j]), gs[q] = dy[k * n + j];
      }
#pragma unroll
      for (int q = 0; q < kLoadsAhead; ++q) {
        const int64_t k = k0 + q * kColY;
        if (k < r1) {
          const T v = ew::ActGradFromOutput(A, ys[q], gs[q]);
          dz[k * n + j] = v;
          acc += double(v);
        }
      }
    }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    double a = sums[0][threadIdx.x];
    for (int q = 1; q < kColY; ++q) a += sums[q][threadIdx.x];
    if (part)
      part[int64_t(blockIdx.y) * n + j] = a;
    else
      db[j] = T(a);
  }
}

// channels = 1: y, dy, dz: (n, c, s), db: (c). One block per channel (grid-stride over channels);
// its threads stride over (image, position), sum in double, and BlockSum combines them.
template <typename T, typename Y, BiasAct A>
__global__ void ChannelBiasActGradKernel(Y y, const T* dy, T* dz, T* db, int64_t n, int64_t c, int64_t s) {
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double acc = 0;
    for (int64_t q = threadIdx.x; q < n * s; q += blockDim.x) {
      const int64_t at = ((q / s) * c + ch) * s + q % s;
      const T v = ew::ActGradFromOutput(A, T(y[at]), dy[at]);
      dz[at] = v;
      acc += double(v);
    }
    acc = BlockSum(acc);
    if (threadIdx.x == 0) db[ch] = T(acc);
  }
}
