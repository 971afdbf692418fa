// The schedule and clipping ops of the optimizers (nn/schedule.h, nn/clip.h). Both produce a
// float64 device scalar that the update kernels read, so a replayed step recomputes them from
// device state alone (Note [Schedules on the device], Note [Clipping folded into the update]).
#include "core/ops/common.h"
#include "core/schedule_formula.h"

namespace loom {

using namespace opdecl;

namespace {
void CheckStepScalar(const char* op, const TensorMeta& m, const char* what) {
  LOOM_CHECK(m.dtype == DType::kFloat64 && NumElements(m.shape) == 1, DTypeError, "[", op, "] ", what,
             " must be a float64 scalar, got ", Name(m.dtype), " ", ToString(m.shape));
}
}  // namespace

// inputs: step (float64 scalar, steps completed) -> outputs: lr (float64 scalar)
// attrs: the schedule spec (sched::ToAttrs); lr = sched::ScheduleValue(spec, step).
LOOM_OP(lr_schedule) {
  def.internal = "the learning rate of nn::Optimizer::SetSchedule, reached through loom.schedule";
  def.attrs = sched::AttrDecls();
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("lr_schedule", in, 1);
    CheckStepScalar("lr_schedule", in[0], "step counter");
    sched::FromAttrs(a);  // a malformed spec fails here, at capture, not in a replay
    return std::vector<TensorMeta>{{Shape{}, DType::kFloat64}};
  };
}

// inputs: g_1 ... g_n (float32 or float64, any shapes) -> outputs: () float64, the 2-norm of
// all their elements together, sqrt(sum_k sum_i g_k[i]^2), accumulated in double.
LOOM_OP(grad_norm) {
  def.internal = "nn::GlobalGradNorm, the norm of clipping by global norm (nn/clip.h)";
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    LOOM_CHECK(!in.empty(), ValueError, "[grad_norm] needs at least one gradient");
    for (const TensorMeta& m : in) CheckFloat("grad_norm", m, "gradient");
    return std::vector<TensorMeta>{{Shape{}, DType::kFloat64}};
  };
}

}  // namespace loom
