// CPU kernels of the schedule and clipping ops (core/ops/schedule.cc).
#include <cmath>

#include "device/cpu/kernels/common.h"
#include "device/schedule_formula.h"

namespace loom {
namespace cpu {
namespace {

// step: () float64 -> lr: () float64 (Note [Schedules on the device])
void LrScheduleCpu(const OpRecord& op, const KernelContext&) {
  const sched::Spec spec = sched::FromAttrs(op.attrs);
  *op.outputs[0].data<double>() = sched::ScheduleValue(spec, *op.inputs[0].data<double>());
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
        for (int64_t c = c0; c < c1; ++c) {
          double acc = 0;
          for (int64_t i = c * kGrain, e = std::min(n, i + kGrain); i < e; ++i) acc += double(g[i]) * double(g[i]);
          part[size_t(c)] = acc;
        }
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
