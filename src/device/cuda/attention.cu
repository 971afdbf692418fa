// CUDA scaled-dot-product attention (Note [Attention keeps no score matrix] in
// core/ops_transformer.h), one warp per row: the forward and dq kernels give a warp one query
// row, the dk/dv kernel one key row, and each walks the other side's rows with an online
// softmax (forward) or the probabilities recomputed from the saved log-sum-exp (backward).
// Every sum runs in a fixed order, so results do not vary from run to run, and no kernel needs
// atomics. A lane holds the row's elements lane, lane + 32, ... (head widths up to
// 32 * kChunks). They run the float64 records, and float32 heads wider than 64; float32 heads up
// to 64 wide run the tiled kernels below (Note [Attention in tiles on CUDA]). Neither uses tensor
// cores. The bf16 policy's records (a bfloat16 qkv) run on cuDNN's fused attention (Note
// [Attention on cuDNN] in cudnn_attention.h).
#include "device/cuda/common.cuh"
#include "device/cuda/cudnn_attention.h"

namespace loom {
namespace cuda {
namespace {

#include "device/cuda/attention_tiles.cuh"

constexpr int kChunks = 8;          // head width up to 256
constexpr int kRowsPerBlock = 8;    // warps per block

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

__device__ __forceinline__ int64_t WarpRow() { return int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5); }
unsigned RowGrid(int64_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// One query row: y = softmax(scale q k^T) v by the online recurrence, lse = m + log l.
template <typename T>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    AttentionKernel(AttentionDims g, const T* q, const T* k, const T* v, T* y, T* lse) {
  const int64_t row = WarpRow();
  if (row >= g.bh * g.tq) return;
  const int lane = threadIdx.x & 31;
  const int64_t p = row / g.tq, i = row % g.tq;
  const T* kb = k + g.k.Offset(p, g.heads);
  const T* vb = v + g.v.Offset(p, g.heads);
  T qr[kChunks], o[kChunks];
  LoadRow(q + g.q.Offset(p, g.heads) + i * g.q.ld, g.d, lane, qr);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) o[c] = T(0);
  const T scale = T(g.scale);
  T m = -Infinity<T>(), l = T(0);
  const int64_t end = g.KeyEnd(i);
  for (int64_t j = 0; j < end; ++j) {
    const T s = Dot(qr, kb + j * g.k.ld, g.d, lane) * scale;
    const T mnew = MaxOf(m, s);
    const T alpha = m == -Infinity<T>() ? T(0) : Exp(m - mnew);
    const T e = Exp(s - mnew);
    l = l * alpha + e;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) o[c] *= alpha;
    Axpy(e, vb + j * g.v.ld, g.dv, lane, o);
    m = mnew;
  }
  StoreRow(o, T(1) / l, y + g.y.Offset(p, g.heads) + i * g.y.ld, g.dv, lane);
  if (lane == 0) lse[row] = m + Log(l);
}

// One query row's dq = scale sum_j dS_ij k_j, after D_i = rowsum(dy y) - dlse_i (kept in drow
// for the dk/dv kernel). dq is laid out as q.
template <typename T>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    AttentionDqKernel(AttentionDims g, const T* q, const T* k, const T* v, const T* y, const T* lse, const T* dy,
                      const T* dlse, T* dq, T* drow) {
  const int64_t row = WarpRow();
  if (row >= g.bh * g.tq) return;
  const int lane = threadIdx.x & 31;
  const int64_t p = row / g.tq, i = row % g.tq;
  const T* kb = k + g.k.Offset(p, g.heads);
  const T* vb = v + g.v.Offset(p, g.heads);
  const int64_t oq = g.q.Offset(p, g.heads) + i * g.q.ld, oy = g.y.Offset(p, g.heads) + i * g.y.ld;
  T qr[kChunks], dyr[kChunks], acc[kChunks];
  LoadRow(q + oq, g.d, lane, qr);
  LoadRow(dy + oy, g.dv, lane, dyr);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) acc[c] = T(0);
  const T di = Dot(dyr, y + oy, g.dv, lane) - dlse[row];
  if (lane == 0) drow[row] = di;
  const T scale = T(g.scale), l = lse[row];
  const int64_t end = g.KeyEnd(i);
  for (int64_t j = 0; j < end; ++j) {
    const T pr = Exp(NonPositive(Dot(qr, kb + j * g.k.ld, g.d, lane) * scale - l));
    const T ds = pr * (Dot(dyr, vb + j * g.v.ld, g.dv, lane) - di);
    Axpy(ds, kb + j * g.k.ld, g.d, lane, acc);
  }
  StoreRow(acc, scale, dq + oq, g.d, lane);
}

