// The model zoo: the networks the examples, tests and benchmarks train.
#pragma once

#include <memory>
#include <vector>

#include "nn/layer.h"

namespace loom {
namespace nn {

// Linear -> ReLU -> ... -> Linear (no activation after the last).
std::shared_ptr<Layer> MakeMlp(const std::vector<int64_t>& dims, LayerOptions o = {});
// Two conv blocks (conv3x3 -> BatchNorm -> ReLU -> maxpool2), then a linear classifier;
// for (N, in_channels, 32, 32) inputs.
std::shared_ptr<Layer> MakeSmallCnn(int64_t in_channels = 3, int64_t classes = 10, LayerOptions o = {});
// ResNet-18 with the CIFAR stem (3x3 conv, no max-pool) for (N, 3, 32, 32) inputs.
std::shared_ptr<Layer> MakeResNet18(int64_t classes = 10, LayerOptions o = {});
// ResNet-50 (Bottleneck blocks, ImageNet stem) for (N, 3, 224, 224) inputs.
std::shared_ptr<Layer> MakeResNet50(int64_t classes = 1000, LayerOptions o = {});

}  // namespace nn
}  // namespace loom
