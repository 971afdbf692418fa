// CPU kernels for matmul (OpenBLAS GEMM, one per batch), add_bias and its gradient.
#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "device/cpu/blas.h"
#include "device/cpu/dnnl_gemm.h"
#include "device/cpu/kernels/common.h"
#include "device/cpu/kernels/product.h"
#include "device/kernel_report.h"

namespace loom {
namespace cpu {
namespace {

// OpenBLAS runs a GEMM with fewer multiply-adds than this on one thread (SMP_THRESHOLD_MIN *
// GEMM_MULTITHREAD_THRESHOLD in its interface/gemm.c); batches of such GEMMs are split across
// our threads instead. Larger GEMMs run one after another and OpenBLAS threads each of them.
constexpr int64_t kSmallGemm = 65536 * 4;

// 16-bit operands (their bits), a float32 C: oneDNN's bf16 or f16 matmul, else both operands
// widened to float32 (exactly) and the float32 GEMM: products of bfloat16 or float16 numbers are
// exact in float32, so the two differ only in the order of the float32 sums. oneDNN has no f16
// matmul on a CPU without AVX512-FP16, where float16 products always take the widening path
// (reported once as the "gemm f16 -> f32" kernel).
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

// The float32 values of n float16 numbers, exactly (F16C's conversion where the build has it).
void WidenHalves(const uint16_t* p, float* w, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(w + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i))));
#endif
  for (; i < n; ++i) w[i] = HalfToFloat(p[i]);
}
void WidenBf16(const uint16_t* p, float* w, size_t n) {
  for (size_t i = 0; i < n; ++i) w[i] = BFloat16ToFloat(p[i]);
}

