#include "core/dtype.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace loom {

size_t SizeOf(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
    case DType::kBool: return 1;
  }
  LOOM_ASSERT(false, "unknown dtype ", int(t));
}

const char* Name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
    case DType::kBool: return "bool";
  }
  return "?";
}

bool IsFloating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
}

DType DTypeFromName(const std::string& name) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                  DType::kInt64, DType::kUInt8, DType::kBool})
    if (name == Name(t)) return t;
  throw DTypeError("[dtype] unknown dtype name '" + name + "'");
}

namespace {
template <typename T>
uint64_t Bits(T x) {
  uint64_t w = 0;
  std::memcpy(&w, &x, sizeof(T));
  return w;
}
}  // namespace

uint64_t FillBits(DType t, double v) {
  switch (t) {
    case DType::kFloat32: return Bits(float(v));
    case DType::kFloat64: return Bits(v);
    case DType::kFloat16: return Bits(FloatToHalf(RoundToOddFloat(v)));
    case DType::kBFloat16: return Bits(FloatToBFloat16(RoundToOddFloat(v)));
    case DType::kInt32: return Bits(int32_t(v));
    case DType::kInt64: return Bits(int64_t(v));
    case DType::kUInt8: return Bits(uint8_t(v));
    case DType::kBool: return Bits(uint8_t(v != 0));
  }
  LOOM_ASSERT(false, "unknown dtype ", int(t));
}

void CheckFillValue(const char* op, DType t, double v) {
  double lo = 0, hi = 0;  // the truncated value must lie in [lo, hi)
  switch (t) {
    case DType::kInt32: lo = -2147483648.0, hi = 2147483648.0; break;
    case DType::kInt64: lo = -9223372036854775808.0, hi = 9223372036854775808.0; break;
    case DType::kUInt8: lo = 0, hi = 256; break;
    default: return;
  }
  const double w = std::trunc(v);
  LOOM_CHECK(std::isfinite(v) && w >= lo && w < hi, ValueError, "[", op, "] value ", v, " does not fit ", Name(t),
             ": expected a finite value in [", lo, ", ", hi, ")");
}

}  // namespace loom
