// A learning-rate schedule as plain data, and its value at a step, written once for every
// backend: nn::Schedule builds a ScheduleSpec, the lr_schedule op carries it as attributes, and
// the CPU kernel (cpu/kernels/schedule.cc) and the CUDA kernel (cuda/schedule.cu) both call
// ScheduleValue, compiled by nvcc as __host__ __device__, so the two cannot drift apart.
//
// Note [Schedules on the device]
// The learning rate of step k is ScheduleValue(spec, k), where k is a float64 step counter on the
// device that the optimizer advances by an op in the step. Both run inside the captured step, so
// a replay computes the next rate itself: no recapture and no host write per step (docs/design.md
// invariant 6). A spec is a list of segments (one for a plain schedule, several for a composition
// such as warm-up then cosine); segment i runs from its absolute start step up to the next
// segment's start and sees the step counted from its own start. A composition of compositions is
// flattened into one list when it is built (nn/schedule.cc).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/attrs.h"
#include "core/host_device.h"

namespace loom {
namespace sched {

// Segment kinds. value(t), with t the step counted from the segment's start:
//   constant     v0
//   exponential  v0 * gamma^(t / period)         (staircase: gamma^floor(t / period); step decay)
//   multistep    v0 * gamma^(number of milestones <= t)
//   cosine       v1 + (v0 - v1) * (1 + cos(pi * min(t, period) / period)) / 2
//   linear       v0 + (v1 - v0) * min(t, period) / period    (v1 when period is 0: warm-up)
enum Kind : int32_t { kConstant = 0, kExponential = 1, kMultiStep = 2, kCosine = 3, kLinear = 4 };
constexpr int kNumKinds = 5;
constexpr int kMaxSegments = 8;
constexpr int kMaxMilestones = 32;  // over all multistep segments of one spec

struct Segment {
  int32_t kind;
  int32_t staircase;
  int64_t start;   // absolute step at which the segment begins
  int64_t period;  // exponential: decay steps; cosine: total steps; linear: ramp steps
  double v0, v1, gamma;
  int32_t m_begin, m_end;  // its milestones: milestones[m_begin, m_end), relative to start
};

// Trivially copyable: a CUDA kernel takes it by value.
struct Spec {
  int32_t num_segments;
  int32_t num_milestones;
  Segment seg[kMaxSegments];
  int64_t milestones[kMaxMilestones];
};

LOOM_HD double SegmentValue(const Spec& s, const Segment& g, double t) {
  switch (g.kind) {
    case kExponential: {
      double e = t / double(g.period);
      if (g.staircase) e = std::floor(e);
      return g.v0 * std::pow(g.gamma, e);
    }
    case kMultiStep: {
      int passed = 0;
      for (int32_t i = g.m_begin; i < g.m_end; ++i) passed += double(s.milestones[i]) <= t ? 1 : 0;
      return g.v0 * std::pow(g.gamma, double(passed));
    }
    case kCosine: {
      const double pi = 3.14159265358979323846;
      const double u = (t < double(g.period) ? t : double(g.period)) / double(g.period);
      return g.v1 + (g.v0 - g.v1) * (1 + std::cos(pi * u)) / 2;
    }
    case kLinear: {
      if (g.period == 0) return g.v1;
      const double u = (t < double(g.period) ? t : double(g.period)) / double(g.period);
      return g.v0 + (g.v1 - g.v0) * u;
    }
    default:
      return g.v0;
  }
}

// The schedule's value at `step` (>= 0; a whole number held in a double).
LOOM_HD double ScheduleValue(const Spec& s, double step) {
  int i = 0;
  while (i + 1 < s.num_segments && double(s.seg[i + 1].start) <= step) ++i;
  return SegmentValue(s, s.seg[i], step - double(s.seg[i].start));
}

// ---- the spec as op attributes (host only; core/ops/schedule.cc checks them) ----
const char* KindName(int32_t kind);  // "cosine"; "?" for anything else
// Attributes "segments" (the count), "milestones" (all, concatenated) and per segment i
// "s<i>.kind" (a name), "s<i>.start", "s<i>.period", "s<i>.staircase", "s<i>.v0", "s<i>.v1",
// "s<i>.gamma", "s<i>.milestones" (how many of them are its own): readable in dumps.
Attrs ToAttrs(const Spec& s);
// The inverse; a malformed attribute list (from Python's call_op) is a ValueError.
Spec FromAttrs(const Attrs& a);
// lr_schedule's declaration of them (Note [Declared attributes]): the keys of every segment up
// to kMaxSegments.
std::vector<AttrDecl> AttrDecls();

}  // namespace sched
}  // namespace loom
