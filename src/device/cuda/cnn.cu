// CUDA kernels for the convolutional-network ops that are not cuDNN calls (cudnn.cc has
// convolution and inference-mode batch norm): pooling, training batch norm and its gradients.
// Semantics follow src/device/cpu/kernels/{pool,norm}.cc. (Layer norm and embedding:
// transformer.cu.)
// Batch norm and pooling take their 4-D operands in NCHW or NHWC, each as its record says (Note
// [Activation layouts] in graph/layouts.cc), and compute the same values in either.
//
// Why pooling is not cuDNN's: max_pool2d's contract is a second output, the int32 index of the
// first maximum of each window (NaN wins), which backward scatters through; cuDNN's pooling
// produces no indices and its backward recomputes the window maxima. The kernels below give the
// CPU's bits: forward windows are scanned in the CPU's order, and the gradients gather, for each
// input pixel, the windows that contain it in increasing output order, which is the order in
// which the CPU's scatter adds them.
#include "device/cuda/common.cuh"

LOOM_OP_KIND(batch_norm_grad);
LOOM_OP_KIND(max_pool2d);
LOOM_OP_KIND(global_avg_pool);

namespace loom {
namespace cuda {
namespace {

// The output rows (or columns) whose window covers input position i: [lo, hi].
__device__ __forceinline__ void Covering(int64_t i, int64_t k, int64_t s, int64_t p, int64_t out, int64_t& lo,
                                         int64_t& hi) {
  const int64_t a = i + p - k + 1;  // o * s >= a
  lo = a <= 0 ? 0 : (a + s - 1) / s;
  hi = Min64((i + p) / s, out - 1);  // o * s <= i + p
}

// A 4-D pooling operand in NCHW or NHWC (Note [Activation layouts] in graph/layouts.cc): plane p
// = image p / c, channel p % c; pixel k of the plane at Plane(p) + k * step.
struct PoolLayout {
  int64_t c, hw;
  bool nhwc;
  __device__ __forceinline__ int64_t Plane(int64_t p) const { return nhwc ? (p / c) * hw * c + p % c : p * hw; }
  __device__ __forceinline__ int64_t Step() const { return nhwc ? c : 1; }
  __device__ __forceinline__ int64_t At(int64_t p, int64_t k) const { return Plane(p) + k * Step(); }
  // Element t in this layout's order: its plane and pixel.
  __device__ __forceinline__ void Split(int64_t t, int64_t& p, int64_t& k) const {
    if (nhwc) {
      k = (t / c) % hw;
      p = (t / (c * hw)) * c + t % c;
    } else {
      p = t / hw;
      k = t % hw;
    }
  }
};
PoolLayout PoolLayoutOf(const OpRecord& op, const char* attr, int64_t c, int64_t hw) {
  return PoolLayout{c, hw, op.attrs.Int(attr, 0) != 0};
}

// Thread t of a pooling gradient kernel (NCHW): input pixel (ih, iw) of plane p, and the outputs
// [oi0, oi1] x [oj0, oj1] whose windows cover it.
struct Covered {
  int64_t p, ih, iw, oi0, oi1, oj0, oj1;
};
__device__ __forceinline__ Covered CoveredAt(const PoolDims& d, int64_t p, int64_t k) {
  Covered c;
  c.p = p;
  c.ih = k / d.w;
  c.iw = k % d.w;
  Covering(c.ih, d.kh, d.sh, d.ph, d.oh, c.oi0, c.oi1);
  Covering(c.iw, d.kw, d.sw, d.pw, d.ow, c.oj0, c.oj1);
  return c;
}
__device__ __forceinline__ Covered CoveredBy(const PoolDims& d, int64_t t) {
  return CoveredAt(d, t / (d.h * d.w), t % (d.h * d.w));
}

// x: (N, C, H, W) -> y: (N, C, OH, OW), argmax: int32 (N, C, OH, OW); one thread per output, in
// y's layout order; each operand in its own layout (xl, yl, al).
template <typename T>
__global__ void MaxPoolKernel(const T* x, T* y, int32_t* arg, PoolDims d, PoolLayout xl, PoolLayout yl,
                              PoolLayout al) {
  LOOM_GRID_STRIDE(t, d.planes * d.oh * d.ow) {
    int64_t p, k;
    yl.Split(t, p, k);
    const int64_t oi = k / d.ow, oj = k % d.ow;
    T m;
    const int64_t best = WindowArgMax(x + xl.Plane(p), d.w, RowSpan(d, oi), ColSpan(d, oj), m, xl.Step());
    y[t] = m;
    arg[al.At(p, k)] = int32_t(best);
  }
}

void MaxPool2dCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.inputs[0].dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.inputs[0].shape(), op.outputs[0].shape());
    const int64_t n = d.planes * d.oh * d.ow, c = op.inputs[0].dim(1);
    if (n == 0) return;
    MaxPoolKernel<<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(
        op.inputs[0].data<T>(), op.outputs[0].data<T>(), op.outputs[1].data<int32_t>(), d,
        PoolLayoutOf(op, "x_blocked", c, d.h * d.w), PoolLayoutOf(op, "y_blocked", c, d.oh * d.ow),
        PoolLayoutOf(op, "argmax_blocked", c, d.oh * d.ow));
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// argmax, dy: (N, C, OH, OW) -> dx: (N, C, H, W); one thread per input pixel, in dx's layout
// order, gathering the covering windows in increasing output order.
template <typename T>
__global__ void MaxPoolGradKernel(const int32_t* arg, const T* dy, T* dx, PoolDims d, PoolLayout al, PoolLayout gl,
                                  PoolLayout xl) {
  LOOM_GRID_STRIDE(t, d.planes * d.h * d.w) {
    int64_t p, k;
    xl.Split(t, p, k);
    const Covered c = CoveredAt(d, p, k);
    const int32_t self = int32_t(c.ih * d.w + c.iw);
    // The planes' starts once per pixel, not per covering window (each a 64-bit division).
    const int32_t* ap = arg + al.Plane(p);
    const T* gp = dy + gl.Plane(p);
    const int64_t as = al.Step(), gs = gl.Step();
    T acc = T(0);
    for (int64_t oi = c.oi0; oi <= c.oi1; ++oi)
      for (int64_t oj = c.oj0; oj <= c.oj1; ++oj) {
        const int64_t o = oi * d.ow + oj;
        if (ap[o * as] == self) acc += gp[o * gs];
      }
    dx[t] = acc;
  }
}

void MaxPool2dGradCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "max_pool2d_grad", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.outputs[0].shape(), op.inputs[1].shape());
    const int64_t n = d.planes * d.h * d.w, c = op.outputs[0].dim(1);
    if (n == 0) return;
    MaxPoolGradKernel<<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(
        op.inputs[0].data<int32_t>(), op.inputs[1].data<T>(), op.outputs[0].data<T>(), d,
        PoolLayoutOf(op, "argmax_blocked", c, d.oh * d.ow), PoolLayoutOf(op, "dy_blocked", c, d.oh * d.ow),
        PoolLayoutOf(op, "dx_blocked", c, d.h * d.w));
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
__global__ void AvgPoolKernel(const T* x, T* y, PoolDims d, bool include_pad) {
  LOOM_GRID_STRIDE(t, d.planes * d.oh * d.ow) {
    const int64_t p = t / (d.oh * d.ow), oi = (t / d.ow) % d.oh, oj = t % d.ow;
    const T* xp = x + p * d.h * d.w;
    const Span rows = RowSpan(d, oi), cols = ColSpan(d, oj);
    T s = T(0);
    for (int64_t i = rows.lo; i < rows.hi; ++i)
      for (int64_t j = cols.lo; j < cols.hi; ++j) s += xp[i * d.w + j];
    y[t] = s / T(AvgCount(d, include_pad, oi, oj));
  }
}

void AvgPool2dCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.inputs[0].dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.inputs[0].shape(), op.outputs[0].shape());
    const int64_t n = d.planes * d.oh * d.ow;
    if (n == 0) return;
    AvgPoolKernel<<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(op.inputs[0].data<T>(), op.outputs[0].data<T>(), d,
                                                                 op.attrs.Int("count_include_pad", 1) != 0);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
