// An optimizer's state in checkpoints (io/checkpoint.h): saved beside a model's tensors, or alone
// in a file of its own.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "io/checkpoint.h"

namespace loom {
namespace nn {

class Optimizer;
using io::Checkpoint;
using io::NamedTensors;

// Note [Optimizer state in checkpoints]
// An optimizer's state is its states() map ("<param key>/<slot>" -> tensor, e.g.
// "w0/momentum") plus its learning rate; each is saved under `prefix` ("optimizer/w0/momentum",
// meta "optimizer/lr"). An optimizer creates its state lazily, at the first update of each
// parameter, so a fresh optimizer has none: RestoreOptimizerState creates each saved slot the
// optimizer keeps (Optimizer::HasSlot, EnsureState) as zeros and overwrites it with the saved
// value; a saved slot the optimizer does not keep (momentum into plain SGD) is an IOError. Adam's
// step count is saved as meta "<prefix>adam_steps" and restored with Adam::SetStepsTaken, so the
// bias correction continues where it stopped. A schedule's step counter (Note [Schedules on the
// device]) is saved as meta "<prefix>schedule_step" and restored with SetScheduleStep. Loss
// scaling's state (Note [Loss scaling] in nn/loss_scale.h) is saved as meta "<prefix>loss_scale",
// "<prefix>loss_scale_good_steps" and "<prefix>skipped_steps" and restored with SetLossScale;
// restoring it into an optimizer that does not scale losses is an IOError (set the precision,
// fp16, or SetLossScaling first), while a file without it leaves the optimizer's scale alone.

// Appends the optimizer's state tensors and learning rate (and Adam's step count) under `prefix`.
void AddOptimizerState(Optimizer& opt, NamedTensors* tensors, std::map<std::string, double>* meta,
                       const std::string& prefix = "optimizer/");
// Restores what AddOptimizerState saved. New state is created on `dev` (the parameters'
// device). Mismatched or missing slots are all reported in one IOError, before the optimizer
// changes at all (Note [Check everything, then copy]). A slot the optimizer already keeps must
// be in the file: a checkpoint saved before the first update has no slots, and restoring it
// into an optimizer that has stepped since is refused rather than half done.
void RestoreOptimizerState(const Checkpoint& ckpt, Optimizer& opt, const std::shared_ptr<Device>& dev,
                           const std::string& prefix = "optimizer/");
// What RestoreOptimizerState would refuse, without changing the optimizer.
void CheckOptimizerState(const Checkpoint& ckpt, const Optimizer& opt, const std::string& prefix = "optimizer/");

// An optimizer alone in a file of its own. LoadOptimizer reads what SaveOptimizer wrote and
// refuses any other file instead of restoring nothing: tensors outside "optimizer/" (a model
// checkpoint) or no "optimizer/lr" are an IOError naming them. RestoreOptimizerFile is its
// second half, on a checkpoint already read.
void SaveOptimizer(const std::string& path, Optimizer& opt);
void LoadOptimizer(const std::string& path, Optimizer& opt, const std::shared_ptr<Device>& dev);
void RestoreOptimizerFile(const Checkpoint& ckpt, Optimizer& opt, const std::shared_ptr<Device>& dev);

}  // namespace nn
}  // namespace loom
