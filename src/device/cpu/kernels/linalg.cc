// CPU kernels for matmul (OpenBLAS GEMM, one per batch), add_bias and its gradient.
#include <algorithm>
#include <cstring>

#include "device/cpu/blas.h"
#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {
namespace {

// OpenBLAS runs a GEMM with fewer multiply-adds than this on one thread (SMP_THRESHOLD_MIN *
// GEMM_MULTITHREAD_THRESHOLD in its interface/gemm.c); batches of such GEMMs are split across
// our threads instead. Larger GEMMs run one after another and OpenBLAS threads each of them.
constexpr int64_t kSmallGemm = 65536 * 4;

Shape BatchOf(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

template <typename T>
void MatMulTyped(const OpRecord& op) {
  const Tensor& ta_t = op.inputs[0];
  const Tensor& tb_t = op.inputs[1];
  const Tensor& tc_t = op.outputs[0];
  const bool ta = op.attrs.Int("ta", 0) != 0, tb = op.attrs.Int("tb", 0) != 0;
  const bool sum_batch = op.attrs.Int("sum_batch", 0) != 0;
  const Shape& sa = ta_t.shape();
  const Shape& sb = tb_t.shape();
  const size_t ra = sa.size(), rb = sb.size();
  const int64_t m = ta ? sa[ra - 1] : sa[ra - 2];
  const int64_t k = ta ? sa[ra - 2] : sa[ra - 1];
  const int64_t n = tb ? sb[rb - 2] : sb[rb - 1];
  const Shape ba = BatchOf(sa), bb = BatchOf(sb);
  const Shape batch = BroadcastShapes(ba, bb, "matmul");
  const int64_t nb = NumElements(batch), nba = NumElements(ba), nbb = NumElements(bb);
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  const int64_t size_a = m * k, size_b = k * n, size_c = m * n;
  const T* a = ta_t.data<T>();
  const T* b = tb_t.data<T>();
  T* c = tc_t.data<T>();

  if (tc_t.numel() == 0) return;
  if (k == 0 || nb == 0) {  // an empty sum
    std::fill(c, c + tc_t.numel(), T(0));
    return;
  }
  // One rhs for every batch: the batches of lhs are consecutive rows of one (nb * M, K) GEMM.
  if (!ta && !sum_batch && nbb == 1) {
    Gemm(false, tb, nb * m, n, k, T(1), a, lda, b, ldb, T(0), c, n);
    return;
  }
  // sum_b A_b^T B_b with both unbroadcast: A is (nb * K, M), B is (nb * K, N), one GEMM over nb * K.
  if (sum_batch && ta && !tb && nba == nb && nbb == nb) {
    Gemm(true, false, m, n, nb * k, T(1), a, lda, b, ldb, T(0), c, n);
    return;
  }

  const std::vector<int64_t> sta = BroadcastStrides(ba, batch), stb = BroadcastStrides(bb, batch);
  const int64_t rank = int64_t(batch.size());
  // Offsets of batch i's matrices in lhs and rhs (broadcast dimensions repeat a matrix).
  auto offsets = [&](int64_t i, int64_t& oa, int64_t& ob) {
    oa = 0;
    ob = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      int64_t idx = i % batch[size_t(d)];
      i /= batch[size_t(d)];
      oa += idx * sta[size_t(d)];
      ob += idx * stb[size_t(d)];
    }
    oa *= size_a;
    ob *= size_b;
  };
  if (sum_batch) {  // accumulate in batch order: deterministic
    for (int64_t i = 0; i < nb; ++i) {
      int64_t oa, ob;
      offsets(i, oa, ob);
      Gemm(ta, tb, m, n, k, T(1), a + oa, lda, b + ob, ldb, T(i == 0 ? 0 : 1), c, n);
    }
    return;
  }
  auto run = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      int64_t oa, ob;
      offsets(i, oa, ob);
      Gemm(ta, tb, m, n, k, T(1), a + oa, lda, b + ob, ldb, T(0), c + i * size_c, n);
    }
  };
  const int64_t work = m * n * k;
  if (work < kSmallGemm)
    ParallelFor(nb, std::max<int64_t>(1, kGrain / work), run);
  else
    run(0, nb);
}

// a: (..., M, K) or (..., K, M) with ta, b: (..., K, N) or (..., N, K) with tb
//   -> c: (broadcast(...), M, N), or (M, N) summed over the batch with sum_batch
void MatMulCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "matmul", [&](auto tag) { MatMulTyped<decltype(tag)>(op); });
}

// x: (R, N) (leading dimensions flattened), b: (N) -> y: (R, N)
void AddBiasCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "add_bias", [&](auto tag) {
    using T = decltype(tag);
    const T* x = op.inputs[0].data<T>();
    const T* b = op.inputs[1].data<T>();
    T* y = op.outputs[0].data<T>();
    const int64_t n = op.inputs[1].numel();
    if (n == 0) return;
    const int64_t rows = op.outputs[0].numel() / n;
    ParallelFor(rows, std::max<int64_t>(1, kGrain / n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * n;
        T* yr = y + r * n;
        for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] + b[j];
      }
    });
  });
}

// dy: (R, N) (leading dimensions flattened) -> db: (N), sum over R
// Split by columns, each summed in row order: the result does not depend on the thread count.
void BiasGradCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "bias_grad", [&](auto tag) {
    using T = decltype(tag);
    const T* dy = op.inputs[0].data<T>();
    T* db = op.outputs[0].data<T>();
    const int64_t n = op.outputs[0].numel();
    if (n == 0) return;
    const int64_t rows = op.inputs[0].numel() / n;
    ParallelFor(n, std::max<int64_t>(1, kGrain / std::max<int64_t>(rows, 1)), [&](int64_t c0, int64_t c1) {
      std::fill(db + c0, db + c1, T(0));
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = dy + r * n;
        for (int64_t j = c0; j < c1; ++j) db[j] += row[j];
      }
    });
  });
}

}  // namespace

LOOM_KERNEL(matmul, kCPU, MatMulCpu);
LOOM_KERNEL(add_bias, kCPU, AddBiasCpu);
LOOM_KERNEL(bias_grad, kCPU, BiasGradCpu);

}  // namespace cpu
}  // namespace loom
