// Learning-rate schedules evaluated on the device (Note [Schedules on the device] in
// core/schedule_formula.h). A Schedule is an immutable value: what the rate is at each step.
// Optimizer::SetSchedule makes the optimizer compute its rate from a device step counter with
// one lr_schedule op per step, inside the step, so a replayed graph follows the schedule with
// no recapture and no host write.
//
//   auto s = nn::Schedule::Sequential({nn::Schedule::LinearWarmup(0.1, 500),
//                                     nn::Schedule::Cosine(0.1, 9500)}, {500});
//   opt.SetSchedule(s);
//
// Every schedule gives absolute rates (not factors of the optimizer's rate). Bad arguments are a
// ValueError naming the schedule and the value: "[schedule multistep] milestones must increase:
// 30 after 60".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/attrs.h"
#include "core/tensor.h"
#include "core/schedule_formula.h"

namespace loom {
namespace nn {

class Schedule {
 public:
  // value at every step.
  static Schedule Constant(double value);
  // base * gamma^floor(step / step_size)  (torch's StepLR).
  static Schedule Step(double base, int64_t step_size, double gamma);
  // base * gamma^(number of milestones <= step); milestones strictly increasing, >= 1.
  static Schedule MultiStep(double base, const std::vector<int64_t>& milestones, double gamma);
  // base * gamma^(step / decay_steps), or gamma^floor(step / decay_steps) with staircase (SINGA's
  // ExponentialDecay(init_value, decay_steps, decay_rate, staircase)).
  static Schedule Exponential(double base, double gamma, int64_t decay_steps = 1, bool staircase = false);
  // min_value + (base - min_value) * (1 + cos(pi * min(step, total_steps) / total_steps)) / 2:
  // from base down to min_value over total_steps, then min_value.
  static Schedule Cosine(double base, int64_t total_steps, double min_value = 0);
  // start + (end - start) * min(step, steps) / steps: a ramp, then end (end at once if steps is 0).
  static Schedule Linear(double start, double end, int64_t steps);
  // Linear(start_value, target, warmup_steps): the usual warm-up, from start_value to target.
  static Schedule LinearWarmup(double target, int64_t warmup_steps, double start_value = 0);
  // parts[0] until milestones[0], then parts[1] with its step counted from milestones[0], ...
  // (torch's SequentialLR): one milestone fewer than parts, strictly increasing, >= 1.
  static Schedule Sequential(const std::vector<Schedule>& parts, const std::vector<int64_t>& milestones);

  // The rate at `step` (>= 0), computed on the host with the device's formula.
  double ValueAt(int64_t step) const;
  // The rate for the device step counter `step` (a float64 scalar): one lr_schedule op.
  Tensor Eval(const Tensor& step) const;
  // Writes the rate for `step` into `lr` (a float64 scalar on step's device): the same op.
  void EvalInto(const Tensor& step, const Tensor& lr) const;

  const sched::Spec& spec() const { return spec_; }
  Attrs ToAttrs() const { return sched::ToAttrs(spec_); }
  std::string ToString() const;  // "cosine(base=0.1, steps=100, min=0)", compositions joined by " | "

 private:
  Schedule();
  static Schedule Of(const sched::Segment& segment);  // a one-segment schedule
  sched::Spec spec_;
};

}  // namespace nn
}  // namespace loom
