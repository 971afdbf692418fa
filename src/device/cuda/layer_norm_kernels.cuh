// Layer norm's CUDA kernels, forward and gradient (rows by warps or by blocks, dgamma and dbeta
// by chunks of rows), and the launch helpers that pick them. A kernel source fragment:
// transformer.cu includes it inside its namespace after common.cuh; test/emu includes it after
// test/emu/cuda_emu.h and device_math.cuh, to run it on the CPU (Note [CUDA kernels emulated on
// the CPU]).
#pragma once

// ---------------------------------------------------------------- layer norm
// x seen as (R, D); sums in double, two passes, as on the CPU.
//
// Note [Layer norm rows by warps]
// A float32 row of at most kWarpRowMax x 32 values (GPT-2's 768) is one warp's: each lane loads
// its values (j = lane, lane + 32, ...) into registers at once, the sums are lane sums in order of
// j then a fixed shuffle tree (WarpAllSum), and the second pass and the output come from the
// registers. A block per row (256 threads, 3 values each for GPT-2) waited out two block-wide
// reductions and three trips to memory per row, over 8 waves of blocks. Longer rows and float64
// keep the block kernels. Which kernel runs depends on the shape alone (eager and replay agree).
constexpr int kWarpRowMax = 32;  // values per lane, at most (the kernels take 8, 16, 24 or 32)

__device__ __forceinline__ double WarpAllSum(double v) {
  return __shfl_sync(0xffffffffu, WarpReduce(v, SumOp{}), 0);
}

inline bool WarpRows(DType t, int64_t d) { return t == DType::kFloat32 && d > 0 && d <= 32 * kWarpRowMax; }

// Rows per block of the warp kernels (4 warps: with about 100 to 170 registers a thread, blocks
// of 128 threads let 3 or more share an SM), and their grid.
constexpr int kWarpRowsPerBlock = 4;
inline unsigned WarpRowBlocks(int64_t rows) { return RowBlocks((rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock); }

// Calls f(std::integral_constant<int, N>) with the fewest values per lane N (8, 16, 24, 32) that
// hold a row of d values: registers are the warp kernels' limit on how many share an SM.
template <typename F>
void WithLaneValues(int64_t d, F&& f) {
  if (d <= 32 * 8) return f(std::integral_constant<int, 8>{});
  if (d <= 32 * 16) return f(std::integral_constant<int, 16>{});
  if (d <= 32 * 24) return f(std::integral_constant<int, 24>{});
  f(std::integral_constant<int, 32>{});
}

template <int N, typename Out>
__global__ void LayerNormWarpKernel(const float* x, const float* gamma, const float* beta, Out* y, float* mean_out,
                                    float* invstd_out, int64_t rows, int64_t d64, double eps, bool bf16) {
  const int lane = threadIdx.x & 31, d = int(d64);  // d <= 32 N
  const int64_t warps = int64_t(gridDim.x) * kWarpRowsPerBlock;
  for (int64_t r = int64_t(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5); r < rows; r += warps) {
    const float* xr = x + r * d64;
    float v[N];
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (lane + 32 * k < d) v[k] = xr[lane + 32 * k];
    double sum = 0;
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (lane + 32 * k < d) sum += double(v[k]);
    const double mean = WarpAllSum(sum) / double(d);
    double sq = 0;
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (lane + 32 * k < d) {
        const double dv = double(v[k]) - mean;
        sq += dv * dv;
      }
    const double invstd = 1.0 / sqrt(WarpAllSum(sq) / double(d) + eps);
    const float tm = float(mean), ti = float(invstd);
    Out* yr = y + r * d64;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int j = lane + 32 * k;
      if (j < d) yr[j] = StoreResult<Out>(float((v[k] - tm) * ti * gamma[j] + beta[j]), bf16);
    }
    if (lane == 0) {
      mean_out[r] = tm;
      invstd_out[r] = ti;
    }
  }
}

// One block per row: longer rows, float64.
template <typename T, typename Out>
__global__ void LayerNormKernel(const T* x, const T* gamma, const T* beta, Out* y, T* mean_out, T* invstd_out,
                                int64_t rows, int64_t d, double eps, bool bf16) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    Out* yr = y + r * d;
    double sum = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += double(xr[j]);
    const double mean = BlockSum(sum) / double(d);
    double sq = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double v = double(xr[j]) - mean;
      sq += v * v;
    }
    sq = BlockSum(sq);
    const double invstd = 1.0 / sqrt(sq / double(d) + eps);
    const T tm = T(mean), ti = T(invstd);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      yr[j] = StoreResult<Out>(T((xr[j] - tm) * ti * gamma[j] + beta[j]), bf16);
    if (threadIdx.x == 0) {
      mean_out[r] = tm;
      invstd_out[r] = ti;
    }
  }
}

