#include "common/harness.h"

#include <pthread.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

namespace loom {
namespace test {

const std::vector<DType> kAllDTypes = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                                       DType::kInt32,   DType::kInt64,   DType::kUInt8,   DType::kBool};

namespace {

// A binary floating format: `frac` fraction bits, `ebits` exponent bits (IEEE layout).
struct Format {
  int frac, ebits;
  int bias() const { return (1 << (ebits - 1)) - 1; }
  int emin() const { return 1 - bias(); }  // the smallest normal exponent
};
constexpr Format kHalf{10, 5};
constexpr Format kBFloat{7, 8};

// Nearest value of the format, ties to even (below 2^emin the quantum stays that of 2^emin,
// which gives the subnormals), and infinity past the largest finite value.
double RoundToFormat(double v, Format f) {
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  double a = std::fabs(v);
  double quantum = std::ldexp(1.0, std::max(std::ilogb(a), f.emin()) - f.frac);
  double r = std::nearbyint(a / quantum) * quantum;  // a / quantum is exact: a power-of-two scale
  double largest = std::ldexp(2.0 - std::ldexp(1.0, -f.frac), f.bias());
  if (r > largest) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, v);
}

// The bits of `v`, a value of the format (rounded already).
uint16_t FormatBits(double v, Format f) {
  const uint32_t sign = std::signbit(v) ? 1u << 15 : 0;
  const uint32_t exp_all = ((1u << f.ebits) - 1) << f.frac;
  if (std::isnan(v)) return uint16_t(sign | exp_all | (1u << (f.frac - 1)));
  if (std::isinf(v)) return uint16_t(sign | exp_all);
  double a = std::fabs(v);
  if (a == 0) return uint16_t(sign);
  int e = std::ilogb(a);
  if (e < f.emin()) return uint16_t(sign | uint32_t(std::ldexp(a, f.frac - f.emin())));  // subnormal
  uint32_t mant = uint32_t(std::ldexp(a, f.frac - e)) - (1u << f.frac);
  return uint16_t(sign | (uint32_t(e + f.bias()) << f.frac) | mant);
}

double FormatValue(uint16_t bits, Format f) {
  const double sign = (bits >> 15) ? -1.0 : 1.0;
  const int exp = (bits >> f.frac) & ((1 << f.ebits) - 1);
  const uint32_t mant = bits & ((1u << f.frac) - 1);
  if (exp == (1 << f.ebits) - 1) return mant ? std::nan("") : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(double(mant), f.emin() - f.frac);
  return sign * std::ldexp(double(mant + (1u << f.frac)), exp - f.bias() - f.frac);
}

template <typename T>
void Put(std::vector<uint8_t>& out, size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}
template <typename T>
T Get(const std::vector<uint8_t>& in, size_t i) {
  T v;
  std::memcpy(&v, in.data() + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

double RoundTo(DType dtype, double v) {
  switch (dtype) {
    case DType::kFloat32: return double(float(v));
    case DType::kFloat64: return v;
    case DType::kFloat16: return RoundToFormat(v, kHalf);
    case DType::kBFloat16: return RoundToFormat(v, kBFloat);
    case DType::kInt32: return double(int32_t(v));
    case DType::kInt64: return double(int64_t(v));
    case DType::kUInt8: return double(uint8_t(v));
    case DType::kBool: return v != 0 ? 1.0 : 0.0;
  }
  return v;
}

std::vector<uint8_t> EncodeHost(const std::vector<double>& values, DType dtype) {
  std::vector<uint8_t> out(values.size() * SizeOf(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    double r = RoundTo(dtype, values[i]);
    switch (dtype) {
      case DType::kFloat32: Put(out, i, float(r)); break;
      case DType::kFloat64: Put(out, i, r); break;
      case DType::kFloat16: Put(out, i, FormatBits(r, kHalf)); break;
      case DType::kBFloat16: Put(out, i, FormatBits(r, kBFloat)); break;
      case DType::kInt32: Put(out, i, int32_t(r)); break;
      case DType::kInt64: Put(out, i, int64_t(r)); break;
      case DType::kUInt8:
      case DType::kBool: Put(out, i, uint8_t(r)); break;
    }
  }
  return out;
}

std::vector<double> DecodeHost(const std::vector<uint8_t>& bytes, DType dtype) {
  std::vector<double> out(bytes.size() / SizeOf(dtype));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype) {
      case DType::kFloat32: out[i] = Get<float>(bytes, i); break;
      case DType::kFloat64: out[i] = Get<double>(bytes, i); break;
      case DType::kFloat16: out[i] = FormatValue(Get<uint16_t>(bytes, i), kHalf); break;
      case DType::kBFloat16: out[i] = FormatValue(Get<uint16_t>(bytes, i), kBFloat); break;
      case DType::kInt32: out[i] = Get<int32_t>(bytes, i); break;
      case DType::kInt64: out[i] = double(Get<int64_t>(bytes, i)); break;
      case DType::kUInt8: out[i] = Get<uint8_t>(bytes, i); break;
      case DType::kBool: out[i] = Get<uint8_t>(bytes, i) != 0; break;
    }
  }
  return out;
}

Tensor TensorWithBytes(const Shape& shape, DType dtype, const std::vector<uint8_t>& bytes,
                       const std::shared_ptr<Device>& dev) {
  Tensor t(shape, dtype, dev);
  t.CopyFromHost(bytes.data(), bytes.size());
  return t;
}

Tensor FromDoubles(const std::vector<double>& values, const Shape& shape, DType dtype,
                   const std::shared_ptr<Device>& dev) {
  LOOM_CHECK(int64_t(values.size()) == NumElements(shape), ShapeError, "[test] ", values.size(),
             " values do not fill shape ", ToString(shape));
  return TensorWithBytes(shape, dtype, EncodeHost(values, dtype), dev);
}

Tensor RandomTensor(const Shape& shape, DType dtype, uint32_t seed, double lo, double hi,
                    const std::shared_ptr<Device>& dev) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(NumElements(shape)));
  for (double& x : v) x = dist(gen);
  return FromDoubles(v, shape, dtype, dev);
}

