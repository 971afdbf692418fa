// Linear algebra: batched matrix products with broadcast batch dimensions, and bias addition.
//
// `matmul` carries three integer attributes, all 0 for the public ops::MatMul:
//   ta, tb     the stored lhs/rhs is the transpose of the operand: lhs (..., K, M), rhs (..., N, K).
//              GEMM transposes for free, so backward never materialises a transposed copy.
//   sum_batch  the output is (M, N), summed over the broadcast batch: the gradient of an operand
//              that was broadcast over the whole batch (a (D, H) weight used by a (B, T, D) input)
//              in one op, with no (B, D, H) intermediate and no separate reduction.
#include "core/ops/common.h"

LOOM_OP_KIND(bias_grad);
LOOM_OP_KIND(matmul);

namespace loom {

using namespace opdecl;

namespace {

struct MatMulDims {
  int64_t m = 0, k = 0, n = 0;
  Shape batch;  // broadcast batch shape of the product
};

MatMulDims InferMatMulDims(const TensorMeta& a, const TensorMeta& b, const Attrs& attrs) {
  const Shape& sa = a.shape;
  const Shape& sb = b.shape;
  LOOM_CHECK(sa.size() >= 2, ShapeError, "[matmul] lhs ", ToString(sa), " must have at least 2 dimensions (..., M, K)");
  LOOM_CHECK(sb.size() >= 2, ShapeError, "[matmul] rhs ", ToString(sb), " must have at least 2 dimensions (..., K, N)");
  bool ta = attrs.Int("ta", 0) != 0, tb = attrs.Int("tb", 0) != 0;
  size_t ra = sa.size(), rb = sb.size();
  MatMulDims d;
  d.m = ta ? sa[ra - 1] : sa[ra - 2];
  int64_t ka = ta ? sa[ra - 2] : sa[ra - 1];
  int64_t kb = tb ? sb[rb - 1] : sb[rb - 2];
  d.n = tb ? sb[rb - 2] : sb[rb - 1];
  LOOM_CHECK(ka == kb, ShapeError, "[matmul] lhs ", ToString(sa), (ta ? " (transposed)" : ""), " and rhs ",
             ToString(sb), (tb ? " (transposed)" : ""), ": inner dimensions ", ka, " and ", kb, " differ");
  d.k = ka;
  Shape ba = BatchOf(sa), bb = BatchOf(sb);
  size_t r = std::max(ba.size(), bb.size());
  d.batch.assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - ba.size() ? 1 : ba[i - (r - ba.size())];
    int64_t y = i < r - bb.size() ? 1 : bb[i - (r - bb.size())];
    LOOM_CHECK(x == y || x == 1 || y == 1, ShapeError, "[matmul] lhs ", ToString(sa), " and rhs ", ToString(sb),
               ": batch dimensions ", ToString(ba), " and ", ToString(bb), " do not broadcast");
    d.batch[i] = x == 1 ? y : x;
  }
  return d;
}

Tensor MatMulT(const Tensor& a, const Tensor& b, bool ta, bool tb, bool sum_batch = false) {
  return Call1(op_kind::matmul, {a, b},
               Attrs{{"ta", int64_t(ta)}, {"tb", int64_t(tb)}, {"sum_batch", int64_t(sum_batch)}});
}

// A contiguous tensor seen with another shape of the same size (no op: the same block).
Tensor ViewAs(const Tensor& t, const Shape& shape) {
  Tensor c = t.Contiguous();
  LOOM_ASSERT(NumElements(shape) == c.numel(), "view ", c.Describe(), " as ", ToString(shape));
  return Tensor(c.block_ptr(), shape, ContiguousStrides(shape), c.offset(), c.dtype());
}

// Gradient of one matmul operand of shape `want`: op(l) op(r) has the product's batch `batch`
// and want's matrix dimensions; it is summed over the batch dimensions that were broadcast.
Tensor OperandGrad(const Tensor& l, const Tensor& r, bool tl, bool tr, const Shape& want, const Shape& batch) {
  Shape full = batch;
  full.push_back(want[want.size() - 2]);
  full.push_back(want.back());
  if (full == want) return MatMulT(l, r, tl, tr);
  // Broadcast over the whole batch (a weight): one op sums the per-batch products.
  if (NumElements(BatchOf(want)) == 1) return ViewAs(MatMulT(l, r, tl, tr, true), want);
  return ops::SumTo(MatMulT(l, r, tl, tr), want);
}

}  // namespace

