// Conversions between Python values and the C++ types that cross the boundary often. They are
// written by hand (not std_vector.i's generic ones) because every op call goes through them.
//
//   Shape / std::vector<int64_t>          <- any sequence of ints;  -> tuple of ints
//   std::vector<loom::Tensor>             <- any sequence of Tensors; -> list of Tensors
//   nn::NamedTensors                      -> list of (name, Tensor) tuples
//   std::vector<std::pair<Tensor,Tensor>> -> list of (Tensor, Tensor) tuples

%{
#include "core/tensor.h"

namespace loom_py {

// An int as int64_t; one out of its range is a loom.ValueError naming `what`.
static bool ToInt64(PyObject* o, int64_t& out, const char* what) {
  out = PyLong_AsLongLong(o);
  if (out != -1 || !PyErr_Occurred()) return true;
  if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
    PyErr_Clear();
    PyErr_Format(g_errors[kValue], "[loom] %s: %R is out of the range of int64", what, o);
  }
  return false;
}

static bool ToInt64Vector(PyObject* o, std::vector<int64_t>& out, const char* what) {
  if (PyLong_Check(o)) {  // a bare int: one element (convenient for axes)
    out.resize(1);
    return ToInt64(o, out[0], what);
  }
  PyObject* seq = PySequence_Fast(o, "");
  if (!seq) {
    PyErr_Format(g_errors[kType], "[loom] %s must be a sequence of ints, got %s", what, Py_TYPE(o)->tp_name);
    return false;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  out.resize(size_t(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    PyObject* idx = PyNumber_Index(item);  // ints and numpy integers; refuses floats
    if (!idx) {
      Py_DECREF(seq);
      PyErr_Format(g_errors[kType], "[loom] %s must be a sequence of ints, item %zd is %s", what, i,
                   Py_TYPE(item)->tp_name);
      return false;
    }
    bool ok = ToInt64(idx, out[size_t(i)], what);
    Py_DECREF(idx);
    if (!ok) { Py_DECREF(seq); return false; }
  }
  Py_DECREF(seq);
  return true;
}

static PyObject* FromInt64Vector(const std::vector<int64_t>& v) {
  PyObject* t = PyTuple_New(Py_ssize_t(v.size()));
  if (!t) return nullptr;
  for (size_t i = 0; i < v.size(); ++i) PyTuple_SET_ITEM(t, Py_ssize_t(i), PyLong_FromLongLong(v[i]));
  return t;
}

// A new Python Tensor owning a copy of the handle `t` (same block, same autograd state).
static PyObject* WrapTensor(const loom::Tensor& t) {
  return SWIG_NewPointerObj(new loom::Tensor(t), SWIGTYPE_p_loom__Tensor, SWIG_POINTER_OWN);
}

static bool ToTensorVector(PyObject* o, std::vector<loom::Tensor>& out, const char* what) {
  PyObject* seq = PySequence_Fast(o, "");
  if (!seq) {
    PyErr_Format(g_errors[kType], "[loom] %s must be a sequence of Tensors, got %s", what, Py_TYPE(o)->tp_name);
    return false;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  out.clear();
  out.reserve(size_t(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    void* p = nullptr;
    if (!SWIG_IsOK(SWIG_ConvertPtr(item, &p, SWIGTYPE_p_loom__Tensor, 0)) || !p) {
      Py_DECREF(seq);
      PyErr_Format(g_errors[kType], "[loom] %s must be a sequence of Tensors, item %zd is %s", what, i,
                   Py_TYPE(item)->tp_name);
      return false;
    }
    out.push_back(*static_cast<loom::Tensor*>(p));
  }
  Py_DECREF(seq);
  return true;
}

static PyObject* FromTensorVector(const std::vector<loom::Tensor>& v) {
  PyObject* l = PyList_New(Py_ssize_t(v.size()));
  if (!l) return nullptr;
  for (size_t i = 0; i < v.size(); ++i) PyList_SET_ITEM(l, Py_ssize_t(i), WrapTensor(v[i]));
  return l;
}

static PyObject* FromTensorPairs(const std::vector<std::pair<loom::Tensor, loom::Tensor>>& v) {
  PyObject* l = PyList_New(Py_ssize_t(v.size()));
  if (!l) return nullptr;
  for (size_t i = 0; i < v.size(); ++i) {
    PyObject* pair = PyTuple_New(2);
    PyTuple_SET_ITEM(pair, 0, WrapTensor(v[i].first));
    PyTuple_SET_ITEM(pair, 1, WrapTensor(v[i].second));
    PyList_SET_ITEM(l, Py_ssize_t(i), pair);
  }
  return l;
}

static PyObject* FromNamedTensors(const std::vector<std::pair<std::string, loom::Tensor>>& v) {
  PyObject* l = PyList_New(Py_ssize_t(v.size()));
  if (!l) return nullptr;
  for (size_t i = 0; i < v.size(); ++i) {
    PyObject* pair = PyTuple_New(2);
    PyTuple_SET_ITEM(pair, 0, PyUnicode_FromStringAndSize(v[i].first.data(), Py_ssize_t(v[i].first.size())));
    PyTuple_SET_ITEM(pair, 1, WrapTensor(v[i].second));
    PyList_SET_ITEM(l, Py_ssize_t(i), pair);
  }
  return l;
}

}  // namespace loom_py
%}

// ---- int64 vectors (Shape, axes, strides) ----
%typemap(in) const std::vector<int64_t>& (std::vector<int64_t> tmp) {
  if (!loom_py::ToInt64Vector($input, tmp, "$1_name")) SWIG_fail;
  $1 = &tmp;
}
%typemap(in) std::vector<int64_t> {
  if (!loom_py::ToInt64Vector($input, $1, "$1_name")) SWIG_fail;
}
%typemap(typecheck, precedence=SWIG_TYPECHECK_INT64_ARRAY) const std::vector<int64_t>&, std::vector<int64_t> {
  $1 = (PyLong_Check($input) || (PySequence_Check($input) && !PyUnicode_Check($input))) ? 1 : 0;
}
%typemap(out) std::vector<int64_t> { $result = loom_py::FromInt64Vector($1); }
%typemap(out) const std::vector<int64_t>& { $result = loom_py::FromInt64Vector(*$1); }

// ---- tensor vectors ----
%typemap(in) const std::vector<loom::Tensor>& (std::vector<loom::Tensor> tmp) {
  if (!loom_py::ToTensorVector($input, tmp, "$1_name")) SWIG_fail;
  $1 = &tmp;
}
%typemap(typecheck, precedence=SWIG_TYPECHECK_POINTER) const std::vector<loom::Tensor>& {
  $1 = (PySequence_Check($input) && !PyUnicode_Check($input)) ? 1 : 0;
}
%typemap(out) std::vector<loom::Tensor> { $result = loom_py::FromTensorVector($1); }
%typemap(out) std::vector<std::pair<loom::Tensor, loom::Tensor>> { $result = loom_py::FromTensorPairs($1); }
%typemap(out) std::vector<std::pair<std::string, loom::Tensor>> { $result = loom_py::FromNamedTensors($1); }

// ---- lists of names ----
%typemap(out) std::vector<std::string> {
  const std::vector<std::string>& v = $1;
  $result = PyList_New(Py_ssize_t(v.size()));
  for (size_t i = 0; $result && i < v.size(); ++i)
    PyList_SET_ITEM($result, Py_ssize_t(i), PyUnicode_FromString(v[i].c_str()));
}

// ---- raw Python objects pass through ----
%typemap(in) PyObject* "$1 = $input;"
%typemap(out) PyObject* "$result = $1;"
