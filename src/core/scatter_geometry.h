// Where scatter_elements and gather_elements read and write (Note [Element scatter and gather]
// in src/core/ops/scatter.cc), shared by the CPU and CUDA kernels so that both walk the same
// lines in the same order. Host code, except the LOOM_HD functions, which CUDA kernels call too.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/host_device.h"
#include "core/shape.h"

namespace loom {

// The index tensor's shape E cut into lines along the axis: line l holds the entries whose
// coordinates off the axis are l's (row-major over E without the axis).
struct ElementLines {
  static constexpr int kMaxRank = 8;
  int rank = 0, axis = 0;
  int64_t e[kMaxRank] = {};   // E, the indices' (and updates') shape
  int64_t es[kMaxRank] = {};  // E's contiguous strides
  int64_t xs[kMaxRank] = {};  // x's contiguous strides
  int64_t lines = 0;          // numel(E) / E[axis]
  int64_t len = 0;            // E[axis]: entries per line
  int64_t axis_dim = 0;       // x's dim along the axis: the indices' range
};

// x: (D...), indices (E...), axis in [-rank, rank) (the op's attribute): the lines of E in x.
inline ElementLines MakeElementLines(const char* op, const Shape& x, const Shape& e, int64_t axis) {
  ElementLines g;
  if (axis < 0) axis += int64_t(x.size());
  LOOM_CHECK(x.size() <= size_t(ElementLines::kMaxRank), ShapeError, "[", op, "] rank ", x.size(),
             " is above the ", ElementLines::kMaxRank, " supported");
  g.rank = int(x.size());
  g.axis = int(axis);
  Shape xs = ContiguousStrides(x), es = ContiguousStrides(e);
  g.lines = 1;
  for (int d = 0; d < g.rank; ++d) {
    g.e[d] = e[size_t(d)];
    g.es[d] = es[size_t(d)];
    g.xs[d] = xs[size_t(d)];
    if (d != g.axis) g.lines *= e[size_t(d)];
  }
  g.len = e[size_t(axis)];
  g.axis_dim = x[size_t(axis)];
  return g;
}

// Line l: the position in E of its first entry (the next ones follow g.es[axis] apart) and the
// offset in x of its elements without the axis term.
LOOM_HD void LineStart(const ElementLines& g, int64_t l, int64_t* pos, int64_t* xbase) {
  *pos = 0;
  *xbase = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    if (d == g.axis) continue;
    const int64_t c = l % g.e[d];
    l /= g.e[d];
    *pos += c * g.es[d];
    *xbase += c * g.xs[d];
  }
}

// An index as an offset along the axis (negative counts from the end), or -1 when out of range.
LOOM_HD int64_t AxisIndex(const ElementLines& g, long long k) {
  if (k < 0) k += g.axis_dim;
  return k < 0 || k >= g.axis_dim ? -1 : int64_t(k);
}

}  // namespace loom
