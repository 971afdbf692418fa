// The tiled float32 attention kernels (Note [Attention in tiles on CUDA]) and the warp helpers
// attention.cu's row kernels share with them. A kernel source fragment, not a header: it is
// included inside a namespace by exactly one translation unit of a binary, after the names it
// uses are declared: CUDA's built-ins (threadIdx, blockIdx, blockDim, __syncthreads,
// __syncwarp, __shfl_xor_sync), and Exp, Log, MaxOf and Infinity (device/cuda/device_math.cuh).
// attention.cu includes it for the GPU; test/emu includes it with the built-ins emulated on the
// CPU (test/emu/cuda_emu.h), so that CPU CI runs these kernels' logic.
#pragma once

constexpr unsigned kAll = 0xffffffffu;

template <typename T>
__device__ __forceinline__ T WarpAllSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kAll, v, o);
  return v;
}

// A recomputed score minus its row's log-sum-exp is at most 0 but for rounding.
template <typename T>
__device__ __forceinline__ T NonPositive(T x) {
  return x < T(0) ? x : T(0);
}

// Note [Attention in tiles on CUDA]
// The row kernels above read every key row from global memory once per query row and add each
// dot product across the warp with five shuffles: at GPT-2's shape (1,024 tokens, heads of 64)
// a float32 step spent hundreds of milliseconds in them. The tiled kernels, for float32 heads up
// to kTileD = 64 wide, stage a tile of kTile rows of the other side in shared memory, where a
// block's kWarps warps each carry kRowsPerWarp of the block's rows, so a staged row serves 32 of
// them; a lane owns one row of the tile, so a score is one lane's dot product (no shuffles:
// the tile is stored transposed, the warp's rows read four columns at a time by broadcast,
// half a shared-memory load per multiply-add),
// and the softmax's maximum and sum take ten shuffles per row per tile instead of five per key.
// A lane then accumulates its output columns lane and lane + 32 from the tile's probabilities,
// shared by its warp through shared memory. The forward is the online softmax by tiles; the
// backward is two kernels, as above: dq (and D_i = rowsum(dy y) - dlse_i) by query rows over
// tiles of keys, then dk and dv by key rows over tiles of queries, the probabilities recomputed
// from the saved log-sum-exp. Every sum runs in an order fixed by the shape, so results repeat.
constexpr int kTile = 32;                            // rows of the other side staged, a lane each
constexpr int kRowsPerWarp = 4;                      // a warp's rows
constexpr int kWarps = 8;                            // a block's warps
constexpr int kBlockRows = kWarps * kRowsPerWarp;    // a block's rows
constexpr int kTileD = 64;                           // the head widths the tiled kernels take

__device__ __forceinline__ float WarpAllMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = MaxOf(v, __shfl_xor_sync(kAll, v, o));
  return v;
}

