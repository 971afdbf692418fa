// The small CNN (nn::MakeSmallCnn: conv-BN-ReLU-pool twice, a linear layer), or ResNet-18,
// trained three SGD steps at a precision on a device, for the precision tests on each device
// (test/graph/autocast_test.cc on the CPU, test/cuda/cuda_graph_test.cc on CUDA) and the layout
// tests on CUDA (test/cuda/nhwc_test.cc).
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
  // graph runs only: the convolution records (by op name) with an operand in the device's blocked
  // layout (Note [Activation layouts] in graph/layouts.cc)
  std::map<std::string, int> blocked_convs;
};

// From seed 8 and one fixed batch of 4 images (3 x 32 x 32), eagerly or in a captured graph
// made with `options`; ResNet-18 (10 classes) instead of the small CNN when `resnet18`.
CnnRun TrainSmallCnn(const std::shared_ptr<Device>& dev, bool graph, Precision p, const GraphOptions& options = {},
                     bool resnet18 = false);

}  // namespace test
}  // namespace loom
