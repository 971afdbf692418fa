// The test helper library (test/common, linked into every test executable): tensors made and
// read on the host without loom's own kernels, comparisons, the finite-difference gradient
// check, and the checks every suite uses. The op-case table (op_cases.h) is built on it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/device.h"

namespace loom {
namespace test {

inline std::shared_ptr<Device> Cpu() { return CpuDevice(); }

// An int attribute of a record, 0 where the record does not have it, whatever its op: for tests
// that look for a (layout) attribute across every op of a graph. Attrs::Int(key, 0) would be an
// InternalError on an op that does not declare the key (Note [Declared attributes]).
inline int64_t IntAttrOrZero(const OpRecord& op, const std::string& key) {
  for (const auto& kv : op.attrs.items())
    if (kv.first == key) return op.attrs.Int(key);
  return 0;
}

// The layout attributes (Note [Activation layouts] in graph/layouts.cc) set on a record, space
// separated in the order x_blocked, y_blocked, dx_blocked, dy_blocked, argmax_blocked; empty
// when none is.
inline std::string BlockedAttrs(const OpRecord& op) {
  std::string set;
  for (const char* a : {"x_blocked", "y_blocked", "dx_blocked", "dy_blocked", "argmax_blocked"})
    if (IntAttrOrZero(op, a) != 0) set += std::string(set.empty() ? "" : " ") + a;
  return set;
}

// Every dtype, in declaration order.
extern const std::vector<DType> kAllDTypes;

// ---- host values of any dtype (decoded and encoded here, not by loom's cast kernel) ----

// `v` rounded to the nearest value of `dtype` (ties to even; float16/bfloat16 with subnormals
// and overflow to infinity; integers truncated toward zero; bool: v != 0).
double RoundTo(DType dtype, double v);
// Row-major bytes of `values` in `dtype`; each value is rounded with RoundTo first.
std::vector<uint8_t> EncodeHost(const std::vector<double>& values, DType dtype);
std::vector<double> DecodeHost(const std::vector<uint8_t>& bytes, DType dtype);

// A contiguous tensor on `dev` holding exactly `bytes`.
Tensor TensorWithBytes(const Shape& shape, DType dtype, const std::vector<uint8_t>& bytes,
                       const std::shared_ptr<Device>& dev = CpuDevice());
// A tensor holding `values` rounded to `dtype`.
Tensor FromDoubles(const std::vector<double>& values, const Shape& shape, DType dtype,
                   const std::shared_ptr<Device>& dev = CpuDevice());
// Uniform values in [lo, hi) from a host generator (independent of loom's own RNG).
Tensor RandomTensor(const Shape& shape, DType dtype, uint32_t seed, double lo = -1, double hi = 1,
                    const std::shared_ptr<Device>& dev = CpuDevice());

// The tensor's bytes, row-major (a strided view is copied first), read on the host.
std::vector<uint8_t> HostBytes(const Tensor& t);
// Host copy of a tensor's values as doubles, for any dtype.
std::vector<double> ToDoubles(const Tensor& t);
// A contiguous copy of `t` on `dev`, made through the host.
Tensor ToDevice(const Tensor& t, const std::shared_ptr<Device>& dev);

// ---- comparisons ----

// The same bytes, except that any NaN equals any NaN of a float dtype: IEEE 754 leaves a NaN
// result's sign and payload open (x86 passes an operand's NaN on, CUDA writes its canonical one).
bool SameBitsAnyNaN(const Tensor& a, const Tensor& b);

// Every element within atol + rtol |want| (equal values, infinities included, and NaN against
// NaN pass). Reports the first element that is not and how many are not.
void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                 const std::string& what = "");
// Bit-for-bit equality of lists of float32 values (parameters of two training runs).
bool SameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b);

// ---- gradients ----

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Gradient check in float64: the analytic gradient of L = sum(f(x) * r), for a fixed random
// r, against central differences, for every element of every float64 input (of those marked
// in `differentiable`, when it is given).
void GradCheck(const OpFn& f, std::vector<Tensor> inputs, double eps = 1e-6, double tol = 1e-6,
               const std::string& what = "", const std::vector<bool>& differentiable = {});

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

// Runs fn on a thread with a 1 MiB stack (a worker thread's or a sanitized build's budget, an
// eighth of the main thread's) and fails the test with any exception it throws: a walk that
// recurses once per op of a long history dies there deterministically.
void RunOnSmallStack(const std::function<void()>& fn);

// GPU tests start with this (Note [No GPU, or a broken one] in core/device.h): a CUDA setup
// error fails the test; no GPU (or no CUDA backend) skips it with the reason, or fails it when
// LOOM_REQUIRE_GPU=1 (tools/gpu_check.sh sets it, so a GPU machine never reports "skipped").
bool GpuRequired();  // LOOM_REQUIRE_GPU=1
#define LOOM_REQUIRE_GPU()                                                                          \
  do {                                                                                              \
    const std::string setup_error = ::loom::CudaSetupError();                                       \
    if (!setup_error.empty()) FAIL() << "CUDA is installed but unusable: " << setup_error;          \
    if (!::loom::CudaAvailable()) {                                                                 \
      if (::loom::test::GpuRequired()) FAIL() << "LOOM_REQUIRE_GPU=1 but no CUDA GPU is visible";   \
      GTEST_SKIP() << "no CUDA GPU visible (or loom built without CUDA): GPU test not run";         \
    }                                                                                               \
  } while (0)

}  // namespace test
}  // namespace loom
