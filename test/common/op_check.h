// Runs a row of the op-case table (Note [The op-case table] in op_cases.h) in each mode. Each
// check reports failures through GoogleTest, naming the mode and the row; an exception from the
// op (a malformed row, a kernel that refuses its input) is reported as a failure of that row
// and the checks of other rows go on.
#pragma once

#include <memory>
#include <vector>

#include "common/op_cases.h"
#include "core/device.h"

namespace loom {
namespace test {

// The case's inputs on `dev`: made on the CPU, copied to `dev`, then viewed as the row says.
std::vector<Tensor> MakeInputs(const OpCase& c, const std::shared_ptr<Device>& dev);
// Calls the op once on `inputs` (on `dev`; random rows set its generator first) and returns
// what it wrote: its new outputs, the inputs it updated in place, or fresh outputs on `dev`.
std::vector<Tensor> RunCase(const OpCase& c, const std::vector<Tensor>& inputs, const std::shared_ptr<Device>& dev);

// Forward on the CPU against the row's float64 reference.
void CheckForward(const OpCase& c);
// Analytic gradients (float64, output 0) against central finite differences; the caller checks
// c.ChecksGradient() first.
void CheckGradient(const OpCase& c);
// The op captured into a graph on the CPU and replayed serially writes the bytes eager does.
void CheckGraphReplay(const OpCase& c);
// On `dev` against the CPU: float32/float64 outputs within the row's CUDA tolerance; the
// outputs of exact rows, and all others, byte for byte.
void CheckAgainstCpu(const OpCase& c, const std::shared_ptr<Device>& dev);

}  // namespace test
}  // namespace loom