__global__ void AvgPoolGradKernel(const T* dy, T* dx, PoolDims d, bool include_pad) {
  LOOM_GRID_STRIDE(t, d.planes * d.h * d.w) {
    const Covered c = CoveredBy(d, t);
    const T* dyp = dy + c.p * d.oh * d.ow;
    T acc = T(0);
    for (int64_t oi = c.oi0; oi <= c.oi1; ++oi)
      for (int64_t oj = c.oj0; oj <= c.oj1; ++oj) acc += dyp[oi * d.ow + oj] / T(AvgCount(d, include_pad, oi, oj));
    dx[t] = acc;
  }
}

void AvgPool2dGradCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "avg_pool2d_grad", [&](auto tag) {
    using T = decltype(tag);
    const PoolDims d = MakePoolDims(op.attrs, op.outputs[0].shape(), op.inputs[0].shape());
    const int64_t n = d.planes * d.h * d.w;
    if (n == 0) return;
    AvgPoolGradKernel<<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(op.inputs[0].data<T>(), op.outputs[0].data<T>(),
                                                                     d, op.attrs.Int("count_include_pad", 1) != 0);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// x: (N, C, H, W) in layout xl -> y: (N, C), one block per plane, summed in double in the same
// order whatever the layout.
template <typename T>
__global__ void GlobalAvgPoolKernel(const T* x, T* y, int64_t planes, PoolLayout xl) {
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    double acc = 0;
    const T* xp = x + xl.Plane(p);
    const int64_t step = xl.Step();
    for (int64_t i = threadIdx.x; i < xl.hw; i += blockDim.x) acc += double(xp[i * step]);
    acc = BlockSum(acc);
    if (threadIdx.x == 0) y[p] = T(acc / double(xl.hw));
  }
}

void GlobalAvgPoolCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.inputs[0].dtype(), "global_avg_pool", [&](auto tag) {
    using T = decltype(tag);
    const Shape& s = op.inputs[0].shape();
    const int64_t planes = s[0] * s[1], hw = s[2] * s[3];
    if (planes == 0) return;
    GlobalAvgPoolKernel<<<unsigned(std::min<int64_t>(planes, 1 << 20)), hw >= 256 ? 256 : 64, 0, Dev(ctx).stream()>>>(
        op.inputs[0].data<T>(), op.outputs[0].data<T>(), planes, PoolLayoutOf(op, "x_blocked", s[1], hw));
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// dy: (N, C) -> dx: (N, C, H, W) in layout xl, one thread per element in that order
template <typename T>
__global__ void GlobalAvgPoolGradKernel(const T* dy, T* dx, int64_t planes, PoolLayout xl) {
  LOOM_GRID_STRIDE(t, planes * xl.hw) {
    int64_t p, k;
    xl.Split(t, p, k);
    dx[t] = T(dy[p] / T(xl.hw));
  }
}

void GlobalAvgPoolGradCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "global_avg_pool_grad", [&](auto tag) {
    using T = decltype(tag);
    const Shape& s = op.outputs[0].shape();
    const int64_t planes = s[0] * s[1], hw = s[2] * s[3];
    if (planes * hw == 0) return;
    GlobalAvgPoolGradKernel<<<Blocks(planes * hw), kThreads, 0, Dev(ctx).stream()>>>(
        op.inputs[0].data<T>(), op.outputs[0].data<T>(), planes, PoolLayoutOf(op, "dx_blocked", s[1], hw));
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// Note [What a kernel supports]: pooling operands in NHWC on 4-D tensors (max pooling's and
// global average pooling's layout attributes; Note [Activation layouts] in graph/layouts.cc),
// unless LOOM_CUDNN_LAYOUT=nchw.
bool PoolSupportsCuda(const OpRecord& op) {
  if (!AnyBlockedOperand(op)) return true;
  if (!CudaNhwcAllowed()) return false;
  const Tensor& image = op.def == &op_kind::max_pool2d || op.def == &op_kind::global_avg_pool ? op.inputs[0]
                                                                                               : op.outputs[0];
  return image.ndim() == 4;
}

#include "device/cuda/batch_norm_kernels.cuh"

// out = p u + q (+ r v) [+ residual] [then relu]: the same-layout kernel where it applies, else
// the general one.
template <typename T, typename U, typename V>
void LaunchBnApply(const U* u, BnLayout ul, const V* v, BnLayout vl, const T* p, const T* q, const T* r, T* out,
                   BnLayout ol, const BnDims& d, cudaStream_t stream, const T* residual = nullptr,
                   bool relu = false) {
  const int64_t total = d.m * d.c;
  if (BnSameLayout(ul, v != nullptr, vl, ol, total)) {
    BnApplySameLayoutKernel<<<Blocks(total), kThreads, 0, stream>>>(u, v, p, q, r, out, uint32_t(total),
                                                                     uint32_t(d.c), uint32_t(d.s), ol.nhwc, residual,
                                                                     relu);
  } else {
    BnApplyKernel<<<Blocks(total), kThreads, 0, stream>>>(u, ul, v, vl, p, q, r, out, ol, d.n, residual, relu);
  }
}

// The layout the record gives operand `attr` (Note [Activation layouts]).
BnLayout BnLayoutOf(const OpRecord& op, const char* attr, const BnDims& d) {
  return BnLayout{d.c, d.s, op.attrs.Int(attr, 0) != 0};
}

// Workspace for a batch-norm kernel: `partials` doubles and `ts` arrays of c T.
struct BnScratch {
  double* partial;
  char* ts;
};
template <typename T>
BnScratch BnWorkspace(CudaDeviceImpl& dev, const BnDims& d, int64_t partials, int ts) {
  const size_t pb = (size_t(partials) * sizeof(double) + 255) / 256 * 256;
  char* base = static_cast<char*>(dev.Workspace(pb + size_t(ts) * size_t(d.c) * sizeof(T)));
  return BnScratch{reinterpret_cast<double*>(base), base + pb};
}

// x: (N, C, ...), gamma, beta, running_mean, running_var: (C)
//   -> y, batch mean (C), batch invstd (C), running_mean and running_var updated in place
// X: T, or uint16_t for a bfloat16 x with float32 for the rest (Note [Convolution outputs kept
// in bfloat16]).
template <typename T, typename X>
void BatchNormTrainTyped(const OpRecord& op, const KernelContext& ctx) {
  CudaDeviceImpl& dev = Dev(ctx);
  const BnDims d = MakeBnDims(op.inputs[0].shape());
  if (d.c == 0 || d.m == 0) return;
  const BnLayout xl = BnLayoutOf(op, "x_blocked", d), yl = BnLayoutOf(op, "y_blocked", d);
  std::lock_guard<std::mutex> lock(dev.library_mutex());  // the workspace
  const BnScratch w = BnWorkspace<T>(dev, d, 2 * d.c * d.chunks, 2);
  T* scale = reinterpret_cast<T*>(w.ts);
  T* shift = scale + d.c;
  const X* x = static_cast<const X*>(op.inputs[0].raw_data());
  cudaStream_t s = dev.stream();
  BnStatsPartialsKernel<<<Blocks(d.c * d.chunks), kThreads, 0, s>>>(x, xl, d, w.partial);
  BnFinishKernel<<<RowBlocks(d.c), RowThreads(d.chunks), 0, s>>>(
      w.partial, op.inputs[1].data<T>(), op.inputs[2].data<T>(), op.attrs.Float("momentum"), op.attrs.Float("eps"), d,
      op.outputs[1].data<T>(), op.outputs[2].data<T>(), op.outputs[3].data<T>(), op.outputs[4].data<T>(), scale,
      shift);
  // relu = 1 (fuse_bn_relu): y = relu(x scale + shift [+ residual]), the residual in y's layout.
  LaunchBnApply(x, xl, static_cast<const T*>(nullptr), xl, scale, shift, static_cast<const T*>(nullptr),
                op.outputs[0].data<T>(), yl, d, s, op.inputs.size() > 5 ? op.inputs[5].data<T>() : nullptr,
                op.attrs.Int("relu", 0) != 0);
  LOOM_CUDA_CHECK_LAUNCH();
}

// x: (N, C, ...), gamma, beta, mean, invstd: (C) [, residual] -> y (Note [Batch norm applied from
// its saved statistics] in core/ops/norm.cc). X: as BatchNormTrainTyped's.
template <typename T, typename X>
void BatchNormApplyTyped(const OpRecord& op, const KernelContext& ctx) {
  CudaDeviceImpl& dev = Dev(ctx);
  const BnDims d = MakeBnDims(op.inputs[0].shape());
  if (d.c == 0 || d.m == 0) return;
  const BnLayout xl = BnLayoutOf(op, "x_blocked", d), yl = BnLayoutOf(op, "y_blocked", d);
  std::lock_guard<std::mutex> lock(dev.library_mutex());  // the workspace
  const BnScratch w = BnWorkspace<T>(dev, d, 0, 2);
  T* scale = reinterpret_cast<T*>(w.ts);
  T* shift = scale + d.c;
  cudaStream_t s = dev.stream();
  BnApplyCoefficientsKernel<<<Blocks(d.c), kThreads, 0, s>>>(op.inputs[1].data<T>(), op.inputs[2].data<T>(),
                                                             op.inputs[3].data<T>(), op.inputs[4].data<T>(), d.c, scale,
                                                             shift);
  LaunchBnApply(static_cast<const X*>(op.inputs[0].raw_data()), xl, static_cast<const T*>(nullptr), xl, scale, shift,
                static_cast<const T*>(nullptr), op.outputs[0].data<T>(), yl, d, s,
                op.inputs.size() > 5 ? op.inputs[5].data<T>() : nullptr, op.attrs.Int("relu", 0) != 0);
  LOOM_CUDA_CHECK_LAUNCH();
}

void BatchNormApplyCuda(const OpRecord& op, const KernelContext& ctx) {
  if (op.inputs[0].dtype() == DType::kBFloat16) return BatchNormApplyTyped<float, uint16_t>(op, ctx);
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_apply",
                [&](auto tag) { BatchNormApplyTyped<decltype(tag), decltype(tag)>(op, ctx); });
}

void BatchNormTrainCuda(const OpRecord& op, const KernelContext& ctx) {
  if (op.inputs[0].dtype() == DType::kBFloat16) return BatchNormTrainTyped<float, uint16_t>(op, ctx);
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_train",
                [&](auto tag) { BatchNormTrainTyped<decltype(tag), decltype(tag)>(op, ctx); });
}

