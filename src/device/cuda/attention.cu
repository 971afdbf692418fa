// CUDA scaled-dot-product attention (Note [Attention keeps no score matrix] in
// core/ops_transformer.h), one warp per row: the forward and dq kernels give a warp one query
// row, the dk/dv kernel one key row, and each walks the other side's rows with an online
// softmax (forward) or the probabilities recomputed from the saved log-sum-exp (backward).
// Every sum runs in a fixed order, so results do not vary from run to run, and no kernel needs
// atomics. A lane holds the row's elements lane, lane + 32, ... (head widths up to
// 32 * kChunks). These are straightforward kernels, not tensor-core ones (FlashAttention's tiles
// or cuDNN's fused attention are the fast path still to come).
#include "device/cuda/common.cuh"

namespace loom {
namespace cuda {
namespace {

constexpr int kChunks = 8;          // head width up to 256
constexpr int kRowsPerBlock = 8;    // warps per block
constexpr unsigned kAll = 0xffffffffu;

template <typename T>
__device__ __forceinline__ T WarpAllSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kAll, v, o);
  return v;
}

// The row of n elements at p into a lane's registers (0 beyond n).
template <typename T>
__device__ __forceinline__ void LoadRow(const T* p, int64_t n, int lane, T (&r)[kChunks]) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t at = lane + 32 * c;
    r[c] = at < n ? p[at] : T(0);
  }
}
// The dot product of a lane's registers with the row at p, summed over the warp (every lane
// gets it).
template <typename T>
__device__ __forceinline__ T Dot(const T (&r)[kChunks], const T* p, int64_t n, int lane) {
  T acc = T(0);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t at = lane + 32 * c;
    if (at < n) acc += r[c] * p[at];
  }
  return WarpAllSum(acc);
}
template <typename T>
__device__ __forceinline__ void Axpy(T a, const T* p, int64_t n, int lane, T (&r)[kChunks]) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t at = lane + 32 * c;
    if (at < n) r[c] += a * p[at];
  }
}
template <typename T>
__device__ __forceinline__ void StoreRow(const T (&r)[kChunks], T scale, T* p, int64_t n, int lane) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t at = lane + 32 * c;
    if (at < n) p[at] = r[c] * scale;
  }
}

// A recomputed score minus its row's log-sum-exp is at most 0 but for rounding.
template <typename T>
__device__ __forceinline__ T NonPositive(T x) {
  return x < T(0) ? x : T(0);
}

__device__ __forceinline__ int64_t WarpRow() { return int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5); }
unsigned RowGrid(int64_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// One query row: y = softmax(scale q k^T) v by the online recurrence, lse = m + log l.
template <typename T>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    AttentionKernel(AttentionDims g, const T* q, const T* k, const T* v, T* y, T* lse) {
  const int64_t row = WarpRow();
  if (row >= g.bh * g.tq) return;
  const int lane = threadIdx.x & 31;
  const int64_t b = row / g.tq, i = row % g.tq;
  const T* kb = k + b * g.tk * g.d;
  const T* vb = v + b * g.tk * g.dv;
  T qr[kChunks], o[kChunks];
  LoadRow(q + row * g.d, g.d, lane, qr);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) o[c] = T(0);
  const T scale = T(g.scale);
  T m = -Infinity<T>(), l = T(0);
  const int64_t end = g.KeyEnd(i);
  for (int64_t j = 0; j < end; ++j) {
    const T s = Dot(qr, kb + j * g.d, g.d, lane) * scale;
    const T mnew = MaxOf(m, s);
    const T alpha = m == -Infinity<T>() ? T(0) : Exp(m - mnew);
    const T p = Exp(s - mnew);
    l = l * alpha + p;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) o[c] *= alpha;
    Axpy(p, vb + j * g.dv, g.dv, lane, o);
    m = mnew;
  }
  StoreRow(o, T(1) / l, y + row * g.dv, g.dv, lane);
  if (lane == 0) lse[row] = m + Log(l);
}