// a: (..., M, K), b: (..., K, N) -> (..., M, N), or (M, N) with sum_batch
// out_dtype (optional): float32 for bfloat16 or float16 operands, the product computed in float32
// (Note [Precision policy] in core/autocast.h: what the policy lowers a float32 matmul to);
// otherwise the operands' own dtype.
LOOM_OP(matmul) {
  def.attrs = {{"ta", kInt}, {"tb", kInt}, {"sum_batch", kInt}, {"out_dtype", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& attrs) {
    CheckArity("matmul", in, 2);
    const bool half = in[0].dtype == DType::kBFloat16 || in[0].dtype == DType::kFloat16;
    if (!half) {
      CheckFloat("matmul", in[0], "lhs");
      CheckFloat("matmul", in[1], "rhs");
    }
    CheckSameDType("matmul", in[0], in[1]);
    const DType out_dtype =
        LoweredResultDType("matmul", in[0].dtype, attrs, {DType::kBFloat16, DType::kFloat16}, "the product");
    MatMulDims d = InferMatMulDims(in[0], in[1], attrs);
    Shape out = attrs.Int("sum_batch", 0) ? Shape{} : d.batch;
    out.push_back(d.m);
    out.push_back(d.n);
    return std::vector<TensorMeta>{{out, out_dtype}};
  };
  def.saved_inputs = {0, 1};
  // C = op(A) op(B): dop(A) = dC op(B)^T, dop(B) = op(A)^T dC, each written in the stored
  // operand's layout by choosing the transpose flags (no transposed copies).
  def.backward = [](const BackwardArgs& a) {
    LOOM_ASSERT(a.attrs.Int("sum_batch", 0) == 0, "backward of a batch-summed matmul");
    // The policy lowers below autograd (Note [Precision policy]): a differentiated matmul is float.
    LOOM_CHECK(a.input_metas[0].dtype != DType::kBFloat16 && a.input_metas[0].dtype != DType::kFloat16, DTypeError,
               "[matmul] a product of ", Name(a.input_metas[0].dtype), " operands is not differentiable: compute in ",
               "float32 under loom's precision policy (autocast) instead");
    bool ta = a.attrs.Int("ta", 0) != 0, tb = a.attrs.Int("tb", 0) != 0;
    const Tensor& g = a.grad_outputs[0];
    const Tensor& A = a.inputs[0];
    const Tensor& B = a.inputs[1];
    Shape batch = BatchOf(g.shape());
    Tensor ga, gb;
    if (a.needs_input_grad[0])
      ga = ta ? OperandGrad(B, g, tb, true, a.input_metas[0].shape, batch)     // A^T = op(B) dC^T
              : OperandGrad(g, B, false, !tb, a.input_metas[0].shape, batch);  // A = dC op(B)^T
    if (a.needs_input_grad[1])
      gb = tb ? OperandGrad(g, A, true, ta, a.input_metas[1].shape, batch)     // B^T = dC^T op(A)
              : OperandGrad(A, g, !ta, false, a.input_metas[1].shape, batch);  // B = op(A)^T dC
    return std::vector<Tensor>{ga, gb};
  };
}

// x: (..., N), b: (N) -> (..., N)
// out_dtype (optional): y rounded to bfloat16 or float16 from float32 (Note [Casts fused into
// their producers] in graph/fuse_casts.cc).
LOOM_OP(add_bias) {
  def.attrs = {{"out_dtype", kInt}};
  def.shareable_inputs = {0};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("add_bias", in, 2);
    CheckFloat("add_bias", in[0], "x");
    CheckFloat("add_bias", in[1], "bias");
    CheckSameDType("add_bias", in[0], in[1]);
    const Shape& x = in[0].shape;
    const Shape& b = in[1].shape;
    LOOM_CHECK(!x.empty(), ShapeError, "[add_bias] x ", ToString(x), " must have at least 1 dimension (..., N)");
    LOOM_CHECK(b.size() == 1 && b[0] == x.back(), ShapeError, "[add_bias] x ", ToString(x), " and bias ",
               ToString(b), ": bias must have shape (", x.back(), ",)");
    return std::vector<TensorMeta>{{x, FusedCastDType("add_bias", in[0].dtype, a)}};
  };
  def.backward = [](const BackwardArgs& a) {
    CheckNotFusedCast("add_bias", a.attrs);
    const Tensor& g = a.grad_outputs[0];
    return std::vector<Tensor>{g, a.needs_input_grad[1] ? Call1(op_kind::bias_grad, {g}) : Tensor()};
  };
}

// dy: (..., N) -> db: (N), the sum over all leading dimensions. out_dtype (optional): float32 for
// a bfloat16 dy, summed in float32 as the float32 dy of the same values is (Note [Attention
// results kept in bfloat16] in graph/bf16_attention.cc); otherwise dy's own dtype. copy_dtype
// (optional, a float32 dy): one more output, dy rounded to bfloat16 or float16 as the cast op
// rounds it (Note [Casts fused into their producers] in graph/fuse_casts.cc).
LOOM_OP(bias_grad) {
  def.internal = "backward of add_bias";
  def.attrs = {{"out_dtype", kInt}, {"copy_dtype", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("bias_grad", in, 1);
    const bool low = in[0].dtype == DType::kBFloat16;
    if (!low) CheckFloat("bias_grad", in[0]);
    LOOM_CHECK(!in[0].shape.empty(), ShapeError, "[bias_grad] dy ", ToString(in[0].shape),
               " must have at least 1 dimension (..., N)");
    const int64_t o = a.Int("out_dtype", low ? -1 : int64_t(in[0].dtype));
    LOOM_CHECK(o == (low ? int64_t(DType::kFloat32) : int64_t(in[0].dtype)), DTypeError, "[bias_grad] out_dtype ", o,
               " for a ", Name(in[0].dtype), " dy: expected ", low ? "float32 (" : "none or the dy's (",
               low ? int64_t(DType::kFloat32) : int64_t(in[0].dtype), ")");
    std::vector<TensorMeta> out{{{in[0].shape.back()}, DType(o)}};
    if (a.Has("copy_dtype")) {
      const int64_t c = a.Int("copy_dtype");
      LOOM_CHECK(in[0].dtype == DType::kFloat32 && (c == int64_t(DType::kBFloat16) || c == int64_t(DType::kFloat16)),
                 DTypeError, "[bias_grad] copy_dtype ", c, " for a ", Name(in[0].dtype), " dy: a float32 dy's copy is ",
                 "bfloat16 (", int64_t(DType::kBFloat16), ") or float16 (", int64_t(DType::kFloat16), ")");
      out.push_back({in[0].shape, DType(c)});
    }
    return out;
  };
}

namespace ops {
Tensor MatMul(const Tensor& a, const Tensor& b) { return Call1(op_kind::matmul, {a, b}); }
Tensor AddBias(const Tensor& x, const Tensor& b) { return Call1(op_kind::add_bias, {x, b}); }
}  // namespace ops

}  // namespace loom
