// Writes the seeds of fuzz_graph_dump: the dumps of real captured training steps, so that the
// fuzzer starts from what tools/graph_dump reads in practice.
//   graph_dump_seeds DIR
// It captures steps on the CPU device, so it links the whole library and is built by the root
// CMakeLists.txt into the main build folder, not into the fuzz folder (which has no device).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "core/device.h"
#include "graph/graph.h"
#include "io/graph_dump.h"
#include "nn/model.h"
#include "nn/cnn_layers.h"
#include "nn/layer.h"
#include "nn/models.h"

namespace {

using loom::DType;
using loom::Tensor;

// Trains `net` for two batches as a graph (capture, one replay) and dumps the training graph.
void DumpTrainingStep(const std::string& path, std::shared_ptr<loom::nn::Layer> net,
                      std::shared_ptr<loom::nn::Optimizer> opt, const loom::Shape& x_shape, int64_t classes,
                      loom::MemoryMode memory) {
  auto dev = loom::CpuDevice();
  Tensor x = loom::ops::Uniform(x_shape, -1, 1, DType::kFloat32, dev);
  std::vector<int32_t> labels(static_cast<size_t>(x_shape[0]));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(i % size_t(classes));
  Tensor y = loom::ops::FromVector(labels, {x_shape[0]}, dev);
  loom::nn::Model m(std::move(net), std::move(opt));
  loom::GraphOptions options;
  options.memory = memory;
  m.Compile({x}, /*is_train=*/true, /*use_graph=*/true, /*sequential=*/true, options);
  m.TrainOneBatch(x, y);
  m.TrainOneBatch(x, y);
  loom::io::WriteGraphDump(*m.train_graph(), path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    loom::CpuDevice()->SetRandSeed(7);
    // An MLP with SGD and momentum, planned memory (arena offsets, fused weight gradients).
    DumpTrainingStep(dir + "/mlp_sgd_planned.lgd", loom::nn::MakeMlp({16, 32, 32, 4}),
                     std::make_shared<loom::nn::SGD>(0.05, 0.9), {8, 16}, 4, loom::MemoryMode::kPlanned);
    // Linear, GELU, dropout (random draws: counter offsets), layer norm, linear; Adam and dynamic
    // memory (no offsets, more optimizer state).
    using namespace loom::nn;
    auto net = std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{
        std::make_shared<Linear>(16, 32), std::make_shared<Activation>(Act::kGELU), std::make_shared<Dropout>(0.25),
        std::make_shared<LayerNorm>(loom::Shape{32}), std::make_shared<Linear>(32, 4)});
    DumpTrainingStep(dir + "/mlp_dropout_adam_dynamic.lgd", net, std::make_shared<Adam>(0.01), {8, 16}, 4,
                     loom::MemoryMode::kDynamic);
    // The small CNN: convolutions, batch norm and pooling (integer-list attributes).
    DumpTrainingStep(dir + "/small_cnn_planned.lgd", loom::nn::MakeSmallCnn(3, 10), std::make_shared<loom::nn::SGD>(0.01),
                     {2, 3, 32, 32}, 10, loom::MemoryMode::kPlanned);
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "graph_dump_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
