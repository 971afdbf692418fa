#include "nn/model.h"

#include <tuple>

#include "core/autograd.h"
#include "core/ops.h"
#include "graph/graph.h"
#include "nn/dist_opt.h"

namespace loom {
namespace nn {

std::atomic<int> Model::next_id_{0};

Model::Model(std::shared_ptr<Layer> net, std::shared_ptr<Optimizer> optimizer, LossKind loss)
    : net_(std::move(net)), opt_(std::move(optimizer)), loss_(loss), id_(next_id_++) {
  LOOM_CHECK(net_, ValueError, "[Model] no network given");
  LOOM_CHECK(opt_, ValueError, "[Model] no optimizer given");
}

void Model::CheckCompiled(const char* what) const {
  LOOM_CHECK(compiled_, GraphError, "[Model] ", what, " called before Compile(inputs, is_train, use_graph, sequential)");
}

void Model::set_recapture(bool on) {
  recapture_ = on;
  if (compiled_ && use_graph_) {  // rebuild the step wrappers with the new policy
    train_step_.reset();
    eval_step_.reset();
  }
}

void Model::set_precision(Precision p) {
  precision_ = p;
  if (p == Precision::kFloat16 && !opt_->scales_losses()) opt_->SetLossScaling(LossScaling{});
  if (auto* dist = dynamic_cast<DistOpt*>(opt_.get())) dist->SetModelPrecision(p);  // Note [Gradients on the wire]
}

void Model::Compile(const std::vector<Tensor>& inputs, bool is_train, bool use_graph, bool sequential,
                    const GraphOptions& options) {
  LOOM_CHECK(!inputs.empty() && inputs[0].defined(), ValueError, "[Model] Compile needs example inputs");
  CheckGraphOptions(options);
  device_ = inputs[0].device_ptr();
  for (auto& p : net_->Params())  // also gives every parameter its full path as name
    LOOM_CHECK(p.second.device() == device_.get(), DeviceError, "[Model] parameter '", p.first, "' is on ",
               p.second.device()->name(), " but the inputs are on ", device_->name());
  // Shape check without running anything: capture a forward pass and drop it. Any shape, dtype
  // or channel mismatch raises here, naming the op.
  {
    NoGradGuard no_grad;
    Graph check(device_, "model" + std::to_string(id_) + ".compile_check");
    check.BeginCapture();
    try {
      net_->Forward(inputs[0]);
    } catch (...) {
      check.AbortCapture();
      throw;
    }
    check.AbortCapture();  // nothing to replay: the capture was the check
  }
  is_train_ = is_train;
  use_graph_ = use_graph;
  sequential_ = sequential;
  graph_options_ = options;
  train_step_.reset();
  eval_step_.reset();
  net_->Train(is_train);
  compiled_ = true;
}

Tensor Model::ComputeLoss(const Tensor& out, const Tensor& y) const {
  switch (loss_) {
    case LossKind::kSoftmaxCrossEntropy: return ops::SoftmaxCrossEntropy(out, y);
    case LossKind::kMse: return ops::MseLoss(out, y);
  }
  return Tensor();
}

void Model::set_micro_batches(int64_t n) {
  LOOM_CHECK(n >= 1, ValueError, "[Model] micro-batches must be at least 1, got ", n);
  micro_batches_ = n;
}

void Model::set_keep_output(bool on) {
  LOOM_CHECK(!train_step_ || on == keep_output_, GraphError, "[Model] set_keep_output(", on ? "true" : "false",
             ") after the first graph step: the graph keeps what it captured (Note [A step that keeps no output])");
  keep_output_ = on;
}

void Model::set_fused_loss(bool on) {
  LOOM_CHECK(!train_step_ || on == fused_loss_, GraphError, "[Model] set_fused_loss(", on ? "true" : "false",
             ") after the first graph step: the graph keeps what it captured");
  fused_loss_ = on;
}

std::pair<Tensor, Tensor> Model::ForwardAndLoss(const Tensor& x, const Tensor& y) {
  if (!keep_output_ && fused_loss_ && loss_ == LossKind::kSoftmaxCrossEntropy && !IsFloating(y.dtype())) {
    Tensor loss = net_->ForwardCrossEntropy(x, y);
    if (loss.defined()) return {Tensor(), loss};
  }
  Tensor out = net_->Forward(x);
  return {out, ComputeLoss(out, y)};
}

// Note [Micro-batches in one step] (model.h)
std::vector<Tensor> Model::MicroBatchStep(const std::vector<Tensor>& in) {
  const int64_t n = micro_batches_, bx = in[0].dim(0), by = in[1].dim(0);
  LOOM_CHECK(bx % n == 0 && by % n == 0, ShapeError, "[Model] ", n, " micro-batches must divide the batch: x ",
             in[0].Describe(), ", y ", in[1].Describe());
  std::vector<std::pair<Tensor, Tensor>> sums;  // (param, gradient summed so far), backward's order
  Tensor out, loss;
  for (int64_t k = 0; k < n; ++k) {
    Tensor lk;
    std::tie(out, lk) = ForwardAndLoss(ops::Slice(in[0], 0, k * bx / n, (k + 1) * bx / n),
                                       ops::Slice(in[1], 0, k * by / n, (k + 1) * by / n));
    // Under loss scaling (Note [Loss scaling]) each micro-batch's gradients are those of the
    // scaled loss, and StepKeyed unscales their sum once.
    Tensor part = ops::MulScalar(lk, 1.0 / double(n));
    std::vector<std::pair<Tensor, Tensor>> pairs = Backward(opt_->scales_losses() ? opt_->ScaleLoss(part) : part);
    NoGradGuard no_grad;
    loss = k == 0 ? lk.Detach() : ops::Add(loss, lk.Detach());
    if (k == 0) {
      sums = std::move(pairs);
      continue;
    }
    LOOM_ASSERT(pairs.size() == sums.size(), "[Model] micro-batch ", k, " gave ", pairs.size(),
                " gradients, the first ", sums.size());
    for (size_t i = 0; i < pairs.size(); ++i) {
      LOOM_ASSERT(pairs[i].first.block() == sums[i].first.block(), "[Model] micro-batch ", k,
                  " handed its gradients out in another order");
      sums[i].second = ops::Add(sums[i].second, pairs[i].second);
    }
  }
  opt_->StepKeyed(sums, /*key_by_name=*/true);
  NoGradGuard no_grad;
  Tensor mean = ops::MulScalar(loss, 1.0 / double(n));
  if (!keep_output_) return {mean};  // Note [A step that keeps no output]
  return {out.Detach(), mean};
}

std::vector<Tensor> Model::Step(const std::vector<Tensor>& in) {
  if (micro_batches_ > 1) return MicroBatchStep(in);
  auto [out, loss] = ForwardAndLoss(in[0], in[1]);
  // Each parameter is updated as soon as its gradient is final, so gradients never pile up: the
  // step's peak is the activations plus one layer's gradients, not all of them (unless the
  // optimizer clips by global norm, which needs them all: Optimizer::BackwardAndUpdate).
  opt_->BackwardAndUpdate(loss);
  if (!keep_output_) return {loss.Detach()};  // Note [A step that keeps no output]
  return {out.Detach(), loss.Detach()};
}

Model::StepResult Model::TrainOneBatch(const Tensor& x, const Tensor& y) {
  CheckCompiled("TrainOneBatch");
  LOOM_CHECK(is_train_, GraphError, "[Model] TrainOneBatch on a model compiled with is_train=false");
  LOOM_CHECK(x.defined() && y.defined(), ValueError, "[Model] TrainOneBatch needs a batch and its labels");
  net_->Train(true);
  // Note [Precision policy]: eager steps in an AutocastScope; graphs through the pass, which casts
  // each weight once for all the products that read it.
  AutocastScope precision(use_graph_ ? Precision::kFloat32 : precision_);
  std::vector<Tensor> r;
  if (use_graph_) {
    if (!train_step_) {
      GraphOptions o = graph_options_;
      if (precision_ != Precision::kFloat32)
        o.passes.Set(precision_ == Precision::kBFloat16 ? "autocast_bf16" : "autocast_fp16", true);
      train_step_ = std::make_unique<CapturedStep>(
          device_, [this](const std::vector<Tensor>& in) { return Step(in); },
          "model" + std::to_string(id_) + ".train", recapture_, sequential_, o);
    }
    r = (*train_step_)({x, y});
  } else {
    r = Step({x, y});
  }
  ++steps_;
  if (r.size() == 1) return {Tensor(), r[0]};
  return {r[0], r[1]};
}

Tensor Model::Forward(const Tensor& x) {
  CheckCompiled("Forward");
  bool was_training = net_->training();
  net_->Train(false);
  NoGradGuard no_grad;
  Tensor out;
  try {
    if (use_graph_) {
      if (!eval_step_)
        eval_step_ = std::make_unique<CapturedStep>(
            device_, [this](const std::vector<Tensor>& in) { return std::vector<Tensor>{net_->Forward(in[0])}; },
            "model" + std::to_string(id_) + ".eval", /*recapture=*/true, sequential_, graph_options_);
      out = (*eval_step_)({x})[0];
    } else {
      out = net_->Forward(x);
    }
  } catch (...) {
    net_->Train(was_training);
    throw;
  }
  net_->Train(was_training);
  return out;
}

std::vector<Tensor> Model::GraphInputs(const Tensor& x, const Tensor& y) const {
  return train_step_ ? train_step_->Placeholders({x, y}) : std::vector<Tensor>();
}

const std::shared_ptr<Graph>& Model::train_graph() const {
  LOOM_CHECK(train_step_, GraphError, "[Model] no training graph yet: compile with use_graph and train a batch");
  return train_step_->last_graph();
}

}  // namespace nn
}  // namespace loom
