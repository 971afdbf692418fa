// Batch norm's CUDA kernels (training statistics by chunks in one read, the gradient's sums,
// the coefficients, y or dx applied in either layout with the fused residual and ReLU) and the
// shapes that pick them. A kernel source fragment: cnn.cu includes it inside its namespace after
// common.cuh; test/emu includes it after test/emu/cuda_emu.h and device_math.cuh, to run it on
// the CPU (Note [CUDA kernels emulated on the CPU]).
#pragma once

// ---------------------------------------------------------------- batch norm
// Note [Batch norm in any layout]
// Training batch norm and its gradient are loom's kernels rather than cuDNN's, so that a graph
// that keeps a region NHWC (Note [Activation layouts] in graph/layouts.cc) computes the bits
// eager execution computes on NCHW. Each per-channel sum runs over the channel's M = N S values
// in one order, whatever the layout: the values m = i S + k (image i, pixel k) are cut into
// chunks (BnChunkOf), each chunk is summed in order of m into a double (one thread), and the
// chunks' partial sums are added by a block per channel in a fixed pattern (thread j takes
// chunks j, j + blockDim, ..., then BlockSum). The layout only changes which thread of the
// partial-sum kernel handles a chunk (channel-fastest for NHWC, so that a warp reads one pixel's
// adjacent channels) and the addresses. The formulas are the CPU kernel's (cpu/kernels/norm.cc):
// the mean, then the squared deviations from it; running statistics with the unbiased
// variance; y = x scale + shift and dx = a dy + k_x x + b with per-channel coefficients
// rounded to T.
//
// Note [Batch norm statistics in one read]
// The forward statistics read x from memory once. A chunk's thread sums its values in
// order and, for their squared deviations, takes each group of kLoadsAhead values it loads
// together (in registers) as a sample of its own: the group's deviations from the group's mean,
// merged into the chunk's by Chan's formula, M2 = M2_a + M2_b + (mean_b - mean_a)^2 n_a n_b /
// (n_a + n_b). The finish kernel merges the chunks' (count, sum, squared deviations) into the
// channel's mean and variance the same way, M2 = sum_j [M2_j + n_j (mean_j - mean)^2], in the
// fixed pattern above. The CPU's two passes over x (the mean, then the deviations from it)
// compute the same quantity in
// another order, within the op table's float32 tolerance; both are exact to a few ulps of the
// variance, since each chunk's deviations are taken from a mean near its values. Three kernels
// instead of five (two partial passes and a mean between them), and one pass over x fewer: on a
// GPU batch norm is bound by memory, and a ResNet-50 step at batch 32 runs 53 of them over 1.3 GB
// of activations.

// Values per chunk: the longest of 128, 64, 32, 16 and 8 that still gives c x chunks threads
// enough to fill a GPU (kBnThreadsWanted), else 8. With 128 always, the late layers of ResNet-50
// at batch 32 (2,048 channels of 1,568 values) ran 26,624 threads, a tenth of an H200's, each
// waiting out 16 rounds of memory latency. A function of (m, c) alone, so the order stays
// layout-independent and eager equals replay.
constexpr int64_t kBnThreadsWanted = 135168;  // 132 SMs x 1,024
inline int64_t BnChunkOf(int64_t m, int64_t c) {
  for (int64_t len : {128, 64, 32, 16})
    if (c * ((m + len - 1) / len) >= kBnThreadsWanted) return len;
  return 8;
}

// A 4-D or (N, C, S) operand's addressing: element (i, ch, k) in NCHW or NHWC.
struct BnLayout {
  int64_t c, s;
  bool nhwc;
  __device__ __forceinline__ int64_t At(int64_t i, int64_t ch, int64_t k) const {
    return nhwc ? (i * s + k) * c + ch : (i * c + ch) * s + k;
  }
};

struct BnDims {
  int64_t n, c, s, m, chunks, chunk;  // m = n s values per channel, in `chunks` chunks of `chunk`
};
inline BnDims MakeBnDims(const Shape& x) {
  const ChannelDims d = MakeChannelDims(x);
  const int64_t m = d.n * d.s;
  const int64_t chunk = BnChunkOf(m, d.c);
  return BnDims{d.n, d.c, d.s, m, (m + chunk - 1) / chunk, chunk};
}

