// Embedding's CUDA kernels: the lookup, and the gradient by rows after a stable sort of the
// tokens by row (the sort itself is CUB's, in transformer.cu). A kernel source fragment:
// transformer.cu includes it inside its namespace after common.cuh; test/emu includes it after
// test/emu/cuda_emu.h and device_math.cuh, to run it on the CPU (Note [CUDA kernels emulated on
// the CPU]).
#pragma once

// ---------------------------------------------------------------- embedding
// An index outside [0, V) cannot throw from the GPU (Note [Errors found on the GPU]): the rows
// it touches become NaN and the next host read throws the CPU's ValueError.

template <typename T, typename I>
__global__ void EmbeddingKernel(const T* table, const I* idx, T* y, int64_t n, int64_t v, int64_t d,
                                KernelError* err) {
  LOOM_GRID_STRIDE(t, n * d) {
    const int64_t i = t / d, j = t % d;
    const long long k = (long long)idx[i];
    if (k < 0 || k >= v) {
      if (j == 0) RaiseKernelError(err, kIndexOutOfRange, kOpEmbedding, i, k, v);
      y[t] = QuietNaN<T>();
    } else {
      y[t] = table[k * d + j];
    }
  }
}

// Note [Embedding gradient by sorted rows]
// dtable[k] is the sum of dy[i] over the tokens i with idx[i] = k, added in order of i from zero,
// as the CPU adds them (cpu/kernels/embedding.cc): no atomics, the CPU's association. The tokens
// are first sorted by row, stably (CUB's radix sort keeps equal keys in their input order, so a
// row's tokens stay in order of i), each row's range of the sorted list is marked, and one
// thread per (row, column) adds its row's tokens in that order; a row no token names gets zero.
// So V D threads share the work (GPT-2's 50,304 x 768) where one thread per column (768 threads,
// each walking every token) did it before. A bad index (outside [0, V)) is reported at the next
// host read (the smallest position: RaiseKernelError) and makes every element NaN, as it did.
template <typename I>
__global__ void EmbeddingRowKeysKernel(const I* idx, int64_t n, int64_t v, uint32_t* keys, uint32_t* tokens,
                                       int* bad, KernelError* err) {
  LOOM_GRID_STRIDE(i, n) {
    const long long k = (long long)idx[i];
    const bool out = k < 0 || k >= v;
    if (out) {
      RaiseKernelError(err, kIndexOutOfRange, kOpEmbeddingGrad, i, k, v);
      *bad = 1;
    }
    keys[i] = out ? uint32_t(v) : uint32_t(k);  // bad tokens sort last, into no row
    tokens[i] = uint32_t(i);
  }
}

// begin[k], end[k]: row k's range of the sorted keys (both 0 for a row no token names).
__global__ void EmbeddingRowBoundsKernel(const uint32_t* keys, int64_t n, int64_t v, int* begin, int* end) {
  LOOM_GRID_STRIDE(p, n) {
    const uint32_t k = keys[p];
    if (int64_t(k) >= v) continue;
    if (p == 0 || keys[p - 1] != k) begin[k] = int(p);
    if (p == n - 1 || keys[p + 1] != k) end[k] = int(p + 1);
  }
}

template <typename T>
__global__ void EmbeddingRowSumsKernel(const uint32_t* tokens, const int* begin, const int* end, const int* bad,
                                       const T* dy, T* g, int64_t v, int64_t d) {
  const bool nan = *bad != 0;
  LOOM_GRID_STRIDE(t, v * d) {
    const int64_t k = t / d, j = t - k * d;
    T acc = T(0);
    if (!nan) {
      const int p1 = end[k];
      for (int p = begin[k]; p < p1; p += kLoadsAhead) {
        T vs[kLoadsAhead];  // a frequent token's many rows: loaded together, added in order
#pragma unroll
        for (int q = 0; q < kLoadsAhead; ++q)
          if (p + q < p1) vs[q] = dy[int64_t(tokens[p + q]) * d + j];
#pragma unroll
        for (int q = 0; q < kLoadsAhead; ++q)
          if (p + q < p1) acc += vs[q];
      }
    }
    g[t] = nan ? QuietNaN<T>() : acc;
  }
}
