#include "nn/evaluate.h"

#include <limits>
#include <numeric>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/device.h"
#include "graph/step.h"
#include "io/dataset.h"

namespace loom {
namespace nn {

Tensor TopKCorrect(const Tensor& logits, const Tensor& labels, int64_t k) {
  LOOM_CHECK(logits.ndim() == 2 && labels.ndim() == 1 && labels.shape()[0] == logits.shape()[0], ShapeError,
             "[top_k] expects logits (N, C) and labels (N), got logits ", ToString(logits.shape()), " and labels ",
             ToString(labels.shape()));
  LOOM_CHECK(IsFloating(logits.dtype()), DTypeError, "[top_k] logits must be floating point, got ",
             Name(logits.dtype()));
  LOOM_CHECK(labels.dtype() == DType::kInt32 || labels.dtype() == DType::kInt64, DTypeError,
             "[top_k] labels must be int32 or int64 class indices, got ", Name(labels.dtype()));
  LOOM_CHECK(k >= 1, ValueError, "[top_k] k = ", k, " must be at least 1");
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  const auto& dev = logits.device_ptr();
  std::vector<int32_t> classes(static_cast<size_t>(c));
  std::iota(classes.begin(), classes.end(), 0);
  Tensor is_label = ops::Equal(ops::Reshape(ops::Cast(labels, DType::kInt32), Shape{n, 1}),
                               ops::FromVector(classes, Shape{1, c}, dev));  // (N, C) bool
  Tensor low = ops::Full(Shape{}, -std::numeric_limits<double>::infinity(), logits.dtype(), dev);
  Tensor label_logit = ops::Max(ops::Where(is_label, logits, low), {1}, /*keepdims=*/true);  // (N, 1)
  Tensor label_f = ops::Cast(is_label, DType::kFloat32);                                     // (N, C)
  // Other classes at or above the label's logit; the label's own column never counts.
  Tensor at_or_above = ops::Cast(ops::GreaterEqual(logits, label_logit), DType::kFloat32);
  Tensor rivals = ops::Sum(ops::Mul(at_or_above, ops::RSubScalar(label_f, 1.0)), {1});      // (N)
  Tensor in_top_k = ops::Cast(ops::Less(rivals, ops::Full({}, double(k), DType::kFloat32, dev)), DType::kFloat32);
  // A label outside [0, C) matches no column; a NaN anywhere in the row is unequal to itself.
  Tensor valid = ops::Max(label_f, {1});
  Tensor nans = ops::Sum(ops::Cast(ops::NotEqual(logits, logits), DType::kFloat32), {1});
  Tensor no_nan = ops::Cast(ops::Equal(nans, ops::Zeros({}, DType::kFloat32, dev)), DType::kFloat32);
  return ops::Sum(ops::Mul(ops::Mul(in_top_k, valid), no_nan));
}

Tensor Top1Correct(const Tensor& logits, const Tensor& labels) { return TopKCorrect(logits, labels, 1); }

// ---- MetricSums: Note [Metrics stay on the device] in evaluate.h ----

MetricSums::MetricSums(std::shared_ptr<Device> dev) : dev_(std::move(dev)) {
  LOOM_CHECK(dev_, DeviceError, "[metric_sums] no device");
  Device::SetupScope setup(dev_.get());
  for (Tensor* t : {&loss_, &top1_, &top5_, &samples_}) {
    *t = ops::Zeros({}, DType::kFloat64, dev_);
    t->block()->set_persistent(true);
  }
}

void MetricSums::Add(const Tensor& logits, const Tensor& labels) {
  NoGradGuard no_grad;
  const double n = double(logits.ndim() > 0 ? logits.shape()[0] : 0);
  auto add = [](const Tensor& sum, const Tensor& v) {
    ops::CopyInto(sum, ops::Add(sum, ops::Cast(v, DType::kFloat64)));
  };
  add(loss_, ops::MulScalar(ops::Cast(ops::SoftmaxCrossEntropy(logits, labels), DType::kFloat64), n));
  add(top1_, TopKCorrect(logits, labels, 1));
  add(top5_, TopKCorrect(logits, labels, 5));
  ops::CopyInto(samples_, ops::AddScalar(samples_, n));  // n is the captured batch's: one graph per shape
}

void MetricSums::Reset() {
  for (Tensor* t : {&loss_, &top1_, &top5_, &samples_}) ops::Fill(*t, 0.0);
}

EvalResult MetricSums::Read() const {
  // One host read of the four sums (a read synchronises with the device).
  NoGradGuard no_grad;
  std::vector<double> v = ops::Concat({ops::Reshape(loss_, {1}), ops::Reshape(top1_, {1}), ops::Reshape(top5_, {1}),
                                       ops::Reshape(samples_, {1})},
                                      0)
                              .ToVector<double>();
  LOOM_CHECK(v[3] > 0, ValueError, "[evaluate] no batch was evaluated (an empty data set, or drop_last with fewer "
             "samples than one batch)");
  EvalResult r;
  r.samples = int64_t(v[3]);
  r.loss = v[0] / v[3];
  r.top1 = v[1] / v[3];
  r.top5 = v[2] / v[3];
  return r;
}

// ---- Evaluator ----

Evaluator::Evaluator(Model& model) : model_(model) {}
Evaluator::~Evaluator() = default;

std::vector<Tensor> Evaluator::Step(const std::vector<Tensor>& in) {
  Tensor out = model_.net().Forward(in[0]);
  sums_->Add(out, in[1]);
  return {out};
}

EvalResult Evaluator::Run(io::DataLoader& loader) {
  LOOM_CHECK(model_.compiled(), GraphError, "[evaluate] the model is not compiled: call Compile first");
  LOOM_CHECK(loader.y_dtype() == DType::kInt32, DTypeError, "[evaluate] loss, top-1 and top-5 are a classifier's: "
             "they need int32 class labels, and data set '", loader.name(), "' gives ", Name(loader.y_dtype()),
             " targets");
  Layer& net = model_.net();
  const bool was_training = net.training();
  net.Train(false);
  NoGradGuard no_grad;
  try {
    io::Batch b;
    while (loader.Next(&b)) {
      if (!sums_) sums_ = std::make_unique<MetricSums>(b.x.device_ptr());
      if (model_.use_graph()) {
        if (!step_)
          step_ = std::make_unique<CapturedStep>(
              b.x.device_ptr(), [this](const std::vector<Tensor>& in) { return Step(in); }, "evaluate",
              /*recapture=*/true, /*sequential=*/true, model_.graph_options());
        (*step_)({b.x, b.y});
      } else {
        Step({b.x, b.y});
      }
    }
    LOOM_CHECK(sums_, ValueError, "[evaluate] the data loader gave no batch (an empty data set, or drop_last with "
               "fewer samples than one batch)");
  } catch (...) {
    net.Train(was_training);
    if (sums_) sums_->Reset();
    throw;
  }
  net.Train(was_training);
  EvalResult r = sums_->Read();
  sums_->Reset();
  return r;
}

EvalResult Evaluate(Model& model, io::DataLoader& loader) { return Evaluator(model).Run(loader); }

}  // namespace nn
}  // namespace loom
