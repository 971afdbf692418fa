// Float64 references of the ops, for the op-case table (op_cases.h): host loops and closed
// forms written from each op's definition (its declaration's comment in src/core/ops/), never
// loom's kernels. A reference sees the case's inputs as exact doubles, before the op ran (so
// in-place updates see the old values), and returns every output the op writes, with its shape.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/attrs.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace loom {
namespace test {

// A tensor's values on the host, row-major, as doubles.
struct HostTensor {
  Shape shape;
  std::vector<double> v;

  HostTensor() = default;
  HostTensor(Shape s, std::vector<double> values) : shape(std::move(s)), v(std::move(values)) {}
  // Zeros of shape `s`.
  explicit HostTensor(Shape s) : shape(std::move(s)), v(size_t(NumElements(shape)), 0.0) {}
  int64_t numel() const { return int64_t(v.size()); }
};

struct RefArgs {
  const std::vector<HostTensor>& in;
  const Attrs& attrs;
  uint64_t rng_seed = 0;     // random ops: the device generator's key
  uint64_t rng_counter = 0;  // and its counter when the op ran
};

using Reference = std::function<std::vector<HostTensor>(const RefArgs&)>;

namespace ref {

// y = f(x, attrs) element by element.
Reference Unary(std::function<double(double, const Attrs&)> f);
// y = f(a, b, attrs) with numpy broadcasting.
Reference Binary(std::function<double(double, double, const Attrs&)> f);
// where(cond, x, y): x where cond is nonzero, else y, the three broadcast together.
std::vector<HostTensor> Where(const RefArgs& a);

// linear algebra and reductions
std::vector<HostTensor> MatMul(const RefArgs& a);
std::vector<HostTensor> AddBias(const RefArgs& a);
std::vector<HostTensor> BiasGrad(const RefArgs& a);
// the fused dense layer (act 0 none, 1 relu, 2 tanh, 3 sigmoid) and its activation + bias backward
std::vector<HostTensor> DenseBiasAct(const RefArgs& a);
std::vector<HostTensor> BiasActGrad(const RefArgs& a);
std::vector<HostTensor> Sum(const RefArgs& a);
std::vector<HostTensor> Max(const RefArgs& a);
std::vector<HostTensor> MaxGrad(const RefArgs& a);

// softmax and losses
std::vector<HostTensor> Softmax(const RefArgs& a);
std::vector<HostTensor> LogSoftmax(const RefArgs& a);
std::vector<HostTensor> SoftmaxGrad(const RefArgs& a);
std::vector<HostTensor> LogSoftmaxGrad(const RefArgs& a);
std::vector<HostTensor> SoftmaxCrossEntropy(const RefArgs& a);
std::vector<HostTensor> SoftmaxCrossEntropyGrad(const RefArgs& a);
std::vector<HostTensor> LinearCrossEntropy(const RefArgs& a);
std::vector<HostTensor> Mse(const RefArgs& a);
std::vector<HostTensor> MseGrad(const RefArgs& a);

// optimizer updates (the updated state, in the order of the op's outputs)
std::vector<HostTensor> SgdUpdate(const RefArgs& a);
std::vector<HostTensor> MatmulSgdUpdate(const RefArgs& a);
std::vector<HostTensor> AdamUpdate(const RefArgs& a);
// Note [Small updates grouped]: each member by SgdUpdate or AdamUpdate (attribute `of`).
std::vector<HostTensor> UpdateGroup(const RefArgs& a);
std::vector<HostTensor> Increment(const RefArgs& a);
std::vector<HostTensor> LrSchedule(const RefArgs& a);
std::vector<HostTensor> GradNorm(const RefArgs& a);
// loss scaling (Note [Loss scaling] in nn/loss_scale.h); UnscaleGrads rounds to the gradients' dtype
std::vector<HostTensor> UnscaleGrads(const RefArgs& a, DType dt);
std::vector<HostTensor> UpdateLossScale(const RefArgs& a);

// creation, random numbers (Philox4x32-10, device/philox.h: the stream's definition) and dropout
std::vector<HostTensor> Fill(const RefArgs& a);
std::vector<HostTensor> Uniform(const RefArgs& a);
std::vector<HostTensor> Normal(const RefArgs& a);
std::vector<HostTensor> Bernoulli(const RefArgs& a);
std::vector<HostTensor> Dropout(const RefArgs& a);
std::vector<HostTensor> DropoutGrad(const RefArgs& a);
std::vector<HostTensor> Copy(const RefArgs& a);
std::vector<HostTensor> Cast(const RefArgs& a);

// shape
std::vector<HostTensor> Concat(const RefArgs& a);
std::vector<HostTensor> Slice(const RefArgs& a);
std::vector<HostTensor> SliceGrad(const RefArgs& a);
std::vector<HostTensor> BroadcastTo(const RefArgs& a);
std::vector<HostTensor> Reshape(const RefArgs& a);
std::vector<HostTensor> Transpose(const RefArgs& a);
std::vector<HostTensor> Permute(const RefArgs& a);

// convolutional networks
std::vector<HostTensor> Conv2d(const RefArgs& a);
std::vector<HostTensor> Conv2dBf16(const RefArgs& a);  // bfloat16 x, w: the result rounded, then the bias
std::vector<HostTensor> Conv2dRelu(const RefArgs& a);  // relu(conv2d(...)): conv2d_relu
std::vector<HostTensor> Conv2dGradInput(const RefArgs& a);
std::vector<HostTensor> Conv2dGradWeight(const RefArgs& a);
std::vector<HostTensor> Conv2dGradBias(const RefArgs& a);
std::vector<HostTensor> ConvWeightLayout(const RefArgs& a);
std::vector<HostTensor> MaxPool2d(const RefArgs& a);
std::vector<HostTensor> MaxPool2dGrad(const RefArgs& a);
std::vector<HostTensor> AvgPool2d(const RefArgs& a);
std::vector<HostTensor> AvgPool2dGrad(const RefArgs& a);
std::vector<HostTensor> GlobalAvgPool(const RefArgs& a);
std::vector<HostTensor> GlobalAvgPoolGrad(const RefArgs& a);
std::vector<HostTensor> BatchNormTrain(const RefArgs& a);
std::vector<HostTensor> BatchNormInfer(const RefArgs& a);
std::vector<HostTensor> BatchNormApply(const RefArgs& a);
std::vector<HostTensor> BatchNormGrad(const RefArgs& a);
std::vector<HostTensor> LayerNorm(const RefArgs& a);
std::vector<HostTensor> LayerNormGrad(const RefArgs& a);
std::vector<HostTensor> Embedding(const RefArgs& a);
std::vector<HostTensor> EmbeddingGrad(const RefArgs& a);

// ---- the transformer ops (op_refs_transformer.cc) ----
std::vector<HostTensor> Attention(const RefArgs& a);
std::vector<HostTensor> AttentionGrad(const RefArgs& a);
std::vector<HostTensor> AttentionQkv(const RefArgs& a);
std::vector<HostTensor> AttentionQkvGrad(const RefArgs& a);

}  // namespace ref
}  // namespace test
}  // namespace loom
