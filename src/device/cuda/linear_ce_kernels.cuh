// The block's log-sum-exp of a row, and linear_cross_entropy's kernel over a chunk's logits
// (staged in shared memory or not). A kernel source fragment: loss.cu includes it inside its
// namespace after common.cuh; test/emu includes it after test/emu/cuda_emu.h and
// device_math.cuh, to run it on the CPU (Note [CUDA kernels emulated on the CPU]).
#pragma once

// max + log(sum(exp(x - max))) of the n elements of xr, by the whole block, returned to every thread.
template <typename T>
__device__ T BlockLogSumExp(const T* xr, int64_t n) {
  T mx = -Infinity<T>();
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) mx = MaxOf(mx, xr[k]);
  mx = BlockMax(mx);
  T sum = T(0);
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) sum += Exp(xr[k] - mx);
  sum = BlockSum(sum);
  return mx + Log(sum);
}

// Note [Cross-entropy fused with the head's product] (core/ops/loss.cc), as the CPU computes it:
// per chunk of rows, the logits by a GEMM into the scratch, then this kernel (one block per
// row): the row's log-sum-exp, its loss term -(x[label] - lse) (in double, into `terms` at the
// row's position), and with grads the logits' gradient (softmax - onehot) / N over the logits,
// or, given g16 (bfloat16 operands), into g16 as the cast op rounds it to bfloat16 (the product
// after reads only that: a write and a read of the float32 gradient and a kernel saved).
// A label outside [0, V) is reported and makes the row's term and gradient NaN.
//
// Note [A row of logits staged in shared memory]
// The row is read three times (its maximum, its sum of exponentials, its gradient). A GPT-2
// chunk's logits (1,376 rows of 50,304) are 277 MB, far beyond the L2, so each read came from
// memory. kStaged: the block (kStagedThreads threads, one block an SM) copies the row into
// shared memory once, kLoadsAhead values a thread at a time, and the three passes read it
// there. Rows of kMinStagedRow to the device's opt-in shared memory (227 KB on Hopper: 58,000
// float32 values) are staged, when the kernel can run kStagedThreads threads a block; the choice depends on the shape and the device, not on the run, and
// both forms sum in one fixed order (the staged one over its own block size).
constexpr int kStagedThreads = 512;
constexpr int64_t kMinStagedRow = 8192;  // shorter rows stay in the L1 and L2 between their reads

template <typename T, typename L, bool kStaged>
__global__ void __launch_bounds__(kStagedThreads) LinearCeChunkKernel(T* x, uint16_t* g16, int64_t rows, int64_t v, const L* lab, int64_t r0, int64_t n,
                                    bool grads, double* terms, KernelError* err) {
  LOOM_DYNAMIC_SHARED(staged_bytes);
  T* staged = reinterpret_cast<T*>(staged_bytes);
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    T* xr = x + i * v;
    const T* src = xr;
    if (kStaged) {
      __syncthreads();  // the previous row's readers are done with `staged`
      for (int64_t c0 = threadIdx.x; c0 < v; c0 += int64_t(blockDim.x) * kLoadsAhead) {
        T vs[kLoadsAhead];
#pragma unroll
        for (int q = 0; q < kLoadsAhead; ++q)
          if (c0 + q * blockDim.x < v) vs[q] = xr[c0 + q * blockDim.x];
#pragma unroll
        for (int q = 0; q < kLoadsAhead; ++q)
          if (c0 + q * blockDim.x < v) staged[c0 + q * blockDim.x] = vs[q];
      }
      __syncthreads();
      src = staged;
    }
    const T lse = BlockLogSumExp(src, v);
    const long long l = (long long)lab[r0 + i];
    const bool bad = l < 0 || l >= v;
    if (threadIdx.x == 0) {
      if (bad) RaiseKernelError(err, kLabelOutOfRange, kOpLinearCrossEntropy, r0 + i, l, v);
      terms[r0 + i] = bad ? QuietNaN<double>() : -double(src[l] - lse);
    }
    if (!grads) continue;
    __syncthreads();  // src[l] is read before any thread overwrites it
    const T inv_n = T(1) / T(n);
    for (int64_t c = threadIdx.x; c < v; c += blockDim.x) {
      T p = Exp(src[c] - lse) * inv_n;
      if (c == l) p -= inv_n;
      if (bad) p = QuietNaN<T>();
      if (g16)
        g16[i * v + c] = StoreResult<uint16_t>(p, true);
      else
        xr[c] = p;
    }
  }
}