// Thread t of a partial-sum kernel: its channel and chunk (channel fastest when the main
// operand is NHWC, chunk fastest when NCHW).
__device__ __forceinline__ void ChunkOf(const BnDims& d, bool channel_fastest, int64_t t, int64_t& ch,
                                        int64_t& chunk) {
  ch = channel_fastest ? t % d.c : t / d.chunks;
  chunk = channel_fastest ? t / d.c : t % d.chunks;
}

// An element as the value it holds: float and double themselves, a bfloat16 (its uint16_t
// bits) as its float (batch norm's x may be a convolution's bfloat16 output: Note [Convolution
// outputs kept in bfloat16] in graph/bf16_conv_outputs.cc; the same values the float32 kernels
// read from the widened tensor, so the same bits).
__device__ __forceinline__ float Val(float v) { return v; }
__device__ __forceinline__ double Val(double v) { return v; }
__device__ __forceinline__ float Val(uint16_t b) { return DevBFloat16ToFloat(b); }

// What fuse_bn_relu folds into batch norm (Note [Batch norm with its ReLU] in
// graph/fuse_bn_relu.cc), computed as the add and relu kernels compute it: y = relu(v +
// residual) in T, relu_f's formula (NaN stays NaN).
template <typename T>
__device__ __forceinline__ T BnEpilogue(T v, const T* residual, int64_t at, bool relu) {
  if (residual) v = v + residual[at];
  return relu && !(v > T(0) || v != v) ? T(0) : v;
}

// Note [Batch norm statistics in one read]: partial[ch * chunks + chunk] = the chunk's sum, and
// partial[(c + ch) * chunks + chunk] = its squared deviations from its own mean, built group by
// group of kLoadsAhead values (each group's deviations from the group's mean, merged into the
// chunk's by Chan's formula), so that each value is read once.
template <typename X>
__global__ void BnStatsPartialsKernel(const X* x, BnLayout xl, BnDims d, double* partial) {
  LOOM_GRID_STRIDE(t, d.c * d.chunks) {
    int64_t ch, chunk;
    ChunkOf(d, xl.nhwc, t, ch, chunk);
    const int64_t m0 = chunk * d.chunk, m1 = Min64(d.m, m0 + d.chunk);
    int64_t i = m0 / d.s, k = m0 % d.s;
    double sum = 0, m2 = 0;  // of the values before this group
    for (int64_t m = m0; m < m1; m += kLoadsAhead) {
      double xs[kLoadsAhead];  // loaded together, added in order (Note [Batch norm in any layout])
#pragma unroll
      for (int j = 0; j < kLoadsAhead; ++j)
        if (m + j < m1) {
          xs[j] = double(Val(x[xl.At(i, ch, k)]));
          if (++k == d.s) k = 0, ++i;
        }
      const double na = double(m - m0), nb = double(Min64(m1 - m, kLoadsAhead));
      double gsum = 0, gm2 = 0;
#pragma unroll
      for (int j = 0; j < kLoadsAhead; ++j)
        if (m + j < m1) gsum += xs[j];
      const double gmean = gsum / nb;
#pragma unroll
      for (int j = 0; j < kLoadsAhead; ++j)
        if (m + j < m1) gm2 += (xs[j] - gmean) * (xs[j] - gmean);
      if (na > 0) {
        const double delta = gmean - sum / na;
        m2 += gm2 + delta * delta * (na * nb / (na + nb));
      } else {
        m2 = gm2;
      }
      sum += gsum;
    }
    partial[ch * d.chunks + chunk] = sum;
    partial[(d.c + ch) * d.chunks + chunk] = m2;
  }
}