// Rows [r0, r0 + n) of an operand of one problem (rows ld apart, w elements each; rows past
// `last` and columns past w read as 0) into a shared tile, row by row: the warps' own rows, read
// by broadcast, four columns at a time.
__device__ __forceinline__ void Stage(float (*tile)[kTileD], int n, const float* base, int64_t r0, int64_t last,
                                      int64_t ld, int64_t w) {
  for (int e = threadIdx.x; e < n * kTileD; e += blockDim.x) {
    const int r = e / kTileD, x = e % kTileD;
    tile[r][x] = r0 + r < last && x < w ? base[(r0 + r) * ld + x] : 0.f;
  }
}
// The same for a tile of kTile rows of the other side, transposed: tile[x][r], so that a lane
// reads its own row's column x (tile[x][lane]) or a row's columns lane and lane + 32
// (tile[lane][r]) without bank conflicts (the padding spreads both).
__device__ __forceinline__ void StageT(float (*tile)[kTile + 1], const float* base, int64_t r0, int64_t last,
                                       int64_t ld, int64_t w) {
  for (int e = threadIdx.x; e < kTile * kTileD; e += blockDim.x) {
    const int r = e / kTileD, x = e % kTileD;
    tile[x][r] = r0 + r < last && x < w ? base[(r0 + r) * ld + x] : 0.f;
  }
}
__device__ __forceinline__ float4 Four(const float* p) { return *reinterpret_cast<const float4*>(p); }
// s[r] += rows[row0 + r][x] t[x][lane] over x < d, in order of x: the warp's rows read four
// columns at a time (both tiles hold zeros past d, up to the next multiple of 4).
__device__ __forceinline__ void RowDots(const float (*rows)[kTileD], int row0, const float (*t)[kTile + 1], int lane,
                                        int64_t d, float (&s)[kRowsPerWarp]) {
  for (int x = 0; x < d; x += 4) {
    const float t0 = t[x][lane], t1 = t[x + 1][lane], t2 = t[x + 2][lane], t3 = t[x + 3][lane];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float4 q = Four(&rows[row0 + r][x]);
      s[r] += q.x * t0;
      s[r] += q.y * t1;
      s[r] += q.z * t2;
      s[r] += q.w * t3;
    }
  }
}
// acc[r][c] += p[r][k] u(k, c) over the tile's rows k in order, for the lane's columns c = lane,
// lane + 32: p read four at a time, u(k, c) = t[c][k] from a transposed tile.
__device__ __forceinline__ void TileProducts(const float (*p)[kTile], const float (*t)[kTile + 1], int lane,
                                             float (&acc)[kRowsPerWarp][2]) {
  for (int k = 0; k < kTile; k += 4) {
    float u0[4], u1[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) u0[q] = t[lane][k + q], u1[q] = t[lane + 32][k + q];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float4 pr = Four(&p[r][k]);
      const float pv[4] = {pr.x, pr.y, pr.z, pr.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        acc[r][0] += pv[q] * u0[q];
        acc[r][1] += pv[q] * u1[q];
      }
    }
  }
}
__device__ __forceinline__ void StageRow(float* to, int n, const float* from, int64_t r0, int64_t last) {
  for (int e = threadIdx.x; e < n; e += blockDim.x) to[e] = r0 + e < last ? from[r0 + e] : 0.f;
}

// A block's problem and first row, from its index: ceil(rows / kBlockRows) blocks a problem.
struct TileBlock {
  int64_t p, r0;
  __device__ explicit TileBlock(int64_t rows) {
    const int64_t per = (rows + kBlockRows - 1) / kBlockRows;
    p = int64_t(blockIdx.x) / per;
    r0 = int64_t(blockIdx.x) % per * kBlockRows;
  }
};
inline unsigned TileGrid(int64_t bh, int64_t rows) { return unsigned(bh * ((rows + kBlockRows - 1) / kBlockRows)); }
// The problems the tiled kernels take: heads up to kTileD wide (a lane holds two columns).
inline bool TiledAttentionTakes(const AttentionDims& g) { return g.d <= kTileD && g.dv <= kTileD; }

__global__ void __launch_bounds__(32 * kWarps)
    AttentionTiledKernel(AttentionDims g, const float* q, const float* k, const float* v, float* y, float* lse) {
  __shared__ __align__(16) float qs[kBlockRows][kTileD];
  __shared__ float kt[kTileD][kTile + 1];
  __shared__ float vt[kTileD][kTile + 1];
  __shared__ __align__(16) float ps[kWarps][kRowsPerWarp][kTile];
  const TileBlock b(g.tq);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const float* kb = k + g.k.Offset(b.p, g.heads);
  const float* vb = v + g.v.Offset(b.p, g.heads);
  Stage(qs, kBlockRows, q + g.q.Offset(b.p, g.heads), b.r0, g.tq, g.q.ld, g.d);
  const float scale = float(g.scale);
  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][2];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) m[r] = -Infinity<float>(), l[r] = 0.f, o[r][0] = o[r][1] = 0.f;
  const int64_t end = g.KeyEnd((b.r0 + kBlockRows < g.tq ? b.r0 + kBlockRows : g.tq) - 1);
  for (int64_t j0 = 0; j0 < end; j0 += kTile) {
    __syncthreads();  // the last tile is used up (and, the first time, qs is staged)
    StageT(kt, kb, j0, g.tk, g.k.ld, g.d);
    StageT(vt, vb, j0, g.tk, g.v.ld, g.dv);
    __syncthreads();
    float s[kRowsPerWarp] = {};
    RowDots(qs, w * kRowsPerWarp, kt, lane, g.d, s);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t i = b.r0 + w * kRowsPerWarp + r;
      const bool seen = i < g.tq && j0 + lane < g.KeyEnd(i);
      const float sv = seen ? s[r] * scale : -Infinity<float>();
      const float mnew = MaxOf(m[r], WarpAllMax(sv));
      const float e = seen ? Exp(sv - mnew) : 0.f;
      const float alpha = m[r] == -Infinity<float>() ? 0.f : Exp(m[r] - mnew);
      l[r] = l[r] * alpha + WarpAllSum(e);
      o[r][0] *= alpha;
      o[r][1] *= alpha;
      m[r] = mnew;
      ps[w][r][lane] = e;
    }
    __syncwarp();
    TileProducts(ps[w], vt, lane, o);
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = b.r0 + w * kRowsPerWarp + r;
    if (i >= g.tq) continue;
    float* yr = y + g.y.Offset(b.p, g.heads) + i * g.y.ld;
    const float inv = 1.f / l[r];
    if (lane < g.dv) yr[lane] = o[r][0] * inv;
    if (lane + 32 < g.dv) yr[lane + 32] = o[r][1] * inv;
    if (lane == 0) lse[b.p * g.tq + i] = m[r] + Log(l[r]);
  }
}

