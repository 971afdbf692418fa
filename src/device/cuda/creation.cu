// CUDA kernels for creation and data movement: fill, the Philox random fills, strided copy,
// cast (float16/bfloat16 included), and the shape ops that copy (concat, slice, slice_grad,
// broadcast_to). Semantics follow src/device/cpu/kernels/{creation,shape}.cc; the random fills
// draw exactly the CPU's numbers (Note [Philox stream] below).
#include <cmath>
#include <cstring>

#include "device/cuda/cast.h"
#include "device/cuda/common.cuh"
#include "device/philox.h"

namespace loom {
namespace cuda {

// ---------------------------------------------------------------- host helpers (common.cuh)

Indexer MakeIndexer(const Shape& shape, const std::vector<std::vector<int64_t>>& strides, const char* op) {
  LOOM_ASSERT(strides.size() <= size_t(kMaxOperands), "indexer with ", strides.size(), " operands");
  // Unit dimensions contribute nothing; then a dimension merges into the next one (inner) when
  // every operand steps over it as over one longer dimension.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> st(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    dims.push_back(shape[d]);
    for (size_t k = 0; k < strides.size(); ++k) st[k].push_back(strides[k][d]);
  }
  std::vector<int64_t> mdims;
  std::vector<std::vector<int64_t>> mst(strides.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    bool merge = !mdims.empty();
    for (size_t k = 0; merge && k < st.size(); ++k) merge = mst[k].back() == st[k][d] * dims[d];
    if (merge) {
      mdims.back() *= dims[d];
      for (size_t k = 0; k < st.size(); ++k) mst[k].back() = st[k][d];
    } else {
      mdims.push_back(dims[d]);
      for (size_t k = 0; k < st.size(); ++k) mst[k].push_back(st[k][d]);
    }
  }
  LOOM_CHECK(mdims.size() <= size_t(kMaxDims), ShapeError, "[", op, "] the CUDA kernel handles up to ", kMaxDims,
             " dimensions that cannot be merged, got ", mdims.size(), " for output ", ToString(shape));
  Indexer ix;
  ix.rank = int(mdims.size());
  for (int d = 0; d < ix.rank; ++d) {
    ix.shape[d] = mdims[size_t(d)];
    for (size_t k = 0; k < mst.size(); ++k) ix.strides[k][d] = mst[k][size_t(d)];
  }
  return ix;
}

__global__ void SetU64x2Kernel(uint64_t* p, uint64_t first, uint64_t second) {
  p[0] = first;
  p[1] = second;
}

void LaunchSetU64x2(uint64_t* p, uint64_t first, uint64_t second, cudaStream_t stream) {
  SetU64x2Kernel<<<1, 1, 0, stream>>>(p, first, second);
  LOOM_CUDA_CHECK_LAUNCH();
}

namespace {

// ---------------------------------------------------------------- fill

template <typename W>
__global__ void FillKernel(W* y, int64_t n, W v) {
  LOOM_GRID_STRIDE(i, n) y[i] = v;
}

// () -> y: any shape, any dtype: one element's bytes (FillBits, shared with the CPU) repeated
void FillCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& y = op.outputs[0];
  const uint64_t w = FillBits(y.dtype(), op.attrs.Float("value"));
  const int64_t n = y.numel();
  if (n == 0) return;
  cudaStream_t s = Dev(ctx).stream();
  auto launch = [&](auto word) {
    using W = decltype(word);
    FillKernel<<<Blocks(n), kThreads, 0, s>>>(static_cast<W*>(y.raw_data()), n, word);
  };
  switch (SizeOf(y.dtype())) {
    case 1: launch(uint8_t(w)); break;
    case 2: launch(uint16_t(w)); break;
    case 4: launch(uint32_t(w)); break;
    default: launch(w); break;
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

// The shape tensor must still hold the recorded shape (Note [ConstantOfShape in a graph]). The
// recorded dims go to the kernel by value, so that a captured CUDA graph keeps them; one thread
// compares the R entries.
struct Dims {
  int64_t v[8];
};
template <typename I>
__global__ void CheckDimsKernel(const I* v, Dims dims, int64_t r, KernelError* err) {
  for (int64_t d = 0; d < r; ++d)
    if ((long long)v[d] != (long long)dims.v[d]) {
      RaiseKernelError(err, kShapeMismatch, kOpConstantOfShape, d, (long long)v[d], (long long)dims.v[d]);
      return;
    }
}

// shape: int32/int64 (R) -> y: attrs.shape, every element attrs.value
void ConstantOfShapeCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& shape = op.inputs[0];
  const std::vector<int64_t>& dims = op.attrs.Ints("shape");
  CudaDeviceImpl& dev = Dev(ctx);
  LOOM_CHECK(dims.size() <= 8, ShapeError, "[constant_of_shape] rank ", dims.size(), " is above the 8 supported");
  Dims d{};
  for (size_t i = 0; i < dims.size(); ++i) d.v[i] = dims[i];
  if (!dims.empty())
    IndexDispatch(shape.dtype(), "constant_of_shape", [&](auto itag) {
      using I = decltype(itag);
      CheckDimsKernel<I><<<1, 1, 0, dev.stream()>>>(shape.data<I>(), d, int64_t(dims.size()), dev.kernel_error());
      LOOM_CUDA_CHECK_LAUNCH();
    });
  FillCuda(op, ctx);
}

// ---------------------------------------------------------------- random fills
// Note [Philox stream]
// Element i uses word i % 4 of Philox4x32(seed, base + offset + i / 4), as on the CPU: one
// thread per counter. seed and base are the run's (KernelContext::rng_seed and rng_base, or the
// device-resident rng_base_device = {base, seed} while a device graph is recorded), offset the
// op's OpRecord::rng_offset.
// The words become values with the CPU's double arithmetic. One difference can remain in the
// last bit: GCC with -march=native on an FMA host contracts `lo + (hi - lo) * u` into one fused
// multiply-add, which UniformF does explicitly; with low = 0 and high = 1 there is nothing to
// round and uniform fills equal the CPU's bit for bit on any host. Normal fills call the GPU's
// log/sin/cos, within an ulp of the host's.

struct UniformF {
  double lo, span;  // span = high - low
  template <typename T>
  __device__ T operator()(const Philox4& r, int j) const {
    return T(fma(span, double(PhiloxUniformF(r.v[j])), lo));
  }
};
struct NormalF {
  double mean, sd;
  template <typename T>
  __device__ T operator()(const Philox4& r, int j) const {
    int pair = j & ~1;
    double u1 = (double(r.v[pair] >> 8) + 1.0) * (1.0 / 16777217.0);  // (0, 1]
    double u2 = double(r.v[pair + 1] >> 8) * (1.0 / 16777216.0);
    double rad = sqrt(-2.0 * log(u1));
    double z = (j & 1) ? rad * sin(2 * M_PI * u2) : rad * cos(2 * M_PI * u2);
    return T(fma(sd, z, mean));
  }
};
struct BernoulliF {
  double p;
  template <typename T>
  __device__ T operator()(const Philox4& r, int j) const {
    return T(double(PhiloxUniformF(r.v[j])) < p ? 1 : 0);
  }
};

template <typename T, typename F>
__global__ void RandomKernel(T* y, int64_t n, uint64_t seed, const uint64_t* base_dev, uint64_t base,
                             uint64_t offset, F f) {
  const uint64_t b = (base_dev ? base_dev[0] : base) + offset;
  const uint64_t s = base_dev ? base_dev[1] : seed;
  LOOM_GRID_STRIDE(g, (n + 3) / 4) {
    Philox4 r = Philox4x32(s, b + uint64_t(g));
    for (int j = 0; j < 4 && g * 4 + j < n; ++j) y[g * 4 + j] = f.template operator()<T>(r, j);
  }
}

template <typename T, typename F>
void RandomFill(const OpRecord& op, const KernelContext& ctx, F f) {
  const int64_t n = op.outputs[0].numel();
  if (n == 0) return;
  RandomKernel<T><<<Blocks((n + 3) / 4), kThreads, 0, Dev(ctx).stream()>>>(
      op.outputs[0].data<T>(), n, ctx.rng_seed, ctx.rng_base_device, ctx.rng_base, op.rng_offset, f);
  LOOM_CUDA_CHECK_LAUNCH();
}

// () -> y: float, uniform in [low, high)
void UniformCuda(const OpRecord& op, const KernelContext& ctx) {
  const double lo = op.attrs.Float("low"), hi = op.attrs.Float("high");
  FloatDispatch(op.outputs[0].dtype(), "uniform",
                [&](auto t) { RandomFill<decltype(t)>(op, ctx, UniformF{lo, hi - lo}); });
}

// () -> y: float, normal(mean, std) by Box-Muller on word pairs
void NormalCuda(const OpRecord& op, const KernelContext& ctx) {
  const double mean = op.attrs.Float("mean"), sd = op.attrs.Float("std");
  FloatDispatch(op.outputs[0].dtype(), "normal", [&](auto t) { RandomFill<decltype(t)>(op, ctx, NormalF{mean, sd}); });
}

// () -> y: float or uint8, 1 with probability p
void BernoulliCuda(const OpRecord& op, const KernelContext& ctx) {
  const double p = op.attrs.Float("p");
  DType dt = op.outputs[0].dtype();
  if (dt == DType::kUInt8 || dt == DType::kBool) return RandomFill<uint8_t>(op, ctx, BernoulliF{p});
  FloatDispatch(dt, "bernoulli", [&](auto t) { RandomFill<decltype(t)>(op, ctx, BernoulliF{p}); });
}

// ---------------------------------------------------------------- copy, cast

template <typename W>
__global__ void StridedCopyKernel(const W* x, W* y, int64_t n, Indexer ix) {
  LOOM_GRID_STRIDE(i, n) {
    int64_t off[2];
    Offsets(ix, i, off);
    y[off[1]] = x[off[0]];
  }
}

// x: any strides -> y: any strides, same shape and dtype
void CopyCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& x = op.inputs[0];
  const Tensor& y = op.outputs[0];
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t s = Dev(ctx).stream();
  if (x.is_contiguous() && y.is_contiguous()) {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(y.raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyDeviceToDevice, s));
    return;
  }
  Indexer ix = MakeIndexer(x.shape(), {x.strides(), y.strides()}, "copy");
  WordDispatch(SizeOf(x.dtype()), "copy", [&](auto w) {
    using W = decltype(w);
    StridedCopyKernel<<<Blocks(n), kThreads, 0, s>>>(static_cast<const W*>(x.raw_data()),
                                                      static_cast<W*>(y.raw_data()), n, ix);
  });
  LOOM_CUDA_CHECK_LAUNCH();
}

