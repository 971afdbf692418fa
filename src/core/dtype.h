// Element types. float16 and bfloat16 are storage types: tensors can hold them and `cast`
// converts to and from them, arithmetic kernels run on float32/float64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/half.h"  // FloatToHalf & co.

namespace loom {

enum class DType : uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool };

size_t SizeOf(DType t);
const char* Name(DType t);
bool IsFloating(DType t);  // float32/float64/float16/bfloat16
DType DTypeFromName(const std::string& name);  // "float32" -> kFloat32, throws DTypeError

// One element of `t` holding `v`, as bytes in the low SizeOf(t) bytes of the word (a
// little-endian load of them gives the element): what `fill` and `constant_of_shape` write, on
// every backend (one definition: the CUDA and CPU kernels agree byte for byte). bool: 1 for any
// non-zero v; integers: v truncated toward zero; float16/bfloat16: v rounded once (through
// RoundToOddFloat). CheckFillValue first: an integer element must be able to hold v.
uint64_t FillBits(DType t, double v);
// Throws ValueError naming `op` when `v` is NaN, infinite or outside the range of an integer `t`.
void CheckFillValue(const char* op, DType t, double v);

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };


}  // namespace loom
