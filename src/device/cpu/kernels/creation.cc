// CPU kernels: fill, random fills, strided copy, cast.
#include <cmath>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "device/cpu/kernels/cast.h"
#include "device/cpu/kernels/common.h"
#include "device/philox.h"

namespace loom {
namespace cpu {
namespace {

template <typename T>
void FillTyped(T* y, int64_t n, T v) {
  ParallelFor(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = v;
  });
}

// () -> y: any shape, any dtype: one element's bytes (FillBits, shared with CUDA) repeated
void FillCpu(const OpRecord& op, const KernelContext&) {
  const Tensor& y = op.outputs[0];
  const uint64_t w = FillBits(y.dtype(), op.attrs.Float("value"));
  const int64_t n = y.numel();
  switch (SizeOf(y.dtype())) {
    case 1: FillTyped(static_cast<uint8_t*>(y.raw_data()), n, uint8_t(w)); break;
    case 2: FillTyped(static_cast<uint16_t*>(y.raw_data()), n, uint16_t(w)); break;
    case 4: FillTyped(static_cast<uint32_t*>(y.raw_data()), n, uint32_t(w)); break;
    default: FillTyped(static_cast<uint64_t*>(y.raw_data()), n, w); break;
  }
}

// shape: int32/int64 (R) -> y: attrs.shape, every element attrs.value. The shape tensor must
// still hold the shape the op was recorded with (Note [ConstantOfShape in a graph]).
void ConstantOfShapeCpu(const OpRecord& op, const KernelContext& ctx) {
  const Tensor& shape = op.inputs[0];
  const std::vector<int64_t>& dims = op.attrs.Ints("shape");
  IndexDispatch(shape.dtype(), "constant_of_shape", [&](auto itag) {
    using I = decltype(itag);
    const I* v = shape.data<I>();
    for (size_t d = 0; d < dims.size(); ++d)
      LOOM_CHECK(int64_t(v[d]) == dims[d], ValueError, "[constant_of_shape] the shape tensor holds ", int64_t(v[d]),
                 " at position ", d, " but the op was recorded for shape ", ToString(dims),
                 ": a graph's shapes are fixed when it is captured");
  });
  FillCpu(op, ctx);
}

// Element i uses word i % 4 of Philox(key, base + offset + i / 4): the same numbers whatever the
// thread split, on every backend.
template <typename T, typename F>
void RandomFill(const OpRecord& op, const KernelContext& ctx, F transform) {
  const Tensor& y = op.outputs[0];
  T* p = y.data<T>();
  int64_t n = y.numel();
  uint64_t base = ctx.rng_base + op.rng_offset;
  ParallelFor((n + 3) / 4, kGrain / 4, [&](int64_t b, int64_t e) {
    for (int64_t g = b; g < e; ++g) {
      Philox4 r = Philox4x32(ctx.rng_seed, base + uint64_t(g));
      for (int j = 0; j < 4 && g * 4 + j < n; ++j) p[g * 4 + j] = transform(r, j);
    }
  });
}

// () -> y: float, uniform in [low, high)
void UniformCpu(const OpRecord& op, const KernelContext& ctx) {
  double lo = op.attrs.Float("low"), hi = op.attrs.Float("high");
  FloatDispatch(op.outputs[0].dtype(), "uniform", [&](auto t) {
    using T = decltype(t);
    RandomFill<T>(op, ctx, [&](const Philox4& r, int j) { return T(lo + (hi - lo) * PhiloxUniformF(r.v[j])); });
  });
}

// () -> y: float, normal(mean, std) by Box-Muller on word pairs
void NormalCpu(const OpRecord& op, const KernelContext& ctx) {
  double mean = op.attrs.Float("mean"), sd = op.attrs.Float("std");
  FloatDispatch(op.outputs[0].dtype(), "normal", [&](auto t) {
    using T = decltype(t);
    RandomFill<T>(op, ctx, [&](const Philox4& r, int j) {
      int pair = j & ~1;
      double u1 = (double(r.v[pair] >> 8) + 1.0) * (1.0 / 16777217.0);  // (0, 1]
      double u2 = double(r.v[pair + 1] >> 8) * (1.0 / 16777216.0);
      double rad = std::sqrt(-2.0 * std::log(u1));
      double z = (j & 1) ? rad * std::sin(2 * M_PI * u2) : rad * std::cos(2 * M_PI * u2);
      return T(mean + sd * z);
    });
  });
}

// () -> y: float or uint8, 1 with probability p
void BernoulliCpu(const OpRecord& op, const KernelContext& ctx) {
  double p = op.attrs.Float("p");
  DType dt = op.outputs[0].dtype();
  if (dt == DType::kUInt8 || dt == DType::kBool) {
    RandomFill<uint8_t>(op, ctx, [&](const Philox4& r, int j) { return uint8_t(PhiloxUniformF(r.v[j]) < p); });
    return;
  }
  FloatDispatch(dt, "bernoulli", [&](auto t) {
    using T = decltype(t);
    RandomFill<T>(op, ctx, [&](const Philox4& r, int j) { return T(PhiloxUniformF(r.v[j]) < p ? 1 : 0); });
  });
}

// x: any strides -> y: any strides, same shape and dtype
void CopyCpu(const OpRecord& op, const KernelContext&) {
  const Tensor& x = op.inputs[0];
  const Tensor& y = op.outputs[0];
  size_t es = SizeOf(x.dtype());
  int64_t n = x.numel();
  if (x.is_contiguous() && y.is_contiguous()) {
    const char* s = static_cast<const char*>(x.raw_data());
    char* d = static_cast<char*>(y.raw_data());
    ParallelFor(n, kGrain, [&](int64_t b, int64_t e) { std::memcpy(d + b * es, s + b * es, size_t(e - b) * es); });
    return;
  }
  const Shape& sh = x.shape();
  int64_t rank = int64_t(sh.size());
  int64_t inner = rank ? sh.back() : 1;
  int64_t xs_in = rank ? x.strides().back() : 1, ys_in = rank ? y.strides().back() : 1;
  const char* s = static_cast<const char*>(x.raw_data());
  char* d = static_cast<char*>(y.raw_data());
  ParallelFor(n / std::max<int64_t>(inner, 1), std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)),
              [&](int64_t r0, int64_t r1) {
                for (int64_t r = r0; r < r1; ++r) {
                  int64_t rem = r, ox = 0, oy = 0;
                  for (int64_t dd = rank - 2; dd >= 0; --dd) {
                    int64_t idx = rem % sh[size_t(dd)];
                    rem /= sh[size_t(dd)];
                    ox += idx * x.strides()[size_t(dd)];
                    oy += idx * y.strides()[size_t(dd)];
                  }
                  for (int64_t j = 0; j < inner; ++j)
                    std::memcpy(d + (oy + j * ys_in) * int64_t(es), s + (ox + j * xs_in) * int64_t(es), es);
                }
              });
}