// The gradient's two sums per chunk: sum dy and sum dy (x - mean) into partial[0, c chunks)
// and partial[c chunks, 2 c chunks).
template <typename T, typename X>
__global__ void BnGradPartialsKernel(const X* x, BnLayout xl, const T* dy, BnLayout gl, const T* mean, BnDims d,
                                     double* partial) {
  LOOM_GRID_STRIDE(t, d.c * d.chunks) {
    int64_t ch, chunk;
    ChunkOf(d, gl.nhwc, t, ch, chunk);
    const int64_t m0 = chunk * d.chunk, m1 = Min64(d.m, m0 + d.chunk);
    const double mu = double(mean[ch]);
    int64_t i = m0 / d.s, k = m0 % d.s;
    double s_dy = 0, s_dyx = 0;
    for (int64_t m = m0; m < m1; m += kLoadsAhead) {
      double gs[kLoadsAhead], xs[kLoadsAhead];  // loaded together, added in order
#pragma unroll
      for (int j = 0; j < kLoadsAhead; ++j)
        if (m + j < m1) {
          gs[j] = double(dy[gl.At(i, ch, k)]);
          xs[j] = double(Val(x[xl.At(i, ch, k)]));
          if (++k == d.s) k = 0, ++i;
        }
#pragma unroll
      for (int j = 0; j < kLoadsAhead; ++j)
        if (m + j < m1) {
          s_dy += gs[j];
          s_dyx += gs[j] * (xs[j] - mu);
        }
    }
    partial[ch * d.chunks + chunk] = s_dy;
    partial[(d.c + ch) * d.chunks + chunk] = s_dyx;
  }
}

// The sum of channel ch's chunks of `partial`, by the block (every thread gets it).
__device__ __forceinline__ double ChunkTotal(const double* partial, int64_t ch, int64_t chunks) {
  double v = 0;
  for (int64_t j = threadIdx.x; j < chunks; j += blockDim.x) v += partial[ch * chunks + j];
  return BlockSum(v);
}

// y's coefficients for channel ch from the saved (rounded) statistics, as the CPU's BnScaleShift
// computes them (Note [Batch norm applied from its saved statistics] in core/ops/norm.cc).
template <typename T>
__device__ __forceinline__ void BnScaleShift(const T* gamma, const T* beta, const T* mean, const T* invstd, int64_t ch,
                                             T* scale, T* shift) {
  const double g = double(gamma[ch]), is = double(invstd[ch]);
  scale[ch] = T(g * is);
  shift[ch] = T(double(beta[ch]) - double(mean[ch]) * g * is);
}

// One block per channel, from BnStatsPartialsKernel's chunks: the mean, the squared deviations
// merged by Chan's formula (Note [Batch norm statistics in one read]), the saved statistics, the
// running ones, and y's coefficients scale and shift from the saved ones (cpu/kernels/norm.cc's
// finish and BnScaleShift).
template <typename T>
__global__ void BnFinishKernel(const double* partial, const T* gamma, const T* beta, double momentum, double eps,
                               BnDims d, T* mean_out, T* invstd_out, T* rmean, T* rvar, T* scale, T* shift) {
  __shared__ double channel_mean;
  for (int64_t ch = blockIdx.x; ch < d.c; ch += gridDim.x) {
    const double total = ChunkTotal(partial, ch, d.chunks);
    if (threadIdx.x == 0) channel_mean = total / double(d.m);
    __syncthreads();
    const double mu = channel_mean;
    double v = 0;
    for (int64_t j = threadIdx.x; j < d.chunks; j += blockDim.x) {
      const double n = double(Min64(d.m, (j + 1) * d.chunk) - j * d.chunk);
      const double dm = partial[ch * d.chunks + j] / n - mu;
      v += partial[(d.c + ch) * d.chunks + j] + n * dm * dm;
    }
    const double sq = BlockSum(v);  // ends with a barrier: channel_mean may be written again
    if (threadIdx.x != 0) continue;
    const double m = double(d.m);
    const double invstd = 1.0 / sqrt(sq / m + eps);
    mean_out[ch] = T(mu);
    invstd_out[ch] = T(invstd);
    rmean[ch] = T((1 - momentum) * double(rmean[ch]) + momentum * mu);
    rvar[ch] = T((1 - momentum) * double(rvar[ch]) + momentum * sq / (m - 1));
    BnScaleShift(gamma, beta, mean_out, invstd_out, ch, scale, shift);
  }
}

// batch_norm_apply's coefficients: a thread per channel.
template <typename T>
__global__ void BnApplyCoefficientsKernel(const T* gamma, const T* beta, const T* mean, const T* invstd, int64_t c,
                                          T* scale, T* shift) {
  LOOM_GRID_STRIDE(ch, c) BnScaleShift(gamma, beta, mean, invstd, ch, scale, shift);
}

