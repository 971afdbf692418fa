// A tiny GPT (nn::Gpt: 2 layers, width 32, 4 heads of 8, context 16, vocabulary 40) trained with
// AdamW on a learnable token chain, eagerly or in a captured graph, at a precision on a device:
// for the transformer tests on each device (test/nn/transformer_test.cc on the CPU,
// test/cuda/cuda_graph_test.cc on CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/device.h"
#include "graph/graph.h"
#include "nn/transformer.h"

namespace loom {
namespace test {

nn::GptConfig TinyGpt();

// Sequences where the next token is (3 t + 1) mod vocab three times in four: (tokens (B, T),
// targets (B T)), on the CPU.
std::pair<Tensor, Tensor> GptBatch(int64_t b, int64_t t, int64_t vocab, uint32_t seed);

struct GptRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
  std::shared_ptr<Graph> graph;  // graph runs only
};

// From seed 11, `steps` batches of 4 x 16 tokens, `micro` micro-batches per step.
GptRun TrainTinyGpt(const std::shared_ptr<Device>& dev, bool graph, int steps, const GraphOptions& o = {},
                    int64_t micro = 1, Precision precision = Precision::kFloat32);

}  // namespace test
}  // namespace loom
