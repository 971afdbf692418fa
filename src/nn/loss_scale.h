// Dynamic loss scaling for float16 training, on the device (issue 31).
//
// Note [Loss scaling]
// float16 keeps 5 exponent bits: a gradient below 2^-24 flushes to zero, one above 65504
// overflows. As torch.amp.GradScaler does, a step with loss scaling multiplies the loss by a scale
// S before backward (the gradients, which pass through float16 products under the fp16 policy,
// are S times larger: away from the bottom of the range), and once every gradient is final:
//  1. one op, unscale_grads, multiplies every gradient by 1/S in place and writes found_inf, a
//     float32 device scalar: 1 when an unscaled gradient element is NaN or infinite, else 0;
//  2. clipping (if any) measures the unscaled gradients, and every update reads found_inf and,
//     when it is set, writes nothing (Note [Skipped updates] in core/ops/optimizer.cc): the
//     parameters, momentum buffers and Adam's moments keep their bits, and the step counters
//     (Adam's bias correction, a schedule's step) advance through `increment` ops that read the
//     flag too, so a skipped step is not counted and the next step's learning rate is the one
//     this step would have used;
//  3. update_loss_scale: after an overflow S *= backoff (0.5), the good-step count becomes 0 and
//     the skipped-step count grows by one; after a good step the good-step count grows, and at
//     `interval` (2000) good steps S *= growth (2), unless that leaves float32's range, and the
//     count restarts.
// S (float32), the good-step count and the skipped-step count (float64) are persistent device
// scalars of the optimizer, one set per device: nothing is read on the host, so an overflow costs
// no synchronisation, and a captured step replays all of it (graph == eager, bitwise). They are
// saved with the optimizer's state (Note [Optimizer state in checkpoints]), so a resumed run
// continues with the same scale, bitwise.
// What a skipped step still changes: Model::steps (it counts TrainOneBatch calls), BatchNorm's
// running statistics (the forward ran) and the device's random counter (dropout drew), as with
// GradScaler. With the defaults (init 65536, growth 2, backoff 0.5) S stays a power of two, so
// scaling and unscaling a float32 value are exact (unless it leaves float32's range): the float32
// parts of a step see the same numbers as without scaling, and only the float16 roundings move.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace loom {
namespace nn {

// torch.amp.GradScaler's settings and defaults.
struct LossScaling {
  double init_scale = 65536;  // S at the first step
  double growth = 2;          // S *= growth after `interval` good steps in a row
  double backoff = 0.5;       // S *= backoff after a step with a non-finite gradient
  int64_t interval = 2000;
};
// ValueError naming the bad field: init_scale not a finite number > 0 that float32 holds,
// growth not > 1, backoff outside (0, 1), interval < 1.
void CheckLossScaling(const LossScaling& s);

// The state of loss scaling on one device: persistent device scalars (Note [Loss scaling]).
struct LossScaleState {
  Tensor scale;      // float32
  Tensor good;       // float64: good steps since the scale last changed (or since an overflow)
  Tensor skipped;    // float64: steps skipped so far
  Tensor found_inf;  // float32: the last step's flag (1: it was skipped)
};
// A fresh state on `dev` (setup: created once, also during a capture) with S = s.init_scale.
LossScaleState MakeLossScaleState(const std::shared_ptr<Device>& dev, const LossScaling& s);

// What a host read of a state finds (synchronises).
struct LossScaleReading {
  double scale = 0;
  int64_t good_steps = 0;
  int64_t skipped_steps = 0;
};
LossScaleReading Read(const LossScaleState& state);
// Writes `r` into the state (resuming from a checkpoint). Not during a capture.
void Write(const LossScaleState& state, const LossScaleReading& r);

// Step 1: the gradients times 1/S in place, state.found_inf written (one op). The gradients:
// float32 or float64, contiguous, on the state's device.
void UnscaleGradients(const std::vector<Tensor>& grads, const LossScaleState& state);
// Step 3: S and the counts moved by state.found_inf (one op).
void UpdateLossScale(const LossScaleState& state, const LossScaling& s);

}  // namespace nn
}  // namespace loom
