#include "nn/models.h"

#include "core/ops.h"
#include "nn/cnn_layers.h"

namespace loom {
namespace nn {

std::shared_ptr<Layer> MakeMlp(const std::vector<int64_t>& dims, LayerOptions o) {
  LOOM_CHECK(dims.size() >= 2, ValueError, "[MakeMlp] needs at least an input and an output size");
  auto net = std::make_shared<Sequential>();
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    net->Add(std::make_shared<Linear>(dims[i], dims[i + 1], true, o));
    if (i + 2 < dims.size()) net->Add(ReLU());
  }
  return net;
}

std::shared_ptr<Layer> MakeSmallCnn(int64_t in_channels, int64_t classes, LayerOptions o) {
  auto net = std::make_shared<Sequential>();
  net->Add(std::make_shared<Conv2d>(in_channels, 32, 3, 1, 1, false, 1, 1, o));
  net->Add(std::make_shared<BatchNorm2d>(32, 0.1, 1e-5, o));
  net->Add(ReLU());
  net->Add(std::make_shared<MaxPool2d>(2));
  net->Add(std::make_shared<Conv2d>(32, 64, 3, 1, 1, false, 1, 1, o));
  net->Add(std::make_shared<BatchNorm2d>(64, 0.1, 1e-5, o));
  net->Add(ReLU());
  net->Add(std::make_shared<MaxPool2d>(2));
  net->Add(std::make_shared<Flatten>());
  net->Add(std::make_shared<Linear>(64 * 8 * 8, classes, true, o));
  return net;
}

namespace {
class ResNet : public Layer {
 public:
  ResNet(bool bottleneck, const std::vector<int>& blocks, int64_t classes, bool cifar_stem, LayerOptions o)
      : cifar_stem_(cifar_stem) {
    if (cifar_stem) {
      stem_conv_ = AddChild("conv1", std::make_shared<Conv2d>(3, 64, 3, 1, 1, false, 1, 1, o));
    } else {
      stem_conv_ = AddChild("conv1", std::make_shared<Conv2d>(3, 64, 7, 2, 3, false, 1, 1, o));
      pool_ = std::make_shared<MaxPool2d>(3, 2, 1);
    }
    stem_bn_ = AddChild("bn1", std::make_shared<BatchNorm2d>(64, 0.1, 1e-5, o));
    int64_t in = 64;
    const int64_t widths[4] = {64, 128, 256, 512};
    for (int stage = 0; stage < 4; ++stage) {
      auto seq = std::make_shared<Sequential>();
      for (int b = 0; b < blocks[size_t(stage)]; ++b) {
        int64_t stride = (b == 0 && stage > 0) ? 2 : 1;
        if (bottleneck) {
          seq->Add(std::make_shared<Bottleneck>(in, widths[stage], stride, o));
          in = widths[stage] * Bottleneck::kExpansion;
        } else {
          seq->Add(std::make_shared<BasicBlock>(in, widths[stage], stride, o));
          in = widths[stage];
        }
      }
      stages_.push_back(AddChild("layer" + std::to_string(stage + 1), seq));
    }
    fc_ = AddChild("fc", std::make_shared<Linear>(in, classes, true, o));
  }
  Tensor Forward(const Tensor& x) override {
    Tensor h = ops::Relu(stem_bn_->Forward(stem_conv_->Forward(x)));
    if (pool_) h = pool_->Forward(h);
    for (auto& s : stages_) h = s->Forward(h);
    return fc_->Forward(ops::GlobalAvgPool(h));
  }
  std::string TypeName() const override { return "ResNet"; }

 private:
  bool cifar_stem_;
  std::shared_ptr<Conv2d> stem_conv_;
  std::shared_ptr<BatchNorm2d> stem_bn_;
  std::shared_ptr<MaxPool2d> pool_;
  std::vector<std::shared_ptr<Sequential>> stages_;
  std::shared_ptr<Linear> fc_;
};
}  // namespace

std::shared_ptr<Layer> MakeResNet18(int64_t classes, LayerOptions o) {
  return std::make_shared<ResNet>(false, std::vector<int>{2, 2, 2, 2}, classes, true, o);
}

std::shared_ptr<Layer> MakeResNet50(int64_t classes, LayerOptions o) {
  return std::make_shared<ResNet>(true, std::vector<int>{3, 4, 6, 3}, classes, false, o);
}

}  // namespace nn
}  // namespace loom
