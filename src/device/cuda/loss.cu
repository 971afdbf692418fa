// CUDA kernels for softmax, log-softmax, their gradients, softmax cross-entropy and MSE, as on
// the CPU (src/device/cpu/kernels/loss.cc). The softmax family sees x as (outer, n, inner):
// with the axis last (inner == 1) one block takes a row; otherwise one thread takes a line of n
// elements strided by inner, neighbouring threads reading neighbouring memory.
//
// Scalar losses: Note [Scalar losses on many blocks] below. Labels outside [0, C) cannot throw
// from the GPU: Note [Errors found on the GPU] in cuda_device.h.
#include <algorithm>
#include <map>
#include <mutex>
#include <type_traits>

#include "device/cuda/common.cuh"
#include "device/cuda/gemm.h"
#include "device/kernel_shapes.h"

namespace loom {
namespace cuda {
namespace {

// ---------------------------------------------------------------- softmax / log-softmax

// y = softmax(x) or log_softmax(x) along rows of n; x - max keeps exp() in range.
template <typename T>
__global__ void SoftmaxRowKernel(const T* x, T* y, int64_t outer, int64_t n, bool log) {
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* xr = x + o * n;
    T* yr = y + o * n;
    T mx = -Infinity<T>();
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) mx = MaxOf(mx, xr[k]);
    mx = BlockMax(mx);
    T sum = T(0);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      T e = Exp(xr[k] - mx);
      if (!log) yr[k] = e;
      sum += e;
    }
    sum = BlockSum(sum);
    if (!log) {
      const T inv = T(1) / sum;
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) yr[k] *= inv;  // this thread's own writes
    } else {
      const T lse = mx + Log(sum);
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) yr[k] = xr[k] - lse;
    }
  }
}

template <typename T>
__global__ void SoftmaxColKernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool log) {
  LOOM_GRID_STRIDE(t, outer * inner) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    const T* xb = x + base;
    T* yb = y + base;
    T mx = -Infinity<T>();
    for (int64_t k = 0; k < n; ++k) mx = MaxOf(mx, xb[k * inner]);
    T sum = T(0);
    if (!log) {
      for (int64_t k = 0; k < n; ++k) {
        T e = Exp(xb[k * inner] - mx);
        yb[k * inner] = e;
        sum += e;
      }
      const T inv = T(1) / sum;
      for (int64_t k = 0; k < n; ++k) yb[k * inner] *= inv;
    } else {
      for (int64_t k = 0; k < n; ++k) sum += Exp(xb[k * inner] - mx);
      const T lse = mx + Log(sum);
      for (int64_t k = 0; k < n; ++k) yb[k * inner] = xb[k * inner] - lse;
    }
  }
}

template <typename T>
void SoftmaxLines(const T* x, T* y, const AxisSplit& s, bool log, cudaStream_t st) {
  if (s.outer * s.n * s.inner == 0) return;
  if (s.inner == 1)
    SoftmaxRowKernel<<<RowBlocks(s.outer), RowThreads(s.n), 0, st>>>(x, y, s.outer, s.n, log);
  else
    SoftmaxColKernel<<<Blocks(s.outer * s.inner), kThreads, 0, st>>>(x, y, s.outer, s.n, s.inner, log);
  LOOM_CUDA_CHECK_LAUNCH();
}

// dx = y * (dy - sum(dy * y)) for softmax; dx = dy - exp(y) * sum(dy) for log_softmax.
template <typename T>
__global__ void SoftmaxGradRowKernel(const T* y, const T* dy, T* dx, int64_t outer, int64_t n, bool log) {
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* yr = y + o * n;
    const T* gr = dy + o * n;
    T* out = dx + o * n;
    T acc = T(0);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) acc += log ? gr[k] : gr[k] * yr[k];
    acc = BlockSum(acc);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
      out[k] = log ? gr[k] - Exp(yr[k]) * acc : yr[k] * (gr[k] - acc);
  }
}

