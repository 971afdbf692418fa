// Building the op-case table (op_cases.cc, op_cases_cnn.cc): the row builder and the helpers
// the families share. Not for use outside those files.
#pragma once

#include <cmath>
#include <deque>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/harness.h"
#include "common/op_cases.h"

namespace loom {
namespace test {
namespace table {

inline constexpr DType kF32 = DType::kFloat32, kF64 = DType::kFloat64;
inline const std::vector<DType> kFloats = {kF32, kF64};

class Table {
 public:
  // A row of `op` at `dtype` with the default tolerances of the dtype.
  OpCase& Add(const std::string& op, const std::string& variant, DType dtype, Reference ref) {
    OpCase& c = rows_.emplace_back();
    c.op = op;
    c.dtype = dtype;
    c.ref = std::move(ref);
    c.label = op + (variant.empty() ? "" : " " + variant) + " " + Name(dtype);
    const bool f64 = dtype == kF64;
    c.CudaTol(f64 ? 1e-10 : 2e-5, f64 ? 1e-11 : 2e-5).Tol(f64 ? 1e-12 : 1e-5, f64 ? 1e-12 : 1e-6);
    return c;
  }
  std::vector<OpCase> Take() { return std::vector<OpCase>(rows_.begin(), rows_.end()); }

 private:
  std::deque<OpCase> rows_;  // stable references while rows are added
};

inline std::string S(const Shape& s) { return ToString(s); }
inline std::string Num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}
inline std::string Range(double lo, double hi) { return "in [" + Num(lo) + ", " + Num(hi) + ")"; }
inline std::string WithAttrs(const std::string& variant, const Attrs& a) {
  return a.items().empty() ? variant : variant + " " + a.ToString();
}

// Output `which` of `op` for inputs of these shapes and dtypes (the op's own shape inference).
inline Shape OutShape(const std::string& op, const std::vector<TensorMeta>& in, const Attrs& a, size_t which = 0) {
  return GetOp(op).infer(in, a)[which].shape;
}

// An input computed by `op` (output `which`) from earlier inputs of the case.
inline InputSpec OutputOf(const std::string& op, std::vector<int> from, Attrs a, size_t which = 0) {
  return Derived([op, from, a, which](const std::vector<Tensor>& made) {
    std::vector<Tensor> in;
    for (int i : from) in.push_back(made[size_t(i)]);
    return Call(op, in, a)[which];
  });
}

// Uniform values in [lo, hi) made here (optionally on a grid of 0.5), for derived inputs.
inline Tensor UniformTensor(const Shape& s, DType dt, double lo, double hi, bool grid = false) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(size_t(NumElements(s)));
  for (double& x : v) x = grid ? std::round(u(gen) * 2) / 2 : u(gen);
  return FromDoubles(v, s, dt);
}

// An input computed by `op` (output `which`) from a tensor made by `make`: the forward's
// outputs that a gradient op takes (a softmax, log-probabilities, argmax indices).
inline InputSpec OpOn(const std::string& op, std::function<Tensor()> make, Attrs a, size_t which = 0) {
  return Derived([op, make, a, which](const std::vector<Tensor>&) { return Call(op, {make()}, a)[which]; });
}

// The rows of the convolutional-network ops (op_cases_cnn.cc).
void AddCnnCases(Table& t);
// The rows of the collectives on a 1-rank communicator (op_cases_collective.cc).
void AddCollectiveCases(Table& t);
// The rows of the transformer ops (op_cases_transformer.cc).
void AddTransformerCases(Table& t);
// The rows of dynamic loss scaling and skipped updates (op_cases_loss_scale.cc).
void AddLossScaleCases(Table& t);

}  // namespace table
}  // namespace test
}  // namespace loom
