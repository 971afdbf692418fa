// CPU kernels for softmax, log-softmax, their gradients, softmax cross-entropy and MSE.
//
// The softmax family sees x as (outer, n, inner) with the softmax axis in the middle. When the
// axis is the last one (inner == 1) each line is a contiguous row; otherwise up to kLanes
// adjacent lines (consecutive inner indices) are processed together so that every pass reads
// contiguous memory.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/elementwise_formulas.h"
#include "device/cpu/blas.h"
#include "device/cpu/kernels/common.h"
#include "device/cpu/kernels/product.h"

namespace loom {
namespace cpu {
namespace {

constexpr int64_t kLanes = 64;

// Calls f(row, base, width) for blocks of `width` adjacent lines starting at element `base`;
// `row` is std::true_type when the lines are contiguous rows (then width is 1).
template <typename F>
void ForLines(const AxisSplit& s, F&& f) {
  // No elements, no lines: with an empty axis the other dimensions may hold 2^40 empty lines.
  if (s.outer == 0 || s.n == 0 || s.inner == 0) return;
  const int64_t n = s.n;
  if (s.inner == 1) {
    ParallelFor(s.outer, std::max<int64_t>(1, kGrain / n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) f(std::true_type{}, r * s.n, int64_t(1));
    });
    return;
  }
  const int64_t blocks = (s.inner + kLanes - 1) / kLanes;
  ParallelFor(s.outer * blocks, std::max<int64_t>(1, kGrain / (n * kLanes)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t o = t / blocks, i0 = (t % blocks) * kLanes;
      f(std::false_type{}, o * s.n * s.inner + i0, std::min(kLanes, s.inner - i0));
    }
  });
}

// y = softmax(x) or log_softmax(x) along the split's axis; x - max keeps exp() in range.
template <typename T>
void SoftmaxLines(const T* x, T* y, const AxisSplit& s, bool log) {
  ForLines(s, [&](auto row, int64_t base, int64_t width) {
    constexpr bool kRow = decltype(row)::value;
    const int64_t st = kRow ? 1 : s.inner, w = kRow ? 1 : width, n = s.n;
    const T* xb = x + base;
    T* yb = y + base;
    T mx[kLanes], sum[kLanes];
    for (int64_t j = 0; j < w; ++j) mx[j] = -std::numeric_limits<T>::infinity();
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < w; ++j) mx[j] = std::max(mx[j], xb[k * st + j]);
    for (int64_t j = 0; j < w; ++j) sum[j] = T(0);
    if (!log) {
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < w; ++j) {
          T e = std::exp(xb[k * st + j] - mx[j]);
          yb[k * st + j] = e;
          sum[j] += e;
        }
      for (int64_t j = 0; j < w; ++j) sum[j] = T(1) / sum[j];
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < w; ++j) yb[k * st + j] *= sum[j];
    } else {
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < w; ++j) sum[j] += std::exp(xb[k * st + j] - mx[j]);
      for (int64_t j = 0; j < w; ++j) mx[j] += std::log(sum[j]);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < w; ++j) yb[k * st + j] = xb[k * st + j] - mx[j];
    }
  });
}

// dx = y * (dy - sum(dy * y)) for softmax; dx = dy - exp(y) * sum(dy) for log_softmax.
template <typename T>
void SoftmaxGradLines(const T* y, const T* dy, T* dx, const AxisSplit& s, bool log) {
  ForLines(s, [&](auto row, int64_t base, int64_t width) {
    constexpr bool kRow = decltype(row)::value;
    const int64_t st = kRow ? 1 : s.inner, w = kRow ? 1 : width, n = s.n;
    const T* yb = y + base;
    const T* gb = dy + base;
    T* ob = dx + base;
    T acc[kLanes];
    for (int64_t j = 0; j < w; ++j) acc[j] = T(0);
    if (!log) {
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < w; ++j) acc[j] += gb[k * st + j] * yb[k * st + j];
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < w; ++j) ob[k * st + j] = yb[k * st + j] * (gb[k * st + j] - acc[j]);
    } else {
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < w; ++j) acc[j] += gb[k * st + j];
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < w; ++j) ob[k * st + j] = gb[k * st + j] - std::exp(yb[k * st + j]) * acc[j];
    }
  });
}

// x: (...) -> y: (...), along attr axis; log_softmax when kLog
template <bool kLog>
void SoftmaxCpu(const OpRecord& op, const KernelContext&) {
  const char* name = kLog ? "log_softmax" : "softmax";
  AxisSplit s = SplitAt(op.inputs[0].shape(), op.attrs.Int("axis", -1), name);
  FloatDispatch(op.outputs[0].dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    SoftmaxLines<T>(op.inputs[0].data<T>(), op.outputs[0].data<T>(), s, kLog);
  });
}

