// Creation and copying: fill, random fills, copy (honours strides), cast.
#include <cmath>

#include "core/ops/common.h"
#include "core/device.h"

namespace loom {

using namespace opdecl;

// What creation ops produce: the output's shape and dtype (FromAttrs), then their own values.
const std::vector<AttrDecl> kCreationAttrs = {{"shape", kInts}, {"dtype", kInt}};

LOOM_OP(fill) {
  def.attrs = Join(kCreationAttrs, {{"value", kFloat}});
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    std::vector<TensorMeta> out = FromAttrs(in, a);
    CheckFillValue("fill", out[0].dtype, a.Float("value"));
    return out;
  };
}

// Random fills consume one Philox counter per four elements (see device/philox.h).
static uint64_t RandomDraws(const OpRecord& op) { return uint64_t(op.outputs[0].numel() + 3) / 4; }
LOOM_OP(uniform) {
  def.attrs = Join(kCreationAttrs, {{"low", kFloat}, {"high", kFloat}});
  def.infer = FromAttrs;
  def.random_draws = RandomDraws;
}
LOOM_OP(normal) {
  def.attrs = Join(kCreationAttrs, {{"mean", kFloat}, {"std", kFloat}});
  def.infer = FromAttrs;
  def.random_draws = RandomDraws;
}
LOOM_OP(bernoulli) {
  def.attrs = Join(kCreationAttrs, {{"p", kFloat}});
  def.infer = FromAttrs;
  def.random_draws = RandomDraws;
}

LOOM_OP(copy) {
  def.internal = "made by ops::CopyInto (loom.core.copy_into, Tensor.copy) and Tensor::Contiguous";
  def.accepts_strided = true;
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    CheckArity("copy", in, 1);
    return std::vector<TensorMeta>{in[0]};
  };
  def.backward = [](const BackwardArgs& a) { return std::vector<Tensor>{a.grad_outputs[0]}; };
}

LOOM_OP(cast) {
  def.attrs = {{"dtype", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("cast", in, 1);
    return std::vector<TensorMeta>{{in[0].shape, DType(a.Int("dtype"))}};
  };
  def.backward = [](const BackwardArgs& a) {
    // Gradients flow between floating types only.
    if (!IsFloating(a.input_metas[0].dtype)) return std::vector<Tensor>{Tensor()};
    return std::vector<Tensor>{ops::Cast(a.grad_outputs[0], a.input_metas[0].dtype)};
  };
}

namespace ops {

static Attrs CreationAttrs(const Shape& shape, DType dtype) {
  return Attrs{{"shape", shape}, {"dtype", int64_t(dtype)}};
}

Tensor Empty(const Shape& shape, DType dtype, const std::shared_ptr<Device>& dev) { return Tensor(shape, dtype, dev); }

Tensor Full(const Shape& shape, double value, DType dtype, const std::shared_ptr<Device>& dev) {
  Tensor t(shape, dtype, dev);
  Fill(t, value);
  return t;
}
Tensor Zeros(const Shape& shape, DType dtype, const std::shared_ptr<Device>& dev) { return Full(shape, 0, dtype, dev); }
Tensor Ones(const Shape& shape, DType dtype, const std::shared_ptr<Device>& dev) { return Full(shape, 1, dtype, dev); }
Tensor ZerosLike(const Tensor& t) { return Zeros(t.shape(), t.dtype(), t.device_ptr()); }
Tensor OnesLike(const Tensor& t) { return Ones(t.shape(), t.dtype(), t.device_ptr()); }

void Fill(const Tensor& t, double value) {
  CallInto(op_kind::fill, {}, {t}, CreationAttrs(t.shape(), t.dtype()).Set("value", value));
}

template <typename T>
Tensor FromVector(const std::vector<T>& data, const Shape& shape, const std::shared_ptr<Device>& dev) {
  LOOM_CHECK(int64_t(data.size()) == NumElements(shape), ShapeError, "[from_vector] ", data.size(),
             " values do not fill shape ", ToString(shape));
  Tensor t(shape, DTypeOf<T>::value, dev);
  t.CopyFromHost(data.data(), data.size() * sizeof(T));
  return t;
}
template Tensor FromVector<float>(const std::vector<float>&, const Shape&, const std::shared_ptr<Device>&);
template Tensor FromVector<double>(const std::vector<double>&, const Shape&, const std::shared_ptr<Device>&);
template Tensor FromVector<int32_t>(const std::vector<int32_t>&, const Shape&, const std::shared_ptr<Device>&);
template Tensor FromVector<int64_t>(const std::vector<int64_t>&, const Shape&, const std::shared_ptr<Device>&);
template Tensor FromVector<uint8_t>(const std::vector<uint8_t>&, const Shape&, const std::shared_ptr<Device>&);

void UniformInto(const Tensor& t, double lo, double hi) {
  LOOM_CHECK(std::isfinite(lo) && std::isfinite(hi), ValueError, "[uniform] bounds (", lo, ", ", hi,
             ") must be finite numbers");
  LOOM_CHECK(lo <= hi, ValueError, "[uniform] low ", lo, " is above high ", hi);
  CallInto(op_kind::uniform, {}, {t}, CreationAttrs(t.shape(), t.dtype()).Set("low", lo).Set("high", hi));
}
void NormalInto(const Tensor& t, double mean, double stddev) {
  LOOM_CHECK(std::isfinite(mean), ValueError, "[normal] mean ", mean, ": must be a finite number");
  LOOM_CHECK(std::isfinite(stddev), ValueError, "[normal] standard deviation ", stddev,
             ": must be a finite number");
  LOOM_CHECK(stddev >= 0, ValueError, "[normal] standard deviation ", stddev, " is negative");
  CallInto(op_kind::normal, {}, {t}, CreationAttrs(t.shape(), t.dtype()).Set("mean", mean).Set("std", stddev));
}
Tensor Uniform(const Shape& shape, double lo, double hi, DType dtype, const std::shared_ptr<Device>& dev) {
  Tensor t(shape, dtype, dev);
  UniformInto(t, lo, hi);
  return t;
}
Tensor Normal(const Shape& shape, double mean, double stddev, DType dtype, const std::shared_ptr<Device>& dev) {
  Tensor t(shape, dtype, dev);
  NormalInto(t, mean, stddev);
  return t;
}
Tensor Bernoulli(const Shape& shape, double p, DType dtype, const std::shared_ptr<Device>& dev) {
  LOOM_CHECK(p >= 0 && p <= 1, ValueError, "[bernoulli] probability ", p, " is outside [0, 1]");
  Tensor t(shape, dtype, dev);
  CallInto(op_kind::bernoulli, {}, {t}, CreationAttrs(shape, dtype).Set("p", p));
  return t;
}

void CopyInto(const Tensor& dst, const Tensor& src) {
  LOOM_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), ShapeError, "[copy] cannot copy ",
             src.Describe(), " into ", dst.Describe());
  CallInto(op_kind::copy, {src}, {dst});
}

Tensor Cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return Call1(op_kind::cast, {x}, Attrs{{"dtype", int64_t(dtype)}});
}

}  // namespace ops
}  // namespace loom
