// The small CNN (nn::MakeSmallCnn: conv-BN-ReLU-pool twice, a linear layer) trained three SGD
// steps at a precision on a device, for the precision tests on each device
// (test/graph/autocast_test.cc on the CPU, test/cuda/cuda_graph_test.cc on CUDA).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/device.h"
#include "graph/graph.h"

namespace loom {
namespace test {

struct CnnRun {
  std::vector<std::vector<float>> params;  // after the steps, in the model's order
  GraphStats stats;                        // graph runs only
  // graph runs only: the conv2d, conv2d_grad_input and conv2d_grad_weight records computed from
  // bfloat16 operands (Note [Precision policy]), by op name
  std::map<std::string, int> bf16_convs;
};

// From seed 8 and one fixed batch of 4 images (3 x 32 x 32), eagerly or in a captured graph.
CnnRun TrainSmallCnn(const std::shared_ptr<Device>& dev, bool graph, Precision p);

}  // namespace test
}  // namespace loom