// Element i of any dtype as double, and double into any dtype: core/dtype.h's conversions.
__device__ __forceinline__ double LoadAs(int t, const void* p, int64_t i) {
  switch (DType(t)) {
    case DType::kFloat32: return static_cast<const float*>(p)[i];
    case DType::kFloat64: return static_cast<const double*>(p)[i];
    case DType::kFloat16: return DevHalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kBFloat16: return DevBFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kInt32: return static_cast<const int32_t*>(p)[i];
    case DType::kInt64: return double(static_cast<const long long*>(p)[i]);
    case DType::kUInt8: return static_cast<const uint8_t*>(p)[i];
    case DType::kBool: return static_cast<const uint8_t*>(p)[i] != 0;
  }
  return 0;
}
__device__ __forceinline__ void StoreAs(int t, void* p, int64_t i, double v) {
  switch (DType(t)) {
    case DType::kFloat32: static_cast<float*>(p)[i] = float(v); return;
    case DType::kFloat64: static_cast<double*>(p)[i] = v; return;
    case DType::kFloat16: static_cast<uint16_t*>(p)[i] = DevCastTo16(v, false); return;
    case DType::kBFloat16: static_cast<uint16_t*>(p)[i] = DevCastTo16(v, true); return;
    case DType::kInt32: static_cast<int32_t*>(p)[i] = int32_t(v); return;
    case DType::kInt64: static_cast<long long*>(p)[i] = (long long)(v); return;
    case DType::kUInt8: static_cast<uint8_t*>(p)[i] = uint8_t(v); return;
    case DType::kBool: static_cast<uint8_t*>(p)[i] = v != 0; return;
  }
}

