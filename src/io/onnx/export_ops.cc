// The export table: every loom op with an ONNX (opset 17) counterpart, and how it is written.
// One row per op; adding an op is one row, plus an emit function when no existing one fits.
// Ops not listed (gradients, optimizer updates, collectives, random ops, training-mode batch norm)
// have no ONNX form that computes what loom computes, and are refused by export.cc.
// Views (reshape, transpose, permute) are not ops of a captured graph: export.cc writes them
// where an op reads one (Emitter::In).
#include <cmath>

#include <unordered_map>

#include "core/ops_cnn.h"
#include "core/bias_act_formulas.h"
#include "io/onnx/export_emit.h"

namespace loom {
namespace io {
namespace onnx {

void SetAttr(onnx_pb::NodeProto* n, const std::string& name, int64_t v) {
  onnx_pb::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx_pb::AttributeProto::INT);
  a->set_i(v);
}
void SetAttr(onnx_pb::NodeProto* n, const std::string& name, double v) {
  onnx_pb::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx_pb::AttributeProto::FLOAT);
  a->set_f(float(v));
}
void SetAttr(onnx_pb::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  onnx_pb::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx_pb::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void SetAttr(onnx_pb::NodeProto* n, const std::string& name, const std::string& v) {
  onnx_pb::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx_pb::AttributeProto::STRING);
  a->set_s(v);
}

namespace {

DType InDType(Emitter& e, size_t i) { return e.op().inputs[i].dtype(); }

// ---- one node, inputs and output 0 as they are ----

void EmitSame(Emitter& e, const OpMapping& m) {
  std::vector<std::string> in;
  for (size_t i = 0; i < e.op().inputs.size(); ++i) in.push_back(e.In(i));
  e.Node(m.onnx, in, {e.Out(0)});
}

// x (op) s: a scalar attribute `s` as a constant operand, on the side the op names.
void EmitScalarRight(Emitter& e, const OpMapping& m) {
  e.Node(m.onnx, {e.In(0), e.Scalar(e.op().attrs.Float("s"), InDType(e, 0))}, {e.Out(0)});
}
void EmitScalarLeft(Emitter& e, const OpMapping& m) {
  e.Node(m.onnx, {e.Scalar(e.op().attrs.Float("s"), InDType(e, 0)), e.In(0)}, {e.Out(0)});
}

void EmitLeakyRelu(Emitter& e, const OpMapping&) {
  SetAttr(e.Node("LeakyRelu", {e.In(0)}, {e.Out(0)}), "alpha", e.op().attrs.Float("slope"));
}

// gelu is the tanh approximation (ew::GeluOf); opset 17 has no Gelu, so it is written out:
// 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2 / pi).
void EmitGelu(Emitter& e, const OpMapping&) {
  const DType t = InDType(e, 0);
  const std::string x = e.In(0);
  const std::string x3 = e.Temp("x3"), inner = e.Temp("inner"), scaled = e.Temp("scaled"), th = e.Temp("tanh"),
                    one_plus = e.Temp("one_plus"), half_x = e.Temp("half_x");
  e.Node("Pow", {x, e.Scalar(3, t)}, {x3});
  const std::string cx3 = e.Temp("cx3");
  e.Node("Mul", {x3, e.Scalar(0.044715, t)}, {cx3});
  e.Node("Add", {x, cx3}, {inner});
  e.Node("Mul", {inner, e.Scalar(0.7978845608028654, t)}, {scaled});
  e.Node("Tanh", {scaled}, {th});
  e.Node("Add", {th, e.Scalar(1, t)}, {one_plus});
  e.Node("Mul", {x, e.Scalar(0.5, t)}, {half_x});
  e.Node("Mul", {half_x, one_plus}, {e.Out(0)});
}

// gelu_erf: 0.5 x (1 + Erf(x / sqrt 2)).
void EmitGeluErf(Emitter& e, const OpMapping&) {
  const DType t = InDType(e, 0);
  const std::string x = e.In(0);
  const std::string scaled = e.Temp("scaled"), er = e.Temp("erf"), one_plus = e.Temp("one_plus"),
                    half_x = e.Temp("half_x");
  e.Node("Mul", {x, e.Scalar(0.7071067811865476, t)}, {scaled});
  e.Node("Erf", {scaled}, {er});
  e.Node("Add", {er, e.Scalar(1, t)}, {one_plus});
  e.Node("Mul", {x, e.Scalar(0.5, t)}, {half_x});
  e.Node("Mul", {half_x, one_plus}, {e.Out(0)});
}

void EmitSoftmax(Emitter& e, const OpMapping& m) {
  SetAttr(e.Node(m.onnx, {e.In(0)}, {e.Out(0)}), "axis", e.op().attrs.Int("axis", -1));
}

void EmitClamp(Emitter& e, const OpMapping&) {
  const DType t = InDType(e, 0);
  e.Node("Clip", {e.In(0), e.Scalar(e.op().attrs.Float("lo"), t), e.Scalar(e.op().attrs.Float("hi"), t)},
         {e.Out(0)});
}

// not_equal: Not(Equal(a, b)).
void EmitNotEqual(Emitter& e, const OpMapping&) {
  const std::string eq = e.Temp("equal");
  e.Node("Equal", {e.In(0), e.In(1)}, {eq});
  e.Node("Not", {eq}, {e.Out(0)});
}

// where's condition may be uint8 (nonzero: true); ONNX's is bool.
void EmitWhere(Emitter& e, const OpMapping&) {
  std::string cond = e.In(0);
  if (InDType(e, 0) != DType::kBool) {
    const std::string b = e.Temp("cond");
    SetAttr(e.Node("Cast", {cond}, {b}), "to", int64_t(onnx_pb::TensorProto::BOOL));
    cond = b;
  }
  e.Node("Where", {cond, e.In(1), e.In(2)}, {e.Out(0)});
}

void EmitCast(Emitter& e, const OpMapping&) {
  SetAttr(e.Node("Cast", {e.In(0)}, {e.Out(0)}), "to", int64_t(OnnxFromDType(DType(e.op().attrs.Int("dtype")))));
}

// ---- linear algebra ----

// A stored-transposed matmul operand (attribute ta / tb) is transposed back: its last two axes.
std::string MatMulOperand(Emitter& e, size_t i, const char* flag) {
  std::string v = e.In(i);
  if (!e.op().attrs.Int(flag, 0)) return v;
  const int64_t r = e.op().inputs[i].ndim();
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < r; ++d) perm.push_back(d);
  std::swap(perm[size_t(r - 1)], perm[size_t(r - 2)]);
  const std::string t = e.Temp(std::string("transposed_") + (i == 0 ? "a" : "b"));
  SetAttr(e.Node("Transpose", {v}, {t}), "perm", perm);
  return t;
}

void EmitMatMul(Emitter& e, const OpMapping&) {
  if (e.op().attrs.Int("sum_batch", 0))
    e.Fail("a batch-summed matmul (sum_batch=1, a weight gradient) has no ONNX form");
  e.Node("MatMul", {MatMulOperand(e, 0, "ta"), MatMulOperand(e, 1, "tb")}, {e.Out(0)});
}

// The activation node of a fused op, from `z` to `out` (none: the caller writes z as out).
void EmitAct(Emitter& e, BiasAct act, const std::string& z, const std::string& out) {
  switch (act) {
    case BiasAct::kRelu: e.Node("Relu", {z}, {out}); return;
    case BiasAct::kTanh: e.Node("Tanh", {z}, {out}); return;
    case BiasAct::kSigmoid: e.Node("Sigmoid", {z}, {out}); return;
    case BiasAct::kNone: e.Node("Identity", {z}, {out}); return;
  }
}

// dense_bias_act(x, w, b; act) = act(x w + b) (Note [Dense, bias, activation]): Gemm for a
// matrix x, MatMul + Add for a batch of them, then the activation.
void EmitDenseBiasAct(Emitter& e, const OpMapping&) {
  const BiasAct act = BiasAct(e.op().attrs.Int("act", 0));
  const std::string z = act == BiasAct::kNone ? e.Out(0) : e.Temp("dense");
  if (e.op().inputs[0].ndim() == 2) {
    e.Node("Gemm", {e.In(0), e.In(1), e.In(2)}, {z});
  } else {
    const std::string xw = e.Temp("matmul");
    e.Node("MatMul", {e.In(0), e.In(1)}, {xw});
    e.Node("Add", {xw, e.In(2)}, {z});
  }
  if (act != BiasAct::kNone) EmitAct(e, act, z, e.Out(0));
}

// ---- convolution, pooling, normalisation ----

// ONNX's pads are (h_begin, w_begin, h_end, w_end): loom's padding and padding_end (Note
// [Asymmetric padding] in core/ops_cnn.h).
std::vector<int64_t> Pads(const Attrs& a) {
  const std::vector<int64_t>& p = a.Ints("padding");
  const std::vector<int64_t>& pe = PaddingEnd(a);
  return {p[0], p[1], pe[0], pe[1]};
}

onnx_pb::NodeProto* ConvNode(Emitter& e, const std::string& out) {
  const OpRecord& op = e.op();
  std::vector<std::string> in = {e.In(0), e.In(1)};
  if (op.inputs.size() == 3) in.push_back(e.In(2));
  onnx_pb::NodeProto* n = e.Node("Conv", in, {out});
  const Shape& w = op.inputs[1].shape();
  SetAttr(n, "kernel_shape", std::vector<int64_t>{w[2], w[3]});
  SetAttr(n, "strides", op.attrs.Ints("stride"));
  SetAttr(n, "pads", Pads(op.attrs));
  SetAttr(n, "dilations", op.attrs.Ints("dilation"));
  SetAttr(n, "group", op.attrs.Int("groups"));
  return n;
}

void EmitConv(Emitter& e, const OpMapping&) { ConvNode(e, e.Out(0)); }

// conv2d_relu (made by the fusion pass): Conv, then Relu.
void EmitConvRelu(Emitter& e, const OpMapping&) {
  const std::string z = e.Temp("conv");
  ConvNode(e, z);
  e.Node("Relu", {z}, {e.Out(0)});
}

// max_pool2d's second output (the argmax as int32 plane offsets) is loom's backward state;
// ONNX's Indices differ (int64, flattened over the whole tensor), so only the values are written.
void EmitPool(Emitter& e, const OpMapping& m) {
  const Attrs& a = e.op().attrs;
  onnx_pb::NodeProto* n = e.Node(m.onnx, {e.In(0)}, {e.Out(0)});
  SetAttr(n, "kernel_shape", a.Ints("kernel"));
  SetAttr(n, "strides", a.Ints("stride"));
  SetAttr(n, "pads", Pads(a));
  // Without the attribute the kernels count the padding (pool.cc's default).
  if (std::string(m.onnx) == "AveragePool") SetAttr(n, "count_include_pad", a.Int("count_include_pad", 1));
}

// (N, C, H, W) -> (N, C): GlobalAveragePool keeps (N, C, 1, 1); Flatten drops the 1s and keeps
// the batch dimension symbolic.
void EmitGlobalAvgPool(Emitter& e, const OpMapping&) {
  const std::string p = e.Temp("pooled");
  e.Node("GlobalAveragePool", {e.In(0)}, {p});
  SetAttr(e.Node("Flatten", {p}, {e.Out(0)}), "axis", int64_t(1));
}

void EmitBatchNormInfer(Emitter& e, const OpMapping&) {
  onnx_pb::NodeProto* n = e.Node("BatchNormalization", {e.In(0), e.In(1), e.In(2), e.In(3), e.In(4)}, {e.Out(0)});
  SetAttr(n, "epsilon", e.op().attrs.Float("eps"));
}

// layer_norm's mean and invstd outputs are its backward's; ONNX's optional ones keep the
// normalised axes as 1s, so only Y is written.
void EmitLayerNorm(Emitter& e, const OpMapping&) {
  onnx_pb::NodeProto* n = e.Node("LayerNormalization", {e.In(0), e.In(1), e.In(2)}, {e.Out(0)});
  SetAttr(n, "axis", -int64_t(e.op().inputs[1].ndim()));
  SetAttr(n, "epsilon", e.op().attrs.Float("eps"));
}

// ---- losses (a model exported with its loss, as SINGA's sonnx could) ----

// softmax_cross_entropy(logits (N, C), labels) -> (loss (), lse (N)): ReduceLogSumExp for lse,
// LogSoftmax, then for class indices NegativeLogLikelihoodLoss (mean over the rows), for float
// labels (one-hot or probabilities) the mean over rows of -sum(labels * log_probs).
void EmitSoftmaxCrossEntropy(Emitter& e, const OpMapping&) {
  onnx_pb::NodeProto* lse = e.Node("ReduceLogSumExp", {e.In(0)}, {e.Out(1)});  // axes an attribute in opset 17
  SetAttr(lse, "axes", std::vector<int64_t>{1});
  SetAttr(lse, "keepdims", int64_t(0));
  const std::string logp = e.Temp("log_probs");
  SetAttr(e.Node("LogSoftmax", {e.In(0)}, {logp}), "axis", int64_t(1));
  const DType lt = InDType(e, 1);
  if (lt == DType::kInt32 || lt == DType::kInt64) {
    std::string labels = e.In(1);
    if (lt == DType::kInt32) {
      const std::string l64 = e.Temp("labels");
      SetAttr(e.Node("Cast", {labels}, {l64}), "to", int64_t(onnx_pb::TensorProto::INT64));
      labels = l64;
    }
    SetAttr(e.Node("NegativeLogLikelihoodLoss", {logp, labels}, {e.Out(0)}), "reduction", std::string("mean"));
    return;
  }
  const std::string prod = e.Temp("labels_logp"), rows = e.Temp("row_sums"), mean = e.Temp("mean");
  e.Node("Mul", {e.In(1), logp}, {prod});
  SetAttr(e.Node("ReduceSum", {prod, e.Int64s({1})}, {rows}), "keepdims", int64_t(0));
  SetAttr(e.Node("ReduceMean", {rows}, {mean}), "keepdims", int64_t(0));
  e.Node("Neg", {mean}, {e.Out(0)});
}

// mse(pred, target) -> mean((pred - target)^2) over every element, shape ().
void EmitMse(Emitter& e, const OpMapping&) {
  const std::string d = e.Temp("diff"), sq = e.Temp("squared");
  e.Node("Sub", {e.In(0), e.In(1)}, {d});
  e.Node("Mul", {d, d}, {sq});
  SetAttr(e.Node("ReduceMean", {sq}, {e.Out(0)}), "keepdims", int64_t(0));
}

// ---- shapes, reductions, creation ----

void EmitIdentity(Emitter& e, const OpMapping&) { e.Node("Identity", {e.In(0)}, {e.Out(0)}); }

void EmitConcat(Emitter& e, const OpMapping&) {
  std::vector<std::string> in;
  for (size_t i = 0; i < e.op().inputs.size(); ++i) in.push_back(e.In(i));
  SetAttr(e.Node("Concat", in, {e.Out(0)}), "axis", e.op().attrs.Int("axis"));
}

void EmitSlice(Emitter& e, const OpMapping&) {
  const Attrs& a = e.op().attrs;
  const int64_t axis = a.Int("axis");
  if (axis == 0 && e.dynamic_batch()) e.Fail("slicing the batch axis fixes the batch size (dynamic_batch)");
  e.Node("Slice", {e.In(0), e.Int64s({a.Int("start")}), e.Int64s({a.Int("end")}), e.Int64s({axis})}, {e.Out(0)});
}

void EmitBroadcastTo(Emitter& e, const OpMapping&) {
  const std::vector<int64_t>& shape = e.op().attrs.Ints("shape");
  if (e.dynamic_batch() && !shape.empty() && shape[0] == e.batch())
    e.Fail("the broadcast shape " + ToString(shape) + " fixes the batch size (dynamic_batch)");
  e.Node("Expand", {e.In(0), e.Int64s(shape)}, {e.Out(0)});
}

// sum / max over the axes [begin, end): ReduceSum takes them as an input (opset 13), ReduceMax
// as an attribute (until opset 18).
void EmitReduce(Emitter& e, const OpMapping& m) {
  const Attrs& a = e.op().attrs;
  std::vector<int64_t> axes;
  for (int64_t d = a.Int("begin"); d < a.Int("end"); ++d) axes.push_back(d);
  onnx_pb::NodeProto* n;
  if (std::string(m.onnx) == "ReduceSum") {
    n = e.Node("ReduceSum", {e.In(0), e.Int64s(axes)}, {e.Out(0)});
  } else {
    n = e.Node(m.onnx, {e.In(0)}, {e.Out(0)});
    SetAttr(n, "axes", axes);
  }
  SetAttr(n, "keepdims", a.Int("keepdims"));
}

void EmitFill(Emitter& e, const OpMapping&) {
  const Attrs& a = e.op().attrs;
  const std::vector<int64_t>& shape = a.Ints("shape");
  if (e.dynamic_batch() && !shape.empty() && shape[0] == e.batch())
    e.Fail("a constant of shape " + ToString(shape) + " fixes the batch size (dynamic_batch)");
  const std::string one = e.Scalar(a.Float("value"), DType(a.Int("dtype")));
  e.Node("Expand", {one, e.Int64s(shape)}, {e.Out(0)});
}

// embedding(table (V, D), indices (...)) -> (..., D): Gather along the table's rows.
void EmitEmbedding(Emitter& e, const OpMapping&) {
  SetAttr(e.Node("Gather", {e.In(0), e.In(1)}, {e.Out(0)}), "axis", int64_t(0));
}

}  // namespace

