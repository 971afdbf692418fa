// Parameters and batch-norm state of the small hand-built conv nets of the graph tests
// (test/graph/layout_test.cc, weight_layout_test.cc): trainable tensors
// drawn from a device's seed, running statistics, and their host values for bit-for-bit
// comparison of two runs; and the fixture of tests about oneDNN's blocked layouts.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "device/cpu/kernels/conv_dnnl.h"
#include "core/device.h"
#include "graph/graph.h"

namespace loom {
namespace test {

// Persistent, trainable float32 tensors of `shapes`, named p0, p1, ... in order: ones at the
// positions listed in `ones` (batch-norm scales), normal(0, 0.3) values elsewhere, drawn in
// order from `dev`'s current seed.
std::vector<Tensor> TrainableParams(const std::shared_ptr<Device>& dev, const std::vector<Shape>& shapes,
                                    const std::vector<size_t>& ones);

// Persistent running mean (zeros) and variance (ones) of one batch norm per entry of
// `channels`: mean, variance, mean, variance, ...
std::vector<Tensor> RunningStats(const std::shared_ptr<Device>& dev, const std::vector<int64_t>& channels);

// Training batch of step s: 4 random 3-channel side x side images (seeded seed + s) and their
// labels (s mod 10, 3, 7, 3s mod 10), on the CPU.
std::pair<Tensor, Tensor> ImageBatch(int64_t side, uint32_t seed, int s);

// Replays `g` `steps` times: before step s, ImageBatch(side, seed, s) is copied into x and y
// (the graph's inputs); after it, the loss is read, then after(s) runs if given. Returns the
// losses.
std::vector<float> ReplayImageSteps(Graph& g, Tensor x, Tensor y, const Tensor& loss, int steps, int64_t side,
                                    uint32_t seed, const std::function<void(int)>& after = {}, bool sequential = true);

// The float32 values of `params` then `stats`, read on the host.
std::vector<std::vector<float>> HostValues(const std::vector<Tensor>& params, const std::vector<Tensor>& stats);

// Tests of what a graph keeps in oneDNN's blocked layouts: skipped, saying so, on a build without
// oneDNN (there is no blocked layout to keep).
class BlockedLayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::HaveDnnl()) GTEST_SKIP() << "loom was built without oneDNN: no blocked layouts";
  }
};

}  // namespace test
}  // namespace loom