// x, dy: (N, C, S), gamma, running mean, running var: (C) -> dx, dgamma, dbeta; one block per
// channel, the CPU's formula with the statistics as constants.
template <typename T>
__global__ void BatchNormGradInferKernel(const T* x, const T* gamma, const T* mean_in, const T* var_in, const T* dy,
                                         T* dx, T* dgamma, T* dbeta, int64_t n, int64_t c, int64_t s, double eps) {
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    const double mean = double(mean_in[ch]);
    const double invstd = 1.0 / sqrt(double(var_in[ch]) + eps);
    double sdy = 0, sdyx = 0;
    for (int64_t t = threadIdx.x; t < n * s; t += blockDim.x) {
      const int64_t off = ((t / s) * c + ch) * s + t % s;
      sdy += double(dy[off]);
      sdyx += double(dy[off]) * (double(x[off]) - mean);
    }
    sdy = BlockSum(sdy);
    sdyx = BlockSum(sdyx) * invstd;
    if (threadIdx.x == 0) {
      dgamma[ch] = T(sdyx);
      dbeta[ch] = T(sdy);
    }
    const T a = T(double(gamma[ch]) * invstd), k_x = T(0), b = T(0);
    for (int64_t t = threadIdx.x; t < n * s; t += blockDim.x) {
      const int64_t off = ((t / s) * c + ch) * s + t % s;
      dx[off] = a * dy[off] + k_x * x[off] + b;
    }
  }
}

