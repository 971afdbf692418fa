// Layers own their parameters (and states such as BatchNorm's running statistics) and compose
// into trees; names are paths ("layer1.0.conv1.weight"). Parameters are created on a device at
// construction, initialised the usual way (Kaiming for ReLU networks), marked persistent (a
// graph never recycles them) and require gradients.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace loom {
class Device;
namespace nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Layer {
 public:
  virtual ~Layer() = default;
  virtual Tensor Forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return Forward(x); }
  virtual std::string TypeName() const = 0;
  // The mean softmax cross-entropy of Forward(x) against class indices `labels`, computed without
  // Forward's output where the layer can (nn::Gpt: Note [Cross-entropy fused with the head's
  // product] in core/ops/loss.cc); undefined where it cannot (the default): the caller then
  // computes Forward and the loss.
  virtual Tensor ForwardCrossEntropy(const Tensor& x, const Tensor& labels) {
    (void)x;
    (void)labels;
    return Tensor();
  }

  NamedTensors Params() const;  // trainable, in registration order
  NamedTensors States() const;  // non-trainable persistent state (running statistics)
  // Train mode: BatchNorm uses batch statistics and updates running ones, Dropout drops.
  void Train(bool on = true);
  void Eval() { Train(false); }
  bool training() const { return training_; }

 protected:
  Tensor& AddParam(const std::string& name, Tensor t);
  Tensor& AddState(const std::string& name, Tensor t);
  template <typename L>
  std::shared_ptr<L> AddChild(const std::string& name, std::shared_ptr<L> child) {
    children_.emplace_back(name, child);
    return child;
  }

 private:
  void Collect(const std::string& prefix, bool params, NamedTensors& out) const;
  NamedTensors params_, states_;
  std::vector<std::pair<std::string, std::shared_ptr<Layer>>> children_;
  bool training_ = true;
};

// Parameter initialisers (counter-based generator of the device: reproducible per seed).
Tensor KaimingNormal(const Shape& shape, int64_t fan_in, DType dtype, const std::shared_ptr<Device>& dev);
Tensor KaimingUniform(const Shape& shape, int64_t fan_in, DType dtype, const std::shared_ptr<Device>& dev);
Tensor XavierUniform(const Shape& shape, int64_t fan_in, int64_t fan_out, DType dtype,
                     const std::shared_ptr<Device>& dev);

struct LayerOptions {
  std::shared_ptr<Device> device;  // null: the CPU device
  DType dtype = DType::kFloat32;
};

class Linear : public Layer {
 public:
  Linear(int64_t in, int64_t out, bool bias = true, LayerOptions o = {});
  Tensor Forward(const Tensor& x) override;  // x: (..., in) -> (..., out)
  std::string TypeName() const override { return "Linear"; }
  Tensor weight, bias;  // (in, out), (out)

 private:
  int64_t in_, out_;
};

enum class Act { kReLU, kLeakyReLU, kSigmoid, kTanh, kGELU, kSoftplus };
class Activation : public Layer {
 public:
  explicit Activation(Act kind, double slope = 0.01) : kind_(kind), slope_(slope) {}
  Tensor Forward(const Tensor& x) override;
  std::string TypeName() const override;

 private:
  Act kind_;
  double slope_;
};
inline std::shared_ptr<Activation> ReLU() { return std::make_shared<Activation>(Act::kReLU); }

class Dropout : public Layer {
 public:
  explicit Dropout(double p);
  Tensor Forward(const Tensor& x) override;
  std::string TypeName() const override { return "Dropout"; }

 private:
  double p_;
};

class Flatten : public Layer {
 public:
  explicit Flatten(int64_t start_axis = 1) : start_(start_axis) {}
  Tensor Forward(const Tensor& x) override;
  std::string TypeName() const override { return "Flatten"; }

 private:
  int64_t start_;
};

class Sequential : public Layer {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Layer>> layers);
  Sequential& Add(std::shared_ptr<Layer> layer);
  Tensor Forward(const Tensor& x) override;
  std::string TypeName() const override { return "Sequential"; }
  size_t size() const { return layers_.size(); }

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
};

}  // namespace nn
}  // namespace loom