// One query row's dq = scale sum_j dS_ij k_j, after D_i = rowsum(dy y) - dlse_i (kept in drow
// for the dk/dv kernel).
template <typename T>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    AttentionDqKernel(AttentionDims g, const T* q, const T* k, const T* v, const T* y, const T* lse, const T* dy,
                      const T* dlse, T* dq, T* drow) {
  const int64_t row = WarpRow();
  if (row >= g.bh * g.tq) return;
  const int lane = threadIdx.x & 31;
  const int64_t b = row / g.tq, i = row % g.tq;
  const T* kb = k + b * g.tk * g.d;
  const T* vb = v + b * g.tk * g.dv;
  T qr[kChunks], dyr[kChunks], acc[kChunks];
  LoadRow(q + row * g.d, g.d, lane, qr);
  LoadRow(dy + row * g.dv, g.dv, lane, dyr);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) acc[c] = T(0);
  const T di = Dot(dyr, y + row * g.dv, g.dv, lane) - dlse[row];
  if (lane == 0) drow[row] = di;
  const T scale = T(g.scale), l = lse[row];
  const int64_t end = g.KeyEnd(i);
  for (int64_t j = 0; j < end; ++j) {
    const T p = Exp(NonPositive(Dot(qr, kb + j * g.d, g.d, lane) * scale - l));
    const T ds = p * (Dot(dyr, vb + j * g.dv, g.dv, lane) - di);
    Axpy(ds, kb + j * g.d, g.d, lane, acc);
  }
  StoreRow(acc, scale, dq + row * g.d, g.d, lane);
}

// One key row's dv = sum_i P_ij dy_i and dk = scale sum_i dS_ij q_i over the query rows that
// see it (i >= j when causal).
template <typename T>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    AttentionDkvKernel(AttentionDims g, const T* q, const T* k, const T* v, const T* lse, const T* dy,
                       const T* drow, T* dk, T* dv) {
  const int64_t row = WarpRow();
  if (row >= g.bh * g.tk) return;
  const int lane = threadIdx.x & 31;
  const int64_t b = row / g.tk, j = row % g.tk;
  const T* qb = q + b * g.tq * g.d;
  const T* dyb = dy + b * g.tq * g.dv;
  T kr[kChunks], vr[kChunks], dkr[kChunks], dvr[kChunks];
  LoadRow(k + row * g.d, g.d, lane, kr);
  LoadRow(v + row * g.dv, g.dv, lane, vr);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) dkr[c] = dvr[c] = T(0);
  const T scale = T(g.scale);
  for (int64_t i = g.causal ? j : 0; i < g.tq; ++i) {
    const int64_t at = b * g.tq + i;
    const T p = Exp(NonPositive(Dot(kr, qb + i * g.d, g.d, lane) * scale - lse[at]));
    Axpy(p, dyb + i * g.dv, g.dv, lane, dvr);
    const T ds = p * (Dot(vr, dyb + i * g.dv, g.dv, lane) - drow[at]);
    Axpy(ds, qb + i * g.d, g.d, lane, dkr);
  }
  StoreRow(dkr, scale, dk + row * g.d, g.d, lane);
  StoreRow(dvr, T(1), dv + row * g.dv, g.dv, lane);
}

bool AttentionCudaSupports(const OpRecord& op) {
  const AttentionDims g = MakeAttentionDims(op.attrs, op.inputs[0].shape(), op.inputs[2].shape());
  return g.d <= 32 * kChunks && g.dv <= 32 * kChunks;
}

void CheckWidths(const AttentionDims& g, const char* op) {
  LOOM_CHECK(g.d <= 32 * kChunks && g.dv <= 32 * kChunks, ShapeError, "[", op, "] head widths D = ", g.d,
             " and Dv = ", g.dv, " must be at most ", 32 * kChunks, " on CUDA");
}