// Reads element i of any dtype as double, writes double into any dtype.
double Load(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::kFloat32: return static_cast<const float*>(p)[i];
    case DType::kFloat64: return static_cast<const double*>(p)[i];
    case DType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kBFloat16: return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kInt32: return static_cast<const int32_t*>(p)[i];
    case DType::kInt64: return double(static_cast<const int64_t*>(p)[i]);
    case DType::kUInt8: return static_cast<const uint8_t*>(p)[i];
    case DType::kBool: return static_cast<const uint8_t*>(p)[i] != 0;
  }
  return 0;
}
void Store(DType t, void* p, int64_t i, double v) {
  switch (t) {
    case DType::kFloat32: static_cast<float*>(p)[i] = float(v); return;
    case DType::kFloat64: static_cast<double*>(p)[i] = v; return;
    case DType::kFloat16: static_cast<uint16_t*>(p)[i] = FloatToHalf(RoundToOddFloat(v)); return;
    case DType::kBFloat16: static_cast<uint16_t*>(p)[i] = FloatToBFloat16(RoundToOddFloat(v)); return;
    case DType::kInt32: static_cast<int32_t*>(p)[i] = int32_t(v); return;
    case DType::kInt64: static_cast<int64_t*>(p)[i] = int64_t(v); return;
    case DType::kUInt8: static_cast<uint8_t*>(p)[i] = uint8_t(v); return;
    case DType::kBool: static_cast<uint8_t*>(p)[i] = v != 0; return;
  }
}

}  // namespace

void CastFloat32To16(const float* f, uint16_t* h, int64_t n, DType to) {
  if (to == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) h[i] = FloatToBFloat16(f[i]);
    return;
  }
  LOOM_ASSERT(to == DType::kFloat16, "CastFloat32To16 to ", Name(to));
  int64_t i = 0;
#if defined(__F16C__)
  // F16C rounds to nearest even as FloatToHalf does, subnormal results and infinities alike
  // (a float32 subnormal input gives +-0 either way); only a NaN's payload may differ, so a
  // group of 8 holding one takes the scalar path.
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(f + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
      for (int64_t k = i; k < i + 8; ++k) h[k] = FloatToHalf(f[k]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) h[i] = FloatToHalf(f[i]);
}

namespace {

// x: (...) any dtype -> y: (...) dtype attr
void CastCpu(const OpRecord& op, const KernelContext&) {
  const Tensor& x = op.inputs[0];
  const Tensor& y = op.outputs[0];
  DType tx = x.dtype(), ty = y.dtype();
  const void* px = x.raw_data();
  void* py = y.raw_data();
  // The precision policy's casts (Note [Precision policy] in core/autocast.h), float32 to 16 bits,
  // without the generic path's switch and double: the same bits (a float32 value rounds to odd
  // as itself), several times faster on a weight matrix.
  if (tx == DType::kFloat32 && (ty == DType::kFloat16 || ty == DType::kBFloat16)) {
    const float* f = static_cast<const float*>(px);
    uint16_t* h = static_cast<uint16_t*>(py);
    ParallelFor(x.numel(), kGrain, [&](int64_t b, int64_t e) { CastFloat32To16(f + b, h + b, e - b, ty); });
    return;
  }
  ParallelFor(x.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) Store(ty, py, i, Load(tx, px, i));
  });
}

}  // namespace

LOOM_KERNEL(fill, kCPU, FillCpu);
LOOM_KERNEL(constant_of_shape, kCPU, ConstantOfShapeCpu);
LOOM_KERNEL(uniform, kCPU, UniformCpu);
LOOM_KERNEL(normal, kCPU, NormalCpu);
LOOM_KERNEL(bernoulli, kCPU, BernoulliCpu);
LOOM_KERNEL(copy, kCPU, CopyCpu);
LOOM_KERNEL(cast, kCPU, CastCpu);

}  // namespace cpu
}  // namespace loom