// One key row's dv = sum_i P_ij dy_i and dk = scale sum_i dS_ij q_i over the query rows that
// see it (i >= j when causal); dk and dv are laid out as k and v.
template <typename T>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    AttentionDkvKernel(AttentionDims g, const T* q, const T* k, const T* v, const T* lse, const T* dy,
                       const T* drow, T* dk, T* dv) {
  const int64_t row = WarpRow();
  if (row >= g.bh * g.tk) return;
  const int lane = threadIdx.x & 31;
  const int64_t p = row / g.tk, j = row % g.tk;
  const T* qb = q + g.q.Offset(p, g.heads);
  const T* dyb = dy + g.y.Offset(p, g.heads);
  const int64_t ok = g.k.Offset(p, g.heads) + j * g.k.ld, ov = g.v.Offset(p, g.heads) + j * g.v.ld;
  T kr[kChunks], vr[kChunks], dkr[kChunks], dvr[kChunks];
  LoadRow(k + ok, g.d, lane, kr);
  LoadRow(v + ov, g.dv, lane, vr);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) dkr[c] = dvr[c] = T(0);
  const T scale = T(g.scale);
  for (int64_t i = g.causal ? j : 0; i < g.tq; ++i) {
    const int64_t at = p * g.tq + i;
    const T pr = Exp(NonPositive(Dot(kr, qb + i * g.q.ld, g.d, lane) * scale - lse[at]));
    Axpy(pr, dyb + i * g.y.ld, g.dv, lane, dvr);
    const T ds = pr * (Dot(vr, dyb + i * g.y.ld, g.dv, lane) - drow[at]);
    Axpy(ds, qb + i * g.q.ld, g.d, lane, dkr);
  }
  StoreRow(dkr, scale, dk + ok, g.d, lane);
  StoreRow(dvr, T(1), dv + ov, g.dv, lane);
}

bool Tiled(const AttentionDims& g, const float*) { return TiledAttentionTakes(g); }
bool Tiled(const AttentionDims&, const double*) { return false; }

void CheckWidths(const AttentionDims& g, const char* op) {
  LOOM_CHECK(g.d <= 32 * kChunks && g.dv <= 32 * kChunks, ShapeError, "[", op, "] head widths D = ", g.d,
             " and Dv = ", g.dv, " must be at most ", 32 * kChunks, " on CUDA");
}

