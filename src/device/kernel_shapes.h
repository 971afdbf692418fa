// How kernels view their operands, shared by every backend so that the CPU and CUDA kernels of
// an op agree on the layout by construction (STYLE.md: share shape logic, not copies of it).
#pragma once

#include <cstdint>
#include <vector>

#include "core/attrs.h"
#include "core/shape.h"

namespace loom {

// A reduction over the run of axes [a0, a1): the input seen as (outer, r, inner).
struct ReduceDims {
  int64_t outer = 1, r = 1, inner = 1;
};
inline ReduceDims MakeReduceDims(const Shape& s, int64_t a0, int64_t a1) {
  ReduceDims d;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    if (i < a0) d.outer *= s[size_t(i)];
    else if (i < a1) d.r *= s[size_t(i)];
    else d.inner *= s[size_t(i)];
  }
  return d;
}

// An op along one axis (softmax and friends): the input seen as (outer, n, inner).
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
inline AxisSplit SplitAt(const Shape& s, int64_t axis, const char* op) {
  AxisSplit r;
  if (s.empty()) return r;  // a scalar: one line of length 1
  int64_t a = NormalizeAxis(axis, int64_t(s.size()), op);
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    if (i < a) r.outer *= s[size_t(i)];
    else if (i == a) r.n = s[size_t(i)];
    else r.inner *= s[size_t(i)];
  }
  return r;
}

// 2-D pooling: x (N, C, H, W) -> y (N, C, OH, OW) as planes = N * C images.
struct PoolDims {
  int64_t planes, h, w, oh, ow;
  int64_t kh, kw, sh, sw, ph, pw;
};
inline PoolDims MakePoolDims(const Attrs& a, const Shape& x, const Shape& y) {
  const std::vector<int64_t>& k = a.Ints("kernel");
  const std::vector<int64_t>& s = a.Ints("stride");
  const std::vector<int64_t>& p = a.Ints("padding");
  return PoolDims{x[0] * x[1], x[2], x[3], y[2], y[3], k[0], k[1], s[0], s[1], p[0], p[1]};
}

}  // namespace loom
