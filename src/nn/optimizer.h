// Optimizers. Each parameter update is one fused op (sgd_update, adam_update) submitted to the
// parameter's device, so it is buffered and replayed like any other op. The learning rate and
// the step count live on the device: SetLearningRate between replays changes the next replay
// (no new capture). State tensors (momentum, Adam moments) are created once, as setup, even when
// the first Apply happens inside a capture (Note [Setup inside a capture] in device.h), and are
// marked persistent so a graph never recycles them.
//
// A schedule (SetSchedule, nn/schedule.h) replaces the constant rate: at the step's first
// update, one op computes the rate from a device step counter and one advances the counter, so
// replays follow the schedule (Note [Schedules on the device]). Gradient clipping (SetGradClip,
// nn/clip.h) is folded into the update ops (Note [Clipping folded into the update]); clipping
// by global norm needs every gradient before the first update, so it works through Step. So does
// dynamic loss scaling (SetLossScaling: Note [Loss scaling] in nn/loss_scale.h), whose finite
// check reads every gradient before an update may run or be skipped.
// Without any of them, the ops submitted are exactly those of a plain optimizer.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/communicator.h"
#include "core/tensor.h"
#include "nn/clip.h"
#include "nn/loss_scale.h"
#include "nn/schedule.h"

namespace loom {
namespace nn {

class Optimizer {
 public:
  explicit Optimizer(double lr);
  virtual ~Optimizer() = default;

  // Updates `param` in place with `grad`; `name` keys the state (empty: keyed by the parameter's
  // storage). Step counts live on the device (Adam's), never in the call.
  virtual void Apply(const Tensor& grad, const Tensor& param, const std::string& name = "") = 0;
  // Whole-model step over (param, grad) pairs, e.g. the result of Backward(loss). With clipping
  // by global norm, the norm of all the gradients and the scale come first (device ops). With
  // loss scaling the gradients are those of ScaleLoss(loss): they are unscaled and checked first,
  // and the updates are skipped when one is not finite (Note [Loss scaling]).
  void Step(const std::vector<std::pair<Tensor, Tensor>>& param_grads);
  // Step with the state keyed by each parameter's name, or its storage (key_by_name false).
  // Virtual: a wrapper (DistOpt) all-reduces the gradients first.
  virtual void StepKeyed(const std::vector<std::pair<Tensor, Tensor>>& param_grads, bool key_by_name);
  // Backward from `loss` and the updates: each parameter as soon as its gradient is final (the
  // memory-friendly order), or, when clipping by global norm or scaling the loss, all after
  // backward (the norm and the finite check need every gradient; with loss scaling the backward
  // starts from ScaleLoss(loss)). State is keyed by the parameter's name, or its storage
  // (key_by_name false).
  void BackwardAndUpdate(const Tensor& loss, bool key_by_name = true);

  // The constant rate. With a schedule set, the schedule's rate overwrites it at every step.
  // Virtual: a wrapper (DistOpt) hands it to the optimizer it wraps.
  virtual void SetLearningRate(double lr);
  double learning_rate() const { return lr_; }

  // ---- schedules (nn/schedule.h). The step counter counts steps on each device from 0; the
  // rate of step k is schedule.ValueAt(k). ----
  // Virtual: a wrapper (DistOpt) hands them to the optimizer it wraps.
  virtual void SetSchedule(const Schedule& schedule);
  void ClearSchedule();  // back to the constant rate (SetLearningRate's)
  const Schedule* schedule() const { return schedule_ ? &*schedule_ : nullptr; }
  // Steps the schedule has counted on `dev` (a host read: synchronises).
  int64_t schedule_step(const std::shared_ptr<Device>& dev);
  // Sets the counter (resuming from a checkpoint). Not during a capture.
  void SetScheduleStep(const std::shared_ptr<Device>& dev, int64_t step);
  // The count of the one device that has a counter (checkpoints); -1 when none has; ValueError
  // when several have.
  int64_t schedule_step();