// y: (...), dy: (...) -> dx: (...), along attr axis; log_softmax_grad when kLog
template <bool kLog>
void SoftmaxGradCpu(const OpRecord& op, const KernelContext&) {
  const char* name = kLog ? "log_softmax_grad" : "softmax_grad";
  AxisSplit s = SplitAt(op.inputs[0].shape(), op.attrs.Int("axis", -1), name);
  FloatDispatch(op.outputs[0].dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    SoftmaxGradLines<T>(op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.outputs[0].data<T>(), s, kLog);
  });
}

// Class-index labels as int64, checked against [0, C) before any parallel work (an exception
// must not escape a pool thread).
template <typename L>
void CheckLabels(const L* lab, int64_t rows, int64_t classes, const char* op) {
  for (int64_t i = 0; i < rows; ++i)
    LOOM_CHECK(lab[i] >= 0 && lab[i] < classes, ValueError, "[", op, "] label ", int64_t(lab[i]), " in row ", i,
               " is outside [0, ", classes, ")");
}

// Calls f(label_ptr) with the labels typed int32_t or int64_t, after checking their range.
template <typename F>
void WithIndexLabels(const Tensor& labels, int64_t rows, int64_t classes, const char* op, F&& f) {
  if (labels.dtype() == DType::kInt32) {
    const int32_t* p = labels.data<int32_t>();
    CheckLabels(p, rows, classes, op);
    f(p);
  } else {
    const int64_t* p = labels.data<int64_t>();
    CheckLabels(p, rows, classes, op);
    f(p);
  }
}

// lse[i] = max + log(sum(exp(x - max))) of each row of x (rows, classes), rows split across threads.
template <typename T>
void RowLogSumExp(const T* x, T* lse, int64_t rows, int64_t classes) {
  ParallelFor(rows, std::max<int64_t>(1, kGrain / classes), [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* xi = x + i * classes;
      T mx = xi[0];
      for (int64_t c = 1; c < classes; ++c) mx = MaxNaN(mx, xi[c]);
      // 16 partial sums, added in a fixed order: the exponentials vectorise (a single running sum
      // is a reduction GCC will not reorder)
      T part[16] = {};
      int64_t c = 0;
      for (; c + 16 <= classes; c += 16)
        for (int l = 0; l < 16; ++l) part[l] += ew::ExpOf(xi[c + l] - mx);
      for (; c < classes; ++c) part[0] += ew::ExpOf(xi[c] - mx);
      T sum = T(0);
      for (int l = 0; l < 16; ++l) sum += part[l];
      lse[i] = mx + std::log(sum);
    }
  });
}

// logits: (N, C), labels: (N) int32/int64 or (N, C) float -> loss: (), lse: (N)
// (Note [One copy of the logits] in core/ops/loss.cc)
void SoftmaxCrossEntropyCpu(const OpRecord& op, const KernelContext&) {
  const char* name = "softmax_cross_entropy";
  const Tensor& logits = op.inputs[0];
  const Tensor& labels = op.inputs[1];
  const int64_t rows = logits.dim(0), classes = logits.dim(1);
  FloatDispatch(logits.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* lse = op.outputs[1].data<T>();
    double total = 0;
    // The loss sums are O(N) (indices) or O(N C) multiply-adds (floats): serial, in row order.
    if (IsFloating(labels.dtype())) {
      RowLogSumExp(x, lse, rows, classes);
      const T* t = labels.data<T>();
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t c = 0; c < classes; ++c) {
          const int64_t at = i * classes + c;
          if (t[at] != T(0)) total -= double(t[at]) * double(x[at] - lse[i]);  // 0 * log 0 counts as 0
        }
    } else {
      WithIndexLabels(labels, rows, classes, name, [&](const auto* lab) {
        RowLogSumExp(x, lse, rows, classes);
        for (int64_t i = 0; i < rows; ++i) total -= double(x[i * classes + int64_t(lab[i])] - lse[i]);
      });
    }
    op.outputs[0].data<T>()[0] = T(total / double(rows));
  });
}

