// The convolutional-network ops (core/ops_cnn.h), their layers (nn/cnn_layers.h) and the CNN
// models of the zoo. Included by loom.i when those sources are in the tree (LOOM_PY_CNN, set by
// swig/CMakeLists.txt); loom/autograd.py and loom/layer.py say so clearly when they are not.

%{
#include "core/ops_cnn.h"
#include "nn/cnn_layers.h"
%}

%shared_ptr(loom::nn::Conv2d)
%shared_ptr(loom::nn::BatchNorm2d)
%shared_ptr(loom::nn::LayerNorm)
%shared_ptr(loom::nn::MaxPool2d)
%shared_ptr(loom::nn::AvgPool2d)
%shared_ptr(loom::nn::GlobalAvgPool)
%shared_ptr(loom::nn::Embedding)
%shared_ptr(loom::nn::BasicBlock)
%shared_ptr(loom::nn::Bottleneck)

%rename(global_avg_pool) loom::ops::GlobalAvgPool;
%rename(batch_norm) loom::ops::BatchNorm;
%rename(layer_norm) loom::ops::LayerNorm;
%rename(embedding) loom::ops::Embedding;
%rename(make_small_cnn) loom::nn::MakeSmallCnn;
%rename(make_resnet18) loom::nn::MakeResNet18;
%rename(make_resnet50) loom::nn::MakeResNet50;

namespace loom {
namespace ops {
Tensor GlobalAvgPool(const Tensor& x);
Tensor BatchNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                 const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
Tensor LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5);
Tensor Embedding(const Tensor& table, const Tensor& indices);
}  // namespace ops

namespace nn {
class Conv2d : public Layer {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding, bool bias,
         int64_t dilation, int64_t groups, LayerOptions o);
};
class BatchNorm2d : public Layer {
 public:
  BatchNorm2d(int64_t channels, double momentum, double eps, LayerOptions o);
};
class LayerNorm : public Layer {
 public:
  LayerNorm(const Shape& normalized_shape, double eps, LayerOptions o);
};
class MaxPool2d : public Layer {
 public:
  MaxPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);
};
class AvgPool2d : public Layer {
 public:
  AvgPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);
};
class GlobalAvgPool : public Layer {
 public:
  GlobalAvgPool();
};
class Embedding : public Layer {
 public:
  Embedding(int64_t vocab, int64_t dim, LayerOptions o);
};
class BasicBlock : public Layer {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride, LayerOptions o);
};
class Bottleneck : public Layer {
 public:
  Bottleneck(int64_t in, int64_t mid, int64_t stride, LayerOptions o);
};

std::shared_ptr<Layer> MakeSmallCnn(int64_t in_channels, int64_t classes, LayerOptions o);
std::shared_ptr<Layer> MakeResNet18(int64_t classes, LayerOptions o);
std::shared_ptr<Layer> MakeResNet50(int64_t classes, LayerOptions o);
}  // namespace nn
}  // namespace loom

// The option structs become plain arguments: (sh, sw), (ph, pw), ...; an undefined bias
// (Tensor()) means none.
%inline %{
namespace loom_py {
loom::Tensor conv2d(const loom::Tensor& x, const loom::Tensor& w, const loom::Tensor& bias,
                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                    const std::vector<int64_t>& dilation, int64_t groups) {
  loom::ops::Conv2dOptions o;
  o.stride = stride;
  o.padding = padding;
  o.dilation = dilation;
  o.groups = groups;
  return loom::ops::Conv2d(x, w, bias, o);
}
loom::Tensor max_pool2d(const loom::Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                        const std::vector<int64_t>& padding) {
  loom::ops::Pool2dOptions o;
  o.kernel = kernel;
  o.stride = stride;
  o.padding = padding;
  return loom::ops::MaxPool2d(x, o);
}
loom::Tensor avg_pool2d(const loom::Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                        const std::vector<int64_t>& padding, bool count_include_pad) {
  loom::ops::Pool2dOptions o;
  o.kernel = kernel;
  o.stride = stride;
  o.padding = padding;
  o.count_include_pad = count_include_pad;
  return loom::ops::AvgPool2d(x, o);
}
}  // namespace loom_py
%}
