#include "core/shape.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace loom {

namespace {
// The product of the dimensions, each counted as at least 1 (Note [Checked sizes]).
int64_t CheckedExtent(const Shape& s, const char* op) {
  int64_t extent = 1;
  for (int64_t d : s) {
    LOOM_CHECK(d >= 0, ShapeError, "[", op, "] negative dimension in shape ", ToString(s));
    LOOM_CHECK(!__builtin_mul_overflow(extent, std::max<int64_t>(d, 1), &extent) && extent <= kMaxTensorBytes,
               ShapeError, "[", op, "] shape ", ToString(s), " is too large: its size exceeds 2^56 elements");
  }
  return extent;
}
}  // namespace

int64_t NumElements(const Shape& s, const char* op) {
  int64_t extent = CheckedExtent(s, op);
  for (int64_t d : s)
    if (d == 0) return 0;
  return extent;
}

int64_t ByteSize(const Shape& s, size_t itemsize, const char* op) {
  int64_t extent = CheckedExtent(s, op);
  LOOM_CHECK(extent <= kMaxTensorBytes / int64_t(itemsize), ShapeError, "[", op, "] shape ", ToString(s), " of ",
             itemsize, "-byte elements is too large: it exceeds 2^56 bytes");
  return NumElements(s, op) * int64_t(itemsize);
}

std::string ToString(const Shape& s) {
  std::ostringstream o;
  o << "(";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  if (s.size() == 1) o << ",";
  o << ")";
  return o.str();
}

Shape ContiguousStrides(const Shape& s) {
  CheckedExtent(s, "shape");  // no stride below can overflow
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

Shape BroadcastShapes(const Shape& a, const Shape& b, const char* op) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    LOOM_CHECK(da == db || da == 1 || db == 1, ShapeError, "[", op, "] shapes ", ToString(a), " and ",
               ToString(b), " do not broadcast (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape BatchOf(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

int64_t NormalizeAxis(int64_t axis, int64_t rank, const char* op) {
  int64_t a = axis < 0 ? axis + rank : axis;
  LOOM_CHECK(a >= 0 && a < std::max<int64_t>(rank, 1), ValueError, "[", op, "] axis ", axis,
             " is out of range for a tensor of rank ", rank);
  return a;
}

}  // namespace loom
