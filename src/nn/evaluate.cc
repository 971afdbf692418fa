#include "nn/evaluate.h"

#include <limits>
#include <numeric>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "io/dataset.h"

namespace loom {
namespace nn {

Tensor Top1Correct(const Tensor& logits, const Tensor& labels) {
  LOOM_CHECK(logits.ndim() == 2 && labels.ndim() == 1 && labels.shape()[0] == logits.shape()[0], ShapeError,
             "[top1] expects logits (N, C) and labels (N), got logits ", ToString(logits.shape()), " and labels ",
             ToString(labels.shape()));
  LOOM_CHECK(IsFloating(logits.dtype()), DTypeError, "[top1] logits must be floating point, got ",
             Name(logits.dtype()));
  LOOM_CHECK(labels.dtype() == DType::kInt32 || labels.dtype() == DType::kInt64, DTypeError,
             "[top1] labels must be int32 or int64 class indices, got ", Name(labels.dtype()));
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  const auto& dev = logits.device_ptr();
  std::vector<int32_t> classes(static_cast<size_t>(c));
  std::iota(classes.begin(), classes.end(), 0);
  Tensor is_label = ops::Equal(ops::Reshape(ops::Cast(labels, DType::kInt32), Shape{n, 1}),
                               ops::FromVector(classes, Shape{1, c}, dev));  // (N, C) bool
  Tensor low = ops::Full(Shape{}, -std::numeric_limits<double>::infinity(), logits.dtype(), dev);
  Tensor label_logit = ops::Max(ops::Where(is_label, logits, low), {1});  // (N); -inf for a bad label
  Tensor other_max = ops::Max(ops::Where(is_label, low, logits), {1});
  // Strictly the largest: the label's logit is the row's maximum and no other class reaches it.
  // Equal is false for NaN, so a NaN row is never counted.
  Tensor is_max = ops::Cast(ops::Equal(label_logit, ops::Max(logits, {1})), DType::kFloat32);
  Tensor unique = ops::Cast(ops::NotEqual(other_max, label_logit), DType::kFloat32);
  return ops::Sum(ops::Mul(is_max, unique));
}

// Note [Metrics stay on the device]
// Evaluate adds each batch's loss and correct count into device scalars and reads them once at
// the end, instead of calling Item() per batch: a host read waits for the device, which would
// serialise the pass on a GPU. The sums are float64, so a large data set loses no counts.
EvalResult Evaluate(Model& model, io::DataLoader& loader) {
  NoGradGuard no_grad;
  Tensor loss_sum, correct;
  int64_t samples = 0;
  io::Batch b;
  while (loader.Next(&b)) {
    Tensor out = model.Forward(b.x);
    const int64_t n = b.x.shape()[0];
    Tensor batch_loss = ops::MulScalar(ops::Cast(ops::SoftmaxCrossEntropy(out, b.y), DType::kFloat64), double(n));
    Tensor batch_correct = ops::Cast(Top1Correct(out, b.y), DType::kFloat64);
    loss_sum = loss_sum.defined() ? ops::Add(loss_sum, batch_loss) : batch_loss;
    correct = correct.defined() ? ops::Add(correct, batch_correct) : batch_correct;
    samples += n;
  }
  LOOM_CHECK(samples > 0, ValueError, "[evaluate] the data loader gave no batch (an empty data set, or drop_last with "
             "fewer samples than one batch)");
  EvalResult r;
  r.samples = samples;
  r.loss = loss_sum.Item() / double(samples);
  r.top1 = correct.Item() / double(samples);
  return r;
}

}  // namespace nn
}  // namespace loom
