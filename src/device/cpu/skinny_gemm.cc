// Skinny GEMMs on the CPU (Note [Skinny GEMM] in skinny_gemm.h).
#include "device/cpu/skinny_gemm.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "device/cpu/parallel.h"

namespace loom {
namespace {

// 16 floats: one AVX-512 register; GCC splits it into two AVX2 registers on CPUs without AVX-512.
typedef float V __attribute__((vector_size(64)));
constexpr int kLanes = 16;
constexpr int kSkinny = 16;                   // M (NN, NT) or K (TN) up to this is skinny
constexpr int64_t kSplitMacs = int64_t(1) << 18;  // below this many multiply-adds: one thread

inline V Load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void Store(float* p, const V& v) { std::memcpy(p, &v, sizeof v); }
inline V Splat(float x) { return V{} + x; }

// alpha * acc + beta * out; out is not read when beta == 0 (it may hold garbage or NaN).
inline V Scale(const V& acc, float alpha, float beta, const float* out) {
  return beta == 0.0f ? acc * alpha : acc * alpha + Load(out) * beta;
}
inline float Scale(float acc, float alpha, float beta, const float* out) {
  return beta == 0.0f ? acc * alpha : acc * alpha + *out * beta;
}

// Sum of the lanes in a fixed order (halves, then quarters, ...).
inline float SumLanes(const V& v) {
  float t[kLanes];
  std::memcpy(t, &v, sizeof t);
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) t[l] += t[l + w];
  return t[0];
}

// Calls f(std::integral_constant<int, v>{}) for the v in 1..N equal to `value`: the kernels are
// instantiated per row count (or K), so that their accumulators are registers.
template <typename F, int... Vs>
void Dispatch(int64_t value, F f, std::integer_sequence<int, Vs...>) {
  (void)std::initializer_list<int>{(value == Vs + 1 ? (f(std::integral_constant<int, Vs + 1>{}), 0) : 0)...};
}
template <int N, typename F>
void WithConstant(int64_t value, F f) {
  Dispatch(value, f, std::make_integer_sequence<int, N>{});
}

struct Args {
  int64_t m, n, k;
  float alpha, beta;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
};

// Runs body(begin, end) over [0, units), on the pool when there is enough work.
template <typename Body>
void Split(const Args& g, int64_t units, int64_t macs_per_unit, Body body) {
  if (g.m * g.n * g.k < kSplitMacs || units < 2 || NumThreads() <= 1) return body(int64_t(0), units);
  ParallelFor(units, std::max<int64_t>(1, kSplitMacs / std::max<int64_t>(1, macs_per_unit)), body);
}

// ---- NN: C(M,N) = A(M,K) B(K,N), M <= 16 ----

// Rows [0, MR) of C, NV * 16 columns starting at b and c.
template <int MR, int NV>
void NNPanel(const Args& g, const float* a, const float* b, float* c) {
  V acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
  for (int64_t p = 0; p < g.k; ++p) {
    V bp[NV];
    for (int v = 0; v < NV; ++v) bp[v] = Load(b + p * g.ldb + v * kLanes);
    for (int i = 0; i < MR; ++i) {
      const V ai = Splat(a[i * g.lda + p]);
      for (int v = 0; v < NV; ++v) acc[i][v] += ai * bp[v];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) {
      float* out = c + i * g.ldc + v * kLanes;
      Store(out, Scale(acc[i][v], g.alpha, g.beta, out));
    }
}

// Fewer than 16 columns left: the same order of sums, one column at a time.
void NNTail(int mr, int64_t cols, const Args& g, const float* a, const float* b, float* c) {
  float acc[8][kLanes] = {};
  for (int64_t p = 0; p < g.k; ++p)
    for (int i = 0; i < mr; ++i)
      for (int64_t j = 0; j < cols; ++j) acc[i][j] += a[i * g.lda + p] * b[p * g.ldb + j];
  for (int i = 0; i < mr; ++i)
    for (int64_t j = 0; j < cols; ++j) c[i * g.ldc + j] = Scale(acc[i][j], g.alpha, g.beta, c + i * g.ldc + j);
}

// Panels as wide as the registers allow (MR x NV accumulators, at most 16): with one row of A a
// panel is 256 columns, so each row of B is read in runs of 1 KB that the prefetcher follows;
// narrow panels step down B's column in 4 KB strides, a new page every row (5x slower at M = 1).
template <int MR>
void NNRowsOf(const Args& g, int64_t j0, int64_t j1, const float* a, float* c) {
  constexpr int NV = MR == 1 ? 16 : MR == 2 ? 8 : MR <= 4 ? 4 : 2;
  int64_t j = j0;
  for (; j + NV * kLanes <= j1; j += NV * kLanes) NNPanel<MR, NV>(g, a, g.b + j, c + j);
  for (; j + kLanes <= j1; j += kLanes) NNPanel<MR, 1>(g, a, g.b + j, c + j);
  if (j < j1) NNTail(MR, j1 - j, g, a, g.b + j, c + j);
}

void NN(const Args& g) {
  constexpr int64_t kUnit = 16 * kLanes;  // columns of C per unit of work: the widest panel
  const int64_t units = (g.n + kUnit - 1) / kUnit;
  Split(g, units, kUnit * g.m * g.k, [&](int64_t s, int64_t e) {
    const int64_t j0 = s * kUnit, j1 = std::min(g.n, e * kUnit);
    for (int64_t i0 = 0; i0 < g.m; i0 += 8) {
      const float* a = g.a + i0 * g.lda;
      float* c = g.c + i0 * g.ldc;
      WithConstant<8>(std::min<int64_t>(8, g.m - i0), [&](auto mr) { NNRowsOf<decltype(mr)::value>(g, j0, j1, a, c); });
    }
  });
}

// ---- NT: C(M,N) = A(M,K) B(N,K)^T, M <= 16 ----

// Rows [0, MR) of C, columns [0, NR) (rows of B), each a dot product over K.
template <int MR, int NR>
void NTBlock(const Args& g, const float* a, const float* b, float* c) {
  V acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = V{};
  int64_t p = 0;
  for (; p + kLanes <= g.k; p += kLanes) {
    V br[NR];
    for (int r = 0; r < NR; ++r) br[r] = Load(b + r * g.ldb + p);
    for (int i = 0; i < MR; ++i) {
      V ai = Load(a + i * g.lda + p);
      // Eight rows, two columns: GCC would fold the load into both multiply-adds (loading A
      // twice, 18 loads per 16 multiply-adds); held in a register it is 10 (M = 8: 1.15x faster).
      // (A register holds all 16 lanes only with AVX-512: elsewhere the constraint cannot be met.)
#ifdef __AVX512F__
      if (MR > 4) asm("" : "+v"(ai));
#endif
      for (int r = 0; r < NR; ++r) acc[i][r] += ai * br[r];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) {
      float s = SumLanes(acc[i][r]);
      for (int64_t q = p; q < g.k; ++q) s += a[i * g.lda + q] * b[r * g.ldb + q];
      float* out = c + i * g.ldc + r;
      *out = Scale(s, g.alpha, g.beta, out);
    }
}

// Accumulators: MR x NR of them, at most 16, plus NR rows of B and one of A in registers.
template <int MR>
void NTRows(const Args& g, int64_t j0, int64_t j1, const float* a, float* c) {
  constexpr int NR = MR <= 2 ? 8 : MR <= 4 ? 4 : 2;
  int64_t j = j0;
  for (; j + NR <= j1; j += NR) NTBlock<MR, NR>(g, a, g.b + j * g.ldb, c + j);
  for (; j < j1; ++j) NTBlock<MR, 1>(g, a, g.b + j * g.ldb, c + j);
}

constexpr int kNTRows = 8;

void NT(const Args& g) {
  constexpr int64_t kGroup = 8;  // columns of C per unit of work
  const int64_t groups = (g.n + kGroup - 1) / kGroup;
  Split(g, groups, kGroup * g.m * g.k, [&](int64_t s, int64_t e) {
    const int64_t j0 = s * kGroup, j1 = std::min(g.n, e * kGroup);
    for (int64_t i0 = 0; i0 < g.m; i0 += kNTRows) {
      const float* a = g.a + i0 * g.lda;
      float* c = g.c + i0 * g.ldc;
      WithConstant<kNTRows>(std::min<int64_t>(kNTRows, g.m - i0),
                            [&](auto mr) { NTRows<decltype(mr)::value>(g, j0, j1, a, c); });
    }
  });
}

// ---- TN: C(M,N) = A(K,M)^T B(K,N), K <= 16 ----

// Rows [i0, i1) of C: row i is sum_p A(p, i) B(p, :), p ascending, with A's K values of the row
// held in registers while the row is written.
// Rows [i0, i1) of C: row i is sum_p A(p, i) B(p, :), p ascending, with A's K values of the row
// held in registers while the row is written, four vectors at a time (four independent chains
// of K multiply-adds hide their latency).
constexpr int64_t kTNCols = kSkinnyTNColumns;

template <int K>
void TNRows(const Args& g, int64_t i0, int64_t i1) {
  const float* __restrict a = g.a;
  const float* __restrict b = g.b;
  const int64_t n = g.n, lda = g.lda, ldb = g.ldb, ldc = g.ldc;
  const float alpha = g.alpha, beta = g.beta;
  for (int64_t jb = 0; jb < n; jb += kTNCols)
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t je = std::min(n, jb + kTNCols);
    V ai[K];
    for (int p = 0; p < K; ++p) ai[p] = Splat(a[p * lda + i]);
    float* __restrict c = g.c + i * ldc;
    int64_t j = jb;
    for (; j + 4 * kLanes <= je; j += 4 * kLanes) {
      V acc[4];
      for (int v = 0; v < 4; ++v) acc[v] = ai[0] * Load(b + j + v * kLanes);
      for (int p = 1; p < K; ++p)
        for (int v = 0; v < 4; ++v) acc[v] += ai[p] * Load(b + p * ldb + j + v * kLanes);
      for (int v = 0; v < 4; ++v) Store(c + j + v * kLanes, Scale(acc[v], alpha, beta, c + j + v * kLanes));
    }
    for (; j + kLanes <= je; j += kLanes) {
      V acc = ai[0] * Load(b + j);
      for (int p = 1; p < K; ++p) acc += ai[p] * Load(b + p * ldb + j);
      Store(c + j, Scale(acc, alpha, beta, c + j));
    }
    for (; j < je; ++j) {
      float acc = a[i] * b[j];
      for (int p = 1; p < K; ++p) acc += a[p * lda + i] * b[p * ldb + j];
      c[j] = Scale(acc, alpha, beta, c + j);
    }
  }
}

template <int K>
void TNFixed(const Args& g, bool parallel) {
  if (parallel)
    Split(g, g.m, g.n * K, [&](int64_t s, int64_t e) { TNRows<K>(g, s, e); });
  else
    TNRows<K>(g, 0, g.m);
}

}  // namespace

bool IsSkinny(bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) return false;
  if (!ta && !tb) return m <= kSkinny && n >= kLanes;
  if (!ta && tb) return m <= kSkinny && k >= 2 * kLanes;
  if (ta && !tb) return k <= kSkinny && n >= kLanes;
  return false;
}

bool SkinnyGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (!IsSkinny(ta, tb, m, n, k)) return false;
  const Args g{m, n, k, alpha, beta, a, lda, b, ldb, c, ldc};
  if (!ta && !tb) NN(g);
  else if (!ta && tb) NT(g);
  else WithConstant<kSkinny>(g.k, [&](auto k) { TNFixed<decltype(k)::value>(g, /*parallel=*/true); });
  return true;
}

void SkinnyGemmTNRows(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                      float* c, int64_t ldc) {
  LOOM_ASSERT(m > 0 && n > 0 && k > 0 && k <= kSkinny, "SkinnyGemmTNRows: K = ", k, " is not skinny");
  const Args g{m, n, k, 1.0f, 0.0f, a, lda, b, ldb, c, ldc};
  WithConstant<kSkinny>(g.k, [&](auto k) { TNFixed<decltype(k)::value>(g, /*parallel=*/false); });
}

}  // namespace loom
