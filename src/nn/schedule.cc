#include "nn/schedule.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/op.h"

LOOM_OP_KIND(lr_schedule);

namespace loom {
namespace nn {

namespace {

void CheckRate(const char* name, const char* what, double v) {
  LOOM_CHECK(std::isfinite(v) && v >= 0, ValueError, "[schedule ", name, "] ", what, " ", v,
             ": must be a finite number >= 0");
}
void CheckGamma(const char* name, double gamma) {
  LOOM_CHECK(std::isfinite(gamma) && gamma > 0, ValueError, "[schedule ", name, "] gamma ", gamma,
             ": must be a finite number > 0");
}
void CheckSteps(const char* name, const char* what, int64_t steps, int64_t least) {
  LOOM_CHECK(steps >= least, ValueError, "[schedule ", name, "] ", what, " ", steps, ": must be >= ", least);
}
// Milestones strictly increasing and >= 1 (a milestone at 0 would hide what comes before it).
void CheckMilestones(const char* name, const std::vector<int64_t>& ms) {
  for (size_t i = 0; i < ms.size(); ++i) {
    LOOM_CHECK(ms[i] >= 1, ValueError, "[schedule ", name, "] milestone ", ms[i], ": must be >= 1");
    LOOM_CHECK(i == 0 || ms[i] > ms[i - 1], ValueError, "[schedule ", name, "] milestones must increase: ", ms[i],
               " after ", ms[i - 1]);
  }
}

}  // namespace

Schedule::Schedule() {
  std::memset(&spec_, 0, sizeof spec_);
  spec_.num_segments = 1;
}

Schedule Schedule::Of(const sched::Segment& segment) {
  Schedule s;
  s.spec_.seg[0] = segment;
  return s;
}

Schedule Schedule::Constant(double value) {
  CheckRate("constant", "value", value);
  return Of({sched::kConstant, 0, 0, 0, value, 0, 1, 0, 0});
}

Schedule Schedule::Step(double base, int64_t step_size, double gamma) {
  CheckRate("step", "base", base);
  CheckSteps("step", "step_size", step_size, 1);
  CheckGamma("step", gamma);
  return Of({sched::kExponential, 1, 0, step_size, base, 0, gamma, 0, 0});
}

Schedule Schedule::MultiStep(double base, const std::vector<int64_t>& milestones, double gamma) {
  CheckRate("multistep", "base", base);
  CheckGamma("multistep", gamma);
  CheckMilestones("multistep", milestones);
  LOOM_CHECK(milestones.size() <= size_t(sched::kMaxMilestones), ValueError, "[schedule multistep] ",
             milestones.size(), " milestones; at most ", sched::kMaxMilestones, " are supported");
  Schedule s;
  s.spec_.seg[0] = {sched::kMultiStep, 0, 0, 0, base, 0, gamma, 0, int32_t(milestones.size())};
  s.spec_.num_milestones = int32_t(milestones.size());
  for (size_t i = 0; i < milestones.size(); ++i) s.spec_.milestones[i] = milestones[i];
  return s;
}

Schedule Schedule::Exponential(double base, double gamma, int64_t decay_steps, bool staircase) {
  CheckRate("exponential", "base", base);
  CheckGamma("exponential", gamma);
  CheckSteps("exponential", "decay_steps", decay_steps, 1);
  return Of({sched::kExponential, int32_t(staircase), 0, decay_steps, base, 0, gamma, 0, 0});
}

Schedule Schedule::Cosine(double base, int64_t total_steps, double min_value) {
  CheckRate("cosine", "base", base);
  CheckRate("cosine", "min_value", min_value);
  CheckSteps("cosine", "total_steps", total_steps, 1);
  return Of({sched::kCosine, 0, 0, total_steps, base, min_value, 1, 0, 0});
}

Schedule Schedule::Linear(double start, double end, int64_t steps) {
  CheckRate("linear", "start", start);
  CheckRate("linear", "end", end);
  CheckSteps("linear", "steps", steps, 0);
  return Of({sched::kLinear, 0, 0, steps, start, end, 1, 0, 0});
}

Schedule Schedule::LinearWarmup(double target, int64_t warmup_steps, double start_value) {
  CheckRate("linear warm-up", "target", target);
  CheckRate("linear warm-up", "start_value", start_value);
  CheckSteps("linear warm-up", "warmup_steps", warmup_steps, 0);
  return Linear(start_value, target, warmup_steps);
}

// Note [Schedules on the device]: a composition is flattened into one segment list. Part i
// covers [start_i, start_{i+1}); its own segments move by start_i, and those that would begin at
// or after start_{i+1} are never reached and are dropped. Multistep milestones are relative to
// their segment's start, so they move with it unchanged.
Schedule Schedule::Sequential(const std::vector<Schedule>& parts, const std::vector<int64_t>& milestones) {
  LOOM_CHECK(!parts.empty(), ValueError, "[schedule sequential] needs at least one schedule");
  LOOM_CHECK(milestones.size() + 1 == parts.size(), ValueError, "[schedule sequential] ", parts.size(),
             " schedules need ", parts.size() - 1, " milestones, got ", milestones.size());
  CheckMilestones("sequential", milestones);
  Schedule s;
  sched::Spec& out = s.spec_;
  out.num_segments = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t start = i == 0 ? 0 : milestones[i - 1];
    const int64_t end = i < milestones.size() ? milestones[i] : INT64_MAX;
    const sched::Spec& in = parts[i].spec_;
    for (int k = 0; k < in.num_segments; ++k) {
      sched::Segment g = in.seg[k];
      if (g.start >= end - start) break;
      LOOM_CHECK(out.num_segments < sched::kMaxSegments, ValueError, "[schedule sequential] more than ",
                 sched::kMaxSegments, " pieces in all; at most ", sched::kMaxSegments, " are supported");
      const int32_t own = g.m_end - g.m_begin;
      LOOM_CHECK(out.num_milestones + own <= sched::kMaxMilestones, ValueError, "[schedule sequential] more than ",
                 sched::kMaxMilestones, " multistep milestones in all");
      for (int32_t m = 0; m < own; ++m) out.milestones[out.num_milestones + m] = in.milestones[g.m_begin + m];
      g.m_begin = out.num_milestones;
      g.m_end = out.num_milestones + own;
      out.num_milestones += own;
      g.start += start;
      out.seg[out.num_segments++] = g;
    }
  }
  return s;
}

double Schedule::ValueAt(int64_t step) const {
  LOOM_CHECK(step >= 0, ValueError, "[schedule] step ", step, " is negative");
  return sched::ScheduleValue(spec_, double(step));
}

Tensor Schedule::Eval(const Tensor& step) const { return Call1(op_kind::lr_schedule, {step}, ToAttrs()); }

void Schedule::EvalInto(const Tensor& step, const Tensor& lr) const {
  CallInto(op_kind::lr_schedule, {step}, {lr}, ToAttrs());
}

std::string Schedule::ToString() const {
  std::ostringstream o;
  for (int i = 0; i < spec_.num_segments; ++i) {
    const sched::Segment& g = spec_.seg[i];
    if (i) o << " | from step " << g.start << ": ";
    o << sched::KindName(g.kind) << "(";
    switch (g.kind) {
      case sched::kConstant: o << g.v0; break;
      case sched::kExponential:
        o << "base=" << g.v0 << ", gamma=" << g.gamma << ", every=" << g.period << (g.staircase ? ", staircase" : "");
        break;
      case sched::kMultiStep:
        o << "base=" << g.v0 << ", gamma=" << g.gamma << ", milestones=[";
        for (int32_t m = g.m_begin; m < g.m_end; ++m) o << (m > g.m_begin ? ", " : "") << spec_.milestones[m];
        o << "]";
        break;
      case sched::kCosine: o << "base=" << g.v0 << ", steps=" << g.period << ", min=" << g.v1; break;
      case sched::kLinear: o << g.v0 << " -> " << g.v1 << " over " << g.period << " steps"; break;
    }
    o << ")";
  }
  return o.str();
}

}  // namespace nn
}  // namespace loom
