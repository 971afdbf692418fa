// Convolutional-network layers over the ops of core/ops_cnn.h. Images are NCHW.
#pragma once

#include "core/ops_cnn.h"
#include "nn/layer.h"

namespace loom {
namespace nn {

class Conv2d : public Layer {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
         bool bias = true, int64_t dilation = 1, int64_t groups = 1, LayerOptions o = {});
  Tensor Forward(const Tensor& x) override;
  std::string TypeName() const override { return "Conv2d"; }
  Tensor weight, bias;  // (O, C/groups, K, K), (O)

 private:
  int64_t in_;
  ops::Conv2dOptions opt_;
};

class BatchNorm2d : public Layer {
 public:
  explicit BatchNorm2d(int64_t channels, double momentum = 0.1, double eps = 1e-5, LayerOptions o = {});
  Tensor Forward(const Tensor& x) override;
  std::string TypeName() const override { return "BatchNorm2d"; }
  Tensor gamma, beta, running_mean, running_var;

 private:
  int64_t channels_;
  double momentum_, eps_;
};

class LayerNorm : public Layer {
 public:
  explicit LayerNorm(const Shape& normalized_shape, double eps = 1e-5, LayerOptions o = {});
  Tensor Forward(const Tensor& x) override;
  std::string TypeName() const override { return "LayerNorm"; }
  Tensor gamma, beta;

 private:
  double eps_;
};

class MaxPool2d : public Layer {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);
  Tensor Forward(const Tensor& x) override { return ops::MaxPool2d(x, opt_); }
  std::string TypeName() const override { return "MaxPool2d"; }

 private:
  ops::Pool2dOptions opt_;
};

class AvgPool2d : public Layer {
 public:
  explicit AvgPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);
  Tensor Forward(const Tensor& x) override { return ops::AvgPool2d(x, opt_); }
  std::string TypeName() const override { return "AvgPool2d"; }

 private:
  ops::Pool2dOptions opt_;
};

class GlobalAvgPool : public Layer {
 public:
  Tensor Forward(const Tensor& x) override { return ops::GlobalAvgPool(x); }
  std::string TypeName() const override { return "GlobalAvgPool"; }
};

class Embedding : public Layer {
 public:
  Embedding(int64_t vocab, int64_t dim, LayerOptions o = {});
  Tensor Forward(const Tensor& indices) override { return ops::Embedding(table, indices); }
  std::string TypeName() const override { return "Embedding"; }
  Tensor table;  // (V, D)
};

// ResNet v1.5 blocks: the stride sits in the 3x3 convolution; the shortcut is a 1x1 conv with
// BatchNorm when the shape changes.
class BasicBlock : public Layer {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride = 1, LayerOptions o = {});
  Tensor Forward(const Tensor& x) override;
  std::string TypeName() const override { return "BasicBlock"; }

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_, down_conv_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_, down_bn_;
};

class Bottleneck : public Layer {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in, int64_t mid, int64_t stride = 1, LayerOptions o = {});
  Tensor Forward(const Tensor& x) override;
  std::string TypeName() const override { return "Bottleneck"; }

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_, conv3_, down_conv_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_, bn3_, down_bn_;
};

}  // namespace nn
}  // namespace loom