std::vector<uint8_t> HostBytes(const Tensor& t) {
  Tensor c = t.is_contiguous() ? t : t.Detach().Contiguous();
  std::vector<uint8_t> bytes(c.nbytes());
  CheckHostReadAllowed(c, "host_bytes");
  c.device()->Synchronize();
  if (!bytes.empty()) c.device()->MemcpyToHost(bytes.data(), c.raw_data(), bytes.size());
  return bytes;
}

std::vector<double> ToDoubles(const Tensor& t) { return DecodeHost(HostBytes(t), t.dtype()); }

Tensor ToDevice(const Tensor& t, const std::shared_ptr<Device>& dev) {
  return TensorWithBytes(t.shape(), t.dtype(), HostBytes(t), dev);
}

bool SameBitsAnyNaN(const Tensor& a, const Tensor& b) {
  const std::vector<uint8_t> x = HostBytes(a), y = HostBytes(b);
  if (a.dtype() != b.dtype() || x.size() != y.size()) return false;
  if (!IsFloating(a.dtype())) return x == y;
  const std::vector<double> u = DecodeHost(x, a.dtype()), v = DecodeHost(y, b.dtype());
  const size_t e = SizeOf(a.dtype());
  for (size_t i = 0; i < u.size(); ++i)
    if (!(std::isnan(u[i]) && std::isnan(v[i])) && std::memcmp(&x[i * e], &y[i * e], e) != 0) return false;
  return true;
}

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bool ok = got[i] == want[i] || std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]) ||
              (std::isnan(got[i]) && std::isnan(want[i]));
    if (!ok && bad++ == 0) first = i;
  }
  if (bad)
    ADD_FAILURE() << what << ": element " << first << " is " << got[first] << ", expected " << want[first]
                  << " (tolerance " << atol + rtol * std::abs(want[first]) << "); " << bad << " of " << got.size()
                  << " elements are off";
}

bool SameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

void GradCheck(const OpFn& f, std::vector<Tensor> inputs, double eps, double tol, const std::string& what,
               const std::vector<bool>& differentiable) {
  auto checked = [&](size_t i) {
    return inputs[i].dtype() == DType::kFloat64 && (differentiable.empty() || differentiable[i]);
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    if (checked(i)) inputs[i] = inputs[i].Detach().set_requires_grad(true);
  Tensor y = f(inputs);
  Tensor r = RandomTensor(y.shape(), y.dtype(), 1234, -1, 1, y.device_ptr());  // the seed has the dtype of y
  std::vector<double> rv = ToDoubles(r);
  std::vector<std::vector<double>> analytic(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (checked(i)) analytic[i].assign(size_t(inputs[i].numel()), 0.0);
  Backward(y, [&](const Tensor& p, const Tensor& g) {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (checked(i) && p.block() == inputs[i].block()) analytic[i] = ToDoubles(g);
  }, r);

  auto loss = [&](const std::vector<Tensor>& in) {
    NoGradGuard ng;
    std::vector<double> yv = ToDoubles(f(in));
    double s = 0;
    for (size_t k = 0; k < yv.size(); ++k) s += yv[k] * rv[k];
    return s;
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!checked(i)) continue;
    std::vector<double> base = ToDoubles(inputs[i]);
    std::vector<double> numeric(base.size());
    const Shape& shape = inputs[i].shape();
    for (size_t k = 0; k < base.size(); ++k) {
      std::vector<Tensor> in = inputs;
      std::vector<double> v = base;
      v[k] = base[k] + eps;
      in[i] = FromDoubles(v, shape, DType::kFloat64, inputs[i].device_ptr());
      double lp = loss(in);
      v[k] = base[k] - eps;
      in[i] = FromDoubles(v, shape, DType::kFloat64, inputs[i].device_ptr());
      double lm = loss(in);
      numeric[k] = (lp - lm) / (2 * eps);
    }
    ExpectClose(analytic[i], numeric, tol, tol, what + " gradient of input " + std::to_string(i));
  }
}

bool GpuRequired() {
  const char* v = std::getenv("LOOM_REQUIRE_GPU");
  return v && std::string(v) == "1";
}

void RunOnSmallStack(const std::function<void()>& fn) {
  struct Job {
    const std::function<void()>* fn;
    std::string failure;
  } job{&fn, ""};
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, size_t(1) << 20), 0);
  auto body = [](void* p) -> void* {
    Job* j = static_cast<Job*>(p);
    try {
      (*j->fn)();
    } catch (const std::exception& e) {
      j->failure = e.what();
    }
    return nullptr;
  };
  pthread_t th;
  const int rc = pthread_create(&th, &attr, body, &job);
  pthread_attr_destroy(&attr);
  ASSERT_EQ(rc, 0);
  pthread_join(th, nullptr);
  EXPECT_EQ(job.failure, "") << "the function run on a small stack threw";
}

}  // namespace test
}  // namespace loom
