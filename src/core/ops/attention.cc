// Scaled-dot-product attention and its gradient (Note [Attention keeps no score matrix] in
// core/ops_transformer.h).
#include <algorithm>
#include <cmath>

#include "core/ops/common.h"
#include "core/ops_transformer.h"

LOOM_OP_KIND(attention_grad);
LOOM_OP_KIND(attention_qkv_grad);

namespace loom {

using namespace opdecl;

namespace {

// q: (..., Tq, D), k: (..., Tk, D), v: (..., Tk, Dv) of one float dtype, leading axes equal.
void CheckAttentionInputs(const char* op, const TensorMeta& q, const TensorMeta& k, const TensorMeta& v) {
  static const char* names[] = {"q", "k", "v"};
  const TensorMeta* m[] = {&q, &k, &v};
  for (int i = 0; i < 3; ++i) {
    CheckFloat(op, *m[i], names[i]);
    LOOM_CHECK(m[i]->shape.size() >= 2, ShapeError, "[", op, "] ", names[i], " ", ToString(m[i]->shape),
               " must be (..., T, D)");
    CheckSameDType(op, q, *m[i]);
  }
  const Shape &qs = q.shape, &ks = k.shape, &vs = v.shape;
  const size_t r = qs.size();
  LOOM_CHECK(ks.size() == r && vs.size() == r && std::equal(qs.begin(), qs.end() - 2, ks.begin()) &&
                 std::equal(qs.begin(), qs.end() - 2, vs.begin()),
             ShapeError, "[", op, "] q ", ToString(qs), ", k ", ToString(ks), " and v ", ToString(vs),
             " must have the same leading (batch, head) axes");
  LOOM_CHECK(ks[r - 1] == qs[r - 1], ShapeError, "[", op, "] q ", ToString(qs), " and k ", ToString(ks),
             " must have the same last axis (the head width)");
  LOOM_CHECK(vs[r - 2] == ks[r - 2], ShapeError, "[", op, "] k ", ToString(ks), " and v ", ToString(vs),
             " must have the same number of keys (axis -2)");
  LOOM_CHECK(qs[r - 2] > 0 && ks[r - 2] > 0 && qs[r - 1] > 0, ShapeError, "[", op, "] q ", ToString(qs), " and k ",
             ToString(ks), ": attention needs at least one query, one key and a head width of at least one");
}

void CheckAttentionAttrs(const char* op, const Attrs& a) {
  const int64_t causal = a.Int("causal", 0);
  LOOM_CHECK(causal == 0 || causal == 1, ValueError, "[", op, "] causal must be 0 or 1, got ", causal);
  const double scale = a.Float("scale", 0);
  LOOM_CHECK(std::isfinite(scale) && scale >= 0, ValueError, "[", op, "] scale must be finite and >= 0 (0: 1/sqrt(D)), got ",
             scale);
}

Shape Lead(const Shape& s, size_t drop) { return Shape(s.begin(), s.end() - drop); }

// (y, lse, dy, dlse) for the gradient ops: the forward's outputs and their gradients, zeros for
// an output no gradient reached (the usual lse).
std::vector<Tensor> OutputsAndGrads(const BackwardArgs& a) {
  std::vector<Tensor> o{a.outputs[0], a.outputs[1], a.grad_outputs[0], a.grad_outputs[1]};
  for (size_t i = 0; i < 2; ++i)
    if (!o[2 + i].defined()) o[2 + i] = ops::ZerosLike(o[i]);
  return o;
}

// qkv: (B, T, 3 D) of a float dtype (or bfloat16: QkvResultDType), D a positive multiple of
// heads. Returns D.
int64_t CheckQkv(const char* op, const TensorMeta& qkv, const Attrs& a) {
  if (qkv.dtype != DType::kBFloat16) CheckFloat(op, qkv, "qkv");
  const Shape& s = qkv.shape;
  const int64_t heads = a.Int("heads");
  LOOM_CHECK(heads > 0, ValueError, "[", op, "] heads must be positive, got ", heads);
  LOOM_CHECK(s.size() == 3 && s[2] > 0 && s[2] % (3 * heads) == 0, ShapeError, "[", op, "] qkv ", ToString(s),
             " must be (B, T, 3 D) with D a positive multiple of heads = ", heads);
  LOOM_CHECK(s[1] > 0, ShapeError, "[", op, "] qkv ", ToString(s), " has no positions");
  CheckAttentionAttrs(op, a);
  return s[2] / 3;
}

// The dtype of attention_qkv's results (and of its gradient's inputs other than qkv, and of the
// gradient): qkv's, or float32 for a bfloat16 qkv, which needs out_dtype float32 (Note [Precision
// policy] in core/autocast.h: what the bf16 policy lowers a float32 attention_qkv to).
DType QkvResultDType(const char* op, const TensorMeta& qkv, const Attrs& a) {
  return LoweredResultDType(op, qkv.dtype, a, {DType::kBFloat16}, "attention");
}

// The dtype of y (attention_qkv's output 0) or dqkv (its gradient's): QkvResultDType, or
// bfloat16 for a bfloat16 qkv with out_dtype bfloat16, the float32 result's bfloat16 rounding
// (Note [Attention results kept in bfloat16] in graph/bf16_attention.cc).
DType QkvOutputDType(const char* op, const TensorMeta& qkv, const Attrs& a) {
  if (qkv.dtype == DType::kBFloat16 && a.Int("out_dtype", -1) == int64_t(DType::kBFloat16)) return DType::kBFloat16;
  return QkvResultDType(op, qkv, a);
}

}  // namespace

// q: (..., Tq, D), k: (..., Tk, D), v: (..., Tk, Dv) -> y: (..., Tq, Dv), lse: (..., Tq)
LOOM_OP(attention) {
  def.attrs = {{"causal", kInt}, {"scale", kFloat}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("attention", in, 3);
    CheckAttentionInputs("attention", in[0], in[1], in[2]);
    CheckAttentionAttrs("attention", a);
    Shape y = Lead(in[0].shape, 1);
    y.push_back(in[2].shape.back());
    return std::vector<TensorMeta>{{y, in[0].dtype}, {Lead(in[0].shape, 1), in[0].dtype}};
  };
  def.saved_inputs = {0, 1, 2};
  def.saved_outputs = {0, 1};
  def.backward = [](const BackwardArgs& a) {
    const std::vector<Tensor> o = OutputsAndGrads(a);
    std::vector<Tensor> g =
        Call(op_kind::attention_grad, {a.inputs[0], a.inputs[1], a.inputs[2], o[0], o[1], o[2], o[3]}, a.attrs);
    for (size_t i = 0; i < 3; ++i)
      if (!a.needs_input_grad[i]) g[i] = Tensor();
    return g;
  };
}

// (q, k, v, y, lse, dy, dlse) -> dq, dk, dv: the probabilities recomputed block by block from
// q, k and lse; dS = P (dP - rowsum(dy y) + dlse) with dP = dy v^T.
LOOM_OP(attention_grad) {
  def.internal = "backward of attention";
  def.attrs = {{"causal", kInt}, {"scale", kFloat}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const char* op = "attention_grad";
    CheckArity(op, in, 7);
    CheckAttentionInputs(op, in[0], in[1], in[2]);
    CheckAttentionAttrs(op, a);
    Shape y = Lead(in[0].shape, 1);
    y.push_back(in[2].shape.back());
    const Shape lse = Lead(in[0].shape, 1);
    LOOM_CHECK(in[3].shape == y && in[5].shape == y, ShapeError, "[", op, "] y ", ToString(in[3].shape), " and dy ",
               ToString(in[5].shape), " must be ", ToString(y));
    LOOM_CHECK(in[4].shape == lse && in[6].shape == lse, ShapeError, "[", op, "] lse ", ToString(in[4].shape),
               " and dlse ", ToString(in[6].shape), " must be ", ToString(lse));
    for (size_t i = 3; i < 7; ++i) CheckSameDType(op, in[0], in[i]);
    return std::vector<TensorMeta>{in[0], in[1], in[2]};
  };
}

// qkv: (B, T, 3 D), each row q | k | v with head h in columns [h D / heads, (h + 1) D / heads)
// of each third -> y: (B, T, D) (heads side by side), lse: (B, heads, T)
// out_dtype (optional): float32 for a bfloat16 qkv, the products from bfloat16 operands and
// everything else in float32, y rounded to bfloat16 values (Note [Precision policy]: what the
// bf16 policy lowers a float32 attention_qkv to); bfloat16 for a bfloat16 qkv, the same y kept
// in bfloat16 and lse float32 (Note [Attention results kept in bfloat16] in
// graph/bf16_attention.cc); otherwise qkv's own dtype.
LOOM_OP(attention_qkv) {
  def.attrs = {{"heads", kInt}, {"causal", kInt}, {"scale", kFloat}, {"out_dtype", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("attention_qkv", in, 1);
    const int64_t dim = CheckQkv("attention_qkv", in[0], a);
    const DType y = QkvOutputDType("attention_qkv", in[0], a);
    const DType lse = in[0].dtype == DType::kBFloat16 ? DType::kFloat32 : y;
    const Shape& s = in[0].shape;
    return std::vector<TensorMeta>{{{s[0], s[1], dim}, y}, {{s[0], a.Int("heads"), s[1]}, lse}};
  };
  def.saved_inputs = {0};
  def.saved_outputs = {0, 1};
  def.backward = [](const BackwardArgs& a) {
    LOOM_CHECK(a.inputs[0].dtype() != DType::kBFloat16, DTypeError,
               "[attention_qkv] an attention of a bfloat16 qkv is not differentiated (Note [Precision policy]: the "
               "policy lowers the float32 op and its gradient, never differentiates the lowered one)");
    const std::vector<Tensor> o = OutputsAndGrads(a);
    Attrs attrs = a.attrs;
    attrs.Bind(op_kind::attention_qkv_grad);
    if (!a.grad_outputs[1].defined()) attrs.Set("zero_dlse", int64_t(1));  // dlse: the zeros OutputsAndGrads made
    return std::vector<Tensor>{Call1(op_kind::attention_qkv_grad, {a.inputs[0], o[0], o[1], o[2], o[3]}, attrs)};
  };
}

// (qkv, y, lse, dy, dlse) -> dqkv: (B, T, 3 D), laid out as qkv. With a bfloat16 qkv and
// out_dtype float32 (the bf16 policy's record): y, lse, dy, dlse and dqkv float32, dqkv rounded
// to bfloat16 values; with out_dtype bfloat16, the same dqkv kept in bfloat16, and with a
// bfloat16 qkv y may be the forward's bfloat16 y (Note [Attention results kept in bfloat16]).
// zero_dlse (optional, 0 or 1): 1 says dlse holds zeros (no gradient reached lse, the usual case:
// attention_qkv's backward sets it when it made those zeros), so a kernel may leave the dlse term
// out (cuDNN's fused attention has none: Note [Attention on cuDNN] in device/cuda/cudnn_attention.h).
LOOM_OP(attention_qkv_grad) {
  def.internal = "backward of attention_qkv";
  def.attrs = {{"heads", kInt}, {"causal", kInt}, {"scale", kFloat}, {"out_dtype", kInt}, {"zero_dlse", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const char* op = "attention_qkv_grad";
    CheckArity(op, in, 5);
    const int64_t zero_dlse = a.Int("zero_dlse", 0);
    LOOM_CHECK(zero_dlse == 0 || zero_dlse == 1, ValueError, "[", op, "] zero_dlse must be 0 or 1, got ", zero_dlse);
    const int64_t dim = CheckQkv(op, in[0], a);
    const bool low = in[0].dtype == DType::kBFloat16;
    const DType out = QkvOutputDType(op, in[0], a), rest = low ? DType::kFloat32 : out;
    const Shape& s = in[0].shape;
    const Shape y{s[0], s[1], dim}, lse{s[0], a.Int("heads"), s[1]};
    LOOM_CHECK(in[1].shape == y && in[3].shape == y, ShapeError, "[", op, "] y ", ToString(in[1].shape), " and dy ",
               ToString(in[3].shape), " must be ", ToString(y));
    LOOM_CHECK(in[2].shape == lse && in[4].shape == lse, ShapeError, "[", op, "] lse ", ToString(in[2].shape),
               " and dlse ", ToString(in[4].shape), " must be ", ToString(lse));
    for (size_t i = 1; i < 5; ++i)
      LOOM_CHECK(in[i].dtype == rest || (low && i == 1 && in[i].dtype == DType::kBFloat16), DTypeError, "[", op,
                 "] input ", i, " is ", Name(in[i].dtype), ", expected ", Name(rest),
                 low && i == 1 ? " or bfloat16" : "", " (qkv is ", Name(in[0].dtype), ")");
    return std::vector<TensorMeta>{{s, out}};
  };
}

namespace ops {
Tensor AttentionQkv(const Tensor& qkv, int64_t heads, bool causal, double scale) {
  return Call(op_kind::attention_qkv, {qkv}, Attrs{{"heads", heads}, {"causal", int64_t(causal)}, {"scale", scale}})[0];
}
Tensor Attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  return Call(op_kind::attention, {q, k, v}, Attrs{{"causal", int64_t(causal)}, {"scale", scale}})[0];
}
}  // namespace ops

}  // namespace loom
