// Optimizers. Each parameter update is one fused op (sgd_update, adam_update) submitted to the
// parameter's device, so it is buffered and replayed like any other op. The learning rate and
// the step count live on the device: SetLearningRate between replays changes the next replay
// (no new capture). State tensors (momentum, Adam moments) are created once, as setup, even when
// the first Apply happens inside a capture (Note [Setup inside a capture] in device.h), and are
// marked persistent so a graph never recycles them.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace loom {
namespace nn {

class Optimizer {
 public:
  explicit Optimizer(double lr);
  virtual ~Optimizer() = default;

  // Updates `param` in place with `grad`; `name` keys the state (empty: keyed by the parameter's
  // storage). Step counts live on the device (Adam's), never in the call.
  virtual void Apply(const Tensor& grad, const Tensor& param, const std::string& name = "") = 0;
  // Whole-model step over (param, grad) pairs, e.g. the result of Backward(loss).
  void Step(const std::vector<std::pair<Tensor, Tensor>>& param_grads);

  void SetLearningRate(double lr);
  double learning_rate() const { return lr_; }
  // The device scalar (float64, shape ()) the update kernels read on `dev`.
  const Tensor& LearningRateTensor(const std::shared_ptr<Device>& dev);

  // Named state tensors, for checkpoints: "<param key>/<slot>" -> tensor.
  const std::map<std::string, Tensor>& states() const { return states_; }
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

 private:
  double lr_;
  std::map<Device*, Tensor> lr_tensors_;
  std::map<std::string, Tensor> states_;
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

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
  std::map<Device*, Tensor> step_tensors_;
  std::map<Device*, Block*> step_bumped_by_;  // the parameter whose update advances the count
};

}  // namespace nn
}  // namespace loom
