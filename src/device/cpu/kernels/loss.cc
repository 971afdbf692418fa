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
#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {
namespace {

constexpr int64_t kLanes = 64;

// Calls f(row, base, width) for blocks of `width` adjacent lines starting at element `base`;
// `row` is std::true_type when the lines are contiguous rows (then width is 1).
template <typename F>
void ForLines(const AxisSplit& s, F&& f) {
  const int64_t n = std::max<int64_t>(s.n, 1);
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
LOOM_KERNEL(mse, kCPU, MseCpu);
LOOM_KERNEL(mse_grad, kCPU, MseGradCpu);

}  // namespace cpu
}  // namespace loom