template <typename T>
__global__ void SoftmaxGradColKernel(const T* y, const T* dy, T* dx, int64_t outer, int64_t n, int64_t inner,
                                     bool log) {
  LOOM_GRID_STRIDE(t, outer * inner) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    const T* yb = y + base;
    const T* gb = dy + base;
    T* ob = dx + base;
    T acc = T(0);
    for (int64_t k = 0; k < n; ++k) acc += log ? gb[k * inner] : gb[k * inner] * yb[k * inner];
    for (int64_t k = 0; k < n; ++k)
      ob[k * inner] = log ? gb[k * inner] - Exp(yb[k * inner]) * acc : yb[k * inner] * (gb[k * inner] - acc);
  }
}

template <typename T>
void SoftmaxGradLines(const T* y, const T* dy, T* dx, const AxisSplit& s, bool log, cudaStream_t st) {
  if (s.outer * s.n * s.inner == 0) return;
  if (s.inner == 1)
    SoftmaxGradRowKernel<<<RowBlocks(s.outer), RowThreads(s.n), 0, st>>>(y, dy, dx, s.outer, s.n, log);
  else
    SoftmaxGradColKernel<<<Blocks(s.outer * s.inner), kThreads, 0, st>>>(y, dy, dx, s.outer, s.n, s.inner, log);
  LOOM_CUDA_CHECK_LAUNCH();
}

// x: (...) -> y: (...), along attr axis; log_softmax when kLog
template <bool kLog>
void SoftmaxCuda(const OpRecord& op, const KernelContext& ctx) {
  const char* name = kLog ? "log_softmax" : "softmax";
  AxisSplit s = SplitAt(op.inputs[0].shape(), op.attrs.Int("axis", -1), name);
  FloatDispatch(op.outputs[0].dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    SoftmaxLines<T>(op.inputs[0].data<T>(), op.outputs[0].data<T>(), s, kLog, Dev(ctx).stream());
  });
}

// y: (...), dy: (...) -> dx: (...), along attr axis; log_softmax_grad when kLog
template <bool kLog>
void SoftmaxGradCuda(const OpRecord& op, const KernelContext& ctx) {
  const char* name = kLog ? "log_softmax_grad" : "softmax_grad";
  AxisSplit s = SplitAt(op.inputs[0].shape(), op.attrs.Int("axis", -1), name);
  FloatDispatch(op.outputs[0].dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    SoftmaxGradLines<T>(op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.outputs[0].data<T>(), s, kLog,
                        Dev(ctx).stream());
  });
}

// ---------------------------------------------------------------- softmax cross-entropy

// Note [Scalar losses on many blocks]
// A scalar loss is a mean of terms. Up to kLossBlocks blocks each sum a grid-strided share of
// the terms in double into one partial (the op's scratch: planned arena bytes in a graph, the
// device pool in eager mode); one block then sums the partials in block order. The order is
// fixed by the sizes alone, so the result is deterministic, and a large MSE does not run on
// one block of one multiprocessor.
constexpr int kLossThreads = 512;
constexpr int64_t kLossBlocks = 256;

int64_t LossBlocks(int64_t terms) { return std::clamp<int64_t>((terms + kLossThreads - 1) / kLossThreads, 1, kLossBlocks); }

template <typename Term>
__global__ void __launch_bounds__(kLossThreads) PartialSumKernel(Term term, int64_t n, double* partial) {
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc += term(i);
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <typename T>
__global__ void __launch_bounds__(kLossThreads) MeanOfPartialsKernel(const double* partial, int64_t parts,
                                                                      double divisor, T* out) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < parts; i += blockDim.x) acc += partial[i];
  acc = BlockSum(acc);
  if (threadIdx.x == 0) out[0] = T(acc / divisor);
}

// out[0] = (sum of term(i) for i in [0, n)) / divisor.
template <typename T, typename Term>
void MeanOfTerms(const KernelContext& ctx, Term term, int64_t n, double divisor, T* out) {
  CudaDeviceImpl& dev = Dev(ctx);
  const int64_t blocks = LossBlocks(n);
  const size_t bytes = size_t(blocks) * sizeof(double);
  const bool planned = ctx.scratch && ctx.scratch_bytes >= bytes;
  double* partial = static_cast<double*>(planned ? ctx.scratch : dev.Malloc(bytes));
  PartialSumKernel<<<unsigned(blocks), kLossThreads, 0, dev.stream()>>>(term, n, partial);
  cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) {
    MeanOfPartialsKernel<<<1, kLossThreads, 0, dev.stream()>>>(partial, blocks, divisor, out);
    launched = cudaGetLastError();
  }
  // Back to the pool at once: only work queued later on this stream can reach it.
  if (!planned) dev.Free(partial);
  LOOM_CUDA_CHECK(launched);
}

