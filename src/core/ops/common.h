// Helpers for op declarations (shape inference and checks shared by several ops).
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/op.h"
#include "core/ops.h"

namespace loom {
namespace opdecl {

// The attribute types of a declaration, short: def.attrs = {{"axis", kInt}} (Note [Declared
// attributes] in core/attrs.h).
constexpr AttrType kInt = AttrType::kInt, kFloat = AttrType::kFloat, kInts = AttrType::kInts, kStr = AttrType::kStr;

// A declaration made of shared parts: the geometry of a convolution and the attributes its
// gradient adds, say.
inline std::vector<AttrDecl> Join(std::vector<AttrDecl> a, const std::vector<AttrDecl>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

inline void CheckArity(const std::string& op, const std::vector<TensorMeta>& in, size_t n) {
  LOOM_CHECK(in.size() == n, ValueError, "[", op, "] takes ", n, " inputs, got ", in.size());
}

// Arithmetic kernels run on float32 and float64.
inline void CheckFloat(const std::string& op, const TensorMeta& m, const char* what = "input") {
  LOOM_CHECK(m.dtype == DType::kFloat32 || m.dtype == DType::kFloat64, DTypeError, "[", op, "] ", what,
             " must be float32 or float64, got ", Name(m.dtype));
}

inline void CheckSameDType(const std::string& op, const TensorMeta& a, const TensorMeta& b) {
  LOOM_CHECK(a.dtype == b.dtype, DTypeError, "[", op, "] dtypes differ: ", Name(a.dtype), " and ", Name(b.dtype));
}

// The result dtype of an op whose 16-bit operands give float32 results (Note [Precision policy]
// in core/autocast.h: what the policy lowers a float32 op to): for operands of a dtype in
// `lowered` (bfloat16, and float16 for the matmul) out_dtype must say float32; for any other it
// is absent or the operands' own dtype. `what` names what is computed, for the message.
inline DType LoweredResultDType(const std::string& op, DType operands, const Attrs& a,
                                std::initializer_list<DType> lowered, const char* what) {
  const bool half = std::find(lowered.begin(), lowered.end(), operands) != lowered.end();
  const int64_t o = a.Int("out_dtype", half ? -1 : int64_t(operands));
  if (half) {
    LOOM_CHECK(o == int64_t(DType::kFloat32), DTypeError, "[", op, "] ", Name(operands), " operands need out_dtype ",
               "float32 (", int64_t(DType::kFloat32), "), got ", o, ": ", what, " is computed and kept in float32");
    return DType::kFloat32;
  }
  LOOM_CHECK(o == int64_t(operands), DTypeError, "[", op, "] out_dtype ", o, " differs from the operands' ",
             Name(operands), ": only 16-bit operands lowered by the precision policy change dtype");
  return operands;
}

// The result dtype of an element-wise producer that may take a fused cast (Note [Casts fused
// into their producers] in graph/fuse_casts.cc): without out_dtype, the input's; with it, bfloat16
// or float16 from a float32 input, the result rounded as the cast op rounds it.
inline DType FusedCastDType(const std::string& op, DType in, const Attrs& a) {
  const int64_t o = a.Int("out_dtype", int64_t(in));
  if (o == int64_t(in)) return in;
  LOOM_CHECK(in == DType::kFloat32 && (o == int64_t(DType::kBFloat16) || o == int64_t(DType::kFloat16)), DTypeError,
             "[", op, "] out_dtype ", o, " for a ", Name(in), " input: only a float32 result rounded to bfloat16 (",
             int64_t(DType::kBFloat16), ") or float16 (", int64_t(DType::kFloat16),
             ") (Note [Casts fused into their producers])");
  return DType(o);
}

// A producer with a fused cast is made by the graph pass after the backward was recorded: it is
// never differentiated (a user's call with out_dtype is told so).
inline void CheckNotFusedCast(const char* op, const Attrs& a) {
  LOOM_CHECK(!a.Has("out_dtype"), DTypeError, "[", op, "] a result rounded to 16 bits (out_dtype) is not ",
             "differentiated (Note [Casts fused into their producers])");
}

// One float input, one output of the same shape and dtype.
inline std::vector<TensorMeta> UnaryFloat(const std::string& op, const std::vector<TensorMeta>& in) {
  CheckArity(op, in, 1);
  CheckFloat(op, in[0]);
  return {in[0]};
}

// Two float inputs of one dtype; output has their broadcast shape.
inline std::vector<TensorMeta> BinaryBroadcast(const std::string& op, const std::vector<TensorMeta>& in) {
  CheckArity(op, in, 2);
  CheckFloat(op, in[0], "lhs");
  CheckFloat(op, in[1], "rhs");
  CheckSameDType(op, in[0], in[1]);
  return {{BroadcastShapes(in[0].shape, in[1].shape, op.c_str()), in[0].dtype}};
}

// Two float inputs of exactly one shape and dtype (gradient ops: (x or y, dy) -> dx).
inline std::vector<TensorMeta> SameShapePair(const std::string& op, const std::vector<TensorMeta>& in) {
  CheckArity(op, in, 2);
  CheckFloat(op, in[0]);
  CheckSameDType(op, in[0], in[1]);
  LOOM_CHECK(in[0].shape == in[1].shape, ShapeError, "[", op, "] shapes differ: ", ToString(in[0].shape), " and ",
             ToString(in[1].shape));
  return {in[0]};
}

// conv2d's attributes (core/ops/conv.cc), which conv2d_relu, made from a conv2d record, shares.
std::vector<AttrDecl> Conv2dAttrs();

// Creation ops carry their output's shape and dtype as attributes.
inline std::vector<TensorMeta> FromAttrs(const std::vector<TensorMeta>&, const Attrs& a) {
  return {{a.Ints("shape"), DType(a.Int("dtype"))}};
}

}  // namespace opdecl
}  // namespace loom