// dq by query rows over tiles of keys; first D_i = rowsum(dy y) - dlse_i into drow.
__global__ void __launch_bounds__(32 * kWarps)
    AttentionTiledDqKernel(AttentionDims g, const float* q, const float* k, const float* v, const float* y,
                           const float* lse, const float* dy, const float* dlse, float* dq, float* drow) {
  __shared__ __align__(16) float qs[kBlockRows][kTileD];
  __shared__ __align__(16) float dys[kBlockRows][kTileD];
  __shared__ float kt[kTileD][kTile + 1];
  __shared__ float vt[kTileD][kTile + 1];
  __shared__ __align__(16) float ds[kWarps][kRowsPerWarp][kTile];
  const TileBlock b(g.tq);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const float* kb = k + g.k.Offset(b.p, g.heads);
  const float* vb = v + g.v.Offset(b.p, g.heads);
  const int64_t oy = g.y.Offset(b.p, g.heads);
  Stage(qs, kBlockRows, q + g.q.Offset(b.p, g.heads), b.r0, g.tq, g.q.ld, g.d);
  Stage(dys, kBlockRows, dy + oy, b.r0, g.tq, g.y.ld, g.dv);
  __syncthreads();
  float di[kRowsPerWarp], li[kRowsPerWarp], acc[kRowsPerWarp][2];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = b.r0 + w * kRowsPerWarp + r;
    const int lr = w * kRowsPerWarp + r;
    const float* yr = y + oy + (i < g.tq ? i : 0) * g.y.ld;
    float part = 0.f;
    if (i < g.tq && lane < g.dv) part += dys[lr][lane] * yr[lane];
    if (i < g.tq && lane + 32 < g.dv) part += dys[lr][lane + 32] * yr[lane + 32];
    const int64_t at = b.p * g.tq + i;
    const float sum = WarpAllSum(part);
    di[r] = i < g.tq ? sum - dlse[at] : 0.f;
    li[r] = i < g.tq ? lse[at] : 0.f;
    if (i < g.tq && lane == 0) drow[at] = di[r];
    acc[r][0] = acc[r][1] = 0.f;
  }
  const float scale = float(g.scale);
  const int64_t end = g.KeyEnd((b.r0 + kBlockRows < g.tq ? b.r0 + kBlockRows : g.tq) - 1);
  for (int64_t j0 = 0; j0 < end; j0 += kTile) {
    __syncthreads();
    StageT(kt, kb, j0, g.tk, g.k.ld, g.d);
    StageT(vt, vb, j0, g.tk, g.v.ld, g.dv);
    __syncthreads();
    float s[kRowsPerWarp] = {}, dp[kRowsPerWarp] = {};
    RowDots(qs, w * kRowsPerWarp, kt, lane, g.d, s);
    RowDots(dys, w * kRowsPerWarp, vt, lane, g.dv, dp);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t i = b.r0 + w * kRowsPerWarp + r;
      const bool seen = i < g.tq && j0 + lane < g.KeyEnd(i);
      const float pr = seen ? Exp(NonPositive(s[r] * scale - li[r])) : 0.f;
      ds[w][r][lane] = pr * (dp[r] - di[r]);
    }
    __syncwarp();
    TileProducts(ds[w], kt, lane, acc);
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = b.r0 + w * kRowsPerWarp + r;
    if (i >= g.tq) continue;
    float* dqr = dq + g.q.Offset(b.p, g.heads) + i * g.q.ld;
    if (lane < g.d) dqr[lane] = acc[r][0] * scale;
    if (lane + 32 < g.d) dqr[lane + 32] = acc[r][1] * scale;
  }
}