// -logp[i, label_i]. A label outside [0, C) makes its term NaN and is reported (Note [Errors
// found on the GPU]).
template <typename T, typename L>
struct SceIndexTerm {
  const T* x;
  const T* lse;
  const L* lab;
  int64_t classes;
  KernelError* err;
  __device__ double operator()(int64_t i) const {
    const long long l = (long long)lab[i];
    if (l < 0 || l >= classes) {
      RaiseKernelError(err, kLabelOutOfRange, kOpSoftmaxCrossEntropy, i, l, classes);
      return QuietNaN<double>();
    }
    return -double(x[i * classes + l] - lse[i]);
  }
};

// -t * log_softmax over every element, 0 where t == 0 (0 * log 0 counts as 0).
template <typename T>
struct SceFloatTerm {
  const T* x;
  const T* lse;
  const T* t;
  int64_t classes;
  __device__ double operator()(int64_t e) const {
    return t[e] != T(0) ? -double(t[e]) * double(x[e] - lse[e / classes]) : 0.0;
  }
};

#include "device/cuda/linear_ce_kernels.cuh"

// lse[i] = max + log(sum(exp(x - max))) of row i of x (rows, n), one block per row.
template <typename T>
__global__ void RowLogSumExpKernel(const T* x, T* lse, int64_t rows, int64_t n) {
  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {
    const T l = BlockLogSumExp(x + o * n, n);
    if (threadIdx.x == 0) lse[o] = l;
  }
}

// (pred - target)^2
template <typename T>
struct SquaredErrorTerm {
  const T* p;
  const T* t;
  __device__ double operator()(int64_t i) const {
    const double d = double(p[i]) - double(t[i]);
    return d * d;
  }
};

size_t SoftmaxCrossEntropyScratch(const OpRecord& op) {
  const Tensor& logits = op.inputs[0];
  const int64_t terms = IsFloating(op.inputs[1].dtype()) ? logits.numel() : logits.dim(0);
  return size_t(LossBlocks(terms)) * sizeof(double);
}

size_t MseScratch(const OpRecord& op) { return size_t(LossBlocks(op.inputs[0].numel())) * sizeof(double); }

// logits: (N, C), labels: (N) int32/int64 or (N, C) float -> loss: (), lse: (N)
// (Note [One copy of the logits] in core/ops/loss.cc)
void SoftmaxCrossEntropyCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& logits = op.inputs[0];
  const Tensor& labels = op.inputs[1];
  const int64_t rows = logits.dim(0), classes = logits.dim(1);
  CudaDeviceImpl& dev = Dev(ctx);
  cudaStream_t s = dev.stream();
  FloatDispatch(logits.dtype(), "softmax_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* lse = op.outputs[1].data<T>();
    T* loss = op.outputs[0].data<T>();
    RowLogSumExpKernel<<<RowBlocks(rows), RowThreads(classes), 0, s>>>(x, lse, rows, classes);
    LOOM_CUDA_CHECK_LAUNCH();
    if (IsFloating(labels.dtype()))
      MeanOfTerms(ctx, SceFloatTerm<T>{x, lse, labels.data<T>(), classes}, rows * classes, double(rows), loss);
    else if (labels.dtype() == DType::kInt32)
      MeanOfTerms(ctx, SceIndexTerm<T, int32_t>{x, lse, labels.data<int32_t>(), classes, dev.kernel_error()}, rows,
                  double(rows), loss);
    else
      MeanOfTerms(ctx, SceIndexTerm<T, int64_t>{x, lse, labels.data<int64_t>(), classes, dev.kernel_error()}, rows,
                  double(rows), loss);
  });
}

