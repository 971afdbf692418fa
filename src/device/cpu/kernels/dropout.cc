// CPU kernels for dropout. The mask follows the random fills' convention (kernels/creation.cc):
// element i keeps its value when word i % 4 of Philox(seed, base + offset + i / 4), as a
// uniform in [0, 1), is below 1 - p. Dropout's mask is therefore bernoulli(1 - p) drawn at the
// same counter, on every backend and whatever the thread split.
#include "device/cpu/kernels/common.h"
#include "device/philox.h"

namespace loom {
namespace cpu {
namespace {

// x: (...) -> y: (...), mask: (...) uint8
void DropoutCpu(const OpRecord& op, const KernelContext& ctx) {
  const double p = op.attrs.Float("p");
  const double keep = 1 - p;  // compared in double, exactly as bernoulli compares with its p
  const int64_t n = op.inputs[0].numel();
  const uint64_t base = ctx.rng_base + op.rng_offset;
  uint8_t* m = op.outputs[1].data<uint8_t>();
  FloatDispatch(op.outputs[0].dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    const T scale = T(1 / (1 - p));
    const T* x = op.inputs[0].data<T>();
    T* y = op.outputs[0].data<T>();
    ParallelFor((n + 3) / 4, kGrain / 4, [&](int64_t b, int64_t e) {
      for (int64_t g = b; g < e; ++g) {
        Philox4 r = Philox4x32(ctx.rng_seed, base + uint64_t(g));
        for (int64_t j = 0; j < 4 && g * 4 + j < n; ++j) {
          int64_t i = g * 4 + j;
          bool k = PhiloxUniformF(r.v[j]) < keep;
          m[i] = uint8_t(k);
          y[i] = k ? x[i] * scale : T(0);
        }
      }
    });
  });
}

// mask: (...) uint8, dy: (...) -> dx: (...) = dy * mask / (1 - p)
void DropoutGradCpu(const OpRecord& op, const KernelContext&) {
  const double p = op.attrs.Float("p");
  const uint8_t* m = op.inputs[0].data<uint8_t>();
  FloatDispatch(op.outputs[0].dtype(), "dropout_grad", [&](auto tag) {
    using T = decltype(tag);
    const T scale = T(1 / (1 - p));
    const T* dy = op.inputs[1].data<T>();
    T* dx = op.outputs[0].data<T>();
    ParallelFor(op.outputs[0].numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dx[i] = m[i] ? dy[i] * scale : T(0);
    });
  });
}

}  // namespace

LOOM_KERNEL(dropout, kCPU, DropoutCpu);
LOOM_KERNEL(dropout_grad, kCPU, DropoutGradCpu);

}  // namespace cpu
}  // namespace loom
