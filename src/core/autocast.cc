// Note [Precision policy] (autocast.h).
#include "core/autocast.h"

#include "core/device.h"
#include "core/error.h"

LOOM_OP_KIND(cast);
LOOM_OP_KIND(matmul);

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

bool Lowers(const OpRecord& op, Precision p) {
  if (p == Precision::kFloat32 || op.def != &op_kind::matmul || op.inputs.size() != 2 || op.outputs.size() != 1)
    return false;
  return op.inputs[0].dtype() == DType::kFloat32 && op.inputs[1].dtype() == DType::kFloat32 &&
         op.outputs[0].dtype() == DType::kFloat32 && op.inputs[0].device() &&
         op.inputs[0].device()->HasKernel(op_kind::matmul);
}

std::vector<OpRecord> Lower(const OpRecord& op, Precision p, const std::function<Tensor(const Tensor&)>& reuse) {
  LOOM_ASSERT(Lowers(op, p), "Lower: ", op.name(), " is not lowered at ", Name(p));
  std::vector<OpRecord> out;
  OpRecord product = op;
  for (Tensor& in : product.inputs) {
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
    in = low;
  }
  product.attrs.Set("out_dtype", int64_t(DType::kFloat32));
  product.BindAttrs();
  out.push_back(std::move(product));
  return out;
}

}  // namespace loom