// dlogits = (exp(logits - lse) - onehot(label)) * dy / N; a row with a bad label becomes NaN.
template <typename T, typename L>
__global__ void SceIndexGradKernel(const T* x, const T* lse, const L* lab, const T* dy, T* dx, int64_t rows,
                                   int64_t classes, KernelError* err) {
  const T scale = dy[0] / T(rows);
  LOOM_GRID_STRIDE(e, rows * classes) {
    const int64_t i = e / classes, c = e % classes;
    const long long l = (long long)lab[i];
    if (l < 0 || l >= classes) {
      if (c == 0) RaiseKernelError(err, kLabelOutOfRange, kOpSoftmaxCrossEntropyGrad, i, l, classes);
      dx[e] = QuietNaN<T>();
    } else {
      T v = Exp(x[e] - lse[i]) * scale;
      if (c == l) v -= scale;
      dx[e] = v;
    }
  }
}

// dlogits = (exp(logits - lse) * sum(labels, row) - labels) * dy / N, one block per row.
template <typename T>
__global__ void SceFloatGradKernel(const T* x, const T* lse, const T* t, const T* dy, T* dx, int64_t rows,
                                   int64_t classes) {
  const T scale = dy[0] / T(rows);
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const T* ti = t + i * classes;
    T mass = T(0);
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) mass += ti[c];
    mass = BlockSum(mass);
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
      dx[i * classes + c] = (Exp(x[i * classes + c] - lse[i]) * mass - ti[c]) * scale;
  }
}

