// Shapes and strides, in elements. A rank-0 shape {} is a scalar with one element.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

using Shape = std::vector<int64_t>;

int64_t NumElements(const Shape& s);
std::string ToString(const Shape& s);             // "(2, 3)"
Shape ContiguousStrides(const Shape& s);          // row-major
// Numpy broadcasting of two shapes; throws ShapeError naming `op` when they do not broadcast.
Shape BroadcastShapes(const Shape& a, const Shape& b, const char* op);
// The batch dimensions of a stack of matrices (..., R, C): all but the last two.
Shape BatchOf(const Shape& s);
// Maps a possibly negative axis into [0, rank); throws ValueError naming `op`.
int64_t NormalizeAxis(int64_t axis, int64_t rank, const char* op);

}  // namespace loom
