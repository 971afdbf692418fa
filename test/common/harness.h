// The op test harness (STYLE.md, "Tests"): forward against a float64 reference, gradients
// against central finite differences, both on any device. Header-only so that every test
// folder can use it.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "device/device.h"

namespace loom {
namespace test {

inline std::shared_ptr<Device> Cpu() { return CpuDevice(); }

// Uniform values in [lo, hi) from a host generator (independent of loom's own RNG).
inline Tensor RandomTensor(const Shape& shape, DType dtype, uint32_t seed, double lo = -1, double hi = 1,
                           std::shared_ptr<Device> dev = CpuDevice()) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(NumElements(shape)));
  for (double& x : v) x = dist(gen);
  Tensor t = ops::FromVector(v, shape, dev);
  return dtype == DType::kFloat64 ? t : ops::Cast(t, dtype);
}

// Host copy of a tensor's values as doubles, for any numeric dtype.
inline std::vector<double> ToDoubles(const Tensor& t) {
  Tensor d = t.dtype() == DType::kFloat64 ? t : ops::Cast(t.Detach(), DType::kFloat64);
  return d.ToVector<double>();
}

inline void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                        const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = atol + rtol * std::abs(want[i]);
    ASSERT_TRUE(std::abs(got[i] - want[i]) <= tol || (std::isnan(got[i]) && std::isnan(want[i])))
        << what << ": element " << i << " is " << got[i] << ", expected " << want[i] << " (tolerance " << tol << ")";
  }
}

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs `f` on float32 casts of `inputs64` and compares with `want` (computed independently, in
// double precision, by the test).
inline void CheckForward32(const OpFn& f, const std::vector<Tensor>& inputs64, const std::vector<double>& want,
                           double rtol = 1e-5, double atol = 1e-6, const std::string& what = "") {
  std::vector<Tensor> in32;
  for (const Tensor& t : inputs64) in32.push_back(IsFloating(t.dtype()) ? ops::Cast(t, DType::kFloat32) : t);
  Tensor y = f(in32);
  ExpectClose(ToDoubles(y), want, rtol, atol, what + " (float32)");
  Tensor y64 = f(inputs64);
  ExpectClose(ToDoubles(y64), want, 1e-12, 1e-12, what + " (float64)");
}

// Gradient check in float64: the analytic gradient of L = sum(f(x) * r), for a fixed random
// r, against central differences, for every element of every floating input.
inline void GradCheck(const OpFn& f, std::vector<Tensor> inputs, double eps = 1e-6, double tol = 1e-6,
                      const std::string& what = "") {
  for (Tensor& t : inputs)
    if (t.dtype() == DType::kFloat64) t = t.Detach().set_requires_grad(true);
  Tensor y = f(inputs);
  Tensor r = RandomTensor(y.shape(), DType::kFloat64, 1234, -1, 1, y.device_ptr());
  std::vector<double> rv = r.ToVector<double>();
  std::vector<std::vector<double>> analytic(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].requires_grad()) analytic[i].assign(size_t(inputs[i].numel()), 0.0);
  Backward(y, [&](const Tensor& p, const Tensor& g) {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (p.block() == inputs[i].block()) analytic[i] = g.ToVector<double>();
  }, r);

  auto loss = [&](const std::vector<Tensor>& in) {
    NoGradGuard ng;
    std::vector<double> yv = f(in).ToVector<double>();
    double s = 0;
    for (size_t k = 0; k < yv.size(); ++k) s += yv[k] * rv[k];
    return s;
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    std::vector<double> base = inputs[i].ToVector<double>();
    std::vector<double> numeric(base.size());
    for (size_t k = 0; k < base.size(); ++k) {
      std::vector<Tensor> in = inputs;
      std::vector<double> v = base;
      v[k] = base[k] + eps;
      in[i] = ops::FromVector(v, inputs[i].shape(), inputs[i].device_ptr());
      double lp = loss(in);
      v[k] = base[k] - eps;
      in[i] = ops::FromVector(v, inputs[i].shape(), inputs[i].device_ptr());
      double lm = loss(in);
      numeric[k] = (lp - lm) / (2 * eps);
    }
    ExpectClose(analytic[i], numeric, tol, tol, what + " gradient of input " + std::to_string(i));
  }
}

// Expects `stmt` to throw exception type E whose message contains `needle`.
#define LOOM_EXPECT_THROW_MSG(stmt, E, needle)                                              \
  do {                                                                                      \
    try {                                                                                   \
      stmt;                                                                                 \
      ADD_FAILURE() << "expected " #E " from: " #stmt;                                      \
    } catch (const E& e) {                                                                  \
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)                      \
          << "message '" << e.what() << "' lacks '" << needle << "'";                       \
    }                                                                                       \
  } while (0)

}  // namespace test
}  // namespace loom