// logits: (N, C), labels: (N) int or (N, C) float, lse: (N), dy: () -> dlogits: (N, C)
void SoftmaxCrossEntropyGradCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& lp = op.inputs[0];
  const Tensor& labels = op.inputs[1];
  const int64_t rows = lp.dim(0), classes = lp.dim(1);
  if (rows * classes == 0) return;
  CudaDeviceImpl& dev = Dev(ctx);
  cudaStream_t s = dev.stream();
  FloatDispatch(lp.dtype(), "softmax_cross_entropy_grad", [&](auto tag) {
    using T = decltype(tag);
    const T* x = lp.data<T>();
    const T* lse = op.inputs[2].data<T>();
    const T* dy = op.inputs[3].data<T>();
    T* dx = op.outputs[0].data<T>();
    if (IsFloating(labels.dtype()))
      SceFloatGradKernel<<<RowBlocks(rows), RowThreads(classes), 0, s>>>(x, lse, labels.data<T>(), dy, dx, rows,
                                                                           classes);
    else if (labels.dtype() == DType::kInt32)
      SceIndexGradKernel<<<Blocks(rows * classes), kThreads, 0, s>>>(x, lse, labels.data<int32_t>(), dy, dx, rows,
                                                                      classes, dev.kernel_error());
    else
      SceIndexGradKernel<<<Blocks(rows * classes), kThreads, 0, s>>>(x, lse, labels.data<int64_t>(), dy, dx, rows,
                                                                      classes, dev.kernel_error());
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// ---------------------------------------------------------------- linear cross-entropy

// Note [A row of logits staged in shared memory]: the bytes a staged row of v float32 values
// takes, or 0 when it does not fit the device beside the block reductions' own (or T is not
// float32). The kernel is allowed the device's opt-in shared memory once per device, at its first
// (eager or warm-up) run, so a device graph's recording makes no such call.
template <typename T, typename L>
size_t StagedRowBytes(CudaDeviceImpl& dev, int64_t v) {
  if (!std::is_same<T, float>::value || v < kMinStagedRow) return 0;
  static std::mutex mu;
  static std::map<int, int> allowed;  // device -> the shared memory the kernel may take
  std::lock_guard<std::mutex> lock(mu);
  auto it = allowed.find(dev.id());
  if (it == allowed.end()) {
    int optin = 0;
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev.id()));
    optin = std::max(0, optin - 1024);  // room for BlockReduce's static shared memory
    cudaFuncAttributes fa{};
    LOOM_CUDA_CHECK(cudaFuncGetAttributes(&fa, LinearCeChunkKernel<T, L, true>));
    if (fa.maxThreadsPerBlock < kStagedThreads) optin = 0;  // registers: no staged block of that size
    else
      LOOM_CUDA_CHECK(
          cudaFuncSetAttribute(LinearCeChunkKernel<T, L, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    it = allowed.emplace(dev.id(), optin).first;
  }
  const size_t bytes = size_t(v) * sizeof(T);
  return bytes <= size_t(it->second) ? bytes : 0;
}

// One chunk's kernel: staged when the row fits (the kernel allowed the shared memory it needs
// first), else one block of RowThreads per row over the logits in place.
template <typename T, typename L>
void LaunchLinearCeChunk(CudaDeviceImpl& dev, T* x, uint16_t* g16, int64_t rows, int64_t v, const L* lab, int64_t r0,
                         int64_t n, bool grads, double* terms) {
  const size_t staged = StagedRowBytes<T, L>(dev, v);
  if (staged > 0) {
    LinearCeChunkKernel<T, L, true><<<RowBlocks(rows), kStagedThreads, staged, dev.stream()>>>(
        x, g16, rows, v, lab, r0, n, grads, terms, dev.kernel_error());
  } else {
    LinearCeChunkKernel<T, L, false><<<RowBlocks(rows), RowThreads(v), 0, dev.stream()>>>(
        x, g16, rows, v, lab, r0, n, grads, terms, dev.kernel_error());
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

struct DoubleTerm {
  const double* t;
  __device__ double operator()(int64_t i) const { return t[i]; }
};

// Scratch: the chunk's logits, their 16-bit gradient (16-bit operands), the rows' loss terms and
// the partial sums of their mean.
struct LinearCeScratch {
  size_t logits, grad16, terms, partials;
  size_t total() const { return logits + grad16 + terms + partials; }
};
LinearCeScratch LinearCeScratchOf(const OpRecord& op) {
  const LinearCrossEntropyLayout l = MakeLinearCrossEntropyLayout(op.attrs, op.inputs[0].shape(), op.inputs[1].shape());
  const bool half = op.inputs[0].dtype() == DType::kBFloat16;
  const size_t es = half ? sizeof(float) : SizeOf(op.outputs[0].dtype());
  return {l.LogitsBytes(es), l.Grad16Bytes(half), LinearCrossEntropyLayout::Align(size_t(l.n) * sizeof(double)),
          size_t(LossBlocks(l.n)) * sizeof(double)};
}
size_t LinearCrossEntropyScratch(const OpRecord& op) { return LinearCeScratchOf(op).total(); }

// h: (N, D), w: (V, D) or (D, V), labels: (N) -> loss: () [, dh: (N, D), dw: w's shape]
void LinearCrossEntropyCuda(const OpRecord& op, const KernelContext& ctx) {
  CudaDeviceImpl& dev = Dev(ctx);
  cudaStream_t s = dev.stream();
  const LinearCrossEntropyLayout l = MakeLinearCrossEntropyLayout(op.attrs, op.inputs[0].shape(), op.inputs[1].shape());
  const DType operands = op.inputs[0].dtype();
  const bool half = operands == DType::kBFloat16;
  const bool grads = op.outputs.size() == 3;
  const LinearCeScratch sc = LinearCeScratchOf(op);
  const bool planned = ctx.scratch && ctx.scratch_bytes >= sc.total();
  char* base = static_cast<char*>(planned ? ctx.scratch : dev.Malloc(sc.total()));
  auto body = [&] {
    const size_t es = SizeOf(operands), rs = half ? sizeof(float) : es;  // operands', results'
    const char* h = static_cast<const char*>(op.inputs[0].raw_data());
    const void* w = op.inputs[1].raw_data();
    char* dh = grads ? static_cast<char*>(op.outputs[1].raw_data()) : nullptr;
    void* dw = grads ? op.outputs[2].raw_data() : nullptr;
    void* logits = base;
    void* grad16 = base + sc.logits;
    double* terms = reinterpret_cast<double*>(base + sc.logits + sc.grad16);
    for (int64_t r0 = 0; r0 < l.n; r0 += l.chunk) {
      const int64_t rows = std::min(l.chunk, l.n - r0);
      const char* hc = h + size_t(r0 * l.d) * es;
      DeviceGemm(dev, operands, false, l.tb, rows, l.v, l.d, hc, l.d, w, l.ldw(), logits, false);
      FloatDispatch(half ? DType::kFloat32 : operands, "linear_cross_entropy", [&](auto tag) {
        using T = decltype(tag);
        T* x = static_cast<T*>(logits);
        // bfloat16 operands: the gradient in bfloat16, the cast op's rounding, as the unfused
        // policy rounds the logits' gradient.
        uint16_t* g16 = half && grads ? static_cast<uint16_t*>(grad16) : nullptr;
        if (op.inputs[2].dtype() == DType::kInt32)
          LaunchLinearCeChunk(dev, x, g16, rows, l.v, op.inputs[2].data<int32_t>(), r0, l.n, grads, terms);
        else
          LaunchLinearCeChunk(dev, x, g16, rows, l.v, op.inputs[2].data<int64_t>(), r0, l.n, grads, terms);
      });
      if (!grads) continue;
      const void* p = half ? grad16 : logits;
      DeviceGemm(dev, operands, false, !l.tb, rows, l.d, l.v, p, l.v, w, l.ldw(), dh + size_t(r0 * l.d) * rs, false);
      if (l.tb) DeviceGemm(dev, operands, true, false, l.v, l.d, rows, p, l.v, hc, l.d, dw, r0 > 0);
      else DeviceGemm(dev, operands, true, false, l.d, l.v, rows, hc, l.d, p, l.v, dw, r0 > 0);
    }
    KernelContext sub = ctx;
    sub.scratch = base + sc.logits + sc.grad16 + sc.terms;
    sub.scratch_bytes = sc.partials;
    FloatDispatch(op.outputs[0].dtype(), "linear_cross_entropy", [&](auto tag) {
      using T = decltype(tag);
      MeanOfTerms(sub, DoubleTerm{terms}, l.n, double(l.n), op.outputs[0].data<T>());
    });
  };
  if (planned) return body();
  // Back to the pool at once, even when a launch fails: only work queued later on this stream
  // can reach it.
  try {
    body();
  } catch (...) {
    dev.Free(base);
    throw;
  }
  dev.Free(base);
}

// ---------------------------------------------------------------- mean squared error

// pred: (...), target: (...) -> loss: ()
void MseCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "mse", [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = op.inputs[0].numel();
    MeanOfTerms(ctx, SquaredErrorTerm<T>{op.inputs[0].data<T>(), op.inputs[1].data<T>()}, n, double(n),
                op.outputs[0].data<T>());
  });
}

template <typename T>
__global__ void MseGradKernel(const T* p, const T* t, const T* dy, T* dx, int64_t n) {
  const T scale = T(2) * dy[0] / T(n);
  LOOM_GRID_STRIDE(i, n) dx[i] = (p[i] - t[i]) * scale;
}

// pred: (...), target: (...), dy: () -> dpred: (...) = 2 (pred - target) * dy / numel
void MseGradCuda(const OpRecord& op, const KernelContext& ctx) {
  const int64_t n = op.inputs[0].numel();
  if (n == 0) return;
  FloatDispatch(op.outputs[0].dtype(), "mse_grad", [&](auto tag) {
    using T = decltype(tag);
    MseGradKernel<<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(op.inputs[0].data<T>(), op.inputs[1].data<T>(),
                                                                 op.inputs[2].data<T>(), op.outputs[0].data<T>(), n);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

LOOM_KERNEL(softmax, kCUDA, SoftmaxCuda<false>);
LOOM_KERNEL(log_softmax, kCUDA, SoftmaxCuda<true>);
LOOM_KERNEL(softmax_grad, kCUDA, SoftmaxGradCuda<false>);
LOOM_KERNEL(log_softmax_grad, kCUDA, SoftmaxGradCuda<true>);
LOOM_KERNEL(softmax_cross_entropy, kCUDA, SoftmaxCrossEntropyCuda);
LOOM_KERNEL(softmax_cross_entropy_grad, kCUDA, SoftmaxCrossEntropyGradCuda);
LOOM_KERNEL(linear_cross_entropy, kCUDA, LinearCrossEntropyCuda);
LOOM_KERNEL_SCRATCH(linear_cross_entropy, kCUDA, LinearCrossEntropyScratch);
LOOM_KERNEL(mse, kCUDA, MseCuda);
LOOM_KERNEL_SCRATCH(softmax_cross_entropy, kCUDA, SoftmaxCrossEntropyScratch);
LOOM_KERNEL_SCRATCH(mse, kCUDA, MseScratch);
LOOM_KERNEL(mse_grad, kCUDA, MseGradCuda);

}  // namespace cuda
}  // namespace loom