// One block per channel, from the gradient's chunks: dgamma, dbeta and dx's coefficients
// (cpu/kernels/norm.cc's BatchNormGrad::Finish, training).
template <typename T>
__global__ void BnGradFinishKernel(const double* partial, const T* gamma, const T* mean, const T* invstd_in,
                                   BnDims d, T* dgamma, T* dbeta, T* a, T* k_x, T* b) {
  for (int64_t ch = blockIdx.x; ch < d.c; ch += gridDim.x) {
    const double sdy = ChunkTotal(partial, ch, d.chunks);
    double sdyx = ChunkTotal(partial + d.c * d.chunks, ch, d.chunks);
    if (threadIdx.x != 0) continue;
    const double m = double(d.m), invstd = double(invstd_in[ch]), mu = double(mean[ch]);
    sdyx *= invstd;  // sum(dy * xhat)
    dgamma[ch] = T(sdyx);
    dbeta[ch] = T(sdy);
    const double gi = double(gamma[ch]) * invstd;
    a[ch] = T(gi);
    k_x[ch] = T(-gi * sdyx * invstd / m);
    b[ch] = T(-gi * sdy / m + gi * sdyx * invstd * mu / m);
  }
}

// Element `at` of out from its u and (or null) its v, by explicit fused multiply-adds: p u + q
// and p u + (r v + q) each rounded once per Fma whatever the compiler would contract. Both apply
// kernels call it, so an NHWC region's batch norm gives eager NCHW's bits; written as a u + q
// in each kernel, the same formula was contracted into an FMA in one kernel and not the other
// (by the host compiler under test/emu; nvcc contracts by default too).
template <typename T, typename U, typename V>
__device__ __forceinline__ T BnOut(const T* p, const T* q, const T* r, int64_t ch, U u, const V* v, const T* residual,
                                   int64_t at, bool relu) {
  const T rest = v ? Fma(r[ch], T(Val(*v)), q[ch]) : q[ch];
  return BnEpilogue(Fma(p[ch], T(Val(u)), rest), residual, at, relu);
}

// out = p[ch] u + q[ch] (+ r[ch] v when v is given): y = scale x + shift, or dx = a dy + k_x x
// + b, in T by BnOut's fused multiply-adds (the CPU adds (a dy + k_x x) + b: within rounding); one thread per element of out, in out's layout order; then
// the fused residual (in out's layout, or null) and ReLU of y (BnEpilogue).
template <typename T, typename U, typename V>
__global__ void BnApplyKernel(const U* u, BnLayout ul, const V* v, BnLayout vl, const T* p, const T* q, const T* r,
                              T* out, BnLayout ol, int64_t n, const T* residual, bool relu) {
  LOOM_GRID_STRIDE(t, n * ol.c * ol.s) {
    int64_t i, ch, k;
    if (ol.nhwc) {
      ch = t % ol.c;
      k = (t / ol.c) % ol.s;
      i = t / (ol.c * ol.s);
    } else {
      k = t % ol.s;
      ch = (t / ol.s) % ol.c;
      i = t / (ol.s * ol.c);
    }
    out[t] = BnOut(p, q, r, ch, u[ul.At(i, ch, k)], v ? v + vl.At(i, ch, k) : nullptr, residual, t, relu);
  }
}

// BnApplyKernel where every operand has out's layout and fits 32-bit indices (a region's batch
// norm, or eager NCHW): element t of out is element t of u and v, so the channel is the only
// index to derive, by one or two 32-bit divisions instead of three 64-bit ones per element (a
// long instruction sequence each on a GPU, in a kernel that should be bound by memory). Same
// formula, same bits.
template <typename T, typename U, typename V>
__global__ void BnApplySameLayoutKernel(const U* u, const V* v, const T* p, const T* q, const T* r, T* out,
                                        uint32_t total, uint32_t c, uint32_t s, bool nhwc, const T* residual,
                                        bool relu) {
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += blockDim.x * gridDim.x) {
    const uint32_t ch = nhwc ? t % c : (t / s) % c;
    out[t] = BnOut(p, q, r, ch, u[t], v ? v + t : nullptr, residual, t, relu);
  }
}

// Whether out = p u + q (+ r v) of `total` values runs BnApplySameLayoutKernel (every operand in
// out's layout, 32-bit indices) rather than BnApplyKernel.
inline bool BnSameLayout(const BnLayout& ul, bool has_v, const BnLayout& vl, const BnLayout& ol, int64_t total) {
  return ul.nhwc == ol.nhwc && (!has_v || vl.nhwc == ol.nhwc) && total < (int64_t(1) << 31);
}