  // ---- hooks for a wrapper (DistOpt) ----
  // Whether BackwardAndUpdate must collect every gradient and Step them together (clipping by
  // global norm and loss scaling need them all); else each is applied as it becomes final.
  virtual bool needs_every_gradient() const { return clips_by_norm() || scales_losses(); }
  // Called by BackwardAndUpdate after its backward handed every gradient to Apply one by one.
  virtual void FinishStep() {}
  // Called instead when that backward or an update threw: a step half handed over is dropped.
  virtual void AbandonStep() {}
  // Note [Sharded optimizer state] (nn/dist_opt.h): the gradients Step is handed are this rank's
  // pieces of every gradient, so the global norm (clipping) and the non-finite flag (loss
  // scaling) are reduced over the ranks with `reduce` (in place, on a device scalar) before use.
  void SetCrossRankReduce(std::function<void(const Tensor&, ReduceOp)> reduce) { cross_rank_ = std::move(reduce); }
  // A piece of a parameter's storage stands for a parameter of `ndim` dimensions in rules that
  // depend on its shape (Adam's DecayOn::kMatrices).
  void SetParameterDims(const Block* storage, int ndim) { param_dims_[storage] = ndim; }

  // ---- clipping (nn/clip.h) ----
  virtual void SetGradClip(const GradClip& clip);
  const GradClip& grad_clip() const { return clip_; }
  bool clips_by_norm() const { return clip_.max_norm > 0; }
  // The global gradient norm of the last Step with clipping by norm (a float64 device scalar,
  // rewritten by every replay; undefined before).
  // Virtual: a wrapper (DistOpt) answers with the optimizer it wraps.
  virtual const Tensor& last_grad_norm() const { return last_grad_norm_; }
  // The updates read grad_multiplier x the gradient they are handed (1 by default), and clipping
  // measures that product: DistOpt sets 1/N on the optimizer it wraps, whose gradients are sums
  // over N ranks (Note [Data parallelism folded into the update] in core/ops/optimizer.cc).
  void SetGradMultiplier(double m);
  double grad_multiplier() const { return grad_mult_; }
  // The device scalar (float64, shape ()) the update kernels read on `dev`.
  const Tensor& LearningRateTensor(const std::shared_ptr<Device>& dev);

  // ---- dynamic loss scaling (Note [Loss scaling] in nn/loss_scale.h); precision fp16 turns it
  // on (Model::set_precision). The settings apply from the next step; a scale that has run keeps
  // its value and counts (SetLossScale changes them). Virtual: a wrapper (DistOpt) hands them to
  // the optimizer it wraps, which keeps the state. ----
  virtual void SetLossScaling(const LossScaling& s);
  virtual void ClearLossScaling();  // off, the state dropped
  virtual bool scales_losses() const { return loss_scaling_.has_value(); }
  virtual const LossScaling* loss_scaling() const { return loss_scaling_ ? &*loss_scaling_ : nullptr; }
  // loss times the scale on loss's device (differentiable): what BackwardAndUpdate backpropagates
  // from. A training loop of its own backpropagates from it and hands the gradients to Step, as
  // with torch's GradScaler.scale(loss). ValueError without loss scaling.
  virtual Tensor ScaleLoss(const Tensor& loss);
  // Host reads (synchronise): the scale and counts on `dev` ({init_scale, 0, 0} before its first
  // step); without an argument, those of the one device that has a state (the initial reading
  // when none has; ValueError when several have). ValueError without loss scaling.
  virtual LossScaleReading loss_scale(const std::shared_ptr<Device>& dev);
  virtual LossScaleReading loss_scale();
  // Sets the state on `dev` (resuming from a checkpoint). Not during a capture.
  virtual void SetLossScale(const std::shared_ptr<Device>& dev, const LossScaleReading& r);

  // Named state tensors, for checkpoints: "<param key>/<slot>" -> tensor.
  const std::map<std::string, Tensor>& states() const { return states_; }
  // Their bytes; a wrapper (DistOpt) answers with the optimizer it wraps.
  virtual size_t state_bytes() const;
  // The state tensor `key` ("<param key>/<slot>"), created as zeros (in setup) when missing:
  // what a checkpoint restores into before the first update.
  Tensor& EnsureState(const std::string& key, const Shape& shape, DType dtype, const std::shared_ptr<Device>& dev);
  // Whether this optimizer, as configured, keeps a state slot of that name ("momentum", "m", ...).
  virtual bool HasSlot(const std::string& slot) const = 0;

