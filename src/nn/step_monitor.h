// StepMonitor: what a trainer needs to know about every step without reading anything on the
// host per step: a step counter, the first step whose loss or gradients were not finite, and the
// sum of the losses since the last read, all device scalars updated by ops (Note [Non-finite
// steps are caught on the device]).
//
//   nn::StepMonitor monitor(dev, model.Params(), /*use_graph=*/true);
//   for (...) { auto r = model.TrainOneBatch(x, y); monitor.Record(r.loss); }   // no host read
//   auto now = monitor.Read();                  // at a log or checkpoint point: one read
//   if (now.first_bad) throw nn::NonFiniteError(now.first_bad, ...);
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "graph/options.h"
#include "nn/layer.h"

namespace loom {
class CapturedStep;
namespace nn {

// Note [Non-finite steps are caught on the device]
// After each training step, Record adds to a device scalar the sum of (x * 0) over the loss and
// every watched tensor (the parameters, just updated): 0 when all are finite, NaN as soon as one
// element is NaN or infinite. A non-finite gradient always reaches the parameters it updates
// (lr * NaN is NaN; so is 0 * inf), so watching the updated parameters catches non-finite
// gradients too, for any optimizer and any model, without a hook inside its step. The step
// counter advances by one, and the first step at which the sum was NaN is kept (0: none yet).
// With use_graph these ops are a small graph of their own, replayed after each step; nothing is
// read until Read, which a trainer calls at its log and checkpoint points only. So a bad step k
// is reported at the next such point, naming k, and a checkpoint is written only after a Read
// that found no bad step: every checkpoint on disk precedes k.
class StepMonitor {
 public:
  StepMonitor(std::shared_ptr<Device> dev, NamedTensors watched, bool use_graph, GraphOptions options = {});
  ~StepMonitor();
  // One step done; `loss` is its loss (shape ()). Ops only (no host read).
  void Record(const Tensor& loss);

  struct Reading {
    int64_t steps = 0;      // steps recorded (counting from SetSteps)
    int64_t first_bad = 0;  // the first step (1-based) with a non-finite loss or parameter; 0: none
    double loss_sum = 0;    // the losses recorded since the previous Read
    int64_t losses = 0;     // how many
  };
  // One host read (synchronises); restarts the loss sum unless told not to.
  Reading Read(bool restart_loss_sum = true);
  // Resuming: the device counter becomes `steps`, no bad step, and the loss sum holds
  // `loss_sum` over `losses` steps (what Read(false) gave when the checkpoint was written).
  void SetSteps(int64_t steps, double loss_sum = 0, int64_t losses = 0);

 private:
  std::vector<Tensor> Step(const std::vector<Tensor>& in);
  std::shared_ptr<Device> dev_;
  NamedTensors watched_;
  bool use_graph_;
  GraphOptions options_;
  Tensor steps_, first_bad_, loss_sum_;  // float64 ()
  int64_t losses_ = 0;
  std::unique_ptr<CapturedStep> step_;
};

// The trainer's report of a non-finite loss or gradient: step() is the first bad step (1-based),
// last_good_checkpoint() the newest checkpoint written before it ("" when there is none).
class NonFiniteError : public ValueError {
 public:
  NonFiniteError(int64_t step, std::string last_good_checkpoint);
  int64_t step() const { return step_; }
  const std::string& last_good_checkpoint() const { return checkpoint_; }

 private:
  int64_t step_;
  std::string checkpoint_;
};

}  // namespace nn
}  // namespace loom