template <typename H>
void HalfProduct(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const H* a, int64_t lda, const H* b,
                 int64_t ldb, float beta, float* c, int64_t ldc) {
  constexpr bool kBf16 = std::is_same<H, Bf16>::value;
  const auto* a16 = reinterpret_cast<const uint16_t*>(a);
  const auto* b16 = reinterpret_cast<const uint16_t*>(b);
  if (GemmHalf(kBf16, ta, tb, m, n, k, alpha, a16, lda, b16, ldb, beta, c, ldc)) return;
  if (!kBf16) {
    static const bool reported =
        (ReportKernel("gemm f16 -> f32", "float16 operands widened to float32, then the float32 GEMM"), true);
    (void)reported;
  }
  // A (rows, cols) operand with leading dimension ld: (rows - 1) ld + cols elements, widened by
  // the pool in fixed chunks (a pure conversion: the split changes no bit).
  auto widen = [](const uint16_t* p, int64_t rows, int64_t cols, int64_t ld) {
    const int64_t n = (rows - 1) * ld + cols;
    std::unique_ptr<float[]> w(new float[size_t(n)]);
    float* out = w.get();
    ParallelFor(n, kGrain, [&](int64_t b, int64_t e) { (kBf16 ? WidenBf16 : WidenHalves)(p + b, out + b, size_t(e - b)); });
    return w;
  };
  const auto fa = widen(a16, ta ? k : m, ta ? m : k, lda), fb = widen(b16, tb ? n : k, tb ? k : n, ldb);
  Gemm(ta, tb, m, n, k, alpha, fa.get(), lda, fb.get(), ldb, beta, c, ldc);
}
void Product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const Bf16* a, int64_t lda,
             const Bf16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  HalfProduct(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void Product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const F16* a, int64_t lda,
             const F16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  HalfProduct(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

void HalfGemm(bool bf16, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
              int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (bf16)
    HalfProduct(ta, tb, m, n, k, alpha, reinterpret_cast<const Bf16*>(a), lda, reinterpret_cast<const Bf16*>(b), ldb,
                beta, c, ldc);
  else
    HalfProduct(ta, tb, m, n, k, alpha, reinterpret_cast<const F16*>(a), lda, reinterpret_cast<const F16*>(b), ldb,
                beta, c, ldc);
}

namespace {

// Float operands: the GEMM of blas.h.
template <typename T>
void Product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
             int64_t ldb, T beta, T* c, int64_t ldc) {
  Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// In: the operands' element type, T: the product's (float32 for 16-bit operands).
template <typename T, typename In = T>
void MatMulTyped(const OpRecord& op) {
  const Tensor& tc_t = op.outputs[0];
  const MatMulLayout l = MakeMatMulLayout(op.attrs, op.inputs[0].shape(), op.inputs[1].shape());
  const In* a = static_cast<const In*>(op.inputs[0].raw_data());
  const In* b = static_cast<const In*>(op.inputs[1].raw_data());
  T* c = tc_t.data<T>();

  if (tc_t.numel() == 0) return;
  if (l.k == 0 || l.nb == 0) {  // an empty sum
    std::fill(c, c + tc_t.numel(), T(0));
    return;
  }
  if (l.RowsOfOneGemm()) {
    Product(false, l.tb, l.nb * l.m, l.n, l.k, T(1), a, l.lda, b, l.ldb, T(0), c, l.n);
    return;
  }
  if (l.SumIsOneGemm()) {
    Product(true, false, l.m, l.n, l.nb * l.k, T(1), a, l.lda, b, l.ldb, T(0), c, l.n);
    return;
  }
  if (l.sum_batch) {  // accumulate in batch order: deterministic
    for (int64_t i = 0; i < l.nb; ++i) {
      int64_t oa, ob;
      l.Offsets(i, oa, ob);
      Product(l.ta, l.tb, l.m, l.n, l.k, T(1), a + oa, l.lda, b + ob, l.ldb, T(i == 0 ? 0 : 1), c, l.n);
    }
    return;
  }
  auto run = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      int64_t oa, ob;
      l.Offsets(i, oa, ob);
      Product(l.ta, l.tb, l.m, l.n, l.k, T(1), a + oa, l.lda, b + ob, l.ldb, T(0), c + i * l.size_c, l.n);
    }
  };
  const int64_t work = l.m * l.n * l.k;
  if (work < kSmallGemm)
    ParallelFor(l.nb, std::max<int64_t>(1, kGrain / work), run);
  else
    run(0, l.nb);
}

// a: (..., M, K) or (..., K, M) with ta, b: (..., K, N) or (..., N, K) with tb
//   -> c: (broadcast(...), M, N), or (M, N) summed over the batch with sum_batch
// bfloat16 and float16 operands give a float32 product (out_dtype, Note [Precision policy] in
// core/autocast.h).
void MatMulCpu(const OpRecord& op, const KernelContext&) {
  if (op.inputs[0].dtype() == DType::kBFloat16) return MatMulTyped<float, Bf16>(op);
  if (op.inputs[0].dtype() == DType::kFloat16) return MatMulTyped<float, F16>(op);
  FloatDispatch(op.outputs[0].dtype(), "matmul", [&](auto tag) { MatMulTyped<decltype(tag)>(op); });
}

// x: (R, N) (leading dimensions flattened), b: (N) -> y: (R, N)
void AddBiasCpu(const OpRecord& op, const KernelContext&) {
  const DType out = op.outputs[0].dtype();
  if (out != op.inputs[0].dtype()) {  // Note [Casts fused into their producers]: y rounded to 16 bits
    const float* x = op.inputs[0].data<float>();
    const float* b = op.inputs[1].data<float>();
    uint16_t* y = op.outputs[0].data<uint16_t>();
    const int64_t n = op.inputs[1].numel();
    if (n == 0) return;
    ParallelFor(op.outputs[0].numel() / n, std::max<int64_t>(1, kGrain / n), [&](int64_t r0, int64_t r1) {
      float tile[kStoreTile];
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j0 = 0; j0 < n; j0 += kStoreTile) {
          const int64_t m = std::min(kStoreTile, n - j0);
          const float* xr = x + r * n + j0;
          for (int64_t j = 0; j < m; ++j) tile[j] = xr[j] + b[j0 + j];
          CastFloat32To16(tile, y + r * n + j0, m, out);
        }
    });
    return;
  }
  FloatDispatch(out, "add_bias", [&](auto tag) {
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
// A bfloat16 dy (In) is widened as it is read: the same sums as its float32 values'.
// A float32 dy's 16-bit copy (copy_dtype, output 1: Note [Casts fused into their producers]) is
// written as the rows are read: bfloat16 in the summing loop, float16 by the cast op's own
// conversion (CastFloat32To16) on the row's piece still in cache.
template <typename T, typename In = T>
void BiasGradTyped(const OpRecord& op) {
  const In* dy = static_cast<const In*>(op.inputs[0].raw_data());
  T* db = op.outputs[0].data<T>();
  const int64_t n = op.outputs[0].numel();
  if (n == 0) return;
  const int64_t rows = op.inputs[0].numel() / n;
  uint16_t* copy = op.outputs.size() > 1 ? static_cast<uint16_t*>(op.outputs[1].raw_data()) : nullptr;
  ParallelFor(n, std::max<int64_t>(1, kGrain / std::max<int64_t>(rows, 1)), [&](int64_t c0, int64_t c1) {
    std::fill(db + c0, db + c1, T(0));
    for (int64_t r = 0; r < rows; ++r) {
      const In* row = dy + r * n;
      if constexpr (std::is_same<In, T>::value) {
        if constexpr (std::is_same<T, float>::value) {
          if (copy && op.outputs[1].dtype() == DType::kBFloat16) {
            uint16_t* cr = copy + r * n;
            for (int64_t j = c0; j < c1; ++j) {
              db[j] += row[j];
              cr[j] = Bf16Bits(row[j]);
            }
            continue;
          }
        }
        for (int64_t j = c0; j < c1; ++j) db[j] += row[j];
        if constexpr (std::is_same<T, float>::value)
          if (copy) CastFloat32To16(row + c0, copy + r * n + c0, c1 - c0, op.outputs[1].dtype());
      } else {
        for (int64_t j = c0; j < c1; ++j) db[j] += BFloat16ToFloat(row[j]);
      }
    }
  });
}

void BiasGradCpu(const OpRecord& op, const KernelContext&) {
  if (op.inputs[0].dtype() == DType::kBFloat16) return BiasGradTyped<float, uint16_t>(op);
  FloatDispatch(op.outputs[0].dtype(), "bias_grad", [&](auto tag) { BiasGradTyped<decltype(tag)>(op); });
}

// dy's own dtype, or float32 from a bfloat16 dy (Note [Attention results kept in bfloat16]); a
// 16-bit copy of a float32 dy.
bool BiasGradSupported(const OpRecord& op) {
  const DType in = op.inputs[0].dtype(), out = op.outputs[0].dtype();
  if (op.outputs.size() > 1) return BiasGradCopySupported(op);
  return in == out ? in == DType::kFloat32 || in == DType::kFloat64 : in == DType::kBFloat16 && out == DType::kFloat32;
}

}  // namespace

LOOM_KERNEL(matmul, kCPU, MatMulCpu);
LOOM_KERNEL(add_bias, kCPU, AddBiasCpu);
LOOM_KERNEL_SUPPORTS(add_bias, kCPU, FusedCastSupportedCpu);
LOOM_KERNEL(bias_grad, kCPU, BiasGradCpu);
LOOM_KERNEL_SUPPORTS(bias_grad, kCPU, BiasGradSupported);

}  // namespace cpu
}  // namespace loom