// The table. Keep it sorted by family; `onnx` says what the op becomes.
const std::vector<OpMapping>& OpMappings() {
  static const std::vector<OpMapping> table = {
      // element-wise arithmetic (numpy broadcasting on both sides)
      {"add", "Add", EmitSame},
      {"sub", "Sub", EmitSame},
      {"mul", "Mul", EmitSame},
      {"div", "Div", EmitSame},
      {"pow", "Pow", EmitSame},
      {"add_scalar", "Add", EmitScalarRight},
      {"mul_scalar", "Mul", EmitScalarRight},
      {"pow_scalar", "Pow", EmitScalarRight},
      {"rsub_scalar", "Sub", EmitScalarLeft},
      {"rdiv_scalar", "Div", EmitScalarLeft},
      {"neg", "Neg", EmitSame},
      {"exp", "Exp", EmitSame},
      {"log", "Log", EmitSame},
      {"sqrt", "Sqrt", EmitSame},
      {"abs", "Abs", EmitSame},
      {"erf", "Erf", EmitSame},
      {"sign", "Sign", EmitSame},
      {"ceil", "Ceil", EmitSame},
      {"floor", "Floor", EmitSame},
      {"rounde", "Round", EmitSame},
      {"sin", "Sin", EmitSame},
      {"cos", "Cos", EmitSame},
      {"tan", "Tan", EmitSame},
      {"asin", "Asin", EmitSame},
      {"acos", "Acos", EmitSame},
      {"atan", "Atan", EmitSame},
      {"sinh", "Sinh", EmitSame},
      {"cosh", "Cosh", EmitSame},
      {"asinh", "Asinh", EmitSame},
      {"acosh", "Acosh", EmitSame},
      {"atanh", "Atanh", EmitSame},
      {"clamp", "Clip", EmitClamp},
      {"where", "Where", EmitWhere},
      {"cast", "Cast", EmitCast},
      // comparisons
      {"equal", "Equal", EmitSame},
      {"not_equal", "Equal + Not", EmitNotEqual},
      {"greater", "Greater", EmitSame},
      {"less", "Less", EmitSame},
      {"greater_equal", "GreaterOrEqual", EmitSame},
      {"less_equal", "LessOrEqual", EmitSame},
      // activations
      {"relu", "Relu", EmitSame},
      {"sigmoid", "Sigmoid", EmitSame},
      {"tanh", "Tanh", EmitSame},
      {"softplus", "Softplus", EmitSame},
      {"leaky_relu", "LeakyRelu", EmitLeakyRelu},
      {"gelu", "Pow, Mul, Add, Tanh (the tanh approximation)", EmitGelu},
      {"gelu_erf", "Mul, Erf, Add", EmitGeluErf},
      {"softmax", "Softmax", EmitSoftmax},
      {"log_softmax", "LogSoftmax", EmitSoftmax},
      // linear algebra
      {"matmul", "MatMul (Transpose for a stored-transposed operand)", EmitMatMul},
      {"add_bias", "Add", EmitSame},
      {"dense_bias_act", "Gemm (MatMul + Add for batched x) + Relu/Tanh/Sigmoid", EmitDenseBiasAct},
      {"embedding", "Gather", EmitEmbedding},
      // convolution, pooling, normalisation
      {"conv2d", "Conv", EmitConv},
      {"conv2d_relu", "Conv + Relu", EmitConvRelu},
      {"max_pool2d", "MaxPool", EmitPool},
      {"avg_pool2d", "AveragePool", EmitPool},
      {"global_avg_pool", "GlobalAveragePool + Flatten", EmitGlobalAvgPool},
      {"batch_norm_infer", "BatchNormalization", EmitBatchNormInfer},
      {"layer_norm", "LayerNormalization", EmitLayerNorm},
      // losses
      {"softmax_cross_entropy", "LogSoftmax + NegativeLogLikelihoodLoss (class indices) or Mul, ReduceSum, "
                                "ReduceMean, Neg (float labels)", EmitSoftmaxCrossEntropy},
      {"mse", "Sub, Mul, ReduceMean", EmitMse},
      // shapes, reductions, creation (reshape / transpose / permute are views: export.cc)
      {"copy", "Identity", EmitIdentity},
      {"concat", "Concat", EmitConcat},
      {"slice", "Slice", EmitSlice},
      {"broadcast_to", "Expand", EmitBroadcastTo},
      {"sum", "ReduceSum", EmitReduce},
      {"max", "ReduceMax", EmitReduce},
      {"fill", "Expand of a scalar", EmitFill},
  };
  return table;
}

const OpMapping* FindOpMapping(const OpDef& def) {
  // By OpDef address (Note [Op kinds]): GetOp throws for a name that is not a registered op, so
  // a misspelt row fails the first export instead of never matching.
  static const std::unordered_map<const OpDef*, const OpMapping*> by_def = [] {
    std::unordered_map<const OpDef*, const OpMapping*> m;
    for (const OpMapping& row : OpMappings()) m[&GetOp(row.loom_op)] = &row;
    return m;
  }();
  auto it = by_def.find(&def);
  return it == by_def.end() ? nullptr : it->second;
}

}  // namespace onnx
}  // namespace io
}  // namespace loom