__global__ void CastKernel(const void* x, int tx, void* y, int ty, int64_t n) {
  LOOM_GRID_STRIDE(i, n) StoreAs(ty, y, i, LoadAs(tx, x, i));
}

// x: (...) any dtype -> y: (...) dtype attr
void CastCuda(const OpRecord& op, const KernelContext& ctx) {
  LaunchCast(op.inputs[0].dtype(), op.inputs[0].raw_data(), op.outputs[0].dtype(), op.outputs[0].raw_data(),
             op.inputs[0].numel(), Dev(ctx).stream());
}

// ---------------------------------------------------------------- shape ops that copy

// Copies `rows` rows of `len` words: dst[r * dst_row + dst_off + j] = src[r * src_row + src_off + j].
template <typename W>
__global__ void BandCopyKernel(const W* src, int64_t src_row, int64_t src_off, W* dst, int64_t dst_row,
                               int64_t dst_off, int64_t rows, int64_t len) {
  LOOM_GRID_STRIDE(i, rows * len) {
    int64_t r = i / len, j = i % len;
    dst[r * dst_row + dst_off + j] = src[r * src_row + src_off + j];
  }
}

template <typename W>
void BandCopy(const void* src, int64_t src_row, int64_t src_off, void* dst, int64_t dst_row, int64_t dst_off,
              int64_t rows, int64_t len, cudaStream_t s) {
  if (rows * len == 0) return;
  BandCopyKernel<<<Blocks(rows * len), kThreads, 0, s>>>(static_cast<const W*>(src), src_row, src_off,
                                                          static_cast<W*>(dst), dst_row, dst_off, rows, len);
  LOOM_CUDA_CHECK_LAUNCH();
}