// x: (N, C, ...), gamma: (C), running mean, running var: (C), dy -> dx, dgamma, dbeta
void BatchNormGradInference(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_grad", [&](auto tag) {
    using T = decltype(tag);
    const ChannelDims d = MakeChannelDims(op.inputs[0].shape());
    if (d.c == 0) return;
    BatchNormGradInferKernel<<<RowBlocks(d.c), RowThreads(d.n * d.s), 0, Dev(ctx).stream()>>>(
        op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.inputs[2].data<T>(), op.inputs[3].data<T>(),
        op.inputs[4].data<T>(), op.outputs[0].data<T>(), op.outputs[1].data<T>(), op.outputs[2].data<T>(), d.n, d.c,
        d.s, op.attrs.Float("eps"));
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// x: (N, C, ...), gamma: (C), mean: (C), invstd (training) or running var: (C), dy
//   -> dx, dgamma, dbeta. X: as BatchNormTrainTyped's.
template <typename T, typename X>
void BatchNormGradTyped(const OpRecord& op, const KernelContext& ctx) {
  CudaDeviceImpl& dev = Dev(ctx);
  const BnDims d = MakeBnDims(op.inputs[0].shape());
  if (d.c == 0) return;
  const Tensor &dgamma = op.outputs[1], &dbeta = op.outputs[2];
  cudaStream_t s = dev.stream();
  if (d.m == 0) {  // no values: zero sums
    LOOM_CUDA_CHECK(cudaMemsetAsync(dgamma.raw_data(), 0, dgamma.nbytes(), s));
    LOOM_CUDA_CHECK(cudaMemsetAsync(dbeta.raw_data(), 0, dbeta.nbytes(), s));
    return;
  }
  const BnLayout xl = BnLayoutOf(op, "x_blocked", d), gl = BnLayoutOf(op, "dy_blocked", d),
                 dl = BnLayoutOf(op, "dx_blocked", d);
  std::lock_guard<std::mutex> lock(dev.library_mutex());  // the workspace
  const BnScratch w = BnWorkspace<T>(dev, d, 2 * d.c * d.chunks, 3);
  T* a = reinterpret_cast<T*>(w.ts);
  T* k_x = a + d.c;
  T* b = k_x + d.c;
  const X* x = static_cast<const X*>(op.inputs[0].raw_data());
  const T* dy = op.inputs[4].data<T>();
  BnGradPartialsKernel<<<Blocks(d.c * d.chunks), kThreads, 0, s>>>(x, xl, dy, gl, op.inputs[2].data<T>(), d,
                                                                   w.partial);
  BnGradFinishKernel<<<RowBlocks(d.c), RowThreads(d.chunks), 0, s>>>(
      w.partial, op.inputs[1].data<T>(), op.inputs[2].data<T>(), op.inputs[3].data<T>(), d, dgamma.data<T>(),
      dbeta.data<T>(), a, k_x, b);
  LaunchBnApply(dy, gl, x, xl, a, b, k_x, op.outputs[0].data<T>(), dl, d, s);
  LOOM_CUDA_CHECK_LAUNCH();
}

void BatchNormGradCuda(const OpRecord& op, const KernelContext& ctx) {
  if (op.attrs.Int("training") == 0) return BatchNormGradInference(op, ctx);
  if (op.inputs[0].dtype() == DType::kBFloat16) return BatchNormGradTyped<float, uint16_t>(op, ctx);
  FloatDispatch(op.inputs[0].dtype(), "batch_norm_grad",
                [&](auto tag) { BatchNormGradTyped<decltype(tag), decltype(tag)>(op, ctx); });
}

// Note [What a kernel supports]: the layout attributes on 4-D operands (training batch norm and
// its training gradient; the inference-mode gradient is NCHW only), unless LOOM_CUDNN_LAYOUT=nchw;
// a bfloat16 x with float32 for the rest in training; batch_norm_train's relu = 1 and residual
// (fuse_bn_relu) with any of these.
bool BatchNormSupportsCuda(const OpRecord& op) {
  // A bfloat16 x: training only, float32 for the rest (Note [Convolution outputs kept in bfloat16]).
  const bool training = op.def != &op_kind::batch_norm_grad || op.attrs.Int("training") != 0;
  if (op.inputs[0].dtype() == DType::kBFloat16 && (!training || op.inputs[1].dtype() != DType::kFloat32))
    return false;
  if (!AnyBlockedOperand(op)) return true;
  if (!CudaNhwcAllowed() || op.inputs[0].ndim() != 4) return false;
  return training;
}

}  // namespace

