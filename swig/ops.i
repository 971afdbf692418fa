// The op API: core/ops.h and core/ops_cnn.h as they are, plus the gradient mode and the op
// registry's names from core/op.h. One wrapped C++ function per op, so a Python op call costs one
// C call; loom/autograd.py re-exports them under SINGA's names.
//
// Adding an op needs no edit here because SWIG reads core/ops.h itself and names the function by
// the rule in loom.i (Where -> where), and loom.autograd picks up every core function named like
// a registered op (Note [Bindings come from the headers] in loom.i). call_op reaches any
// registered op by name, with attributes from a dict.

%{
#include "core/autograd.h"
#include "core/ops.h"
#include "core/ops_cnn.h"
#include "core/ops_transformer.h"
#include "core/ops/external.h"
#include "core/ops/math.h"

namespace loom_py {

// {"axis": 1, "eps": 1e-5, "stride": (2, 2), "mode": "max"} -> Attrs.
static loom::Attrs ToAttrs(PyObject* dict) {
  loom::Attrs a;
  if (dict == Py_None) return a;
  if (!PyDict_Check(dict)) {
    PyErr_Format(g_errors[kType], "[call_op] attributes must be a dict, got %s", Py_TYPE(dict)->tp_name);
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

// ---- core/op.h: the registry is C++'s (records, kernels, shape inference); Python gets the
// gradient mode, ListOps and, through loom_py below, OpDef::internal and Call by name.
%ignore loom::kNumDeviceTypes;
%ignore loom::Name(DeviceType);
%ignore loom::OpRecord;
%warnfilter(314) loom::OpRecord::def;  // a Python keyword; the struct is ignored anyway
%ignore loom::KernelContext;
%ignore loom::TensorMeta;
%ignore loom::BackwardArgs;
%ignore loom::OpDef;
%ignore loom::RegisterOp;
%ignore loom::RegisterKernel;
%ignore loom::RegisterScratch;
%ignore loom::GetOp;
%ignore loom::Call;      // call_op below: attributes from a dict
%ignore loom::Call1;
%ignore loom::CallInto;  // call_op_into below
%include "core/op.h"

// ---- core/ops.h ----
// Exceptions to the naming rule: SINGA's and numpy's names.
%rename(matmul) loom::ops::MatMul;  // not mat_mul
%rename(cat) loom::ops::Concat;
%ignore loom::ops::FromVector;  // a template over host element types: Python has from_numpy
%include "core/ops.h"

// ---- core/ops/math.h: sin, cos, ..., ceil, floor, round, rounde, sign (the naming rule) ----
%include "core/ops/math.h"

// ---- core/ops_cnn.h ----
// The option structs become plain arguments in the adapters below ((sh, sw), (ph, pw), ...),
// under the ops' registered names; an undefined bias (Tensor()) means none.
%ignore loom::ops::Conv2dOptions;
%ignore loom::ops::Pool2dOptions;
%ignore loom::ops::Conv2d;
%ignore loom::ops::MaxPool2d;
%ignore loom::ops::AvgPool2d;
%ignore loom::PaddingEnd;
%include "core/ops_cnn.h"
%include "core/ops_transformer.h"
// Exceptions to the naming rule, which would write conv_2d: the registered ops' names.
%rename(conv2d) loom_py::conv2d;
%rename(max_pool2d) loom_py::max_pool2d;
%rename(avg_pool2d) loom_py::avg_pool2d;

%inline %{
namespace loom_py {
loom::Tensor conv2d(const loom::Tensor& x, const loom::Tensor& w, const loom::Tensor& bias,
                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                    const std::vector<int64_t>& dilation, int64_t groups,
                    const std::vector<int64_t>& padding_end = std::vector<int64_t>()) {
  loom::ops::Conv2dOptions o;
  o.stride = stride;
  o.padding = padding;
  o.dilation = dilation;
  o.groups = groups;
  o.padding_end = padding_end;  // Note [Asymmetric padding]; empty: as padding
  return loom::ops::Conv2d(x, w, bias, o);
}
loom::Tensor max_pool2d(const loom::Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                        const std::vector<int64_t>& padding,
                        const std::vector<int64_t>& padding_end = std::vector<int64_t>()) {
  loom::ops::Pool2dOptions o;
  o.kernel = kernel;
  o.stride = stride;
  o.padding = padding;
  o.padding_end = padding_end;
  return loom::ops::MaxPool2d(x, o);
}
loom::Tensor avg_pool2d(const loom::Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                        const std::vector<int64_t>& padding, bool count_include_pad,
                        const std::vector<int64_t>& padding_end = std::vector<int64_t>()) {
  loom::ops::Pool2dOptions o;
  o.kernel = kernel;
  o.stride = stride;
  o.padding = padding;
  o.padding_end = padding_end;
  o.count_include_pad = count_include_pad;
  return loom::ops::AvgPool2d(x, o);
}
}  // namespace loom_py
%}

// ---- core/ops/external.h: loom.autograd.Operator (Note [External ops]) ----
// The dispatcher is a Python callable, set once by loom.autograd: set_external_backward below.
%ignore loom::SetExternalBackward;
%ignore loom::ExternalBackwardFn;
%include "core/ops/external.h"

%{
namespace loom_py {
// Note [External ops]: calls the Python dispatcher fn(id, dy, needs) -> sequence of Tensors or
// None (one per input); a Python exception reaches the caller of backward unchanged.
static PyObject* g_external_backward = nullptr;

static std::vector<loom::Tensor> CallExternalBackward(int64_t id, const loom::Tensor& dy,
                                                      const std::vector<bool>& needs) {
  PyGILState_STATE gil = PyGILState_Ensure();
  struct Release {
    PyGILState_STATE g;
    ~Release() { PyGILState_Release(g); }
  } release{gil};
  PyObject* needs_list = PyList_New(Py_ssize_t(needs.size()));
  if (!needs_list) throw PythonError();
  for (size_t i = 0; i < needs.size(); ++i) PyList_SET_ITEM(needs_list, Py_ssize_t(i), PyBool_FromLong(needs[i]));
  PyObject* grad = dy.defined() ? WrapTensor(dy) : (Py_INCREF(Py_None), Py_None);
  PyObject* r = PyObject_CallFunction(g_external_backward, "LNN", (long long)id, grad, needs_list);
  if (!r) throw PythonError();
  PyObject* seq = PySequence_Fast(r, "");
  Py_DECREF(r);
  if (!seq) {
    PyErr_Format(g_errors[kType], "[external] operator %lld's backward must return a sequence", (long long)id);
    throw PythonError();
  }
  std::vector<loom::Tensor> out;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    void* p = nullptr;
    if (item == Py_None) {
      out.emplace_back();
    } else if (SWIG_IsOK(SWIG_ConvertPtr(item, &p, SWIGTYPE_p_loom__Tensor, 0)) && p) {
      out.push_back(*static_cast<loom::Tensor*>(p));
    } else {
      PyErr_Format(g_errors[kType], "[external] operator %lld's gradient %zd is %s, not a Tensor or None",
                   (long long)id, i, Py_TYPE(item)->tp_name);
      Py_DECREF(seq);
      throw PythonError();
    }
  }
  Py_DECREF(seq);
  return out;
}
}  // namespace loom_py
%}

%inline %{
namespace loom_py {
// While one lives, ops on `device` run at once even if it captures: creating persistent state
// (a Python optimizer's moments) is setup, not part of the step (Device::SetupScope).
class SetupGuard {
 public:
  explicit SetupGuard(std::shared_ptr<loom::Device> device)
      : device_(std::move(device)), scope_(std::make_unique<loom::Device::SetupScope>(device_.get())) {}

 private:
  std::shared_ptr<loom::Device> device_;
  std::unique_ptr<loom::Device::SetupScope> scope_;
};

void set_external_backward(PyObject* fn) {
  LOOM_CHECK(PyCallable_Check(fn), ValueError, "[external] the backward dispatcher must be callable");
  Py_INCREF(fn);
  Py_XDECREF(g_external_backward);
  g_external_backward = fn;
  loom::SetExternalBackward(CallExternalBackward);
}
}  // namespace loom_py
%}

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
// Why op `name` has no Python function of its name (OpDef::internal); "" for a user-facing op.
std::string op_internal(const std::string& name) {
  const char* why = loom::GetOp(name).internal;
  return why ? why : "";
}
}  // namespace loom_py
%}
