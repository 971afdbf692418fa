// What the emulated kernels' tests share (Note [CUDA kernels emulated on the CPU]): random
// inputs, host tensors for the op table's float64 references, and comparisons that fail on any
// element a kernel left unwritten (NaN beforehand).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/op_refs.h"

namespace loom {
namespace test {

// n values uniform in [lo, hi), from seed.
template <typename T>
std::vector<T> Uniform(size_t n, uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = T(u(rng));
  return v;
}

template <typename T>
HostTensor Host(const Shape& s, const std::vector<T>& v) {
  return HostTensor(s, std::vector<double>(v.begin(), v.end()));
}

// Every element within tol (1 + |want|) of the reference; the first few that are not, reported.
template <typename T>
void ExpectNear(const std::vector<T>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size() && reported < 5; ++i)
    if (!(std::abs(double(got[i]) - want[i]) <= tol * (1 + std::abs(want[i]))))
      ++reported, ADD_FAILURE() << what << " [" << i << "]: " << got[i] << " against " << want[i];
}
template <typename T>
void ExpectNear(const std::vector<T>& got, const HostTensor& want, double tol, const std::string& what) {
  ExpectNear(got, want.v, tol, what);
}

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace test
}  // namespace loom