// logits: (N, C), labels: (N) int or (N, C) float, lse: (N), dy: () -> dlogits: (N, C)
//   dlogits = (exp(logits - lse) * sum(labels, row) - labels) * dy / N  (sum(labels, row) = 1 for
//   indices); each element reads its own logit before it is written (dlogits may be the logits)
void SoftmaxCrossEntropyGradCpu(const OpRecord& op, const KernelContext&) {
  const char* name = "softmax_cross_entropy_grad";
  const Tensor& logits = op.inputs[0];
  const Tensor& labels = op.inputs[1];
  const int64_t rows = logits.dim(0), classes = logits.dim(1);
  FloatDispatch(logits.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    const T* lse = op.inputs[2].data<T>();
    T* dx = op.outputs[0].data<T>();
    const T scale = op.inputs[3].data<T>()[0] / T(rows);
    const int64_t grain = std::max<int64_t>(1, kGrain / classes);
    if (IsFloating(labels.dtype())) {
      const T* t = labels.data<T>();
      ParallelFor(rows, grain, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          const T* ti = t + i * classes;
          T mass = T(0);
          for (int64_t c = 0; c < classes; ++c) mass += ti[c];
          for (int64_t c = 0; c < classes; ++c)
            dx[i * classes + c] = (ew::ExpOf(x[i * classes + c] - lse[i]) * mass - ti[c]) * scale;
        }
      });
      return;
    }
    WithIndexLabels(labels, rows, classes, name, [&](const auto* lab) {
      ParallelFor(rows, grain, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          for (int64_t c = 0; c < classes; ++c) dx[i * classes + c] = ew::ExpOf(x[i * classes + c] - lse[i]) * scale;
          dx[i * classes + int64_t(lab[i])] -= scale;
        }
      });
    });
  });
}

// ---- linear_cross_entropy (Note [Cross-entropy fused with the head's product] in core/ops/loss.cc)

// C = op(A) op(B) (+ C when accumulate) on T operands (float, double) or on 16-bit operands
// (uint16_t bits: the op's bf16 record) with a float32 C.
template <typename T>
void ChunkGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
               bool accumulate, T* c, int64_t ldc) {
  Gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, T(accumulate ? 1 : 0), c, ldc);
}
void ChunkGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
               int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  HalfGemm(true, ta, tb, m, n, k, 1.f, a, lda, b, ldb, accumulate ? 1.f : 0.f, c, ldc);
}

// In: the operands' element (T, or uint16_t for bfloat16 operands); T: the logits' and results'.
template <typename T, typename In, typename L>
void LinearCrossEntropyTyped(const OpRecord& op, const KernelContext& ctx, const L* lab) {
  constexpr bool kHalf = std::is_same<In, uint16_t>::value;
  const LinearCrossEntropyLayout l = MakeLinearCrossEntropyLayout(op.attrs, op.inputs[0].shape(), op.inputs[1].shape());
  const In* h = static_cast<const In*>(op.inputs[0].raw_data());
  const In* w = static_cast<const In*>(op.inputs[1].raw_data());
  const bool grads = op.outputs.size() == 3;
  T* dh = grads ? op.outputs[1].data<T>() : nullptr;
  T* dw = grads ? op.outputs[2].data<T>() : nullptr;
  Scratch scratch(ctx, l.ScratchBytes(sizeof(T), kHalf));
  T* logits = scratch.as<T>();
  T* lse = reinterpret_cast<T*>(scratch.as<char>() + l.LogitsBytes(sizeof(T)));
  uint16_t* p16 = reinterpret_cast<uint16_t*>(scratch.as<char>() + l.LogitsBytes(sizeof(T)) + l.LseBytes(sizeof(T)));
  const T inv_n = T(1) / T(l.n);
  double total = 0;
  for (int64_t r0 = 0; r0 < l.n; r0 += l.chunk) {
    const int64_t rows = std::min(l.chunk, l.n - r0);
    const In* hc = h + r0 * l.d;
    ChunkGemm(false, l.tb, rows, l.v, l.d, hc, l.d, w, l.ldw(), false, logits, l.v);
    RowLogSumExp(logits, lse, rows, l.v);
    for (int64_t i = 0; i < rows; ++i) total -= double(logits[i * l.v + int64_t(lab[r0 + i])] - lse[i]);
    if (!grads) continue;
    // p = (softmax - onehot) / N, the logits' gradient for a loss gradient of one, over the logits
    // (and rounded to 16 bits for 16-bit products: the cast op's rounding)
    ParallelFor(rows, std::max<int64_t>(1, kGrain / l.v), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        T* x = logits + i * l.v;
        for (int64_t c = 0; c < l.v; ++c) x[c] = ew::ExpOf(x[c] - lse[i]) * inv_n;
        x[int64_t(lab[r0 + i])] -= inv_n;
        if (kHalf) CastFloat32To16(reinterpret_cast<const float*>(x), p16 + i * l.v, l.v, DType::kBFloat16);
      }
    });
    const auto* p = [&] {
      if constexpr (kHalf) return static_cast<const In*>(p16);
      else return static_cast<const In*>(logits);
    }();
    // dh's rows = p w; dw += p^T h (w (V, D)) or h^T p (w (D, V)), chunk after chunk
    ChunkGemm(false, !l.tb, rows, l.d, l.v, p, l.v, w, l.ldw(), false, dh + r0 * l.d, l.d);
    if (l.tb) ChunkGemm(true, false, l.v, l.d, rows, p, l.v, hc, l.d, r0 > 0, dw, l.d);
    else ChunkGemm(true, false, l.d, l.v, rows, hc, l.d, p, l.v, r0 > 0, dw, l.v);
  }
  op.outputs[0].data<T>()[0] = T(total / double(l.n));
}