// q: (..., Tq, D), k: (..., Tk, D), v: (..., Tk, Dv) -> y: (..., Tq, Dv), lse: (..., Tq)
void AttentionCuda(const OpRecord& op, const KernelContext& ctx) {
  const AttentionDims g = MakeAttentionDims(op.attrs, op.inputs[0].shape(), op.inputs[2].shape());
  CheckWidths(g, "attention");
  if (g.bh * g.tq == 0) return;
  FloatDispatch(op.inputs[0].dtype(), "attention", [&](auto tag) {
    using T = decltype(tag);
    AttentionKernel<<<RowGrid(g.bh * g.tq), 32 * kRowsPerBlock, 0, Dev(ctx).stream()>>>(
        g, op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.inputs[2].data<T>(), op.outputs[0].data<T>(),
        op.outputs[1].data<T>());
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

size_t AttentionGradScratch(const OpRecord& op) {
  const AttentionDims g = MakeAttentionDims(op.attrs, op.inputs[0].shape(), op.inputs[2].shape());
  return size_t(g.bh * g.tq) * SizeOf(op.inputs[0].dtype());
}

// (q, k, v, y, lse, dy, dlse) -> dq, dk, dv
void AttentionGradCuda(const OpRecord& op, const KernelContext& ctx) {
  const AttentionDims g = MakeAttentionDims(op.attrs, op.inputs[0].shape(), op.inputs[2].shape());
  CheckWidths(g, "attention_grad");
  FloatDispatch(op.inputs[0].dtype(), "attention_grad", [&](auto tag) {
    using T = decltype(tag);
    CudaDeviceImpl& dev = Dev(ctx);
    if (g.bh * g.tk > 0 && g.tq == 0) {  // no query sees a key: dk and dv are zero
      LOOM_CUDA_CHECK(cudaMemsetAsync(op.outputs[1].data<T>(), 0, size_t(op.outputs[1].numel()) * sizeof(T), dev.stream()));
      LOOM_CUDA_CHECK(cudaMemsetAsync(op.outputs[2].data<T>(), 0, size_t(op.outputs[2].numel()) * sizeof(T), dev.stream()));
      return;
    }
    if (g.bh * g.tq == 0) return;
    const size_t bytes = size_t(g.bh * g.tq) * sizeof(T);
    const bool planned = ctx.scratch && ctx.scratch_bytes >= bytes;
    T* drow = static_cast<T*>(planned ? ctx.scratch : dev.Malloc(bytes));
    const T* in[7];
    for (size_t i = 0; i < 7; ++i) in[i] = op.inputs[i].data<T>();
    AttentionDqKernel<<<RowGrid(g.bh * g.tq), 32 * kRowsPerBlock, 0, dev.stream()>>>(
        g, in[0], in[1], in[2], in[3], in[4], in[5], in[6], op.outputs[0].data<T>(), drow);
    cudaError_t launched = cudaGetLastError();
    if (launched == cudaSuccess) {
      AttentionDkvKernel<<<RowGrid(g.bh * g.tk), 32 * kRowsPerBlock, 0, dev.stream()>>>(
          g, in[0], in[1], in[2], in[4], in[5], drow, op.outputs[1].data<T>(), op.outputs[2].data<T>());
      launched = cudaGetLastError();
    }
    if (!planned) dev.Free(drow);  // only work queued later on this stream can reach it
    LOOM_CUDA_CHECK(launched);
  });
}

}  // namespace

LOOM_KERNEL(attention, kCUDA, AttentionCuda);
LOOM_KERNEL_SUPPORTS(attention, kCUDA, AttentionCudaSupports);
LOOM_KERNEL(attention_grad, kCUDA, AttentionGradCuda);
LOOM_KERNEL_SUPPORTS(attention_grad, kCUDA, AttentionCudaSupports);
LOOM_KERNEL_SCRATCH(attention_grad, kCUDA, AttentionGradScratch);

}  // namespace cuda
}  // namespace loom
