// CPU kernels of the fused dense layer (Note [Dense, bias, activation] in
// core/ops/dense_bias_act.cc): the GEMM the matmul op would make, then one epilogue pass; and
// the activation's backward with the bias gradient in one pass.
//
// Why the epilogue follows the whole GEMM rather than each tile of it: the result must be the
// matmul op's bit for bit, and Gemm (blas.h) picks its kernel and its threading from the whole
// shape (Note [Skinny GEMM]), so a GEMM cut into row tiles is not promised the same sums. At the
// sizes where the step is bound by per-op overhead (a few rows) C is in L1/L2 when the epilogue
// reads it, which is what tiling would buy.
#include <algorithm>
#include <type_traits>

#include "core/bias_act_formulas.h"
#include "device/cpu/blas.h"
#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {
namespace {

// x: (..., K), w: (K, N), b: (N) -> y: (..., N) = act(x w + b)
void DenseBiasActCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "dense_bias_act", [&](auto tag) {
    using T = decltype(tag);
    const BiasAct act = BiasAct(op.attrs.Int("act", 0));
    const int64_t k = op.inputs[1].shape()[0], n = op.inputs[1].shape()[1];
    const T* x = op.inputs[0].data<T>();
    const T* w = op.inputs[1].data<T>();
    const T* b = op.inputs[2].data<T>();
    T* y = op.outputs[0].data<T>();
    if (n == 0 || op.outputs[0].numel() == 0) return;
    const int64_t rows = op.outputs[0].numel() / n;
    // The call the matmul kernel makes for a 2-D rhs (rows of one GEMM: cpu/kernels/linalg.cc).
    if (k == 0) std::fill(y, y + rows * n, T(0));
    else Gemm(false, false, rows, n, k, T(1), x, k, w, n, T(0), y, n);
    WithAct(act, [&](auto a) {
      ParallelFor(rows, std::max<int64_t>(1, kGrain / n), [=](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          T* yr = y + r * n;
          for (int64_t j = 0; j < n; ++j) yr[j] = ew::ApplyAct(decltype(a)::value, yr[j] + b[j]);
        }
      });
    });
  });
}

// channels = 1: y, dy: (N, C, S...) -> dz, db: (C). Split by channel, each summed in double, per
// image then over the images: conv2d_grad_bias's order (cpu/kernels/conv.cc), so db is bitwise
// what it makes from the stored dz.
template <typename T, typename Y>
void ChannelsFirst(BiasAct act, const Shape& s, Y y, const T* dy, T* dz, T* db) {
  const int64_t n = s[0], c = s[1], hw = NumElements(s) / std::max<int64_t>(n * c, 1);
  WithAct(act, [&](auto a) {
    ParallelFor(c, std::max<int64_t>(1, kGrain / std::max<int64_t>(n * hw, 1)), [=](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        double acc = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t at = (i * c + ch) * hw;
          double part = 0;
          for (int64_t k = 0; k < hw; ++k) {
            const T v = ew::ActGradFromOutput(decltype(a)::value, T(y[at + k]), dy[at + k]);
            dz[at + k] = v;
            part += double(v);
          }
          acc += part;
        }
        db[ch] = T(acc);
      }
    });
  });
}

// y, dy: (R, N) (leading dimensions flattened) -> dz: (R, N), db: (N) = sum over R of dz; y
// float32 or a 16-bit copy of it with dy float32 (WithSavedOutput, core/bias_act_formulas.h).
// Split by columns, each summed in row order: bias_grad's order (cpu/kernels/linalg.cc), so db is
// bitwise what bias_grad makes from the stored dz. dz may share y's or dy's memory (Note [In-place
// reuse]): element k of both is read before dz's element k is written.
void BiasActGradCpu(const OpRecord& op, const KernelContext&) {
  FloatDispatch(op.outputs[0].dtype(), "bias_act_grad", [&](auto tag) {
    using T = decltype(tag);
    const BiasAct act = BiasAct(op.attrs.Int("act", 0));
    const T* dy = op.inputs[1].data<T>();
    T* dz = op.outputs[0].data<T>();
    T* db = op.outputs[1].data<T>();
    const int64_t n = op.outputs[1].numel();
    if (n == 0) return;
    WithSavedOutput<T>(op.inputs[0].dtype(), op.inputs[0].raw_data(), [&](auto y) {
      if (op.attrs.Int("channels", 0)) return ChannelsFirst<T>(act, op.inputs[0].shape(), y, dy, dz, db);
      const int64_t rows = op.outputs[0].numel() / n;
      WithAct(act, [&](auto a) {
        ParallelFor(n, std::max<int64_t>(1, kGrain / std::max<int64_t>(rows, 1)), [=](int64_t c0, int64_t c1) {
          std::fill(db + c0, db + c1, T(0));
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t at = r * n;
            for (int64_t j = c0; j < c1; ++j) {
              const T v = ew::ActGradFromOutput(decltype(a)::value, T(y[at + j]), dy[at + j]);
              dz[at + j] = v;
              db[j] += v;
            }
          }
        });
      });
    });
  });
}

}  // namespace

LOOM_KERNEL(dense_bias_act, kCPU, DenseBiasActCpu);
LOOM_KERNEL(bias_act_grad, kCPU, BiasActGradCpu);

}  // namespace cpu
}  // namespace loom