// xs[k]: (A..., n_k, B...) -> y: (A..., sum n_k, B...), one band copy per input
void ConcatCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& y = op.outputs[0];
  if (y.numel() == 0) return;
  cudaStream_t s = Dev(ctx).stream();
  const int64_t axis = NormalizeAxis(op.attrs.Int("axis"), y.ndim(), "concat");
  const AxisSplit sy = SplitAt(y.shape(), axis, "concat");
  const int64_t yrow = sy.n * sy.inner;
  WordDispatch(SizeOf(y.dtype()), "concat", [&](auto w) {
    using W = decltype(w);
    int64_t off = 0;
    for (const Tensor& x : op.inputs) {
      int64_t row = x.shape()[size_t(axis)] * sy.inner;
      if (row) BandCopy<W>(x.raw_data(), row, 0, y.raw_data(), yrow, off, sy.outer, row, s);
      off += row;
    }
  });
}

// x: (A..., n, B...) -> y: (A..., end - start, B...)
void SliceCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& x = op.inputs[0];
  const Tensor& y = op.outputs[0];
  if (y.numel() == 0) return;
  const SliceRows b = MakeSliceRows(op.attrs, x.shape(), "slice");
  cudaStream_t s = Dev(ctx).stream();
  WordDispatch(SizeOf(x.dtype()), "slice", [&](auto w) {
    BandCopy<decltype(w)>(x.raw_data(), b.full_row, b.head, y.raw_data(), b.slice_row, 0, b.outer, b.slice_row, s);
  });
}

template <typename W>
__global__ void SliceGradKernel(const W* dy, W* dx, int64_t rows, int64_t xrow, int64_t head, int64_t yrow) {
  LOOM_GRID_STRIDE(i, rows * xrow) {
    int64_t r = i / xrow, j = i % xrow - head;
    dx[i] = (j >= 0 && j < yrow) ? dy[r * yrow + j] : W(0);  // all-zero bits are zero in every dtype
  }
}

// dy: (A..., end - start, B...) -> dx: (A..., n, B...), zero outside [start, end)
void SliceGradCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& dy = op.inputs[0];
  const Tensor& dx = op.outputs[0];
  if (dx.numel() == 0) return;
  const SliceRows b = MakeSliceRows(op.attrs, dx.shape(), "slice_grad");
  const void* src = dy.numel() ? dy.raw_data() : nullptr;
  WordDispatch(SizeOf(dx.dtype()), "slice_grad", [&](auto w) {
    using W = decltype(w);
    SliceGradKernel<<<Blocks(dx.numel()), kThreads, 0, Dev(ctx).stream()>>>(
        static_cast<const W*>(src), static_cast<W*>(dx.raw_data()), b.outer, b.full_row, b.head, b.slice_row);
  });
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename W>
__global__ void BroadcastCopyKernel(const W* x, W* y, int64_t n, Indexer ix) {
  LOOM_GRID_STRIDE(i, n) {
    int64_t off[1];
    Offsets(ix, i, off);
    y[i] = x[off[0]];
  }
}

