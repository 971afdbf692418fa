// ONNX export (src/io/onnx/export.h) for loom/onnx_export.py, which builds SINGA's
// to_onnx(inputs, outputs, model_name) on these two names. The model crosses as bytes (a
// serialized ModelProto): the onnx package, when installed, parses it; loom's own ONNX classes
// never meet Python's (CMakeLists.txt says why they have another package name).
//
// Uses the typemaps of typemaps.i (tensor lists) and io.i (names, (name, Tensor) pairs), so it is
// included after io.i.

%{
#include "core/file.h"
#include "graph/graph.h"
#include "io/onnx/export.h"
%}

%inline %{
namespace loom_py {

// The ONNX model computing `outputs` from `inputs` with the ops of `graph`, as bytes; written
// atomically to `path` too unless it is empty. Names: one per input / output, or none.
PyObject* onnx_export_graph(const std::shared_ptr<loom::Graph>& graph, const std::vector<loom::Tensor>& inputs,
                            const std::vector<loom::Tensor>& outputs, const std::string& model_name,
                            bool dynamic_batch, const std::vector<std::string>& input_names,
                            const std::vector<std::string>& output_names,
                            const std::vector<std::pair<std::string, loom::Tensor>>& names,
                            const std::string& path) {
  LOOM_CHECK(graph, ValueError, "[onnx] to_onnx needs a graph, got None");
  loom::io::OnnxExportOptions o;
  o.model_name = model_name;
  o.dynamic_batch = dynamic_batch;
  o.input_names = input_names;
  o.output_names = output_names;
  o.names = names;
  const std::string bytes = loom::io::ExportOnnxBytes(*graph, inputs, outputs, o);
  if (!path.empty()) {
    WithoutGil io;
    loom::WriteFileAtomic(path, {bytes}, "onnx");
  }
  PyObject* out = PyBytes_FromStringAndSize(bytes.data(), Py_ssize_t(bytes.size()));
  if (!out) throw PythonError();
  return out;
}

// [(loom op, what it becomes in ONNX)] for every op the exporter maps.
PyObject* onnx_exportable_ops() {
  const auto rows = loom::io::OnnxExportableOps();
  PyObject* list = PyList_New(Py_ssize_t(rows.size()));
  if (!list) throw PythonError();
  for (size_t i = 0; i < rows.size(); ++i) {
    PyObject* row = Py_BuildValue("(ss)", rows[i].first.c_str(), rows[i].second.c_str());
    if (!row) {
      Py_DECREF(list);
      throw PythonError();
    }
    PyList_SET_ITEM(list, Py_ssize_t(i), row);
  }
  return list;
}

}  // namespace loom_py
%}
