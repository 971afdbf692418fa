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

#include "device/cuda/column_sums.cuh"
#include "device/cuda/bias_act_kernels.cuh"

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
      const ColumnLaunch cl = ColumnLaunchOf(ReduceDims{1, r, n});
      const unsigned cols = cl.cols;
      const ColumnSlabs sl = cl.slabs;
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