// x: (B...) -> y: (A..., B'...), B broadcast to B' (numpy rules)
void BroadcastToCuda(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& x = op.inputs[0];
  const Tensor& y = op.outputs[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  Indexer ix = MakeIndexer(y.shape(), {BroadcastStrides(x.shape(), y.shape())}, "broadcast_to");
  WordDispatch(SizeOf(x.dtype()), "broadcast_to", [&](auto w) {
    using W = decltype(w);
    BroadcastCopyKernel<<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(static_cast<const W*>(x.raw_data()),
                                                                        static_cast<W*>(y.raw_data()), n, ix);
  });
  LOOM_CUDA_CHECK_LAUNCH();
}

// LaunchRelayout between NCHW and NHWC: a block moves a tile of 32 channels by 32 pixels of one
// image through shared memory, reading and writing along each layout's contiguous axis.
constexpr int kTile = 32, kTileRows = 8;
__global__ void RelayoutKernel(const void* x, int tx, void* y, int ty, int64_t n, int64_t c, int64_t hw,
                               bool to_nhwc) {
  __shared__ double tile[kTile][kTile + 1];
  const int64_t p0 = int64_t(blockIdx.x) * kTile, c0 = int64_t(blockIdx.y) * kTile;
  const int64_t lane = threadIdx.x;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const int64_t nchw = img * c * hw, nhwc = img * hw * c;
    for (int r = threadIdx.y; r < kTile; r += kTileRows) {
      // Loads along the source's contiguous axis: tile[r][lane] = x(channel, pixel) with
      // (channel, pixel) = (c0 + r, p0 + lane) from NCHW, (c0 + lane, p0 + r) from NHWC.
      const int64_t ch = to_nhwc ? c0 + r : c0 + lane, px = to_nhwc ? p0 + lane : p0 + r;
      if (ch < c && px < hw) tile[r][lane] = LoadAs(tx, x, to_nhwc ? nchw + ch * hw + px : nhwc + px * c + ch);
    }
    __syncthreads();
    for (int r = threadIdx.y; r < kTile; r += kTileRows) {
      // Stores along the destination's: (channel, pixel) = (c0 + lane, p0 + r) into NHWC, held
      // at tile[lane][r]; (c0 + r, p0 + lane) into NCHW, held at tile[lane][r] too.
      const int64_t ch = to_nhwc ? c0 + lane : c0 + r, px = to_nhwc ? p0 + r : p0 + lane;
      if (ch < c && px < hw) StoreAs(ty, y, to_nhwc ? nhwc + px * c + ch : nchw + ch * hw + px, tile[lane][r]);
    }
    __syncthreads();
  }
}

}  // namespace

void LaunchCast(DType from, const void* x, DType to, void* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  CastKernel<<<Blocks(n), kThreads, 0, stream>>>(x, int(from), y, int(to), n);
  LOOM_CUDA_CHECK_LAUNCH();
}

void LaunchRelayout(DType from, const void* x, bool x_nhwc, DType to, void* y, bool y_nhwc, int64_t n, int64_t c,
                    int64_t hw, cudaStream_t stream) {
  if (n * c * hw == 0) return;
  if (x_nhwc == y_nhwc || c == 1 || hw == 1) return LaunchCast(from, x, to, y, n * c * hw, stream);
  const dim3 grid(unsigned((hw + kTile - 1) / kTile), unsigned((c + kTile - 1) / kTile),
                  unsigned(std::min<int64_t>(n, 65535)));
  LOOM_CHECK(grid.y <= 65535, ShapeError, "[relayout] ", c, " channels are too many for one launch");
  RelayoutKernel<<<grid, dim3(kTile, kTileRows), 0, stream>>>(x, int(from), y, int(to), n, c, hw, !x_nhwc);
  LOOM_CUDA_CHECK_LAUNCH();
}

LOOM_KERNEL(fill, kCUDA, FillCuda);
LOOM_KERNEL(constant_of_shape, kCUDA, ConstantOfShapeCuda);
LOOM_KERNEL(uniform, kCUDA, UniformCuda);
LOOM_KERNEL(normal, kCUDA, NormalCuda);
LOOM_KERNEL(bernoulli, kCUDA, BernoulliCuda);
LOOM_KERNEL(copy, kCUDA, CopyCuda);
LOOM_KERNEL(cast, kCUDA, CastCuda);
LOOM_KERNEL(concat, kCUDA, ConcatCuda);
LOOM_KERNEL(slice, kCUDA, SliceCuda);
LOOM_KERNEL(slice_grad, kCUDA, SliceGradCuda);
LOOM_KERNEL(broadcast_to, kCUDA, BroadcastToCuda);

}  // namespace cuda
}  // namespace loom