// h: (N, D), w: (V, D) or (D, V), labels: (N) -> loss: () [, dh: (N, D), dw: w's shape]
void LinearCrossEntropyCpu(const OpRecord& op, const KernelContext& ctx) {
  const char* name = "linear_cross_entropy";
  const Tensor& h = op.inputs[0];
  const int64_t rows = h.dim(0);
  const int64_t classes = op.attrs.Int("tb", 1) ? op.inputs[1].dim(0) : op.inputs[1].dim(1);
  WithIndexLabels(op.inputs[2], rows, classes, name, [&](const auto* lab) {
    if (h.dtype() == DType::kBFloat16) return LinearCrossEntropyTyped<float, uint16_t>(op, ctx, lab);
    FloatDispatch(h.dtype(), name, [&](auto tag) {
      using T = decltype(tag);
      LinearCrossEntropyTyped<T, T>(op, ctx, lab);
    });
  });
}

size_t LinearCrossEntropyScratch(const OpRecord& op) {
  const LinearCrossEntropyLayout l = MakeLinearCrossEntropyLayout(op.attrs, op.inputs[0].shape(), op.inputs[1].shape());
  const bool half = op.inputs[0].dtype() == DType::kBFloat16;
  return l.ScratchBytes(half ? sizeof(float) : SizeOf(op.outputs[0].dtype()), half);
}

// pred: (...), target: (...) -> loss: ()
// Partial sums over fixed blocks of kGrain elements, added in block order: the result does not
// depend on the thread count.
void MseCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "mse", [&](auto tag) {
    using T = decltype(tag);
    const T* p = op.inputs[0].data<T>();
    const T* t = op.inputs[1].data<T>();
    const int64_t n = op.inputs[0].numel();
    const int64_t blocks = (n + kGrain - 1) / kGrain;
    std::vector<double> partial(size_t(blocks), 0.0);
    ParallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        double s = 0;
        for (int64_t i = blk * kGrain, e = std::min(n, (blk + 1) * kGrain); i < e; ++i) {
          double d = double(p[i]) - double(t[i]);
          s += d * d;
        }
        partial[size_t(blk)] = s;
      }
    });
    double total = 0;
    for (double s : partial) total += s;
    op.outputs[0].data<T>()[0] = T(total / double(n));
  });
}

// pred: (...), target: (...), dy: () -> dpred: (...) = 2 (pred - target) * dy / numel
void MseGradCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "mse_grad", [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = op.inputs[0].numel();
    const T scale = T(2) * op.inputs[2].data<T>()[0] / T(n);
    BinaryLoop<T>(op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.outputs[0].data<T>(), n,
                  [scale](T p, T t) { return (p - t) * scale; });
  });
}

}  // namespace

LOOM_KERNEL(softmax, kCPU, SoftmaxCpu<false>);
LOOM_KERNEL(log_softmax, kCPU, SoftmaxCpu<true>);
LOOM_KERNEL(softmax_grad, kCPU, SoftmaxGradCpu<false>);
LOOM_KERNEL(log_softmax_grad, kCPU, SoftmaxGradCpu<true>);
LOOM_KERNEL(softmax_cross_entropy, kCPU, SoftmaxCrossEntropyCpu);
LOOM_KERNEL(softmax_cross_entropy_grad, kCPU, SoftmaxCrossEntropyGradCpu);
LOOM_KERNEL(linear_cross_entropy, kCPU, LinearCrossEntropyCpu);
LOOM_KERNEL_SCRATCH(linear_cross_entropy, kCPU, LinearCrossEntropyScratch);
LOOM_KERNEL(mse, kCPU, MseCpu);
LOOM_KERNEL(mse_grad, kCPU, MseGradCpu);

}  // namespace cpu
}  // namespace loom
