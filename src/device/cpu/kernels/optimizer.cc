// CPU optimizer updates: one pass over each parameter, fused and vectorised. A per-element
// path here once made a reference system's CPU step 4x slower than PyTorch's (docs/design.md).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "device/cpu/blas.h"
#include "device/cpu/kernels/cast.h"
#include "device/cpu/kernels/common.h"
#include "device/cpu/skinny_gemm.h"
#include "device/optimizer_formulas.h"

namespace loom {
namespace cpu {
namespace {

using optim::GradMode;
using optim::PrepareGrad;

// ga, gb: the gradient transform's constants (optimizer_formulas.h); unused for kRaw.
template <typename T, GradMode M = GradMode::kRaw>
void SgdRange(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t n, const T lr, const T wd,
              const T mom, const T one_minus_damp, const bool nesterov, const T ga = T(0), const T gb = T(0)) {
  if (!buf) {
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * (PrepareGrad<M>(g[i], ga, gb) + wd * p[i]);
  } else if (!nesterov) {
    for (int64_t i = 0; i < n; ++i) {
      T v = mom * buf[i] + one_minus_damp * (PrepareGrad<M>(g[i], ga, gb) + wd * p[i]);
      buf[i] = v;
      p[i] -= lr * v;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      T d = PrepareGrad<M>(g[i], ga, gb) + wd * p[i];
      T v = mom * buf[i] + one_minus_damp * d;
      buf[i] = v;
      p[i] -= lr * (d + mom * v);
    }
  }
}

// The gradient transform's constants (a, b) of PrepareGrad for `op`: the scale read from its
// last input (device memory is host memory here) times the multiplier, or the multiplier and
// clip_value (optimizer_formulas.h).
std::pair<double, double> GradTransform(const OpRecord& op) {
  const double mult = optim::GradMultiplier(op);
  const Tensor* scale = optim::GradScaleInput(op);
  switch (optim::GradModeOf(op)) {
    case GradMode::kScaled: return {scale ? *scale->data<double>() * mult : mult, 0.0};
    case GradMode::kClamped: return {mult, op.attrs.Float("clip_value")};
    default: return {0.0, 0.0};
  }
}

// The update's 16-bit copy of its parameter (attribute copy_dtype, Note [bfloat16 weight copies
// kept by the update] in graph/weight_copies.cc): the update runs over a thread's range a block of
// kBlock elements at a time, and after each block, while it is in L1, the cast op's own conversion
// writes its rounding. Without a copy the update runs over the range at once, as before.
struct CopyOut {
  static constexpr int64_t kBlock = 2048;
  uint16_t* h = nullptr;  // null: the record has no copy
  DType dtype = DType::kBFloat16;
  explicit CopyOut(const OpRecord& op) {
    if (!optim::HasCopy(op)) return;
    LOOM_ASSERT(op.inputs[0].dtype() == DType::kFloat32, "[", op.name(), "] a copy of a non-float32 parameter");
    h = static_cast<uint16_t*>(op.outputs.back().raw_data());
    dtype = op.outputs.back().dtype();
  }
  // update(s, t) over [b, e) of the parameter p, then the copy of each block.
  template <typename T, typename F>
  void Run(const T* p, int64_t b, int64_t e, F&& update) const {
    if constexpr (std::is_same_v<T, float>) {
      if (h) {
        for (int64_t s = b; s < e; s += kBlock) {
          const int64_t t = std::min(e, s + kBlock);
          update(s, t);
          CastFloat32To16(p + s, h + s, t - s, dtype);
        }
        return;
      }
    }
    update(b, e);
  }
};

// Note [Skipped updates] (core/ops/optimizer.cc): the record's found_inf flag is set.
bool Skipped(const OpRecord& op) {
  const Tensor* flag = optim::SkipFlag(op);
  return flag && *flag->data<float>() != 0;
}

// param: (n), grad: (n), lr: () [, buf: (n)] [, scale: ()] [, found_inf: ()] -> param, buf
// updated in place [, copy: (n) 16-bit] (all left as they are when found_inf is set)
void SgdUpdateCpu(const OpRecord& op, const KernelContext&) {
  if (Skipped(op)) return;
  const double lr = *op.inputs[2].data<double>();
  const double mom = op.attrs.Float("momentum", 0), wd = op.attrs.Float("weight_decay", 0);
  const double damp = op.attrs.Float("dampening", 0);
  const bool nesterov = op.attrs.Int("nesterov", 0) != 0;
  const bool has_buf = optim::HasMomentumBuffer(op);
  const CopyOut copy(op);
  const auto [ga, gb] = GradTransform(op);
  FloatDispatch(op.inputs[0].dtype(), "sgd_update", [&](auto tag) {
    using T = decltype(tag);
    T* p = op.outputs[0].data<T>();
    const T* g = op.inputs[1].data<T>();
    T* buf = has_buf ? op.outputs[1].data<T>() : nullptr;
    const T tlr = T(lr), twd = T(wd), tm = T(mom), t1d = T(1 - damp), tga = T(ga), tgb = T(gb);
    optim::DispatchGradMode(op, [&](auto mode) {
      constexpr GradMode M = decltype(mode)::value;
      ParallelFor(op.inputs[0].numel(), kGrain, [=](int64_t b, int64_t e) {
        // Scalars by value and restrict pointers: otherwise the compiler must assume a store to
        // p or buf may change them, and the momentum loop does not vectorise (3.6x slower).
        copy.Run(p, b, e, [=](int64_t s, int64_t t) {
          SgdRange<T, M>(p + s, g + s, buf ? buf + s : nullptr, t - s, tlr, twd, tm, t1d, nesterov, tga, tgb);
        });
      });
    });
  });
}

// Note [Weight gradient into the update] (core/ops/optimizer.cc, graph/fuse_weight_grad.cc): param (M, N),
// a (K, M), b (K, N), lr [, buf] [, scale] [, found_inf] -> param [, buf]. Rows of the gradient a^T b are computed a
// tile at a time (16 KB, in L1) by the same skinny kernel that the matmul op uses, then SgdRange
// applies them: bitwise the update sgd_update makes from the stored gradient, with one pass
// fewer over memory the size of the parameter (the gradient's write) and one read fewer.
void MatmulSgdUpdateCpu(const OpRecord& op, const KernelContext&) {
  if (Skipped(op)) return;
  LOOM_CHECK(op.inputs[0].dtype() == DType::kFloat32, DTypeError, "[matmul_sgd_update] runs on float32 only, got ",
             op.inputs[0].Describe());
  const double lr = *op.inputs[3].data<double>();
  const float tlr = float(lr), twd = float(op.attrs.Float("weight_decay", 0)),
              tm = float(op.attrs.Float("momentum", 0)), t1d = float(1 - op.attrs.Float("dampening", 0));
  const bool nesterov = op.attrs.Int("nesterov", 0) != 0;
  const auto [ga, gb] = GradTransform(op);
  const float tga = float(ga), tgb = float(gb);
  const int64_t m = op.inputs[0].shape()[0], n = op.inputs[0].shape()[1], k = op.inputs[1].shape()[0];
  float* p = op.outputs[0].data<float>();
  float* buf = op.outputs.size() == 2 ? op.outputs[1].data<float>() : nullptr;
  const float* a = op.inputs[1].data<float>();
  const float* b = op.inputs[2].data<float>();
  constexpr int64_t kTile = 16 * kSkinnyTNColumns;  // floats
  const int64_t cols = std::min(n, kTile), rows = std::max<int64_t>(1, kTile / cols);
  optim::DispatchGradMode(op, [&](auto mode) {
    constexpr GradMode M = decltype(mode)::value;
    ParallelFor(m, std::max<int64_t>(1, kGrain / n), [=](int64_t r0, int64_t r1) {
      float tile[kTile];
      for (int64_t r = r0; r < r1; r += rows) {
        const int64_t nr = std::min(rows, r1 - r);
        for (int64_t c = 0; c < n; c += cols) {
          const int64_t nc = std::min(cols, n - c);
          SkinnyGemmTNRows(nr, nc, k, a + r, m, b + c, n, tile, nc);
          for (int64_t q = 0; q < nr; ++q) {
            const int64_t at = (r + q) * n + c;
            SgdRange<float, M>(p + at, tile + q * nc, buf ? buf + at : nullptr, nc, tlr, twd, tm, t1d, nesterov, tga,
                               tgb);
          }
        }
      }
    });
  });
}

// Note [What a kernel supports]: the fused update is bitwise sgd_update(matmul(a, b, ta=1)) only
// where that matmul takes the skinny TN kernel (the same sums, in the same order; Note [Which GEMM
// kernel] says where it does); elsewhere the graph keeps the two ops.
bool MatmulSgdUpdateSupportedCpu(const OpRecord& op) {
  const Tensor &p = op.inputs[0], &a = op.inputs[1], &b = op.inputs[2];
  for (const Tensor* t : {&p, &a, &b})
    if (t->dtype() != DType::kFloat32 || t->shape().size() != 2 || !t->is_contiguous()) return false;
  return ChooseSgemm(/*ta=*/true, /*tb=*/false, p.shape()[0], p.shape()[1], a.shape()[0]) == GemmKernel::kSkinny;
}

template <typename T, GradMode M>
void AdamRange(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, int64_t n, const T b1,
               const T b2, const T eps, const T wd, const T step_size, const T inv_sqrt_c2, const T decay,
               const bool decoupled, const T ga, const T gb) {
  for (int64_t i = 0; i < n; ++i) {
    const T gt = PrepareGrad<M>(g[i], ga, gb);
    T gi = decoupled ? gt : gt + wd * p[i];
    if (decoupled) p[i] *= decay;
    m[i] = b1 * m[i] + (T(1) - b1) * gi;
    v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + eps);
  }
}

// param, grad: (n), lr: (), m, v: (n), step: () [, scale: ()] [, found_inf: ()] -> param, m, v in
// place [, copy: (n) 16-bit] (all left as they are when found_inf is set)
void AdamUpdateCpu(const OpRecord& op, const KernelContext&) {
  if (Skipped(op)) return;
  const double lr = *op.inputs[2].data<double>();
  const double step = *op.inputs[5].data<double>();
  const double b1 = op.attrs.Float("beta1"), b2 = op.attrs.Float("beta2"), eps = op.attrs.Float("eps");
  const double wd = op.attrs.Float("weight_decay", 0);
  const bool decoupled = op.attrs.Int("decoupled", 0) != 0;
  const double c1 = 1 - std::pow(b1, step), c2 = 1 - std::pow(b2, step);
  const auto [ga, gb] = GradTransform(op);
  const CopyOut copy(op);
  FloatDispatch(op.inputs[0].dtype(), "adam_update", [&](auto tag) {
    using T = decltype(tag);
    T* p = op.outputs[0].data<T>();
    const T* g = op.inputs[1].data<T>();
    T* m = op.outputs[1].data<T>();
    T* v = op.outputs[2].data<T>();
    const T tb1 = T(b1), tb2 = T(b2), teps = T(eps), twd = T(wd);
    const T step_size = T(lr / c1), inv_sqrt_c2 = T(1 / std::sqrt(c2)), decay = T(1 - lr * wd);
    const T tga = T(ga), tgb = T(gb);
    optim::DispatchGradMode(op, [&](auto mode) {
      constexpr GradMode M = decltype(mode)::value;
      ParallelFor(op.inputs[0].numel(), kGrain, [=](int64_t b, int64_t e) {
        copy.Run(p, b, e, [=](int64_t s, int64_t t) {
          AdamRange<T, M>(p + s, g + s, m + s, v + s, t - s, tb1, tb2, teps, twd, step_size, inv_sqrt_c2, decay,
                          decoupled, tga, tgb);
        });
      });
    });
  });
}

// counter: () float64 [, found_inf: () float32] -> counter + 1 (unchanged when found_inf is set)
void IncrementCpu(const OpRecord& op, const KernelContext&) {
  if (op.inputs.size() == 2 && *op.inputs[1].data<float>() != 0) return;
  *op.outputs[0].data<double>() += 1;
}

// Note [Small updates grouped] (graph/group_updates.cc): each member by its own op's kernel, in
// turn: the bits its own record gives.
void UpdateGroupCpu(const OpRecord& op, const KernelContext& ctx) {
  for (const OpRecord& m : optim::MembersOf(op)) m.def->kernels[int(DeviceType::kCPU)](m, ctx);
}
bool UpdateGroupSupportedCpu(const OpRecord& op) { return optim::GroupSupported(op, DeviceType::kCPU); }

}  // namespace

LOOM_KERNEL(update_group, kCPU, UpdateGroupCpu);
LOOM_KERNEL_SUPPORTS(update_group, kCPU, UpdateGroupSupportedCpu);
LOOM_KERNEL(sgd_update, kCPU, SgdUpdateCpu);
LOOM_KERNEL_SUPPORTS(sgd_update, kCPU, optim::CopySupported);
LOOM_KERNEL(matmul_sgd_update, kCPU, MatmulSgdUpdateCpu);
LOOM_KERNEL_SUPPORTS(matmul_sgd_update, kCPU, MatmulSgdUpdateSupportedCpu);
LOOM_KERNEL(adam_update, kCPU, AdamUpdateCpu);
LOOM_KERNEL_SUPPORTS(adam_update, kCPU, optim::CopySupported);
LOOM_KERNEL(increment, kCPU, IncrementCpu);

}  // namespace cpu
}  // namespace loom
