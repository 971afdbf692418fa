#include "common/conv_params.h"

#include <algorithm>
#include <string>

#include "common/harness.h"
#include "core/ops.h"

namespace loom {
namespace test {

std::vector<Tensor> TrainableParams(const std::shared_ptr<Device>& dev, const std::vector<Shape>& shapes,
                                    const std::vector<size_t>& ones) {
  std::vector<Tensor> p;
  for (const Shape& s : shapes) {
    const bool one = std::find(ones.begin(), ones.end(), p.size()) != ones.end();
    Tensor t = one ? ops::Ones(s, DType::kFloat32, dev) : ops::Normal(s, 0, 0.3, DType::kFloat32, dev);
    t.set_requires_grad(true).set_name("p" + std::to_string(p.size()));
    t.block()->set_persistent(true);
    p.push_back(t);
  }
  return p;
}

std::vector<Tensor> RunningStats(const std::shared_ptr<Device>& dev, const std::vector<int64_t>& channels) {
  std::vector<Tensor> stats;
  for (int64_t c : channels)
    for (Tensor t : {ops::Zeros({c}, DType::kFloat32, dev), ops::Ones({c}, DType::kFloat32, dev)}) {
      t.block()->set_persistent(true);
      stats.push_back(t);
    }
  return stats;
}

std::pair<Tensor, Tensor> ImageBatch(int64_t side, uint32_t seed, int s) {
  Tensor x = RandomTensor({4, 3, side, side}, DType::kFloat32, seed + uint32_t(s));
  std::vector<int32_t> labels = {int32_t(s % 10), 3, 7, int32_t((s * 3) % 10)};
  return {x, ops::FromVector(labels, {4}, CpuDevice())};
}

std::vector<float> ReplayImageSteps(Graph& g, Tensor x, Tensor y, const Tensor& loss, int steps, int64_t side,
                                    uint32_t seed, const std::function<void(int)>& after, bool sequential) {
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    auto b = ImageBatch(side, seed, s);
    x.CopyFrom(b.first.ToVector<float>());
    y.CopyFrom(b.second.ToVector<int32_t>());
    g.Run(sequential);
    losses.push_back(float(loss.Item()));
    if (after) after(s);
  }
  return losses;
}

std::vector<std::vector<float>> HostValues(const std::vector<Tensor>& params, const std::vector<Tensor>& stats) {
  std::vector<std::vector<float>> v;
  for (const auto* list : {&params, &stats})
    for (const Tensor& t : *list) v.push_back(t.ToVector<float>());
  return v;
}

}  // namespace test
}  // namespace loom
