// CPU kernels of the schedule and clipping ops (core/ops/schedule.cc).
#include <cmath>

#include "device/cpu/kernels/common.h"
#include "core/schedule_formula.h"

namespace loom {
namespace cpu {
namespace {

// step: () float64 -> lr: () float64 (Note [Schedules on the device])
void LrScheduleCpu(const OpRecord& op, const KernelContext&) {
  const sched::Spec spec = sched::FromAttrs(op.attrs);
  *op.outputs[0].data<double>() = sched::ScheduleValue(spec, *op.inputs[0].data<double>());
}

// Sum of squares of g[0, n) in double: eight running sums (one add chain each would wait on
// the previous add's latency; eight lanes vectorise), combined in a fixed order.
template <typename T>
double SumSquares(const T* __restrict g, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += double(g[i + k]) * double(g[i + k]);
  for (; i < n; ++i) acc[0] += double(g[i]) * double(g[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// g_1 ... g_k: any shapes -> norm: () float64. Partial sums over fixed chunks of kGrain elements,
// added in chunk order: the same result for any number of threads.
void GradNormCpu(const OpRecord& op, const KernelContext&) {
  double total = 0;
  for (const Tensor& t : op.inputs) {
    const int64_t n = t.numel(), chunks = (n + kGrain - 1) / kGrain;
    std::vector<double> part(size_t(chunks), 0.0);
    FloatDispatch(t.dtype(), "grad_norm", [&](auto tag) {
      using T = decltype(tag);
      const T* g = t.data<T>();
      ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) part[size_t(c)] = SumSquares(g + c * kGrain, std::min(kGrain, n - c * kGrain));
      });
    });
    for (double p : part) total += p;
  }
  *op.outputs[0].data<double>() = std::sqrt(total);
}

}  // namespace

LOOM_KERNEL(lr_schedule, kCPU, LrScheduleCpu);
LOOM_KERNEL(grad_norm, kCPU, GradNormCpu);

}  // namespace cpu
}  // namespace loom