template <typename T>
__global__ void LayerNormGradRowsKernel(const T* x, const T* gamma, const T* mean, const T* invstd, const T* dy,
                                        T* dx, int64_t rows, int64_t d) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    const T* gr = dy + r * d;
    T* dr = dx + r * d;
    const double mu = double(mean[r]), is = double(invstd[r]);
    double s1 = 0, s2 = 0;  // sum(dxhat), sum(dxhat * xhat) with dxhat = dy * gamma
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double g = double(gr[j]) * double(gamma[j]);
      s1 += g;
      s2 += g * (double(xr[j]) - mu) * is;
    }
    s1 = BlockSum(s1);
    s2 = BlockSum(s2);
    const double a = s1 / double(d), b = s2 / double(d);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double xhat = (double(xr[j]) - mu) * is;
      dr[j] = T(is * (double(gr[j]) * double(gamma[j]) - a - xhat * b));
    }
  }
}

// LayerNormGradRowsKernel by warps (Note [Layer norm rows by warps]): x and dy loaded at once.
template <int N>
__global__ void LayerNormGradRowsWarpKernel(const float* x, const float* gamma, const float* mean,
                                            const float* invstd, const float* dy, float* dx, int64_t rows,
                                            int64_t d64) {
  const int lane = threadIdx.x & 31, d = int(d64);  // d <= 32 N
  const int64_t warps = int64_t(gridDim.x) * kWarpRowsPerBlock;
  for (int64_t r = int64_t(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5); r < rows; r += warps) {
    const float* xr = x + r * d64;
    const float* gr = dy + r * d64;
    float xs[N], gs[N];
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (lane + 32 * k < d) xs[k] = xr[lane + 32 * k], gs[k] = gr[lane + 32 * k];
    const double mu = double(mean[r]), is = double(invstd[r]);
    double s1 = 0, s2 = 0;  // sum(dxhat), sum(dxhat * xhat) with dxhat = dy * gamma
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (lane + 32 * k < d) {
        const double g = double(gs[k]) * double(gamma[lane + 32 * k]);
        s1 += g;
        s2 += g * (double(xs[k]) - mu) * is;
      }
    const double a = WarpAllSum(s1) / double(d), b = WarpAllSum(s2) / double(d);
    float* dr = dx + r * d64;
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (lane + 32 * k < d) {
        const double xhat = (double(xs[k]) - mu) * is;
        dr[lane + 32 * k] = float(is * (double(gs[k]) * double(gamma[lane + 32 * k]) - a - xhat * b));
      }
  }
}

// dgamma and dbeta sum over the rows (GPT-2: 8,192 of them for 768 columns). One thread per
// column walking every row left a few blocks to do all of it; instead the rows are cut into
// chunks of kLnRowChunk, a thread per (column, chunk) sums its chunk in order of rows into a
// double, and a thread per column adds its chunks' sums in order. A fixed order for a given
// shape: deterministic, and within double rounding of the CPU's row-by-row sums.
constexpr int64_t kLnRowChunk = 64;

template <typename T>
__global__ void LayerNormGradColPartsKernel(const T* x, const T* mean, const T* invstd, const T* dy, double* part_g,
                                            double* part_b, int64_t rows, int64_t d, int64_t chunks) {
  LOOM_GRID_STRIDE(t, d * chunks) {
    const int64_t j = t % d, c = t / d;  // column fastest: a warp reads adjacent columns
    const int64_t r0 = c * kLnRowChunk, r1 = Min64(rows, r0 + kLnRowChunk);
    double sg = 0, sb = 0;
    for (int64_t r = r0; r < r1; r += kLoadsAhead) {
      double gs[kLoadsAhead], xs[kLoadsAhead], ms[kLoadsAhead], is[kLoadsAhead];  // loaded together, added in order
#pragma unroll
      for (int q = 0; q < kLoadsAhead; ++q)
        if (r + q < r1) {
          gs[q] = double(dy[(r + q) * d + j]);
          xs[q] = double(x[(r + q) * d + j]);
          ms[q] = double(mean[r + q]);
          is[q] = double(invstd[r + q]);
        }
#pragma unroll
      for (int q = 0; q < kLoadsAhead; ++q)
        if (r + q < r1) {
          sg += gs[q] * (xs[q] - ms[q]) * is[q];
          sb += gs[q];
        }
    }
    part_g[c * d + j] = sg;
    part_b[c * d + j] = sb;
  }
}

template <typename T>
__global__ void LayerNormGradColSumsKernel(const double* part_g, const double* part_b, T* dgamma, T* dbeta, int64_t d,
                                           int64_t chunks) {
  LOOM_GRID_STRIDE(j, d) {
    double sg = 0, sb = 0;
    for (int64_t c = 0; c < chunks; c += kLoadsAhead) {
      double g[kLoadsAhead], b[kLoadsAhead];
#pragma unroll
      for (int q = 0; q < kLoadsAhead; ++q)
        if (c + q < chunks) g[q] = part_g[(c + q) * d + j], b[q] = part_b[(c + q) * d + j];
#pragma unroll
      for (int q = 0; q < kLoadsAhead; ++q)
        if (c + q < chunks) sg += g[q], sb += b[q];
    }
    dgamma[j] = T(sg);
    dbeta[j] = T(sb);
  }
}
