// The op API (core/ops.h) and autograd (core/autograd.h), one wrapped C++ function per op so
// that a Python call costs one C call: loom/autograd.py re-exports these under SINGA's names.
// Adding an op is one line here (and one in autograd.py if its Python name differs).
// call_op reaches any registered op by name, with attributes from a dict.

%{
#include "core/autograd.h"
#include "core/ops.h"

namespace loom_py {

// {"axis": 1, "eps": 1e-5, "stride": (2, 2), "mode": "max"} -> Attrs.
static loom::Attrs ToAttrs(PyObject* dict) {
  loom::Attrs a;
  if (dict == Py_None) return a;
  if (!PyDict_Check(dict)) {
    PyErr_Format(PyExc_TypeError, "[call_op] attributes must be a dict, got %s", Py_TYPE(dict)->tp_name);
    throw PythonError();
  }
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    const char* k = PyUnicode_AsUTF8(key);
    if (!k) throw PythonError();
    if (PyBool_Check(value) || PyLong_Check(value)) {
      a.Set(k, int64_t(PyLong_AsLongLong(value)));
    } else if (PyFloat_Check(value)) {
      a.Set(k, PyFloat_AsDouble(value));
    } else if (PyUnicode_Check(value)) {
      a.Set(k, std::string(PyUnicode_AsUTF8(value)));
    } else {
      std::vector<int64_t> v;
      if (!ToInt64Vector(value, v, k)) throw PythonError();
      a.Set(k, v);
    }
    if (PyErr_Occurred()) throw PythonError();
  }
  return a;
}

}  // namespace loom_py
%}

// Python names (declared before the declarations they rename).
%rename(empty) loom::ops::Empty;
%rename(full) loom::ops::Full;
%rename(zeros) loom::ops::Zeros;
%rename(ones) loom::ops::Ones;
%rename(zeros_like) loom::ops::ZerosLike;
%rename(ones_like) loom::ops::OnesLike;
%rename(fill) loom::ops::Fill;
%rename(uniform) loom::ops::Uniform;
%rename(normal) loom::ops::Normal;
%rename(bernoulli) loom::ops::Bernoulli;
%rename(uniform_into) loom::ops::UniformInto;
%rename(normal_into) loom::ops::NormalInto;
%rename(copy_into) loom::ops::CopyInto;
%rename(cast) loom::ops::Cast;
%rename(add) loom::ops::Add;
%rename(sub) loom::ops::Sub;
%rename(mul) loom::ops::Mul;
%rename(div) loom::ops::Div;
%rename(add_scalar) loom::ops::AddScalar;
%rename(mul_scalar) loom::ops::MulScalar;
%rename(sub_scalar) loom::ops::SubScalar;
%rename(rsub_scalar) loom::ops::RSubScalar;
%rename(div_scalar) loom::ops::DivScalar;
%rename(rdiv_scalar) loom::ops::RDivScalar;
%rename(pow_scalar) loom::ops::PowScalar;
%rename(pow) loom::ops::Pow;
%rename(neg) loom::ops::Neg;
%rename(exp) loom::ops::Exp;
%rename(log) loom::ops::Log;
%rename(sqrt) loom::ops::Sqrt;
%rename(abs) loom::ops::Abs;
%rename(clamp) loom::ops::Clamp;
%rename(relu) loom::ops::Relu;
%rename(leaky_relu) loom::ops::LeakyRelu;
%rename(sigmoid) loom::ops::Sigmoid;
%rename(tanh) loom::ops::Tanh;
%rename(gelu) loom::ops::Gelu;
%rename(softplus) loom::ops::Softplus;
%rename(matmul) loom::ops::MatMul;
%rename(add_bias) loom::ops::AddBias;
%rename(sum) loom::ops::Sum;
%rename(mean) loom::ops::Mean;
%rename(max) loom::ops::Max;
%rename(sum_to) loom::ops::SumTo;
%rename(softmax) loom::ops::Softmax;
%rename(log_softmax) loom::ops::LogSoftmax;
%rename(softmax_cross_entropy) loom::ops::SoftmaxCrossEntropy;
%rename(mse_loss) loom::ops::MseLoss;
%rename(reshape) loom::ops::Reshape;
%rename(transpose) loom::ops::Transpose;
%rename(permute) loom::ops::Permute;
%rename(cat) loom::ops::Concat;
%rename(slice) loom::ops::Slice;
%rename(broadcast_to) loom::ops::BroadcastTo;
%rename(flatten) loom::ops::Flatten;
%rename(dropout) loom::ops::Dropout;
%rename(grad_enabled) loom::GradEnabled;

