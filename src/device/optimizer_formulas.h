// What an optimizer update does to each gradient element before using it, written once for
// every backend (Note [Clipping folded into the update] in core/ops/optimizer.cc): the CPU
// kernels (cpu/kernels/optimizer.cc) and the CUDA kernels (cuda/elementwise.cu) are templated
// on the GradMode and call PrepareGrad, compiled by nvcc as __host__ __device__.
#pragma once

#include <vector>

#include "core/host_device.h"
#include "core/op.h"
#include "core/ops/update_group.h"

namespace loom {
namespace optim {

enum class GradMode { kRaw, kScaled, kClamped };

// kRaw: g. kScaled: g * a (a = the clip scale times the gradient multiplier). kClamped: g * a
// clamped to [-b, b] (a = the gradient multiplier, 1 without one; b = the clip value); a NaN
// stays NaN. A multiplier of 1 changes no bit (g * 1 == g).
template <GradMode M, typename T>
LOOM_HD T PrepareGrad(T g, T a, T b) {
  if constexpr (M == GradMode::kScaled) {
    return g * a;
  } else if constexpr (M == GradMode::kClamped) {
    const T x = g * a;
    return x < -b ? -b : (x > b ? b : x);
  } else {
    return g;
  }
}

// The constant multiplier of the gradient (attribute grad_mult, 1 when absent): Note [Data
// parallelism folded into the update] in core/ops/optimizer.cc.
inline double GradMultiplier(const OpRecord& op) { return op.attrs.Float("grad_mult", 1.0); }

// The mode an update record asks for, from its attributes (checked by the op's infer): a clip
// value clamps; a scale input or a multiplier other than 1 scales; else the gradient is raw.
inline GradMode GradModeOf(const OpRecord& op) {
  if (op.attrs.Float("clip_value", 0) > 0) return GradMode::kClamped;
  if (op.attrs.Int("grad_scaled", 0) != 0 || GradMultiplier(op) != 1.0) return GradMode::kScaled;
  return GradMode::kRaw;
}

// The found_inf flag of an update (Note [Skipped updates] in core/ops/optimizer.cc): the last
// input with attribute found_inf = 1, else null. And the gradient scale input (grad_scaled = 1):
// the last one before that flag.
inline const Tensor* SkipFlag(const OpRecord& op) {
  return op.attrs.Int("found_inf", 0) != 0 ? &op.inputs.back() : nullptr;
}
inline const Tensor* GradScaleInput(const OpRecord& op) {
  if (op.attrs.Int("grad_scaled", 0) == 0) return nullptr;
  return &op.inputs[op.inputs.size() - (SkipFlag(op) ? 2 : 1)];
}

// The 16-bit copy of an sgd_update or adam_update (attribute copy_dtype, its last output: Note
// [bfloat16 weight copies kept by the update] in graph/weight_copies.cc), and SGD's momentum
// buffer (its second output, before any copy).
inline bool HasCopy(const OpRecord& op) { return op.attrs.Has("copy_dtype"); }
inline bool HasMomentumBuffer(const OpRecord& op) { return op.outputs.size() - (HasCopy(op) ? 1 : 0) == 2; }
// Note [What a kernel supports]: both backends write a copy of a float32 parameter, bfloat16 or
// float16, contiguous and of the parameter's shape (what the op's infer asks, checked again for a
// record a graph pass made); any record without one.
inline bool CopySupported(const OpRecord& op) {
  if (!HasCopy(op)) return true;
  const Tensor &p = op.inputs[0], &c = op.outputs.back();
  return p.dtype() == DType::kFloat32 && (c.dtype() == DType::kBFloat16 || c.dtype() == DType::kFloat16) &&
         int64_t(c.dtype()) == op.attrs.Int("copy_dtype") && c.shape() == p.shape() && c.is_contiguous() &&
         p.is_contiguous();
}

// The member records of an update_group (Note [Small updates grouped] in graph/group_updates.cc):
// inputs and outputs cut into `members` equal runs, the group's attributes but `of` and `members`.
inline std::vector<OpRecord> MembersOf(const OpRecord& group) {
  const size_t n = size_t(group.attrs.Int("members")), k = group.inputs.size() / n, m = group.outputs.size() / n;
  OpRecord member;
  member.def = &GetOp(group.attrs.Str("of"));
  member.attrs = UpdateGroupMemberAttrs(group.attrs);
  std::vector<OpRecord> out(n, member);
  for (size_t i = 0; i < n; ++i) {
    out[i].inputs.assign(group.inputs.begin() + ptrdiff_t(i * k), group.inputs.begin() + ptrdiff_t((i + 1) * k));
    out[i].outputs.assign(group.outputs.begin() + ptrdiff_t(i * m), group.outputs.begin() + ptrdiff_t((i + 1) * m));
    out[i].BindAttrs();
  }
  return out;
}

// Note [What a kernel supports] for an update_group on device type t: each member is a record
// of its own op that t's kernel of that op supports.
inline bool GroupSupported(const OpRecord& group, DeviceType t) {
  if (group.attrs.Int("members", 0) <= 0) return false;
  for (const OpRecord& m : MembersOf(group)) {
    auto pred = m.def->supports[int(t)];
    if (!m.def->kernels[int(t)] || (pred && !pred(m))) return false;
  }
  return true;
}

// Note [Loss scaling] (nn/loss_scale.h), step 3, for both backends: torch.amp.GradScaler's update
// of the scale, the good-step count and the skipped-step count after a step that found a
// non-finite gradient (found) or not.
LOOM_HD void NextLossScale(float* scale, double* good, double* skipped, bool found, float growth,
                           float backoff, double interval) {
  if (found) {
    *scale = *scale * backoff;
    *good = 0;
    *skipped += 1;
    return;
  }
  *good += 1;
  if (*good < interval) return;
  const float grown = *scale * growth;
  if (grown <= 3.40282346638528859811704183484516925e+38f) *scale = grown;  // finite (not inf, not NaN)
  *good = 0;
}

// f(std::integral_constant<GradMode, m>{}) for the record's mode m: one instantiation each.
template <typename F>
void DispatchGradMode(const OpRecord& op, F&& f) {
  switch (GradModeOf(op)) {
    case GradMode::kScaled: f(std::integral_constant<GradMode, GradMode::kScaled>{}); break;
    case GradMode::kClamped: f(std::integral_constant<GradMode, GradMode::kClamped>{}); break;
    default: f(std::integral_constant<GradMode, GradMode::kRaw>{}); break;
  }
}

}  // namespace optim
}  // namespace loom
