// Note [Precision policy] (autocast.h).
#include "core/autocast.h"

#include "core/device.h"
#include "core/error.h"

LOOM_OP_KIND(cast);
LOOM_OP_KIND(conv2d);
LOOM_OP_KIND(conv2d_grad_input);
LOOM_OP_KIND(conv2d_grad_weight);
LOOM_OP_KIND(matmul);
LOOM_OP_KIND(attention_qkv);
LOOM_OP_KIND(attention_qkv_grad);
LOOM_OP_KIND(linear_cross_entropy);
LOOM_OP_KIND(gelu);
LOOM_OP_KIND(gelu_erf);
LOOM_OP_KIND(gelu_grad);
LOOM_OP_KIND(gelu_erf_grad);

namespace loom {

const char* Name(Precision p) {
  switch (p) {
    case Precision::kBFloat16: return "bf16";
    case Precision::kFloat16: return "fp16";
    default: return "fp32";
  }
}

Precision PrecisionFromName(const std::string& name) {
  if (name == "fp32" || name == "float32") return Precision::kFloat32;
  if (name == "bf16" || name == "bfloat16") return Precision::kBFloat16;
  if (name == "fp16" || name == "float16") return Precision::kFloat16;
  throw ValueError(detail::Cat("[precision] '", name, "': expected 'fp32' (float32 throughout), 'bf16' (matrix ",
                               "products from bfloat16 operands) or 'fp16' (from float16 operands, with loss scaling), ",
                               "Note [Precision policy]"));
}

DType OperandType(Precision p) {
  switch (p) {
    case Precision::kBFloat16: return DType::kBFloat16;
    case Precision::kFloat16: return DType::kFloat16;
    default: return DType::kFloat32;
  }
}

namespace {
thread_local Precision t_precision = Precision::kFloat32;
}  // namespace

Precision AutocastPrecision() { return t_precision; }
void SetAutocastPrecision(Precision p) { t_precision = p; }
AutocastScope::AutocastScope(Precision p) : previous_(t_precision) { t_precision = p; }
AutocastScope::~AutocastScope() { t_precision = previous_; }

namespace {
bool IsAttention(const OpRecord& op) {
  return op.def == &op_kind::attention_qkv || op.def == &op_kind::attention_qkv_grad;
}
// A GELU or its gradient: lowered to read its input x in bfloat16 (Note [Precision policy]).
bool IsGelu(const OpRecord& op) {
  return op.def == &op_kind::gelu || op.def == &op_kind::gelu_erf || op.def == &op_kind::gelu_grad ||
         op.def == &op_kind::gelu_erf_grad;
}
// The inputs a lowered op reads in 16 bits: a product's two operands, attention's packed qkv, a
// GELU's x (its gradient's input 0, x; dy stays float32).
size_t LoweredOperands(const OpRecord& op) { return IsAttention(op) || IsGelu(op) ? 1 : 2; }

// op with its operands (LoweredOperands) replaced by `low` tensors of the 16-bit type and float32
// results: the record Lower makes, without its casts.
OpRecord LoweredRecord(const OpRecord& op, Precision p, const Tensor* low = nullptr) {
  OpRecord r = op;
  for (size_t i = 0; i < LoweredOperands(op); ++i)
    r.inputs[i] = low ? low[i] : Tensor(op.inputs[i].shape(), OperandType(p), op.inputs[i].device_ptr());
  if (FindAttrDecl(*op.def, "out_dtype")) r.attrs.Set("out_dtype", int64_t(DType::kFloat32));  // not the gradients'
  r.BindAttrs();
  return r;
}
}  // namespace

bool Lowers(const OpRecord& op, Precision p) {
  if (p == Precision::kFloat32 || op.outputs.empty() || op.inputs.empty()) return false;
  for (const Tensor& t : op.outputs)
    if (t.dtype() != DType::kFloat32) return false;
  // The head's product fused with the loss (Note [Cross-entropy fused with the head's product] in
  // core/ops/loss.cc): h and w, at bf16 only, where the device has the kernel.
  if (op.def == &op_kind::linear_cross_entropy) {
    for (int i = 0; i < 2; ++i)
      if (!op.inputs[i].defined() || op.inputs[i].dtype() != DType::kFloat32 || !op.inputs[i].device()) return false;
    return p == Precision::kBFloat16 && op.inputs[0].device()->Supports(LoweredRecord(op, p));
  }
  for (const Tensor& t : op.inputs)
    if (!t.defined() || t.dtype() != DType::kFloat32 || !t.device()) return false;
  // A GELU and its gradient at bf16, where the device has the kernel: x in bfloat16.
  if (IsGelu(op)) return p == Precision::kBFloat16 && op.inputs[0].device()->Supports(LoweredRecord(op, p));
  // Attention over a packed qkv, forward and gradient, at bf16 where the device has the kernel
  // for a bfloat16 qkv (the CPU: blocks of oneDNN's bf16 products; not yet CUDA).
  if (IsAttention(op)) return p == Precision::kBFloat16 && op.inputs[0].device()->Supports(LoweredRecord(op, p));
  if (op.outputs.size() != 1) return false;
  if (op.def == &op_kind::matmul) return op.inputs.size() == 2 && op.inputs[0].device()->HasKernel(op_kind::matmul);
  // A plain conv2d or gradient of one (no layout attributes: the layout passes run later), at
  // bf16, where the device has a kernel for bfloat16 operands (the CPU: oneDNN's, for this
  // geometry).
  static const char* const kForward[] = {"x_blocked", "y_blocked", "w_blocked"};
  static const char* const kGradInput[] = {"dy_blocked", "dx_blocked", "w_blocked"};
  static const char* const kGradWeight[] = {"x_blocked", "dy_blocked", "dw_blocked"};
  const char* const* layouts = op.def == &op_kind::conv2d               ? kForward
                               : op.def == &op_kind::conv2d_grad_input  ? kGradInput
                               : op.def == &op_kind::conv2d_grad_weight ? kGradWeight
                                                                        : nullptr;
  if (!layouts || p != Precision::kBFloat16 || op.inputs.size() < 2) return false;
  for (int i = 0; i < 3; ++i)
    if (op.attrs.Int(layouts[i], 0) != 0) return false;
  return op.inputs[0].device()->Supports(LoweredRecord(op, p));
}

std::vector<OpRecord> Lower(const OpRecord& op, Precision p, const std::function<Tensor(const Tensor&)>& reuse) {
  LOOM_ASSERT(Lowers(op, p), "Lower: ", op.name(), " is not lowered at ", Name(p));
  std::vector<OpRecord> out;
  Tensor lows[2];
  for (size_t i = 0; i < LoweredOperands(op); ++i) {  // a convolution's bias stays float32
    const Tensor& in = op.inputs[i];
    Tensor low = reuse ? reuse(in) : Tensor();
    if (!low.defined()) {
      low = Tensor(in.shape(), OperandType(p), in.device_ptr());
      OpRecord cast;
      cast.def = &op_kind::cast;
      cast.attrs = Attrs{{"dtype", int64_t(OperandType(p))}};
      cast.inputs = {in};
      cast.outputs = {low};
      cast.BindAttrs();
      out.push_back(std::move(cast));
    }
    lows[i] = low;
  }
  out.push_back(LoweredRecord(op, p, lows));
  return out;
}

}  // namespace loom
