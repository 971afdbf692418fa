// Op-case rows of dynamic loss scaling (Note [Loss scaling] in nn/loss_scale.h): unscale_grads,
// update_loss_scale, and the updates and step counters with a found_inf flag (Note [Skipped
// updates] in core/ops/optimizer.cc), set and clear; and the updates writing a 16-bit copy of
// their parameter (Note [bfloat16 weight copies kept by the update] in graph/weight_copies.cc).
#include <cmath>
#include <limits>

#include "common/op_case_table.h"
#include "core/half.h"

namespace loom {
namespace test {
namespace table {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
InputSpec F32(double v) { return Values({}, {v}, DType::kFloat32); }
InputSpec F64(double v) { return Values({}, {v}, DType::kFloat64); }

// `ref`'s outputs and the parameter's copy: its float32 rounding rounded again to `t`, as the cast
// op rounds a float32 (the row compares that 16-bit output exactly).
Reference WithCopy(Reference ref, DType t) {
  return [ref, t](const RefArgs& a) {
    std::vector<HostTensor> out = ref(a);
    HostTensor c = out[0];
    for (double& v : c.v)
      v = t == DType::kBFloat16 ? BFloat16ToFloat(FloatToBFloat16(float(v))) : HalfToFloat(FloatToHalf(float(v)));
    out.push_back(std::move(c));
    return out;
  };
}

void AddCopyCases(Table& t) {
  const int64_t bf16 = int64_t(DType::kBFloat16), fp16 = int64_t(DType::kFloat16);
  t.Add("sgd_update", "momentum, bfloat16 copy", kF32, WithCopy(ref::SgdUpdate, DType::kBFloat16))
      .In(Uniform({50})).In(Uniform({50}, -3, 3)).In(Float64(0.05)).In(Uniform({50}))
      .Attr("momentum", 0.9).Attr("weight_decay", 1e-3).Attr("copy_dtype", bf16)
      .Into({0, 3, -1});
  // Past one thread's range (kGrain) and not a multiple of 8: the float16 conversion's vector
  // groups and its scalar tail. Values on a grid of 0.5 and a learning rate of 2^-4, so the update
  // is exact in float32 however a build contracts it (with random values a parameter one float32
  // ulp off, at a float16 rounding midpoint, rounded the other way in the sanitizers' build); the
  // rounding itself is checked against the cast op bit for bit in UpdateCopy's tests.
  t.Add("sgd_update", "plain, float16 copy", kF32, WithCopy(ref::SgdUpdate, DType::kFloat16))
      .In(Grid({70001}, -2, 2)).In(Grid({70001}, -3, 3)).In(Float64(0.0625))
      .Attr("copy_dtype", fp16)
      .Into({0, -1});
  for (int64_t copy : {bf16, fp16})
    t.Add("adam_update", std::string("not skipped, ") + Name(DType(copy)) + " copy", kF32,
          WithCopy(ref::AdamUpdate, DType(copy)))
        .In(Uniform({50})).In(Uniform({50}, -3, 3)).In(Float64(0.05))
        .In(Uniform({50}, -0.1, 0.1)).In(Uniform({50}, 0, 0.1)).In(Float64(3)).In(F32(0))
        .Attr("beta1", 0.9).Attr("beta2", 0.999).Attr("eps", 1e-8).Attr("weight_decay", 0.01)
        .Attr("found_inf", int64_t(1)).Attr("copy_dtype", copy)
        .Into({0, 3, 4, -1});
}
}  // namespace

void AddLossScaleCases(Table& t) {
  // unscale_grads: (g_1 ... g_n, scale, found_inf) -> the same gradients times 1 / scale, and the
  // flag, written whatever it held before (7 here).
  for (DType dt : kFloats) {
    auto& finite = t.Add("unscale_grads", "three gradients at scale 65536", dt,
                         [dt](const RefArgs& a) { return ref::UnscaleGrads(a, dt); })
                       .In(Uniform({50}, -6e4, 6e4))
                       .In(Uniform({7, 3}, -4, 4))
                       .In(Uniform({70000}, -1e3, 1e3))
                       .In(F32(65536))
                       .In(F32(7))
                       .Into({0, 1, 2, 4});
    finite.Exact();  // times a power of two: exact in either dtype
    t.Add("unscale_grads", "an infinity at scale 2^40", dt, [dt](const RefArgs& a) { return ref::UnscaleGrads(a, dt); })
        .In(Uniform({9}, -1e9, 1e9))
        .In(Values({4}, {1, -kInf, 3, 4}))
        .In(F32(std::ldexp(1.0, 40)))
        .In(F32(0))
        .Into({0, 1, 3})
        .Exact();
    t.Add("unscale_grads", "a NaN, one gradient", dt, [dt](const RefArgs& a) { return ref::UnscaleGrads(a, dt); })
        .In(Values({5}, {1, 2, kNaN, 4, 5}))
        .In(F32(1024))
        .In(F32(0))
        .Into({0, 2})
        .Exact();
    // A scale below 1 multiplies: 3e38 * 2 overflows float32 (flag 1), not float64 (flag 0).
    t.Add("unscale_grads", "scale 0.5 near the float32 maximum", dt,
          [dt](const RefArgs& a) { return ref::UnscaleGrads(a, dt); })
        .In(Values({3}, {1, 3e38, -2}))
        .In(F32(0.5))
        .In(F32(1))
        .Into({0, 2})
        .Exact();
  }

  // update_loss_scale: (scale, good, skipped, found_inf) -> scale, good, skipped, in place.
  struct Update {
    const char* variant;
    double scale, good, skipped, found;
  };
  for (const Update& u : std::vector<Update>{{"an overflow backs off", 65536, 17, 2, 1},
                                             {"a good step counts", 65536, 17, 2, 0},
                                             {"the interval's last good step grows", 1024, 1999, 5, 0},
                                             {"growth past float32's range keeps the scale", std::ldexp(1.0, 127), 1999,
                                              0, 0},
                                             {"an overflow at a tiny scale", std::ldexp(1.0, -100), 3, 0, 1}})
    t.Add("update_loss_scale", u.variant, kF32, ref::UpdateLossScale)
        .In(F32(u.scale))
        .In(F64(u.good))
        .In(F64(u.skipped))
        .In(F32(u.found))
        .Attr("growth", 2.0)
        .Attr("backoff", 0.5)
        .Attr("interval", int64_t(2000))
        .Into({0, 1, 2})
        .Exact();
  t.Add("update_loss_scale", "growth 4, backoff 0.25, interval 3", kF32, ref::UpdateLossScale)
      .In(F32(8))
      .In(F64(2))
      .In(F64(0))
      .In(F32(0))
      .Attr("growth", 4.0)
      .Attr("backoff", 0.25)
      .Attr("interval", int64_t(3))
      .Into({0, 1, 2})
      .Exact();

  // The updates with a found_inf flag (the last input): set, nothing moves; clear, the update
  // as without it. With momentum, a gradient scale and 1/N before the flag.
  for (DType dt : kFloats)
    for (double flag : {1.0, 0.0}) {
      const std::string how = flag != 0 ? "skipped" : "not skipped";
      t.Add("sgd_update", "momentum, gradient scale, 1/N, " + how, dt, ref::SgdUpdate)
          .In(Uniform({50})).In(Uniform({50}, -3, 3)).In(Float64(0.05)).In(Uniform({50})).In(Float64(0.37))
          .In(F32(flag))
          .Attr("momentum", 0.9).Attr("weight_decay", 1e-3).Attr("grad_scaled", int64_t(1)).Attr("grad_mult", 0.5)
          .Attr("found_inf", int64_t(1))
          .Into({0, 3});
      t.Add("sgd_update", "plain, " + how, dt, ref::SgdUpdate)
          .In(Uniform({50})).In(Uniform({50}, -3, 3)).In(Float64(0.05)).In(F32(flag))
          .Attr("found_inf", int64_t(1))
          .Into({0});
      t.Add("adam_update", "gradient scale, " + how, dt, ref::AdamUpdate)
          .In(Uniform({50})).In(Uniform({50}, -3, 3)).In(Float64(0.05))
          .In(Uniform({50}, -0.1, 0.1)).In(Uniform({50}, 0, 0.1)).In(Float64(3)).In(Float64(0.37)).In(F32(flag))
          .Attr("beta1", 0.9).Attr("beta2", 0.999).Attr("eps", 1e-8).Attr("weight_decay", 0.01)
          .Attr("grad_scaled", int64_t(1)).Attr("found_inf", int64_t(1))
          .Into({0, 3, 4});
      if (dt == kF32)
        t.Add("matmul_sgd_update", "momentum, " + how, kF32, ref::MatmulSgdUpdate)
            .In(Uniform({40, 48})).In(Uniform({8, 40})).In(Uniform({8, 48})).In(Float64(0.05))
            .In(Uniform({40, 48})).In(F32(flag))
            .Attr("momentum", 0.9).Attr("weight_decay", 1e-3).Attr("found_inf", int64_t(1))
            .Into({0, 4});
    }
  AddCopyCases(t);
  for (double flag : {1.0, 0.0})
    t.Add("increment", flag != 0 ? "skipped" : "not skipped", kF64, ref::Increment)
        .In(Float64(41))
        .In(F32(flag))
        .Into({0})
        .Exact();
}

}  // namespace table
}  // namespace test
}  // namespace loom
