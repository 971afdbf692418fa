// ONNX import (src/io/onnx/import.h): a model file or its bytes -> loom.core.OnnxModel, whose
// forward runs the graph with loom's ops; the registry's op list. loom/onnx_import.py and
// loom/sonnx.py build the Python API (the ONNX backend, SONNXModel) on these names. Every
// failure is a loom.OnnxError naming the node (errors.i).

%{
#include "io/onnx/import.h"

namespace loom_py {

// A bytes-like object's contents (a ModelProto's serialization), or a Python error.
static bool BytesOf(PyObject* o, std::string& out) {
  Py_buffer view;
  if (PyObject_GetBuffer(o, &view, PyBUF_SIMPLE) != 0) {
    PyErr_Clear();
    PyErr_Format(g_errors[kType], "[onnx] the model must be bytes (a serialized ModelProto), got %s",
                 Py_TYPE(o)->tp_name);
    return false;
  }
  out.assign(static_cast<const char*>(view.buf), size_t(view.len));
  PyBuffer_Release(&view);
  return true;
}

static PyObject* ValueInfos(const std::vector<loom::io::OnnxValueInfo>& v) {
  PyObject* list = PyList_New(Py_ssize_t(v.size()));
  for (size_t i = 0; list && i < v.size(); ++i) {
    PyObject* shape = PyList_New(Py_ssize_t(v[i].shape.size()));
    for (size_t d = 0; d < v[i].shape.size(); ++d) PyList_SET_ITEM(shape, Py_ssize_t(d), PyLong_FromLongLong(v[i].shape[d]));
    PyObject* item = Py_BuildValue("(ssNO)", v[i].name.c_str(), loom::Name(v[i].dtype), shape,
                                   v[i].has_shape ? Py_True : Py_False);
    PyList_SET_ITEM(list, Py_ssize_t(i), item);
  }
  return list;
}

}  // namespace loom_py
%}

%typemap(out) const std::vector<std::pair<std::string, loom::Tensor>>& { $result = loom_py::FromNamedTensors(*$1); }
%ignore loom::io::OnnxModel::inputs;
%ignore loom::io::OnnxModel::outputs;
%ignore loom::io::ImportOnnxFromBytes;
%ignore loom::io::OnnxImportProblem;
%ignore loom::io::SupportedOnnxOpRanges;
%ignore loom::io::OnnxOpSupport;
%ignore loom::io::OnnxValueInfo;
%ignore loom::io::onnx::ImportedGraph;
%include "io/onnx/import.h"

%extend loom::io::OnnxModel {
  // [(name, dtype name, shape with -1 for unknown, has_shape)]
  PyObject* input_infos() const { return loom_py::ValueInfos($self->inputs()); }
  PyObject* output_infos() const { return loom_py::ValueInfos($self->outputs()); }
}

%inline %{
namespace loom_py {
loom::io::OnnxModel ImportOnnxBytes(PyObject* data, const std::shared_ptr<loom::Device>& device) {
  std::string bytes;
  if (!BytesOf(data, bytes)) throw PythonError();
  return loom::io::ImportOnnxFromBytes(bytes, device);
}
// "" when the model imports, else the OnnxError's message.
std::string OnnxImportProblemBytes(PyObject* data, const std::shared_ptr<loom::Device>& device) {
  std::string bytes;
  if (!BytesOf(data, bytes)) throw PythonError();
  return loom::io::OnnxImportProblem(bytes, device);
}
// [(op_type, since, until)] from the importer's registry.
PyObject* SupportedOnnxOpRangeList() {
  std::vector<loom::io::OnnxOpSupport> v = loom::io::SupportedOnnxOpRanges();
  PyObject* list = PyList_New(Py_ssize_t(v.size()));
  for (size_t i = 0; list && i < v.size(); ++i)
    PyList_SET_ITEM(list, Py_ssize_t(i), Py_BuildValue("(sLL)", v[i].op_type.c_str(), (long long)v[i].since,
                                                       (long long)v[i].until));
  return list;
}
}  // namespace loom_py
%}
