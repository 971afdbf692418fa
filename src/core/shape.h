// Shapes and strides, in elements. A rank-0 shape {} is a scalar with one element.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

using Shape = std::vector<int64_t>;

// Note [Checked sizes]
// Every size computed from a shape goes through NumElements or ByteSize, and they check it once:
// a negative dimension, a product of dimensions that overflows, or a tensor above
// kMaxTensorBytes throws ShapeError naming `op` and the shape. Nothing downstream re-checks, so
// element and byte offsets (int64) of any tensor that exists cannot overflow. A dimension of 0
// does not excuse the others: (0, 2^40, 2^40) is refused, its strides would overflow.
constexpr int64_t kMaxTensorBytes = int64_t(1) << 56;  // 64 PiB: far above any memory, far below 2^63
int64_t NumElements(const Shape& s, const char* op = "shape");
int64_t ByteSize(const Shape& s, size_t itemsize, const char* op);  // NumElements(s) * itemsize
std::string ToString(const Shape& s);             // "(2, 3)"
Shape ContiguousStrides(const Shape& s);          // row-major
// Numpy broadcasting of two shapes; throws ShapeError naming `op` when they do not broadcast.
Shape BroadcastShapes(const Shape& a, const Shape& b, const char* op);
// The batch dimensions of a stack of matrices (..., R, C): all but the last two.
Shape BatchOf(const Shape& s);
// Maps a possibly negative axis into [0, rank); throws ValueError naming `op`.
int64_t NormalizeAxis(int64_t axis, int64_t rank, const char* op);

}  // namespace loom
