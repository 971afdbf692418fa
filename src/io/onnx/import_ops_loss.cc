// ONNX handlers for the losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (Note
// [ONNX handlers] in import_graph.h), written with loom ops so that they differentiate.
#include "core/ops.h"
#include "core/ops_cnn.h"
#include "io/onnx/import_graph.h"

namespace loom {
namespace io {
namespace onnx {
namespace {

// input: (N, C, d...) log-probabilities, target: (N, d...) class indices, weight: (C) or
// undefined. loss = -input[n, target, d...] * weight[target], 0 where target == ignore_index;
// "mean" divides the sum by the sum of the weights used.
Tensor Nll(const RunContext& c, const Tensor& input, const Tensor& target, const Tensor& weight) {
  if (input.ndim() < 2) Fail(c, "input must be (N, C, ...)");
  const int64_t classes = input.shape()[1];
  Shape want(input.shape());
  want.erase(want.begin() + 1);
  if (target.shape() != want)
    Fail(c, detail::Cat("target is ", ToString(target.shape()), ", expected ", ToString(want)));
  const std::shared_ptr<Device>& dev = input.device_ptr();
  const bool has_ignore = c.node.Has("ignore_index");
  const int64_t ignore_index = c.node.Int("ignore_index", 0);
  if (target.numel() > 0 && c.V(1).host) {  // known on the host: checked here, with the position
    const std::vector<int64_t>& tv = *c.V(1).host;
    for (size_t i = 0; i < tv.size(); ++i)
      if ((tv[i] < 0 || tv[i] >= classes) && !(has_ignore && tv[i] == ignore_index))
        Fail(c, detail::Cat("target ", tv[i], " at position ", i, " is not a class in [0, ", classes, ")",
                            has_ignore ? detail::Cat(" nor ignore_index ", ignore_index) : std::string()));
  }
  Tensor t = ops::Cast(target, DType::kFloat64);
  Tensor valid = ops::Cast(ops::Ones(t.shape(), DType::kFloat32, dev), DType::kBool);
  if (has_ignore) {
    Tensor ignore = ops::Full({}, double(ignore_index), DType::kFloat64, dev);
    valid = ops::NotEqual(t, ignore);
    t = ops::Where(valid, t, ops::Zeros({}, DType::kFloat64, dev));
  }
  // Every target (ignored ones now 0) looked up in a table of the class numbers: the lookup
  // refuses an index outside [0, C) on any device (Note [Errors found on the GPU]), where a
  // one-hot compare alone would give such a row a silent loss of 0.
  if (target.numel() > 0) {
    std::vector<double> ids(HostCount(c, classes, "the classes"));
    for (int64_t i = 0; i < classes; ++i) ids[size_t(i)] = double(i);
    Tensor table = ops::FromVector<double>(ids, {classes, 1}, dev);
    t = ops::Reshape(ops::Embedding(table, ops::Cast(t, DType::kInt64)), t.shape());
  }
  // The target as a one-hot mask over C: (N, 1, d...) == (1, C, 1...).
  Shape ts(t.shape());
  ts.insert(ts.begin() + 1, 1);
  std::vector<double> iota(HostCount(c, classes, "the classes"), 0.0);
  for (int64_t i = 0; i < classes; ++i) iota[size_t(i)] = double(i);
  Shape is(size_t(input.ndim()), 1);
  is[1] = classes;
  Tensor hot = ops::Cast(ops::Equal(ops::Reshape(t, ts), ops::FromVector<double>(iota, is, dev)), input.dtype());
  Tensor picked = ops::Sum(ops::Mul(input, hot), {1});
  Tensor w = weight.defined() ? ops::Sum(ops::Mul(hot, ops::Reshape(weight, is)), {1}) : ops::OnesLike(picked);
  w = ops::Mul(w, ops::Cast(valid, input.dtype()));
  Tensor loss = ops::Neg(ops::Mul(picked, w));
  const std::string reduction = c.node.Str("reduction", "mean");
  if (reduction == "none") return loss;
  if (reduction == "sum") return ops::Sum(loss);
  return ops::Div(ops::Sum(loss), ops::Sum(w));
}

std::vector<DType> InferLoss(const InferArgs& a) {
  const std::string r = a.node.Str("reduction", "mean");
  if (r != "mean" && r != "sum" && r != "none") Fail(a.node, "reduction '" + r + "' is not one of mean, sum, none");
  CheckFloatInput(a, 0);
  if (a[1] != DType::kInt32 && a[1] != DType::kInt64) Fail(a.node, "the target must be int32 or int64");
  if (a.node.HasInput(2)) CheckSameDType(a, 0, 2);
  return {a[0], a[0]};
}

std::vector<Value> RunNll(RunContext& c) { return {V(Nll(c, c.T(0), c.T(1), c.Has(2) ? c.T(2) : Tensor()))}; }

std::vector<Value> RunSoftmaxCrossEntropy(RunContext& c) {
  const Tensor& scores = c.T(0);
  if (scores.ndim() < 2) Fail(c, "scores must be (N, C, ...)");
  Tensor log_prob = ops::LogSoftmax(scores, 1);
  return {V(Nll(c, log_prob, c.T(1), c.Has(2) ? c.T(2) : Tensor())), V(log_prob)};
}

}  // namespace

void AddLossOps(std::vector<OpEntry>* r) {
  r->push_back(MakeOp("NegativeLogLikelihoodLoss", 12, 2, 3, {"ignore_index", "reduction"}, InferLoss, RunNll));
  OpEntry sce = MakeOp("SoftmaxCrossEntropyLoss", 12, 2, 3, {"ignore_index", "reduction"}, InferLoss,
                       RunSoftmaxCrossEntropy);
  sce.max_outputs = 2;
  r->push_back(sce);
}

}  // namespace onnx
}  // namespace io
}  // namespace loom
