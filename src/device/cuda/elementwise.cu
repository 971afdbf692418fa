// CUDA kernels for element-wise ops, activations and their gradients (with numpy broadcasting
// as on the CPU; their formulas are the CPU's own, Note [Element-wise formulas] in
// core/elementwise_formulas.h), add_bias, dropout and the optimizer updates. Semantics follow
// src/device/cpu/kernels/{elementwise,linalg,dropout,optimizer}.cc expression for expression.
#include <algorithm>

#include "device/cuda/common.cuh"
#include "core/elementwise_formulas.h"
#include "device/optimizer_formulas.h"
#include "device/philox.h"

namespace loom {
namespace cuda {
namespace {

// ---------------------------------------------------------------- binary, with broadcasting

template <typename T, typename F>
__global__ void BinaryFlat(const T* a, const T* b, T* y, int64_t n, F f) {
  LOOM_GRID_STRIDE(i, n) y[i] = f(a[i], b[i]);
}
template <typename T, typename F>
__global__ void BinaryScalarRhs(const T* a, const T* b, T* y, int64_t n, F f) {
  const T s = b[0];
  LOOM_GRID_STRIDE(i, n) y[i] = f(a[i], s);
}
template <typename T, typename F>
__global__ void BinaryScalarLhs(const T* a, const T* b, T* y, int64_t n, F f) {
  const T s = a[0];
  LOOM_GRID_STRIDE(i, n) y[i] = f(s, b[i]);
}
template <typename T, typename F>
__global__ void BinaryIndexed(const T* a, const T* b, T* y, int64_t n, Indexer ix, F f) {
  LOOM_GRID_STRIDE(i, n) {
    int64_t off[2];
    Offsets(ix, i, off);
    y[i] = f(a[off[0]], b[off[1]]);
  }
}

// a: (A...), b: (B...) -> y: broadcast(A, B), all contiguous
template <typename T, typename F>
void BroadcastBinary(const OpRecord& op, const KernelContext& ctx, const char* name, F f) {
  const Tensor& ta = op.inputs[0];
  const Tensor& tb = op.inputs[1];
  const Tensor& ty = op.outputs[0];
  const int64_t n = ty.numel();
  if (n == 0) return;
  cudaStream_t s = Dev(ctx).stream();
  const T* a = ta.data<T>();
  const T* b = tb.data<T>();
  T* y = ty.data<T>();
  if (ta.shape() == ty.shape() && tb.shape() == ty.shape()) {
    BinaryFlat<<<Blocks(n), kThreads, 0, s>>>(a, b, y, n, f);
  } else if (tb.numel() == 1 && ta.shape() == ty.shape()) {
    BinaryScalarRhs<<<Blocks(n), kThreads, 0, s>>>(a, b, y, n, f);
  } else if (ta.numel() == 1 && tb.shape() == ty.shape()) {
    BinaryScalarLhs<<<Blocks(n), kThreads, 0, s>>>(a, b, y, n, f);
  } else {
    Indexer ix = MakeIndexer(
        ty.shape(), {BroadcastStrides(ta.shape(), ty.shape()), BroadcastStrides(tb.shape(), ty.shape())}, name);
    BinaryIndexed<<<Blocks(n), kThreads, 0, s>>>(a, b, y, n, ix, f);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------- unary, scalar, gradients

// In: x's element, T or (the bf16 policy's GELU records) uint16_t bfloat16 bits read as float.
template <typename T>
__device__ __forceinline__ T LoadValue(T v) {
  return v;
}
__device__ __forceinline__ float LoadValue(uint16_t b) { return DevBFloat16ToFloat(b); }

template <typename In, typename T, typename Out, typename F>
__global__ void UnaryKernel(const In* x, Out* y, int64_t n, ew::Params<T> p, F f, bool bf16) {
  LOOM_GRID_STRIDE(i, n) y[i] = StoreResult<Out>(T(f(T(LoadValue(x[i])), p)), bf16);
}
template <typename S, typename T, typename F>
__global__ void GradKernel(const S* s, const T* dy, T* dx, int64_t n, ew::Params<T> p, F f) {
  LOOM_GRID_STRIDE(i, n) dx[i] = f(T(LoadValue(s[i])), dy[i], p);
}

// a: (A...), b: (B...) -> y: broadcast(A, B)
template <typename F>
void BinaryCuda(const OpRecord& op, const KernelContext& ctx, const char* name, F f) {
  FloatDispatch(op.outputs[0].dtype(), name, [&](auto tag) { BroadcastBinary<decltype(tag)>(op, ctx, name, f); });
}

// x: (...) -> y: (...); y float32's rounding to bfloat16 or float16 with out_dtype (Note [Casts
// fused into their producers] in graph/fuse_casts.cc).
template <typename F>
void UnaryCuda(const OpRecord& op, const KernelContext& ctx, const char* name, F f) {
  const int64_t n = op.outputs[0].numel();
  if (n == 0) return;
  cudaStream_t st = Dev(ctx).stream();
  if constexpr (ew::TakesBf16Input<F>::value) {
    if (op.inputs[0].dtype() == DType::kBFloat16) {  // the bf16 policy's GELU (Note [Precision policy])
      const uint16_t* x = op.inputs[0].data<uint16_t>();
      const ew::Params<float> p = ew::ReadParams<float>(op.attrs);
      if (op.outputs[0].dtype() == DType::kBFloat16)
        UnaryKernel<<<Blocks(n), kThreads, 0, st>>>(x, op.outputs[0].data<uint16_t>(), n, p, f, true);
      else
        UnaryKernel<<<Blocks(n), kThreads, 0, st>>>(x, op.outputs[0].data<float>(), n, p, f, false);
      LOOM_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  FusedCastDispatch(op, name, [&](auto tag, auto out_tag, bool bf16) {
    using T = decltype(tag);
    using Out = decltype(out_tag);
    UnaryKernel<<<Blocks(n), kThreads, 0, st>>>(op.inputs[0].data<T>(), static_cast<Out*>(op.outputs[0].raw_data()),
                                                n, ew::ReadParams<T>(op.attrs), f, bf16);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// (s, dy) -> dx, all (...); s is the saved input x or output y (a GELU's x may be the bf16
// policy's bfloat16 copy, dy and dx then float32)
template <typename F>
void GradCuda(const OpRecord& op, const KernelContext& ctx, const char* name, F f) {
  const int64_t n = op.outputs[0].numel();
  if (n == 0) return;
  cudaStream_t st = Dev(ctx).stream();
  if constexpr (ew::TakesBf16Input<F>::value) {
    if (op.inputs[0].dtype() == DType::kBFloat16) {
      GradKernel<<<Blocks(n), kThreads, 0, st>>>(op.inputs[0].data<uint16_t>(), op.inputs[1].data<float>(),
                                                 op.outputs[0].data<float>(), n, ew::ReadParams<float>(op.attrs), f);
      LOOM_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  FloatDispatch(op.outputs[0].dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    GradKernel<<<Blocks(n), kThreads, 0, st>>>(op.inputs[0].data<T>(), op.inputs[1].data<T>(), op.outputs[0].data<T>(),
                                               n, ew::ReadParams<T>(op.attrs), f);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

// Note [What a kernel supports]: FusedCastDTypes and ActivationDTypes (device/kernel_dispatch.h).
bool FusedCastSupportedCuda(const OpRecord& op) {
  return FusedCastDTypes(op.inputs[0].dtype(), op.outputs[0].dtype());
}
bool ActivationSupportedCuda(const OpRecord& op) {
  return ActivationDTypes(op.inputs[0].dtype(), op.outputs[0].dtype());
}

namespace {

// One kernel per row of the formula lists (Note [Element-wise formulas]).
#define LOOM_CUDA_EW(op, runner)                                                                     \
  void op##_cuda(const OpRecord& o, const KernelContext& ctx) { runner(o, ctx, #op, ew::op##_f{}); } \
  LOOM_KERNEL(op, kCUDA, op##_cuda);
#define LOOM_CUDA_BINARY(op, formula) LOOM_CUDA_EW(op, BinaryCuda)
#define LOOM_CUDA_UNARY(op, formula) \
  LOOM_CUDA_EW(op, UnaryCuda)         \
  LOOM_KERNEL_SUPPORTS(op, kCUDA, ActivationSupportedCuda);
#define LOOM_CUDA_GRAD(op, formula)                                                                  \
  LOOM_CUDA_EW(op, GradCuda)                                                                         \
  bool op##_supports_cuda(const OpRecord& o) {                                                       \
    return ActivationGradDTypes(o.inputs[0].dtype(), o.inputs[1].dtype(), o.outputs[0].dtype(),      \
                                ew::TakesBf16Input<ew::op##_f>::value);                              \
  }                                                                                                  \
  LOOM_KERNEL_SUPPORTS(op, kCUDA, op##_supports_cuda);

LOOM_BINARY_FORMULAS(LOOM_CUDA_BINARY)
LOOM_UNARY_FORMULAS(LOOM_CUDA_UNARY)
LOOM_GRAD_FORMULAS(LOOM_CUDA_GRAD)

// ---------------------------------------------------------------- where

template <typename T>
__global__ void WhereFlat(const uint8_t* c, const T* x, const T* y, T* out, int64_t n) {
  LOOM_GRID_STRIDE(i, n) out[i] = c[i] ? x[i] : y[i];
}
template <typename T>
__global__ void WhereIndexed(const uint8_t* c, const T* x, const T* y, T* out, int64_t n, Indexer ix) {
  LOOM_GRID_STRIDE(i, n) {
    int64_t off[3];
    Offsets(ix, i, off);
    out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
  }
}

// cond: (C...) bool or uint8, x: (X...), y: (Y...) -> out: broadcast(C, X, Y)
void WhereCuda(const OpRecord& op, const KernelContext& ctx) {
  FloatDispatch(op.outputs[0].dtype(), "where", [&](auto tag) {
    using T = decltype(tag);
    const Tensor &tc = op.inputs[0], &tx = op.inputs[1], &ty = op.inputs[2], &to = op.outputs[0];
    const int64_t n = to.numel();
    if (n == 0) return;
    cudaStream_t s = Dev(ctx).stream();
    const Shape& shape = to.shape();
    if (tc.shape() == shape && tx.shape() == shape && ty.shape() == shape) {
      WhereFlat<<<Blocks(n), kThreads, 0, s>>>(tc.data<uint8_t>(), tx.data<T>(), ty.data<T>(), to.data<T>(), n);
    } else {
      Indexer ix = MakeIndexer(shape,
                               {BroadcastStrides(tc.shape(), shape), BroadcastStrides(tx.shape(), shape),
                                BroadcastStrides(ty.shape(), shape)},
                               "where");
      WhereIndexed<<<Blocks(n), kThreads, 0, s>>>(tc.data<uint8_t>(), tx.data<T>(), ty.data<T>(), to.data<T>(), n,
                                                  ix);
    }
    LOOM_CUDA_CHECK_LAUNCH();
  });
}
LOOM_KERNEL(where, kCUDA, WhereCuda);

// ---------------------------------------------------------------- add_bias

// I: uint32_t below 2^31 elements (a 32-bit remainder per element, not a 64-bit one: GPT-2's
// add_bias over (8192, 3072) is close to bound by that arithmetic rather than by memory).
template <typename I, typename T, typename Out>
__global__ void AddBiasKernel(const T* x, const T* b, Out* y, I total, I n, bool bf16) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += I(blockDim.x) * gridDim.x)
    y[i] = StoreResult<Out>(T(x[i] + b[i % n]), bf16);
}

// x: (R, N) (leading dimensions flattened), b: (N) -> y: (R, N), or its 16-bit rounding with
// out_dtype (Note [Casts fused into their producers])
void AddBiasCuda(const OpRecord& op, const KernelContext& ctx) {
  FusedCastDispatch(op, "add_bias", [&](auto tag, auto out_tag, bool bf16) {
    using T = decltype(tag);
    using Out = decltype(out_tag);
    const int64_t n = op.inputs[1].numel(), total = op.outputs[0].numel();
    if (n == 0 || total == 0) return;
    const T *x = op.inputs[0].data<T>(), *b = op.inputs[1].data<T>();
    Out* y = static_cast<Out*>(op.outputs[0].raw_data());
    if (total < (int64_t(1) << 31))
      AddBiasKernel<<<Blocks(total), kThreads, 0, Dev(ctx).stream()>>>(x, b, y, uint32_t(total), uint32_t(n), bf16);
    else
      AddBiasKernel<<<Blocks(total), kThreads, 0, Dev(ctx).stream()>>>(x, b, y, total, n, bf16);
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// ---------------------------------------------------------------- dropout

// Element i keeps its value when word i % 4 of Philox(seed, base + offset + i / 4), as a
// uniform in [0, 1), is below keep = 1 - p (src/device/cpu/kernels/dropout.cc). One thread per
// counter. `base_dev`, when set, holds {base, seed} (device-graph replay); otherwise `base`, `seed`.
template <typename T>
__global__ void DropoutKernel(const T* x, T* y, uint8_t* m, int64_t n, uint64_t seed, const uint64_t* base_dev,
                              uint64_t base, uint64_t offset, double keep, T scale) {
  const uint64_t b = (base_dev ? base_dev[0] : base) + offset;
  const uint64_t s = base_dev ? base_dev[1] : seed;
  LOOM_GRID_STRIDE(g, (n + 3) / 4) {
    Philox4 r = Philox4x32(s, b + uint64_t(g));
    for (int j = 0; j < 4 && g * 4 + j < n; ++j) {
      int64_t i = g * 4 + j;
      bool k = double(PhiloxUniformF(r.v[j])) < keep;
      m[i] = uint8_t(k);
      y[i] = k ? x[i] * scale : T(0);
    }
  }
}

// x: (...) -> y: (...), mask: (...) uint8
void DropoutCuda(const OpRecord& op, const KernelContext& ctx) {
  const double p = op.attrs.Float("p");
  const double keep = 1 - p;
  const int64_t n = op.inputs[0].numel();
  if (n == 0) return;
  FloatDispatch(op.outputs[0].dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    DropoutKernel<<<Blocks((n + 3) / 4), kThreads, 0, Dev(ctx).stream()>>>(
        op.inputs[0].data<T>(), op.outputs[0].data<T>(), op.outputs[1].data<uint8_t>(), n, ctx.rng_seed,
        ctx.rng_base_device, ctx.rng_base, op.rng_offset, keep, T(1 / (1 - p)));
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
__global__ void DropoutGradKernel(const uint8_t* m, const T* dy, T* dx, int64_t n, T scale) {
  LOOM_GRID_STRIDE(i, n) dx[i] = m[i] ? dy[i] * scale : T(0);
}

// mask: (...) uint8, dy: (...) -> dx: (...) = dy * mask / (1 - p)
void DropoutGradCuda(const OpRecord& op, const KernelContext& ctx) {
  const double p = op.attrs.Float("p");
  const int64_t n = op.outputs[0].numel();
  if (n == 0) return;
  FloatDispatch(op.outputs[0].dtype(), "dropout_grad", [&](auto tag) {
    using T = decltype(tag);
    DropoutGradKernel<<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(
        op.inputs[0].data<uint8_t>(), op.inputs[1].data<T>(), op.outputs[0].data<T>(), n, T(1 / (1 - p)));
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// ---------------------------------------------------------------- optimizer updates

using optim::GradMode;
using optim::PrepareGrad;

#include "device/cuda/update_kernels.cuh"

// The clip scale's device address when the record has one, else null.
const double* GradScale(const OpRecord& op) {
  const Tensor* s = optim::GradScaleInput(op);
  return s ? s->data<double>() : nullptr;
}
// The found_inf flag's device address when the record has one, else null.
const float* SkipFlag(const OpRecord& op) {
  const Tensor* f = optim::SkipFlag(op);
  return f ? f->data<float>() : nullptr;
}
// The 16-bit copy's device address when the record has one, else null; and whether it is bfloat16.
uint16_t* CopyOf(const OpRecord& op) {
  return optim::HasCopy(op) ? static_cast<uint16_t*>(op.outputs.back().raw_data()) : nullptr;
}
int CopyIsBf16(const OpRecord& op) { return optim::HasCopy(op) && op.outputs.back().dtype() == DType::kBFloat16; }

// param: (n), grad: (n), lr: () float64 [, buf: (n)] [, scale: ()] [, found_inf: ()] -> param, buf
// updated in place [, copy: (n) 16-bit]
void SgdUpdateCuda(const OpRecord& op, const KernelContext& ctx) {
  const double mom = op.attrs.Float("momentum", 0), wd = op.attrs.Float("weight_decay", 0);
  const double damp = op.attrs.Float("dampening", 0);
  const bool nesterov = op.attrs.Int("nesterov", 0) != 0;
  const bool has_buf = optim::HasMomentumBuffer(op);
  const double clip = op.attrs.Float("clip_value", 0);
  const int64_t n = op.inputs[0].numel();
  if (n == 0) return;
  FloatDispatch(op.inputs[0].dtype(), "sgd_update", [&](auto tag) {
    using T = decltype(tag);
    optim::DispatchGradMode(op, [&](auto mode) {
      SgdKernel<T, decltype(mode)::value><<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(
          op.outputs[0].data<T>(), op.inputs[1].data<T>(), has_buf ? op.outputs[1].data<T>() : nullptr,
          op.inputs[2].data<double>(), n, T(wd), T(mom), T(1 - damp), int(nesterov), GradScale(op),
          optim::GradMultiplier(op), clip, SkipFlag(op), CopyOf(op), CopyIsBf16(op));
    });
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// param, grad: (n), lr: (), m, v: (n), step: () [, scale: ()] [, found_inf: ()] -> param, m, v in
// place [, copy: (n) 16-bit]
void AdamUpdateCuda(const OpRecord& op, const KernelContext& ctx) {
  const double b1 = op.attrs.Float("beta1"), b2 = op.attrs.Float("beta2"), eps = op.attrs.Float("eps");
  const double wd = op.attrs.Float("weight_decay", 0);
  const bool decoupled = op.attrs.Int("decoupled", 0) != 0;
  const int64_t n = op.inputs[0].numel();
  if (n == 0) return;
  const double clip = op.attrs.Float("clip_value", 0);
  FloatDispatch(op.inputs[0].dtype(), "adam_update", [&](auto tag) {
    using T = decltype(tag);
    optim::DispatchGradMode(op, [&](auto mode) {
      AdamKernel<T, decltype(mode)::value><<<Blocks(n), kThreads, 0, Dev(ctx).stream()>>>(
          op.outputs[0].data<T>(), op.inputs[1].data<T>(), op.outputs[1].data<T>(), op.outputs[2].data<T>(),
          op.inputs[2].data<double>(), op.inputs[5].data<double>(), n, b1, b2, eps, wd, int(decoupled),
          GradScale(op), optim::GradMultiplier(op), clip, SkipFlag(op), CopyOf(op), CopyIsBf16(op));
    });
    LOOM_CUDA_CHECK_LAUNCH();
  });
}

// An update_group of sgd_update or adam_update records: tables of kGroupTable members a launch.
// The members' tensors are found by their places in the record (their attributes are alike, so
// is their layout), without making a record per member at every replay.
void UpdateGroupCuda(const OpRecord& op, const KernelContext& ctx) {
  const size_t n = size_t(op.attrs.Int("members")), k = op.inputs.size() / n, m = op.outputs.size() / n;
  OpRecord first;  // member 0, for the attributes and the layout they imply
  first.def = &GetOp(op.attrs.Str("of"));
  first.attrs = UpdateGroupMemberAttrs(op.attrs);
  first.inputs.assign(op.inputs.begin(), op.inputs.begin() + ptrdiff_t(k));
  first.outputs.assign(op.outputs.begin(), op.outputs.begin() + ptrdiff_t(m));
  first.BindAttrs();
  const bool adam = op.attrs.Str("of") == "adam_update";
  const double mult = optim::GradMultiplier(first), clip = first.attrs.Float("clip_value", 0);
  cudaStream_t s = Dev(ctx).stream();
  GroupTable t;
  auto flush = [&] {
    if (t.count == 0) return;
    const unsigned blocks = unsigned(t.first_block[t.count]);
    FloatDispatch(first.inputs[0].dtype(), "update_group", [&](auto tag) {
      using T = decltype(tag);
      optim::DispatchGradMode(first, [&](auto mode) {
        constexpr GradMode M = decltype(mode)::value;
        if (adam)
          AdamGroupKernel<T, M><<<blocks, kThreads, 0, s>>>(
              t, first.attrs.Float("beta1"), first.attrs.Float("beta2"), first.attrs.Float("eps"),
              first.attrs.Float("weight_decay", 0), int(first.attrs.Int("decoupled", 0) != 0), mult, clip,
              CopyIsBf16(first));
        else
          SgdGroupKernel<T, M><<<blocks, kThreads, 0, s>>>(
              t, first.attrs.Float("weight_decay", 0), first.attrs.Float("momentum", 0),
              first.attrs.Float("dampening", 0), int(first.attrs.Int("nesterov", 0) != 0), mult, clip,
              CopyIsBf16(first));
      });
    });
    LOOM_CUDA_CHECK_LAUNCH();
    t.count = 0;
  };
  // Places in a member's inputs and outputs (optimizer_formulas.h's accessors, on member 0).
  const bool buffer = adam || optim::HasMomentumBuffer(first), copy = optim::HasCopy(first);
  const Tensor* scale = optim::GradScaleInput(first);
  const Tensor* skip = optim::SkipFlag(first);
  const ptrdiff_t scale_at = scale ? scale - first.inputs.data() : -1, skip_at = skip ? skip - first.inputs.data() : -1;
  for (size_t i = 0; i < n; ++i) {
    const Tensor* in = op.inputs.data() + i * k;
    const Tensor* out = op.outputs.data() + i * m;
    const int64_t size = in[0].numel();
    if (size == 0) continue;
    if (t.count == kGroupTable) flush();
    AddGroupMember(t, {out[0].raw_data(), in[1].raw_data(), buffer ? out[1].raw_data() : nullptr,
                       adam ? out[2].raw_data() : nullptr,
                       copy ? static_cast<uint16_t*>(out[m - 1].raw_data()) : nullptr, in[2].data<double>(),
                       adam ? in[5].data<double>() : nullptr, scale_at >= 0 ? in[scale_at].data<double>() : nullptr,
                       skip_at >= 0 ? in[skip_at].data<float>() : nullptr, size});
  }
  flush();
}

// Note [What a kernel supports]: each member as its own kernel supports it, all of one dtype.
bool UpdateGroupCudaSupports(const OpRecord& op) {
  if (!optim::GroupSupported(op, DeviceType::kCUDA)) return false;
  const size_t k = op.inputs.size() / size_t(op.attrs.Int("members"));  // each member's parameter first
  for (size_t i = 0; i < op.inputs.size(); i += k)
    if (op.inputs[i].dtype() != op.inputs[0].dtype()) return false;
  return true;
}

__global__ void IncrementKernel(double* c, const float* skip) {
  if (!skip || *skip == 0.0f) *c += 1;
}

// counter: () float64 [, found_inf: () float32] -> counter + 1 (unchanged when found_inf is set)
void IncrementCuda(const OpRecord& op, const KernelContext& ctx) {
  IncrementKernel<<<1, 1, 0, Dev(ctx).stream()>>>(op.outputs[0].data<double>(),
                                                  op.inputs.size() == 2 ? op.inputs[1].data<float>() : nullptr);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

LOOM_KERNEL(add_bias, kCUDA, AddBiasCuda);
LOOM_KERNEL_SUPPORTS(add_bias, kCUDA, FusedCastSupportedCuda);
LOOM_KERNEL(dropout, kCUDA, DropoutCuda);
LOOM_KERNEL(dropout_grad, kCUDA, DropoutGradCuda);
LOOM_KERNEL(sgd_update, kCUDA, SgdUpdateCuda);
LOOM_KERNEL_SUPPORTS(sgd_update, kCUDA, optim::CopySupported);
LOOM_KERNEL(adam_update, kCUDA, AdamUpdateCuda);
LOOM_KERNEL(update_group, kCUDA, UpdateGroupCuda);
LOOM_KERNEL_SUPPORTS(update_group, kCUDA, UpdateGroupCudaSupports);
LOOM_KERNEL_SUPPORTS(adam_update, kCUDA, optim::CopySupported);
LOOM_KERNEL(increment, kCUDA, IncrementCuda);

}  // namespace cuda
}  // namespace loom
