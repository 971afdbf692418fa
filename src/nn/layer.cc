#include "nn/layer.h"

#include <cmath>

#include "core/ops.h"
#include "core/device.h"

namespace loom {
namespace nn {

static std::shared_ptr<Device> Dev(const LayerOptions& o) { return o.device ? o.device : CpuDevice(); }

NamedTensors Layer::Params() const {
  NamedTensors out;
  Collect("", true, out);
  return out;
}

NamedTensors Layer::States() const {
  NamedTensors out;
  Collect("", false, out);
  return out;
}

void Layer::Collect(const std::string& prefix, bool params, NamedTensors& out) const {
  // The tensors take their full path as name (the autograd and optimizer key them by it).
  for (auto& kv : params ? params_ : states_) {
    Tensor t = kv.second;
    t.set_name(prefix + kv.first);
    out.emplace_back(prefix + kv.first, t);
  }
  for (auto& c : children_) c.second->Collect(prefix + c.first + ".", params, out);
}

void Layer::Train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->Train(on);
}

Tensor& Layer::AddParam(const std::string& name, Tensor t) {
  t.block()->set_persistent(true);
  t.set_requires_grad(true);
  t.set_name(name);
  params_.emplace_back(name, t);
  return params_.back().second;
}

Tensor& Layer::AddState(const std::string& name, Tensor t) {
  t.block()->set_persistent(true);
  t.set_name(name);
  states_.emplace_back(name, t);
  return states_.back().second;
}

Tensor KaimingNormal(const Shape& shape, int64_t fan_in, DType dtype, const std::shared_ptr<Device>& dev) {
  return ops::Normal(shape, 0, std::sqrt(2.0 / double(std::max<int64_t>(fan_in, 1))), dtype, dev);
}

Tensor KaimingUniform(const Shape& shape, int64_t fan_in, DType dtype, const std::shared_ptr<Device>& dev) {
  double bound = std::sqrt(6.0 / double(std::max<int64_t>(fan_in, 1)));
  return ops::Uniform(shape, -bound, bound, dtype, dev);
}

Tensor XavierUniform(const Shape& shape, int64_t fan_in, int64_t fan_out, DType dtype,
                     const std::shared_ptr<Device>& dev) {
  double bound = std::sqrt(6.0 / double(std::max<int64_t>(fan_in + fan_out, 1)));
  return ops::Uniform(shape, -bound, bound, dtype, dev);
}

Linear::Linear(int64_t in, int64_t out, bool has_bias, LayerOptions o) : in_(in), out_(out) {
  LOOM_CHECK(in > 0 && out > 0, ValueError, "[Linear] sizes must be positive, got ", in, " -> ", out);
  weight = AddParam("weight", KaimingNormal({in, out}, in, o.dtype, Dev(o)));
  if (has_bias) bias = AddParam("bias", ops::Zeros({out}, o.dtype, Dev(o)));
}

Tensor Linear::Forward(const Tensor& x) {
  LOOM_CHECK(x.ndim() >= 1 && x.dim(-1) == in_, ShapeError, "[Linear] expects inputs (..., ", in_, "), got ",
             x.Describe());
  // A 1-D input is one sample without a batch: (in,) -> (out,), as in PyTorch.
  Tensor y = ops::MatMul(x.ndim() == 1 ? ops::Reshape(x, {1, in_}) : x, weight);
  if (bias.defined()) y = ops::AddBias(y, bias);
  return x.ndim() == 1 ? ops::Reshape(y, {out_}) : y;
}

Tensor Activation::Forward(const Tensor& x) {
  switch (kind_) {
    case Act::kReLU: return ops::Relu(x);
    case Act::kLeakyReLU: return ops::LeakyRelu(x, slope_);
    case Act::kSigmoid: return ops::Sigmoid(x);
    case Act::kTanh: return ops::Tanh(x);
    case Act::kGELU: return ops::Gelu(x);
    case Act::kSoftplus: return ops::Softplus(x);
  }
  return x;
}

std::string Activation::TypeName() const {
  switch (kind_) {
    case Act::kReLU: return "ReLU";
    case Act::kLeakyReLU: return "LeakyReLU";
    case Act::kSigmoid: return "Sigmoid";
    case Act::kTanh: return "Tanh";
    case Act::kGELU: return "GELU";
    case Act::kSoftplus: return "Softplus";
  }
  return "Activation";
}

Dropout::Dropout(double p) : p_(p) {
  LOOM_CHECK(p >= 0 && p < 1, ValueError, "[Dropout] probability ", p, " is outside [0, 1)");
}

Tensor Dropout::Forward(const Tensor& x) { return ops::Dropout(x, p_, training()); }

Tensor Flatten::Forward(const Tensor& x) { return ops::Flatten(x, start_); }

Sequential::Sequential(std::vector<std::shared_ptr<Layer>> layers) {
  for (auto& l : layers) Add(std::move(l));
}

Sequential& Sequential::Add(std::shared_ptr<Layer> layer) {
  LOOM_CHECK(layer, ValueError, "[Sequential] null layer");
  AddChild(std::to_string(layers_.size()), layer);
  layers_.push_back(std::move(layer));
  return *this;
}

Tensor Sequential::Forward(const Tensor& x) {
  Tensor h = x;
  for (auto& l : layers_) h = l->Forward(h);
  return h;
}

}  // namespace nn
}  // namespace loom