LOOM_KERNEL(batch_norm_train, kCUDA, BatchNormTrainCuda);
LOOM_KERNEL_SUPPORTS(batch_norm_train, kCUDA, BatchNormSupportsCuda);
LOOM_KERNEL(batch_norm_apply, kCUDA, BatchNormApplyCuda);
LOOM_KERNEL_SUPPORTS(batch_norm_apply, kCUDA, BatchNormSupportsCuda);
LOOM_KERNEL(batch_norm_grad, kCUDA, BatchNormGradCuda);
LOOM_KERNEL_SUPPORTS(batch_norm_grad, kCUDA, BatchNormSupportsCuda);
LOOM_KERNEL(max_pool2d, kCUDA, MaxPool2dCuda);
LOOM_KERNEL_SUPPORTS(max_pool2d, kCUDA, PoolSupportsCuda);
LOOM_KERNEL(max_pool2d_grad, kCUDA, MaxPool2dGradCuda);
LOOM_KERNEL_SUPPORTS(max_pool2d_grad, kCUDA, PoolSupportsCuda);
LOOM_KERNEL(avg_pool2d, kCUDA, AvgPool2dCuda);
LOOM_KERNEL(avg_pool2d_grad, kCUDA, AvgPool2dGradCuda);
LOOM_KERNEL(global_avg_pool, kCUDA, GlobalAvgPoolCuda);
LOOM_KERNEL_SUPPORTS(global_avg_pool, kCUDA, PoolSupportsCuda);
LOOM_KERNEL(global_avg_pool_grad, kCUDA, GlobalAvgPoolGradCuda);
LOOM_KERNEL_SUPPORTS(global_avg_pool_grad, kCUDA, PoolSupportsCuda);

}  // namespace cuda
}  // namespace loom
