// grad_norm's kernels (Note [Gradient norms in few launches]): squared sums of a table of
// gradients a launch, then the square root of their partials' sum. A kernel source fragment:
// schedule.cu includes it inside its namespace after common.cuh; test/emu includes it after
// test/emu/cuda_emu.h and device_math.cuh, to run it on the CPU (Note [CUDA kernels emulated on
// the CPU]).
#pragma once

// Note [Gradient norms in few launches]
// grad_norm's inputs are every parameter's gradient (GPT-2: about 150 tensors, most of 768
// values): one launch per tensor cost more in launches than in sums. A launch takes a table of
// up to kNormTable tensors of one dtype; tensor k gets NormBlocks(n_k) blocks, block b of it
// sums g[i]^2 over its grid-stride share (i = b kNormThreads + thread, step blocks x
// kNormThreads), kLoadsAhead values loaded before any is added, in order, into partial[first
// block of k + b]. The partials' layout and each one's order depend on the shapes alone, so
// eager steps and replays agree bitwise; SqrtOfSumKernel then adds the partials in order.
constexpr int kNormThreads = 512;
constexpr int64_t kNormBlocks = 512;  // at most, per gradient
constexpr int kNormTable = 48;        // tensors per launch (the table is a kernel parameter, ~1.2 KB)

inline int64_t NormBlocks(int64_t n) { return std::clamp<int64_t>((n + kNormThreads - 1) / kNormThreads, 1, kNormBlocks); }

struct NormTable {
  const void* g[kNormTable];
  int64_t n[kNormTable];
  int64_t first_block[kNormTable + 1];  // of each tensor, from the launch's first partial
  int count = 0;
};

// Appends a tensor of n elements at g to t (t.count < kNormTable), its NormBlocks(n) blocks after
// the last tensor's.
inline void AddNormTensor(NormTable& t, const void* g, int64_t n) {
  if (t.count == 0) t.first_block[0] = 0;
  const int k = t.count++;
  t.g[k] = g;
  t.n[k] = n;
  t.first_block[k + 1] = t.first_block[k] + NormBlocks(n);
}

// partial[first_block[k] + b] = sum of g_k[i]^2 over block b's share of tensor k's elements.
template <typename T>
__global__ void __launch_bounds__(kNormThreads) SumSquaresKernel(NormTable t, double* partial) {
  int k = 0;
  while (int64_t(blockIdx.x) >= t.first_block[k + 1]) ++k;
  const T* g = static_cast<const T*>(t.g[k]);
  const int64_t n = t.n[k], b = int64_t(blockIdx.x) - t.first_block[k];
  const int64_t step = (t.first_block[k + 1] - t.first_block[k]) * int64_t(blockDim.x);
  double acc = 0;
  for (int64_t i = b * int64_t(blockDim.x) + threadIdx.x; i < n; i += step * kLoadsAhead) {
    double v[kLoadsAhead];  // loaded together, added in order
#pragma unroll
    for (int q = 0; q < kLoadsAhead; ++q)
      if (i + q * step < n) v[q] = double(g[i + q * step]);
#pragma unroll
    for (int q = 0; q < kLoadsAhead; ++q)
      if (i + q * step < n) acc += v[q] * v[q];
  }
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kNormThreads) SqrtOfSumKernel(const double* partial, int64_t parts, double* out) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < parts; i += blockDim.x) acc += partial[i];
  acc = BlockSum(acc);
  if (threadIdx.x == 0) out[0] = sqrt(acc);
}