 protected:
  // The state slot `slot` of `param`, created as zeros (in setup) on first use.
  Tensor& State(const Tensor& param, const std::string& name, const std::string& slot);
  // A persistent float64 scalar on `dev` holding `value`, created in setup.
  static Tensor DeviceScalar(const std::shared_ptr<Device>& dev, double value);
  // Whether `param` opens a step on its device: it is the first parameter this optimizer ever
  // updated there (backward hands parameters out in the same order every step). The caller
  // advances per-step counters with it.
  bool OpensStep(const Tensor& param);
  // The rate tensor of param's device for this update; at the step's first update, the
  // schedule's ops come first (Note [Schedules on the device]).
  const Tensor& RateForUpdate(const Tensor& param);
  // The dimensions of the parameter `param` is (a piece of): SetParameterDims's, else its own.
  int ParameterDims(const Tensor& param) const;
  // Whether Apply is being called by BackwardAndUpdate's backward, one gradient at a time.
  bool applying_from_backward() const { return applying_from_backward_; }
  // Appends the clip scale input and the clipping attributes of an update op (Note [Clipping
  // folded into the update]), the gradient multiplier, and the found_inf flag of loss scaling
  // (Note [Skipped updates]); `op` names the update in errors.
  void AddClipping(const char* op, std::vector<Tensor>* inputs, Attrs* attrs) const;
  // counter += 1 on the device (a step count), unless this step is skipped (Note [Skipped updates]).
  void CountStep(const Tensor& counter) const;

 private:
  double lr_;
  double grad_mult_ = 1;
  std::map<Device*, Tensor> lr_tensors_;
  std::map<std::string, Tensor> states_;
  std::map<Device*, Block*> opened_by_;  // OpensStep's parameter per device
  std::optional<Schedule> schedule_;
  std::map<Device*, Tensor> schedule_steps_;
  GradClip clip_;
  Tensor grad_scale_;  // set by Step for its updates when clipping by norm
  Tensor last_grad_norm_;
  std::optional<LossScaling> loss_scaling_;
  std::map<Device*, LossScaleState> loss_scales_;
  Tensor found_inf_;  // set by Step for its updates when scaling the loss
  std::function<void(const Tensor&, ReduceOp)> cross_rank_;
  std::map<const Block*, int> param_dims_;
  bool applying_from_backward_ = false;
  LossScaleState& LossScaleOn(const std::shared_ptr<Device>& dev);  // created at the first use
};

class SGD : public Optimizer {
 public:
  explicit SGD(double lr, double momentum = 0, double weight_decay = 0, bool nesterov = false,
               double dampening = 0);
  void Apply(const Tensor& grad, const Tensor& param, const std::string& name = "") override;
  bool HasSlot(const std::string& slot) const override { return slot == "momentum" && momentum_ > 0; }

 private:
  double momentum_, weight_decay_, dampening_;
  bool nesterov_;
};

// Adam (weight_decay added to the gradient) or AdamW (decoupled = true: decay applied to the
// parameter). The step count is a device scalar advanced by an op in the step, so replays count.
class Adam : public Optimizer {
 public:
  explicit Adam(double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8, double weight_decay = 0,
                bool decoupled = false);
  void Apply(const Tensor& grad, const Tensor& param, const std::string& name = "") override;
  bool HasSlot(const std::string& slot) const override { return slot == "m" || slot == "v"; }
  // Number of completed steps (a host read: synchronises).
  int64_t steps_taken(const std::shared_ptr<Device>& dev);
  // Sets the device step count (resuming from a checkpoint). Not during a capture.
  void SetStepsTaken(const std::shared_ptr<Device>& dev, int64_t steps);
  // Which parameters weight decay applies to: all (PyTorch's default), or only those of two or
  // more dimensions (weight matrices, embeddings, convolution kernels), the rule GPT-2's
  // training follows: no decay on biases and normalisation gains and shifts.
  enum class DecayOn { kAll, kMatrices };
  void set_decay_on(DecayOn d) { decay_on_ = d; }
  DecayOn decay_on() const { return decay_on_; }

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
  DecayOn decay_on_ = DecayOn::kAll;
  std::map<Device*, Tensor> step_tensors_;
};

}  // namespace nn
}  // namespace loom
