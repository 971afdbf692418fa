// Note [The op-case table]
// One table of op cases (op_cases.cc) drives every way an op is tested:
//   - forward against an independent float64 reference (op_refs.h), on the CPU, for every row;
//   - gradients against central finite differences in float64, for rows of differentiable ops;
//   - the op captured into a graph and replayed, bitwise against eager on the CPU (docs/design.md
//     invariant 5);
//   - CUDA against the CPU (test/cuda, where a GPU is visible).
// A row names the op by its registered name, its attributes, how each input is made (shape,
// dtype, value range or exact values, a strided view, or computed from earlier inputs by other
// ops), its reference, and which of the modes do not apply and why. Adding an op is: its
// declaration, its kernels, and rows here; test/ops checks that every op with a kernel has one.
// op_check.h runs a row in each mode.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/op_refs.h"
#include "core/op.h"

namespace loom {
namespace test {

// How one input of a case is made: on the CPU, the same values on every run (the generator is
// seeded from the case's label and the input's position).
struct InputSpec {
  enum class Kind {
    kUniform,  // uniform values in [lo, hi), rounded to the dtype
    kGrid,     // uniform values in [lo, hi) rounded to multiples of 0.5: ties for max and pooling
    kValues,   // exactly `values`
    kDerived,  // derive(inputs made so far), by other ops on the CPU: a softmax output, a mask...
  };
  Kind kind = Kind::kUniform;
  Shape shape;                  // kDerived: unused
  std::optional<DType> dtype;   // unset: the case's dtype
  double lo = -1, hi = 1;
  std::vector<double> values;
  std::function<Tensor(const std::vector<Tensor>&)> derive;
  std::vector<int64_t> permute;  // non-empty: the input is this permutation (a strided view) of
                                 // the tensor made with `shape`
  bool constant = false;         // never differentiated (labels, masks, statistics); derived
                                 // inputs always are

  InputSpec& As(DType t) { dtype = t; return *this; }
  InputSpec& Permuted(std::vector<int64_t> p) { permute = std::move(p); return *this; }
  InputSpec& Constant() { constant = true; return *this; }
};

InputSpec Uniform(Shape shape, double lo = -1, double hi = 1);
InputSpec Grid(Shape shape, double lo = -2, double hi = 2);
InputSpec Values(Shape shape, std::vector<double> values, std::optional<DType> dtype = std::nullopt);
InputSpec Derived(std::function<Tensor(const std::vector<Tensor>&)> derive);
// A float64 scalar constant: learning rates, step counts.
InputSpec Float64(double v);

struct OpCase {
  // How the op is called: Call, creating its outputs; CallInto updating inputs in place (the
  // optimizer updates); or CallInto fresh outputs of the shapes the op infers (creation ops).
  enum class Outputs { kNew, kIntoInputs, kFresh };

  std::string label;  // "<op> <variant> <dtype>", unique
  std::string op;     // registered name
  DType dtype = DType::kFloat32;
  Attrs attrs;
  std::vector<InputSpec> inputs;
  Reference ref;
  Outputs outputs = Outputs::kNew;
  std::vector<int> into;  // kIntoInputs: output i updates input into[i], or is fresh (-1) of the
                          // shape and dtype the op infers (an update's 16-bit copy)

  // Random ops: the device generator is set to (seed, counter) before the op runs.
  bool random = false;
  uint64_t seed = 4242, counter = 0;

  // The forward check (float32/float64 outputs; others are always compared exactly).
  double rtol = 0, atol = 0;
  // CUDA against the CPU (float32/float64 outputs; exact rows and other outputs byte for byte).
  double cuda_rtol = 0, cuda_atol = 0;
  // 16-bit outputs that are a float32 computation's rounding (attention's bfloat16 y), not a
  // conversion: compared within the tolerances above, as float32 outputs are.
  bool rounded16 = false;
  // The gradient check: by default on float64 rows of differentiable ops whose differentiable
  // inputs have at most kSmallGradElements elements (finite differences cost two runs each).
  std::string no_grad;  // non-empty: never, for this reason
  std::string cpu_only;  // non-empty: not compared on CUDA (its kernel does not take the record), why
  bool force_grad = false;
  double grad_eps = 1e-6, grad_tol = 1e-6;
  static constexpr int64_t kSmallGradElements = 400;

  // ---- building a row ----
  OpCase& In(InputSpec s) { inputs.push_back(std::move(s)); return *this; }
  OpCase& Attr(const std::string& key, AttrValue v) { attrs.Set(key, std::move(v)); return *this; }
  OpCase& Ref(Reference r) { ref = std::move(r); return *this; }
  // The forward check's tolerance. CUDA and the CPU, each within it of the reference, may be
  // twice that apart.
  OpCase& Tol(double r, double a) {
    rtol = r;
    atol = a;
    cuda_rtol = std::max(cuda_rtol, 2 * r);
    cuda_atol = std::max(cuda_atol, 2 * a);
    return *this;
  }
  OpCase& Exact() { return Tol(0, 0); }
  OpCase& Rounded16() { rounded16 = true; return *this; }
  bool exact() const { return rtol == 0 && atol == 0; }
  OpCase& CudaTol(double r, double a) { cuda_rtol = r; cuda_atol = a; return *this; }
  OpCase& NoGrad(std::string why) { no_grad = std::move(why); return *this; }
  OpCase& CpuOnly(std::string why) { cpu_only = std::move(why); return *this; }
  OpCase& Grad() { force_grad = true; return *this; }
  OpCase& GradTol(double eps, double tol) { grad_eps = eps; grad_tol = tol; return *this; }
  OpCase& Into(std::vector<int> in) { outputs = Outputs::kIntoInputs; into = std::move(in); return *this; }
  OpCase& Fresh() { outputs = Outputs::kFresh; return *this; }
  OpCase& Random(uint64_t s = 4242, uint64_t c = 0) { random = true; seed = s; counter = c; return *this; }

  // Whether the gradient check runs on this row, and if not, why.
  bool ChecksGradient(std::string* why = nullptr) const;
};

// The table, built once.
const std::vector<OpCase>& AllOpCases();
// The rows of one op, in table order.
std::vector<const OpCase*> CasesOf(const std::string& op);
// The ops the table has rows for, sorted.
std::vector<std::string> OpsWithCases();

// Ops registered with a CPU kernel that no row can reach, with the reason (checked by test/ops:
// each must really have no row).
const std::vector<std::pair<std::string, std::string>>& OpsWithoutCases();

}  // namespace test
}  // namespace loom