template <typename T>
void Forward(const KernelContext& ctx, const AttentionDims& g, const T* q, const T* k, const T* v, T* y, T* lse) {
  if (g.bh == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (Tiled(g, q)) {
      AttentionTiledKernel<<<TileGrid(g.bh, g.tq), 32 * kWarps, 0, Dev(ctx).stream()>>>(g, q, k, v, y, lse);
      LOOM_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  AttentionKernel<<<RowGrid(g.bh * g.tq), 32 * kRowsPerBlock, 0, Dev(ctx).stream()>>>(g, q, k, v, y, lse);
  LOOM_CUDA_CHECK_LAUNCH();
}

// dq, dk, dv laid out as q, k and v; every element of them is written (the problems' rows cover
// the operands).
template <typename T>
void Backward(const KernelContext& ctx, const AttentionDims& g, const T* q, const T* k, const T* v, const T* y,
              const T* lse, const T* dy, const T* dlse, T* dq, T* dk, T* dv) {
  if (g.bh == 0) return;  // tq, tk > 0 (infer): only an empty batch
  CudaDeviceImpl& dev = Dev(ctx);
  const size_t bytes = size_t(g.bh * g.tq) * sizeof(T);
  const bool planned = ctx.scratch && ctx.scratch_bytes >= bytes;
  T* drow = static_cast<T*>(planned ? ctx.scratch : dev.Malloc(bytes));
  const bool tiled = Tiled(g, q);
  if constexpr (std::is_same_v<T, float>) {
    if (tiled) AttentionTiledDqKernel<<<TileGrid(g.bh, g.tq), 32 * kWarps, 0, dev.stream()>>>(g, q, k, v, y, lse, dy,
                                                                                                dlse, dq, drow);
  }
  if (!tiled)
    AttentionDqKernel<<<RowGrid(g.bh * g.tq), 32 * kRowsPerBlock, 0, dev.stream()>>>(g, q, k, v, y, lse, dy, dlse, dq,
                                                                                     drow);
  cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) {
    if constexpr (std::is_same_v<T, float>) {
      if (tiled) AttentionTiledDkvKernel<<<TileGrid(g.bh, g.tk), 32 * kWarps, 0, dev.stream()>>>(g, q, k, v, lse, dy,
                                                                                                   drow, dk, dv);
    }
    if (!tiled)
      AttentionDkvKernel<<<RowGrid(g.bh * g.tk), 32 * kRowsPerBlock, 0, dev.stream()>>>(g, q, k, v, lse, dy, drow, dk,
                                                                                        dv);
    launched = cudaGetLastError();
  }
  if (!planned) dev.Free(drow);  // only work queued later on this stream can reach it
  LOOM_CUDA_CHECK(launched);
}

bool AttentionCudaSupports(const OpRecord& op) {
  const AttentionDims g = MakeAttentionDims(op.attrs, op.inputs[0].shape(), op.inputs[2].shape());
  return g.d <= 32 * kChunks && g.dv <= 32 * kChunks;
}
// Note [What a kernel supports]: head widths the lanes hold, and a qkv of the results' dtype; a
// bfloat16 qkv (the bf16 policy's record, Note [Precision policy]) where cuDNN's fused attention
// takes it (Note [Attention on cuDNN]), else the policy keeps attention float32 here.
bool QkvSupports(const OpRecord& op, bool grad) {
  if (op.inputs[0].dtype() == DType::kBFloat16) return CudnnAttentionSupports(op, grad);
  const AttentionDims g = MakeAttentionQkvDims(op.attrs, op.inputs[0].shape());
  return g.d <= 32 * kChunks && op.inputs[0].dtype() == op.outputs[0].dtype();
}
bool AttentionQkvCudaSupports(const OpRecord& op) { return QkvSupports(op, false); }
bool AttentionQkvGradCudaSupports(const OpRecord& op) { return QkvSupports(op, true); }

// q: (..., Tq, D), k: (..., Tk, D), v: (..., Tk, Dv) -> y: (..., Tq, Dv), lse: (..., Tq)
void AttentionCuda(const OpRecord& op, const KernelContext& ctx) {
  const AttentionDims g = MakeAttentionDims(op.attrs, op.inputs[0].shape(), op.inputs[2].shape());
  CheckWidths(g, "attention");
  FloatDispatch(op.inputs[0].dtype(), "attention", [&](auto tag) {
    using T = decltype(tag);
    Forward(ctx, g, op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.inputs[2].data<T>(), op.outputs[0].data<T>(),
            op.outputs[1].data<T>());
  });
}

// (q, k, v, y, lse, dy, dlse) -> dq, dk, dv
void AttentionGradCuda(const OpRecord& op, const KernelContext& ctx) {
  const AttentionDims g = MakeAttentionDims(op.attrs, op.inputs[0].shape(), op.inputs[2].shape());
  CheckWidths(g, "attention_grad");
  FloatDispatch(op.inputs[0].dtype(), "attention_grad", [&](auto tag) {
    using T = decltype(tag);
    const T* in[7];
    for (size_t i = 0; i < 7; ++i) in[i] = op.inputs[i].data<T>();
    Backward(ctx, g, in[0], in[1], in[2], in[3], in[4], in[5], in[6], op.outputs[0].data<T>(), op.outputs[1].data<T>(),
             op.outputs[2].data<T>());
  });
}

// qkv: (B, T, 3 D) -> y: (B, T, D), lse: (B, heads, T)
void AttentionQkvCuda(const OpRecord& op, const KernelContext& ctx) {
  if (op.inputs[0].dtype() == DType::kBFloat16) return CudnnAttentionQkv(op, ctx);
  const AttentionDims g = MakeAttentionQkvDims(op.attrs, op.inputs[0].shape());
  CheckWidths(g, "attention_qkv");
  FloatDispatch(op.inputs[0].dtype(), "attention_qkv", [&](auto tag) {
    using T = decltype(tag);
    const T* qkv = op.inputs[0].data<T>();
    const int64_t dim = g.d * g.heads;
    Forward(ctx, g, qkv, qkv + dim, qkv + 2 * dim, op.outputs[0].data<T>(), op.outputs[1].data<T>());
  });
}

// (qkv, y, lse, dy, dlse) -> dqkv: (B, T, 3 D)
void AttentionQkvGradCuda(const OpRecord& op, const KernelContext& ctx) {
  if (op.inputs[0].dtype() == DType::kBFloat16) return CudnnAttentionQkvGrad(op, ctx);
  const AttentionDims g = MakeAttentionQkvDims(op.attrs, op.inputs[0].shape());
  CheckWidths(g, "attention_qkv_grad");
  FloatDispatch(op.inputs[0].dtype(), "attention_qkv_grad", [&](auto tag) {
    using T = decltype(tag);
    const T* qkv = op.inputs[0].data<T>();
    T* d = op.outputs[0].data<T>();
    const int64_t dim = g.d * g.heads;
    Backward(ctx, g, qkv, qkv + dim, qkv + 2 * dim, op.inputs[1].data<T>(), op.inputs[2].data<T>(),
             op.inputs[3].data<T>(), op.inputs[4].data<T>(), d, d + dim, d + 2 * dim);
  });
}

size_t AttentionGradScratch(const OpRecord& op) {
  const AttentionDims g = MakeAttentionDims(op.attrs, op.inputs[0].shape(), op.inputs[2].shape());
  return size_t(g.bh * g.tq) * SizeOf(op.inputs[0].dtype());
}
size_t AttentionQkvGradScratch(const OpRecord& op) {
  if (op.inputs[0].dtype() == DType::kBFloat16) return 0;  // cuDNN's: the device's workspace
  const AttentionDims g = MakeAttentionQkvDims(op.attrs, op.inputs[0].shape());
  return size_t(g.bh * g.tq) * SizeOf(op.inputs[0].dtype());
}

}  // namespace

LOOM_KERNEL(attention, kCUDA, AttentionCuda);
LOOM_KERNEL_SUPPORTS(attention, kCUDA, AttentionCudaSupports);
LOOM_KERNEL(attention_grad, kCUDA, AttentionGradCuda);
LOOM_KERNEL_SUPPORTS(attention_grad, kCUDA, AttentionCudaSupports);
LOOM_KERNEL_SCRATCH(attention_grad, kCUDA, AttentionGradScratch);
LOOM_KERNEL(attention_qkv, kCUDA, AttentionQkvCuda);
LOOM_KERNEL_SUPPORTS(attention_qkv, kCUDA, AttentionQkvCudaSupports);
LOOM_KERNEL(attention_qkv_grad, kCUDA, AttentionQkvGradCuda);
LOOM_KERNEL_SUPPORTS(attention_qkv_grad, kCUDA, AttentionQkvGradCudaSupports);
LOOM_KERNEL_SCRATCH(attention_qkv_grad, kCUDA, AttentionQkvGradScratch);

}  // namespace cuda
}  // namespace loom