// dk and dv by key rows over tiles of queries (those at or after the block's first key when
// causal: earlier ones see none of its keys).
__global__ void __launch_bounds__(32 * kWarps)
    AttentionTiledDkvKernel(AttentionDims g, const float* q, const float* k, const float* v, const float* lse,
                            const float* dy, const float* drow, float* dk, float* dv) {
  __shared__ __align__(16) float krows[kBlockRows][kTileD];
  __shared__ __align__(16) float vrows[kBlockRows][kTileD];
  __shared__ float qt[kTileD][kTile + 1];
  __shared__ float dyt[kTileD][kTile + 1];
  __shared__ float lt[kTile], dt[kTile];
  __shared__ __align__(16) float ps[kWarps][kRowsPerWarp][kTile];
  __shared__ __align__(16) float ds[kWarps][kRowsPerWarp][kTile];
  const TileBlock b(g.tk);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const float* qb = q + g.q.Offset(b.p, g.heads);
  const float* dyb = dy + g.y.Offset(b.p, g.heads);
  Stage(krows, kBlockRows, k + g.k.Offset(b.p, g.heads), b.r0, g.tk, g.k.ld, g.d);
  Stage(vrows, kBlockRows, v + g.v.Offset(b.p, g.heads), b.r0, g.tk, g.v.ld, g.dv);
  float gk[kRowsPerWarp][2], gv[kRowsPerWarp][2];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) gk[r][0] = gk[r][1] = gv[r][0] = gv[r][1] = 0.f;
  const float scale = float(g.scale);
  for (int64_t i0 = g.causal ? b.r0 : 0; i0 < g.tq; i0 += kTile) {
    __syncthreads();
    StageT(qt, qb, i0, g.tq, g.q.ld, g.d);
    StageT(dyt, dyb, i0, g.tq, g.y.ld, g.dv);
    StageRow(lt, kTile, lse + b.p * g.tq, i0, g.tq);
    StageRow(dt, kTile, drow + b.p * g.tq, i0, g.tq);
    __syncthreads();
    float s[kRowsPerWarp] = {}, dp[kRowsPerWarp] = {};
    RowDots(krows, w * kRowsPerWarp, qt, lane, g.d, s);
    RowDots(vrows, w * kRowsPerWarp, dyt, lane, g.dv, dp);
    const int64_t i = i0 + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t j = b.r0 + w * kRowsPerWarp + r;
      const bool seen = i < g.tq && j < g.tk && j < g.KeyEnd(i);
      const float pr = seen ? Exp(NonPositive(s[r] * scale - lt[lane])) : 0.f;
      ps[w][r][lane] = pr;
      ds[w][r][lane] = pr * (dp[r] - dt[lane]);
    }
    __syncwarp();
    TileProducts(ps[w], dyt, lane, gv);
    TileProducts(ds[w], qt, lane, gk);
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t j = b.r0 + w * kRowsPerWarp + r;
    if (j >= g.tk) continue;
    float* dkr = dk + g.k.Offset(b.p, g.heads) + j * g.k.ld;
    float* dvr = dv + g.v.Offset(b.p, g.heads) + j * g.v.ld;
    if (lane < g.d) dkr[lane] = gk[r][0] * scale;
    if (lane + 32 < g.d) dkr[lane + 32] = gk[r][1] * scale;
    if (lane < g.dv) dvr[lane] = gv[r][0];
    if (lane + 32 < g.dv) dvr[lane + 32] = gv[r][1];
  }
}
