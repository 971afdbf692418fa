#include "common/gpt.h"

#include <random>

#include "common/harness.h"
#include "nn/model.h"

namespace loom {
namespace test {

nn::GptConfig TinyGpt() {
  nn::GptConfig c;
  c.vocab = 40;
  c.context = 16;
  c.layers = 2;
  c.dim = 32;
  c.heads = 4;
  return c;
}

std::pair<Tensor, Tensor> GptBatch(int64_t b, int64_t t, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> seq(size_t(b * (t + 1)));
  for (int64_t i = 0; i < b; ++i) {
    seq[size_t(i * (t + 1))] = int32_t(gen() % uint32_t(vocab));
    for (int64_t j = 1; j <= t; ++j) {
      const int32_t prev = seq[size_t(i * (t + 1) + j - 1)];
      seq[size_t(i * (t + 1) + j)] = gen() % 4 ? int32_t((3 * prev + 1) % vocab) : int32_t(gen() % uint32_t(vocab));
    }
  }
  std::vector<int32_t> x, y;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < t; ++j) {
      x.push_back(seq[size_t(i * (t + 1) + j)]);
      y.push_back(seq[size_t(i * (t + 1) + j + 1)]);
    }
  return {ops::FromVector(x, {b, t}, CpuDevice()), ops::FromVector(y, {b * t}, CpuDevice())};
}

GptRun TrainTinyGpt(const std::shared_ptr<Device>& dev, bool graph, int steps, const GraphOptions& o, int64_t micro,
                    Precision precision) {
  dev->SetRandSeed(11);
  nn::LayerOptions on;
  on.device = dev;
  auto gpt = std::make_shared<nn::Gpt>(TinyGpt(), on);
  auto adam = std::make_shared<nn::Adam>(3e-3, 0.9, 0.95, 1e-8, 0.1, true);
  adam->set_decay_on(nn::Adam::DecayOn::kMatrices);
  nn::Model m(gpt, adam);
  m.set_micro_batches(micro);
  m.set_precision(precision);
  auto first = GptBatch(4, 16, 40, 1);
  m.Compile({ToDevice(first.first, dev)}, true, graph, true, o);
  GptRun r;
  for (int s = 0; s < steps; ++s) {
    auto b = GptBatch(4, 16, 40, uint32_t(s + 1));
    r.losses.push_back(m.TrainOneBatch(ToDevice(b.first, dev), ToDevice(b.second, dev)).loss.Item());
  }
  for (auto& p : m.Params()) r.params.push_back(p.second.ToVector<float>());
  if (graph) r.graph = m.train_graph();
  return r;
}

}  // namespace test
}  // namespace loom
