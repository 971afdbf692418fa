// The C++ op API: thin functions over Call()/CallInto(). Each op's declaration (shape
// inference, backward, saved tensors) is in src/core/ops/<family>.cc, its kernels in
// src/device/<backend>/kernels/<family>.cc.
#pragma once

#include <memory>
#include <vector>

#include "core/op.h"

namespace loom {
class Device;
namespace ops {

// ---- creation (src/core/ops/creation.cc) ----
Tensor Empty(const Shape& shape, DType dtype, const std::shared_ptr<Device>& dev);  // lazy, unwritten
Tensor Full(const Shape& shape, double value, DType dtype, const std::shared_ptr<Device>& dev);
Tensor Zeros(const Shape& shape, DType dtype, const std::shared_ptr<Device>& dev);
Tensor Ones(const Shape& shape, DType dtype, const std::shared_ptr<Device>& dev);
Tensor ZerosLike(const Tensor& t);
Tensor OnesLike(const Tensor& t);
void Fill(const Tensor& t, double value);  // in place
template <typename T>
Tensor FromVector(const std::vector<T>& data, const Shape& shape, const std::shared_ptr<Device>& dev);
// Counter-based (Philox) random tensors drawn from the device generator.
Tensor Uniform(const Shape& shape, double lo, double hi, DType dtype, const std::shared_ptr<Device>& dev);
Tensor Normal(const Shape& shape, double mean, double stddev, DType dtype, const std::shared_ptr<Device>& dev);
Tensor Bernoulli(const Shape& shape, double p, DType dtype, const std::shared_ptr<Device>& dev);
void UniformInto(const Tensor& t, double lo, double hi);
void NormalInto(const Tensor& t, double mean, double stddev);
// Writes src's values into dst (same shape and dtype; src may be strided). No autograd.
void CopyInto(const Tensor& dst, const Tensor& src);
Tensor Cast(const Tensor& x, DType dtype);

// ---- element-wise, with numpy broadcasting (src/core/ops/elementwise.cc) ----
Tensor Add(const Tensor& a, const Tensor& b);
Tensor Sub(const Tensor& a, const Tensor& b);
Tensor Mul(const Tensor& a, const Tensor& b);
Tensor Div(const Tensor& a, const Tensor& b);
Tensor AddScalar(const Tensor& x, double s);
Tensor MulScalar(const Tensor& x, double s);
Tensor SubScalar(const Tensor& x, double s);   // x - s
Tensor RSubScalar(const Tensor& x, double s);  // s - x
Tensor DivScalar(const Tensor& x, double s);   // x / s
Tensor RDivScalar(const Tensor& x, double s);  // s / x
Tensor PowScalar(const Tensor& x, double p);   // x ** p
Tensor Pow(const Tensor& x, const Tensor& p);  // x ** p, x > 0 where p is not an integer
Tensor Neg(const Tensor& x);
Tensor Exp(const Tensor& x);
Tensor Log(const Tensor& x);
Tensor Sqrt(const Tensor& x);
Tensor Abs(const Tensor& x);
Tensor Clamp(const Tensor& x, double lo, double hi);
Tensor Erf(const Tensor& x);
// x where cond (bool or uint8) is true, else y; the three broadcast together.
Tensor Where(const Tensor& cond, const Tensor& x, const Tensor& y);

// ---- comparisons, with numpy broadcasting, to bool (src/core/ops/compare.cc) ----
// a, b: one dtype (float32, float64, int32, int64, uint8 or bool). Not differentiable.
Tensor Equal(const Tensor& a, const Tensor& b);
Tensor NotEqual(const Tensor& a, const Tensor& b);
Tensor Greater(const Tensor& a, const Tensor& b);  // a > b
Tensor Less(const Tensor& a, const Tensor& b);     // a < b
Tensor GreaterEqual(const Tensor& a, const Tensor& b);
Tensor LessEqual(const Tensor& a, const Tensor& b);

// ---- activations (src/core/ops/activation.cc) ----
Tensor Relu(const Tensor& x);
Tensor LeakyRelu(const Tensor& x, double slope = 0.01);
Tensor Sigmoid(const Tensor& x);
Tensor Tanh(const Tensor& x);
Tensor Gelu(const Tensor& x);     // tanh approximation (GPT-2's)
Tensor GeluErf(const Tensor& x);  // 0.5 x (1 + erf(x / sqrt 2)), the exact form
Tensor Softplus(const Tensor& x);

// ---- linear algebra (src/core/ops/linalg.cc) ----
// a: (..., M, K), b: (..., K, N) -> (..., M, N); batch dimensions broadcast.
Tensor MatMul(const Tensor& a, const Tensor& b);
// x: (..., N), b: (N) -> x + b
Tensor AddBias(const Tensor& x, const Tensor& b);

// ---- reductions (src/core/ops/reduce.cc); empty axes = all axes ----
Tensor Sum(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdims = false);
Tensor Mean(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdims = false);
Tensor Max(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdims = false);
// Sums x down to `shape` (the inverse of broadcasting); used by broadcast backward.
Tensor SumTo(const Tensor& x, const Shape& shape);

// ---- softmax and losses (src/core/ops/loss.cc) ----
Tensor Softmax(const Tensor& x, int64_t axis = -1);
Tensor LogSoftmax(const Tensor& x, int64_t axis = -1);
// logits: (N, C); labels: int32/int64 (N) class indices, or float (N, C) one-hot/probabilities.
// Returns the mean loss over the batch, shape ().
Tensor SoftmaxCrossEntropy(const Tensor& logits, const Tensor& labels);
Tensor MseLoss(const Tensor& pred, const Tensor& target);  // mean of squared differences, shape ()
// softmax_cross_entropy(h w^T, labels) (w_is_table: w (V, D), as an embedding's table) or of h w
// (w (D, V)), without the (N, V) logits: Note [Cross-entropy fused with the head's product] in
// src/core/ops/loss.cc. h: (N, D); labels: int32/int64 (N). Returns the mean loss, shape ().
Tensor LinearCrossEntropy(const Tensor& h, const Tensor& w, const Tensor& labels, bool w_is_table = true);

// ---- shape (src/core/ops/shape.cc) ----
Tensor Reshape(const Tensor& x, const Shape& shape);  // one dimension may be -1
Tensor Transpose(const Tensor& x, int64_t a = -2, int64_t b = -1);  // a view
Tensor Permute(const Tensor& x, const std::vector<int64_t>& perm);  // a view
Tensor Concat(const std::vector<Tensor>& xs, int64_t axis);
Tensor Slice(const Tensor& x, int64_t axis, int64_t start, int64_t end);  // [start, end)
Tensor BroadcastTo(const Tensor& x, const Shape& shape);
Tensor Flatten(const Tensor& x, int64_t start_axis = 1);  // (N, ...) -> (N, prod)

// ---- regularisation (src/core/ops/dropout.cc) ----
// Training: zeroes each element with probability p and scales the rest by 1/(1-p), drawing
// fresh numbers on every run and replay. Not training: identity.
Tensor Dropout(const Tensor& x, double p, bool training = true);

}  // namespace ops
}  // namespace loom
