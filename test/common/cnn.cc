#include "common/cnn.h"

#include "common/harness.h"
#include "nn/model.h"
#include "nn/models.h"

namespace loom {
namespace test {

CnnRun TrainSmallCnn(const std::shared_ptr<Device>& dev, bool graph, Precision p, const GraphOptions& options,
                     bool resnet18) {
  dev->SetRandSeed(8);
  nn::LayerOptions on;
  on.device = dev;
  nn::Model m(resnet18 ? nn::MakeResNet18(10, on) : nn::MakeSmallCnn(3, 10, on), std::make_shared<nn::SGD>(0.05, 0.9));
  m.set_precision(p);
  Tensor x = ToDevice(RandomTensor({4, 3, 32, 32}, DType::kFloat32, 31, -1, 1, CpuDevice()), dev);
  Tensor y = ops::FromVector(std::vector<int32_t>{1, 7, 3, 0}, {4}, dev);
  m.Compile({x}, true, graph, true, options);
  for (int i = 0; i < 3; ++i) m.TrainOneBatch(x, y);
  CnnRun r;
  if (graph) {
    r.stats = m.train_graph()->stats();
    for (const OpRecord& op : m.train_graph()->ops().ops)
      if (op.name().rfind("conv2d", 0) == 0) {
      if (op.inputs[0].dtype() == DType::kBFloat16) ++r.bf16_convs[op.name()];
      if (!BlockedAttrs(op).empty()) ++r.blocked_convs[op.name()];
    }
  }
  for (const auto& kv : m.Params()) r.params.push_back(kv.second.ToVector<float>());
  return r;
}

}  // namespace test
}  // namespace loom
