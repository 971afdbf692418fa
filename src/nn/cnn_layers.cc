#include "nn/cnn_layers.h"

#include "core/ops.h"
#include "core/device.h"

namespace loom {
namespace nn {

static std::shared_ptr<Device> Dev(const LayerOptions& o) { return o.device ? o.device : CpuDevice(); }

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, bool has_bias, int64_t dilation,
               int64_t groups, LayerOptions o)
    : in_(in) {
  LOOM_CHECK(in > 0 && out > 0 && k > 0, ValueError, "[Conv2d] channels and kernel must be positive, got in=", in,
             " out=", out, " kernel=", k);
  LOOM_CHECK(groups > 0 && in % groups == 0 && out % groups == 0, ValueError, "[Conv2d] groups=", groups,
             " must divide in_channels=", in, " and out_channels=", out);
  opt_.stride = {stride, stride};
  opt_.padding = {padding, padding};
  opt_.dilation = {dilation, dilation};
  opt_.groups = groups;
  const int64_t fan_in = NumElements({in / groups, k, k}, "Conv2d");  // checked (Note [Checked sizes])
  weight = AddParam("weight", KaimingNormal({out, in / groups, k, k}, fan_in, o.dtype, Dev(o)));
  if (has_bias) bias = AddParam("bias", ops::Zeros({out}, o.dtype, Dev(o)));
}

Tensor Conv2d::Forward(const Tensor& x) {
  LOOM_CHECK(x.ndim() == 4, ShapeError, "[Conv2d] expects (N, C, H, W) input, got ", x.Describe());
  LOOM_CHECK(x.dim(1) == in_, ShapeError, "[Conv2d] input has ", x.dim(1), " channels, the layer expects ", in_,
             " (input ", x.Describe(), ")");
  return ops::Conv2d(x, weight, bias, opt_);
}

BatchNorm2d::BatchNorm2d(int64_t c, double momentum, double eps, LayerOptions o)
    : channels_(c), momentum_(momentum), eps_(eps) {
  LOOM_CHECK(c > 0, ValueError, "[BatchNorm2d] channel count must be positive, got ", c);
  gamma = AddParam("gamma", ops::Ones({c}, o.dtype, Dev(o)));
  beta = AddParam("beta", ops::Zeros({c}, o.dtype, Dev(o)));
  running_mean = AddState("running_mean", ops::Zeros({c}, o.dtype, Dev(o)));
  running_var = AddState("running_var", ops::Ones({c}, o.dtype, Dev(o)));
}

Tensor BatchNorm2d::Forward(const Tensor& x) {
  LOOM_CHECK(x.ndim() >= 2 && x.dim(1) == channels_, ShapeError, "[BatchNorm2d] input has ",
             x.ndim() >= 2 ? x.dim(1) : 0, " channels, the layer expects ", channels_, " (input ", x.Describe(), ")");
  return ops::BatchNorm(x, gamma, beta, running_mean, running_var, training(), momentum_, eps_);
}

LayerNorm::LayerNorm(const Shape& shape, double eps, LayerOptions o) : eps_(eps) {
  gamma = AddParam("gamma", ops::Ones(shape, o.dtype, Dev(o)));
  beta = AddParam("beta", ops::Zeros(shape, o.dtype, Dev(o)));
}

Tensor LayerNorm::Forward(const Tensor& x) { return ops::LayerNorm(x, gamma, beta, eps_); }

static ops::Pool2dOptions PoolOpts(int64_t k, int64_t s, int64_t p) {
  LOOM_CHECK(k > 0 && s >= 0 && p >= 0, ValueError, "[pool] kernel ", k, ", stride ", s, ", padding ", p,
             " are invalid");
  ops::Pool2dOptions o;
  o.kernel = {k, k};
  o.stride = {s ? s : k, s ? s : k};
  o.padding = {p, p};
  return o;
}
MaxPool2d::MaxPool2d(int64_t k, int64_t s, int64_t p) : opt_(PoolOpts(k, s, p)) {}
AvgPool2d::AvgPool2d(int64_t k, int64_t s, int64_t p) : opt_(PoolOpts(k, s, p)) {}

Embedding::Embedding(int64_t vocab, int64_t dim, LayerOptions o) {
  LOOM_CHECK(vocab > 0 && dim > 0, ValueError, "[Embedding] sizes must be positive, got ", vocab, " x ", dim);
  table = AddParam("weight", ops::Normal({vocab, dim}, 0, 1, o.dtype, Dev(o)));
}

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t stride, LayerOptions o) {
  conv1_ = AddChild("conv1", std::make_shared<Conv2d>(in, out, 3, stride, 1, false, 1, 1, o));
  bn1_ = AddChild("bn1", std::make_shared<BatchNorm2d>(out, 0.1, 1e-5, o));
  conv2_ = AddChild("conv2", std::make_shared<Conv2d>(out, out, 3, 1, 1, false, 1, 1, o));
  bn2_ = AddChild("bn2", std::make_shared<BatchNorm2d>(out, 0.1, 1e-5, o));
  if (stride != 1 || in != out) {
    down_conv_ = AddChild("downsample.0", std::make_shared<Conv2d>(in, out, 1, stride, 0, false, 1, 1, o));
    down_bn_ = AddChild("downsample.1", std::make_shared<BatchNorm2d>(out, 0.1, 1e-5, o));
  }
}

Tensor BasicBlock::Forward(const Tensor& x) {
  Tensor h = ops::Relu(bn1_->Forward(conv1_->Forward(x)));
  h = bn2_->Forward(conv2_->Forward(h));
  Tensor shortcut = down_conv_ ? down_bn_->Forward(down_conv_->Forward(x)) : x;
  return ops::Relu(ops::Add(h, shortcut));
}

Bottleneck::Bottleneck(int64_t in, int64_t mid, int64_t stride, LayerOptions o) {
  int64_t out = mid * kExpansion;
  conv1_ = AddChild("conv1", std::make_shared<Conv2d>(in, mid, 1, 1, 0, false, 1, 1, o));
  bn1_ = AddChild("bn1", std::make_shared<BatchNorm2d>(mid, 0.1, 1e-5, o));
  conv2_ = AddChild("conv2", std::make_shared<Conv2d>(mid, mid, 3, stride, 1, false, 1, 1, o));
  bn2_ = AddChild("bn2", std::make_shared<BatchNorm2d>(mid, 0.1, 1e-5, o));
  conv3_ = AddChild("conv3", std::make_shared<Conv2d>(mid, out, 1, 1, 0, false, 1, 1, o));
  bn3_ = AddChild("bn3", std::make_shared<BatchNorm2d>(out, 0.1, 1e-5, o));
  if (stride != 1 || in != out) {
    down_conv_ = AddChild("downsample.0", std::make_shared<Conv2d>(in, out, 1, stride, 0, false, 1, 1, o));
    down_bn_ = AddChild("downsample.1", std::make_shared<BatchNorm2d>(out, 0.1, 1e-5, o));
  }
}

Tensor Bottleneck::Forward(const Tensor& x) {
  Tensor h = ops::Relu(bn1_->Forward(conv1_->Forward(x)));
  h = ops::Relu(bn2_->Forward(conv2_->Forward(h)));
  h = bn3_->Forward(conv3_->Forward(h));
  Tensor shortcut = down_conv_ ? down_bn_->Forward(down_conv_->Forward(x)) : x;
  return ops::Relu(ops::Add(h, shortcut));
}

}  // namespace nn
}  // namespace loom
