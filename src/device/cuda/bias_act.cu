// CUDA kernels of the fused dense layer's element-wise parts (Note [Dense, bias, activation] in
// core/ops/dense_bias_act.cc): the epilogue after the GEMM (bias_act.h; the GEMM and cuBLASLt's
// own epilogues are in linalg.cc; conv2d_relu's ReLU, cudnn.cc), and bias_act_grad. Each element is computed with the formulas
// of the ops they replace (core/bias_act_formulas.h); the column sums run in the order of
// bias_grad's kernel (reduce.cu: 32 columns x 8 partial sums per block, in double, by the same
// slabs: Note [Column sums by slabs] in device/kernel_shapes.h), so db is
// bitwise what bias_grad makes from the stored dz. With channels = 1 (a convolution's layout) the
// sums are cuDNN's conv2d_grad_bias's to float32 tolerance.
#include "core/bias_act_formulas.h"
#include "device/cuda/bias_act.h"
#include "device/cuda/common.cuh"

namespace loom {
namespace cuda {
namespace {

constexpr int kColX = 32, kColY = 8;

// I: uint32_t below 2^31 elements (as add_bias's kernel, elementwise.cu).
template <typename I, typename T, BiasAct A>
__global__ void BiasActKernel(const T* b, T* y, I total, I n) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += I(blockDim.x) * gridDim.x)
    y[i] = ew::ApplyAct(A, b ? y[i] + b[i % n] : y[i]);
}

// y, dy, dz: (r, n), db: (n). Block (kColX, kColY): 32 columns of the rows [blockIdx.y * slab,
// ...) (Note [Column sums by slabs]), thread row ty takes every 8th row; the column's sum goes to
// db, or to part[(slab, column)] when there are several slabs.
// Y: y's pointer, or a widening reader of its 16-bit copy (WithSavedOutput, core/bias_act_formulas.h).
template <typename T, typename Y, BiasAct A>
__global__ void BiasActGradKernel(Y y, const T* dy, T* dz, T* db, double* part, int64_t r, int64_t n, int64_t slab) {
  __shared__ double sums[kColY][kColX + 1];
  const int64_t j = int64_t(blockIdx.x) * kColX + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * slab, r1 = Min64(r, r0 + slab);
  double acc = 0;
  if (j < n)
    for (int64_t k0 = r0 + threadIdx.y; k0 < r1; k0 += kColY * kLoadsAhead) {
      T ys[kLoadsAhead], gs[kLoadsAhead];  // loaded together, added in order (kLoadsAhead in common.cuh)
#pragma unroll
      for (int q = 0; q < kLoadsAhead; ++q) {
        const int64_t k = k0 + q * kColY;
        if (k < r1) ys[q] = T(y[k * n + j]), gs[q] = dy[k * n + j];
      }
#pragma unroll
      for (int q = 0; q < kLoadsAhead; ++q) {
        const int64_t k = k0 + q * kColY;
        if (k < r1) {
          const T v = ew::ActGradFromOutput(A, ys[q], gs[q]);
          dz[k * n + j] = v;
          acc += double(v);
        }
      }
    }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    double a = sums[0][threadIdx.x];
    for (int q = 1; q < kColY; ++q) a += sums[q][threadIdx.x];
    if (part)
      part[int64_t(blockIdx.y) * n + j] = a;
    else
      db[j] = T(a);
  }
}

// channels = 1: y, dy, dz: (n, c, s), db: (c). One block per channel (grid-stride over channels);
// its threads stride over (image, position), sum in double, and BlockSum combines them.
template <typename T, typename Y, BiasAct A>
__global__ void ChannelBiasActGradKernel(Y y, const T* dy, T* dz, T* db, int64_t n, int64_t c, int64_t s) {
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double acc = 0;
    for (int64_t q = threadIdx.x; q < n * s; q += blockDim.x) {
      const int64_t at = ((q / s) * c + ch) * s + q % s;
      const T v = ew::ActGradFromOutput(A, T(y[at]), dy[at]);
      dz[at] = v;
      acc += double(v);
    }
    acc = BlockSum(acc);
    if (threadIdx.x == 0) db[ch] = T(acc);
  }
}

// y, dy: (R, N) (leading dimensions flattened) -> dz: (R, N), db: (N); y float32 or a 16-bit copy
// of it with dy float32
void BiasActGradCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "bias_act_grad", [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = op.outputs[1].numel();
    if (n == 0) return;
    WithSavedOutput<T>(op.inputs[0].dtype(), op.inputs[0].raw_data(), [&](auto y) {
      using Y = decltype(y);
      if (op.attrs.Int("channels", 0)) {
        const int64_t images = op.inputs[0].dim(0), s = op.inputs[0].numel() / std::max<int64_t>(images * n, 1);
        WithAct(BiasAct(op.attrs.Int("act", 0)), [&](auto a) {
          ChannelBiasActGradKernel<T, Y, decltype(a)::value><<<RowBlocks(n), RowThreads(images * s), 0,
                                                              Dev(ctx).stream()>>>(
              y, op.inputs[1].data<T>(), op.outputs[0].data<T>(), op.outputs[1].data<T>(), images, n, s);
        });
        return;
      }
      // The slabs of bias_grad's column sums (reduce.cu), so that db is bitwise bias_grad's.
      const int64_t r = op.outputs[0].numel() / n;
      const unsigned cols = unsigned((n + kColX - 1) / kColX);
      const ColumnSlabs sl = ColumnSlabsOf(r, cols);
      CudaDeviceImpl& dev = Dev(ctx);
      std::unique_lock<std::mutex> lock(dev.library_mutex(), std::defer_lock);  // the workspace
      double* part = nullptr;
      if (sl.slabs > 1) {
        lock.lock();
        part = static_cast<double*>(dev.Workspace(size_t(sl.slabs * n) * sizeof(double)));
      }
      T* db = op.outputs[1].data<T>();
      WithAct(BiasAct(op.attrs.Int("act", 0)), [&](auto a) {
        BiasActGradKernel<T, Y, decltype(a)::value><<<dim3(cols, unsigned(sl.slabs)), dim3(kColX, kColY), 0,
                                                      dev.stream()>>>(y, op.inputs[1].data<T>(),
                                                                      op.outputs[0].data<T>(), db, part, r, n, sl.rows);
      });
      if (part) ColumnSlabsTotalKernel<double, T><<<Blocks(n), kThreads, 0, dev.stream()>>>(part, db, sl.slabs, n);
    });
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void LaunchBiasActEpilogue(DType dtype, BiasAct act, const void* b, void* y, int64_t rows, int64_t n,
                           cudaStream_t stream) {
  const int64_t total = rows * n;
  if (total == 0) return;
  FloatDispatch(dtype, "dense_bias_act", [&](auto tag) {
    using T = decltype(tag);
    WithAct(act, [&](auto a) {
      const T* bt = static_cast<const T*>(b);
      T* yt = static_cast<T*>(y);
      if (total < (int64_t(1) << 31))
        BiasActKernel<uint32_t, T, decltype(a)::value>
            <<<Blocks(total), kThreads, 0, stream>>>(bt, yt, uint32_t(total), uint32_t(n));
      else
        BiasActKernel<int64_t, T, decltype(a)::value><<<Blocks(total), kThreads, 0, stream>>>(bt, yt, total, n);
    });
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

LOOM_KERNEL(bias_act_grad, kCUDA, BiasActGradCuda);

}  // namespace cuda
}  // namespace loom
