// Reductions: sum and max over a run of consecutive axes (the kernels see the input as
// (outer, reduced, inner)); ops::Sum/Mean/Max take any set of axes and chain runs.
#include <algorithm>

#include "core/ops/common.h"

LOOM_OP_KIND(max_grad);

namespace loom {

using namespace opdecl;

// sum and max (and max_grad, which gets max's): the reduced run of axes [begin, end), keepdims.
const std::vector<AttrDecl> kReduceAttrs = {{"begin", kInt}, {"end", kInt}, {"keepdims", kInt}};

namespace {

// Reduced shape for axes [a0, a1) of `s`, with or without the kept unit dimensions.
Shape ReducedShape(const Shape& s, int64_t a0, int64_t a1, bool keepdims) {
  Shape out;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    if (i >= a0 && i < a1) {
      if (keepdims) out.push_back(1);
    } else {
      out.push_back(s[size_t(i)]);
    }
  }
  return out;
}

std::vector<TensorMeta> InferReduce(const std::string& op, const std::vector<TensorMeta>& in, const Attrs& a) {
  CheckArity(op, in, 1);
  CheckFloat(op, in[0]);
  int64_t a0 = a.Int("begin"), a1 = a.Int("end");
  LOOM_ASSERT(a0 >= 0 && a0 <= a1 && a1 <= int64_t(in[0].shape.size()), op, " axes [", a0, ", ", a1, ")");
  return {{ReducedShape(in[0].shape, a0, a1, a.Int("keepdims") != 0), in[0].dtype}};
}

// The gradient of a reduction, shaped like the input with unit reduced dimensions.
Tensor KeepDimsGrad(const BackwardArgs& a) {
  const Shape& in = a.input_metas[0].shape;
  return ops::Reshape(a.grad_outputs[0], ReducedShape(in, a.attrs.Int("begin"), a.attrs.Int("end"), true));
}

}  // namespace

LOOM_OP(sum) {  // attrs: begin, end (the reduced run of axes), keepdims
  def.attrs = kReduceAttrs;
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) { return InferReduce("sum", in, a); };
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{ops::BroadcastTo(KeepDimsGrad(a), a.input_metas[0].shape)};
  };
}

LOOM_OP(max) {  // attrs as sum; ties share the gradient equally
  def.attrs = kReduceAttrs;
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) { return InferReduce("max", in, a); };
  def.saved_inputs = {0};
  def.saved_outputs = {0};
  def.backward = [](const BackwardArgs& a) {
    Attrs ga = a.attrs;
    ga.Set("keepdims", int64_t(1));
    Shape kshape = ReducedShape(a.input_metas[0].shape, a.attrs.Int("begin"), a.attrs.Int("end"), true);
    return std::vector<Tensor>{
        Call1(op_kind::max_grad, {a.inputs[0], ops::Reshape(a.outputs[0], kshape), KeepDimsGrad(a)}, ga)};
  };
}
// (x (outer, R, inner), y (outer, 1, inner), dy (outer, 1, inner)) -> dx: dy / ties where x == y
LOOM_OP(max_grad) {
  def.internal = "backward of max";
  def.attrs = kReduceAttrs;
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    CheckArity("max_grad", in, 3);
    return std::vector<TensorMeta>{in[0]};
  };
}

namespace ops {

namespace {
// Normalised, sorted, unique axes; empty means all.
std::vector<int64_t> NormalizeAxes(const std::vector<int64_t>& axes, int64_t rank, const char* op) {
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes) out.push_back(NormalizeAxis(a, rank, op));
  std::sort(out.begin(), out.end());
  LOOM_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), ValueError, "[", op,
             "] an axis is repeated in ", ToString(axes));
  return out;
}

// Applies the single-run reduction `op` to each run of consecutive axes, last run first so
// that earlier axis numbers stay valid.
Tensor ReduceRuns(const OpDef& op, const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  std::vector<int64_t> ax = NormalizeAxes(axes, x.ndim(), op.name.c_str());
  Tensor y = x;
  size_t i = ax.size();
  while (i > 0) {
    size_t j = i - 1;
    while (j > 0 && ax[j - 1] == ax[j] - 1) --j;
    y = Call1(op, {y}, Attrs{{"begin", ax[j]}, {"end", ax[i - 1] + 1}, {"keepdims", int64_t(keepdims)}});
    i = j;
  }
  return y;
}
}  // namespace

Tensor Sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  if (x.ndim() == 0) return x;
  return ReduceRuns(op_kind::sum, x, axes, keepdims);
}

Tensor Max(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  if (x.ndim() == 0) return x;
  return ReduceRuns(op_kind::max, x, axes, keepdims);
}

Tensor Mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  LOOM_CHECK(x.defined(), ValueError, "[mean] input 0 is undefined");
  LOOM_CHECK(x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64, DTypeError,
             "[mean] input must be float32 or float64, got ", Name(x.dtype()));
  if (x.ndim() == 0) return x;
  int64_t count = 1;
  for (int64_t a : NormalizeAxes(axes, x.ndim(), "mean")) count *= x.shape()[size_t(a)];
  LOOM_CHECK(count > 0, ShapeError, "[mean] mean over an empty set of elements of ", x.Describe());
  return MulScalar(Sum(x, axes, keepdims), 1.0 / double(count));
}

Tensor SumTo(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const Shape& s = x.shape();
  LOOM_CHECK(shape.size() <= s.size(), ShapeError, "[sum_to] cannot sum ", x.Describe(), " down to ",
             ToString(shape));
  size_t lead = s.size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i < lead) {
      axes.push_back(int64_t(i));
    } else if (shape[i - lead] != s[i]) {
      LOOM_CHECK(shape[i - lead] == 1, ShapeError, "[sum_to] cannot sum ", x.Describe(), " down to ",
                 ToString(shape));
      axes.push_back(int64_t(i));
    }
  }
  Tensor y = axes.empty() ? x : ReduceRuns(op_kind::sum, x, axes, true);
  return Reshape(y, shape);
}

}  // namespace ops
}  // namespace loom
