// CPU kernels of dynamic loss scaling (core/ops/loss_scale.cc, Note [Loss scaling] in
// nn/loss_scale.h).
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "device/cpu/kernels/common.h"
#include "device/optimizer_formulas.h"

namespace loom {
namespace cpu {
namespace {

// g[0, n) *= inv; whether any product is NaN or infinite (its exponent bits all set). One pass,
// vectorised: the check is an integer OR over the products' bits as they are written.
template <typename T>
bool UnscaleRange(T* __restrict g, int64_t n, T inv) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  constexpr U kExp = sizeof(T) == 4 ? U(0x7f800000u) : U(0x7ff0000000000000ull);
  U bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T x = g[i] * inv;
    g[i] = x;
    U u;
    std::memcpy(&u, &x, sizeof u);
    bad |= U((u & kExp) == kExp);
  }
  return bad != 0;
}

// g_1 ... g_n (any shapes), scale: () float32, found_inf: () float32 -> g_1 ... g_n in place,
// found_inf = 1 when any unscaled element is not finite, else 0. The flag is an OR over chunks,
// so it does not depend on how the pool split the work.
void UnscaleGradsCpu(const OpRecord& op, const KernelContext&) {
  const size_t n = op.inputs.size() - 2;
  const float inv = float(1.0 / double(*op.inputs[n].data<float>()));
  std::atomic<bool> found{false};
  for (size_t k = 0; k < n; ++k) {
    const Tensor& g = op.outputs[k];
    FloatDispatch(g.dtype(), "unscale_grads", [&](auto tag) {
      using T = decltype(tag);
      T* p = g.data<T>();
      ParallelFor(g.numel(), kGrain, [&](int64_t b, int64_t e) {
        if (UnscaleRange<T>(p + b, e - b, T(inv))) found.store(true, std::memory_order_relaxed);
      });
    });
  }
  *op.outputs[n].data<float>() = found.load() ? 1.0f : 0.0f;
}

// scale: () float32, good, skipped: () float64, found_inf: () float32 -> scale, good, skipped
void UpdateLossScaleCpu(const OpRecord& op, const KernelContext&) {
  optim::NextLossScale(op.outputs[0].data<float>(), op.outputs[1].data<double>(), op.outputs[2].data<double>(),
                       *op.inputs[3].data<float>() != 0, float(op.attrs.Float("growth")),
                       float(op.attrs.Float("backoff")), double(op.attrs.Int("interval")));
}

}  // namespace

LOOM_KERNEL(unscale_grads, kCPU, UnscaleGradsCpu);
LOOM_KERNEL(update_loss_scale, kCPU, UpdateLossScaleCpu);

}  // namespace cpu
}  // namespace loom