namespace loom {
namespace ops {

// ---- creation ----
Tensor Empty(const Shape& shape, DType dtype, const std::shared_ptr<Device>& dev);
Tensor Full(const Shape& shape, double value, DType dtype, const std::shared_ptr<Device>& dev);
Tensor Zeros(const Shape& shape, DType dtype, const std::shared_ptr<Device>& dev);
Tensor Ones(const Shape& shape, DType dtype, const std::shared_ptr<Device>& dev);
Tensor ZerosLike(const Tensor& t);
Tensor OnesLike(const Tensor& t);
void Fill(const Tensor& t, double value);
Tensor Uniform(const Shape& shape, double lo, double hi, DType dtype, const std::shared_ptr<Device>& dev);
Tensor Normal(const Shape& shape, double mean, double stddev, DType dtype, const std::shared_ptr<Device>& dev);
Tensor Bernoulli(const Shape& shape, double p, DType dtype, const std::shared_ptr<Device>& dev);
void UniformInto(const Tensor& t, double lo, double hi);
void NormalInto(const Tensor& t, double mean, double stddev);
void CopyInto(const Tensor& dst, const Tensor& src);
Tensor Cast(const Tensor& x, DType dtype);

// ---- element-wise ----
Tensor Add(const Tensor& a, const Tensor& b);
Tensor Sub(const Tensor& a, const Tensor& b);
Tensor Mul(const Tensor& a, const Tensor& b);
Tensor Div(const Tensor& a, const Tensor& b);
Tensor AddScalar(const Tensor& x, double s);
Tensor MulScalar(const Tensor& x, double s);
Tensor SubScalar(const Tensor& x, double s);
Tensor RSubScalar(const Tensor& x, double s);
Tensor DivScalar(const Tensor& x, double s);
Tensor RDivScalar(const Tensor& x, double s);
Tensor PowScalar(const Tensor& x, double p);
Tensor Pow(const Tensor& x, const Tensor& p);
Tensor Neg(const Tensor& x);
Tensor Exp(const Tensor& x);
Tensor Log(const Tensor& x);
Tensor Sqrt(const Tensor& x);
Tensor Abs(const Tensor& x);
Tensor Clamp(const Tensor& x, double lo, double hi);

// ---- activations ----
Tensor Relu(const Tensor& x);
Tensor LeakyRelu(const Tensor& x, double slope = 0.01);
Tensor Sigmoid(const Tensor& x);
Tensor Tanh(const Tensor& x);
Tensor Gelu(const Tensor& x);
Tensor Softplus(const Tensor& x);

// ---- linear algebra ----
Tensor MatMul(const Tensor& a, const Tensor& b);
Tensor AddBias(const Tensor& x, const Tensor& b);

// ---- reductions ----
Tensor Sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims = false);
Tensor Mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims = false);
Tensor Max(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims = false);
Tensor SumTo(const Tensor& x, const Shape& shape);

// ---- softmax and losses ----
Tensor Softmax(const Tensor& x, int64_t axis = -1);
Tensor LogSoftmax(const Tensor& x, int64_t axis = -1);
Tensor SoftmaxCrossEntropy(const Tensor& logits, const Tensor& labels);
Tensor MseLoss(const Tensor& pred, const Tensor& target);

// ---- shape ----
Tensor Reshape(const Tensor& x, const Shape& shape);
Tensor Transpose(const Tensor& x, int64_t a = -2, int64_t b = -1);
Tensor Permute(const Tensor& x, const std::vector<int64_t>& perm);
Tensor Concat(const std::vector<Tensor>& xs, int64_t axis);
Tensor Slice(const Tensor& x, int64_t axis, int64_t start, int64_t end);
Tensor BroadcastTo(const Tensor& x, const Shape& shape);
Tensor Flatten(const Tensor& x, int64_t start_axis = 1);

// ---- regularisation ----
Tensor Dropout(const Tensor& x, double p, bool training = true);

}  // namespace ops

// ---- autograd ----
bool GradEnabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
};

}  // namespace loom

%inline %{
namespace loom_py {
// (param, grad) for every leaf that requires grad, in the order the gradients became final.
// `grad_loss` undefined: ones.
std::vector<std::pair<loom::Tensor, loom::Tensor>> backward(const loom::Tensor& loss, const loom::Tensor& grad_loss) {
  std::vector<std::pair<loom::Tensor, loom::Tensor>> out;
  loom::Backward(loss, [&](const loom::Tensor& p, const loom::Tensor& g) { out.emplace_back(p, g); }, grad_loss);
  return out;
}

// Any registered op by name: outputs as a list.
std::vector<loom::Tensor> call_op(const std::string& name, const std::vector<loom::Tensor>& inputs, PyObject* attrs) {
  return loom::Call(name, inputs, ToAttrs(attrs));
}
void call_op_into(const std::string& name, const std::vector<loom::Tensor>& inputs,
                  const std::vector<loom::Tensor>& outputs, PyObject* attrs) {
  loom::CallInto(name, inputs, outputs, ToAttrs(attrs));
}
std::vector<std::string> list_ops() { return loom::ListOps(); }
}  // namespace loom_py
%}
