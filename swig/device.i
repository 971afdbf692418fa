// Devices, buffering (graph capture and replay), graphs, memory statistics and graph dumps.
//
// A Graph reaches Python as a shared handle (std::shared_ptr): the owner (a Model's step, the
// keyed registry behind dev.EnableGraph) and the Python object each hold it, so a handle never
// dangles. GraphOptions and GraphStats cross as dicts built by walking their one field list
// (Note [One list of fields] in graph/options.h): a field added there is reachable here with no
// edit. SINGA's spellings (SetBufferFlag, ExecBuffOps) and `with dev.buffer():` are added in
// loom/device.py.

%{
#include <cstring>
#include <type_traits>

#include "device/cpu/parallel.h"
#include "core/autocast.h"
#include "core/device.h"
#include "core/file.h"
#include "graph/graph.h"
#include "graph/registry.h"

namespace loom_py {

static bool DictSet(PyObject* d, const char* key, PyObject* v) {
  if (!v) return false;
  int rc = PyDict_SetItemString(d, key, v);
  Py_DECREF(v);
  return rc == 0;
}

static PyObject* MemStatsDict(const loom::MemStats& s) {
  PyObject* d = PyDict_New();
  if (d && DictSet(d, "live_bytes", PyLong_FromSize_t(s.live_bytes)) &&
      DictSet(d, "peak_bytes", PyLong_FromSize_t(s.peak_bytes)) &&
      DictSet(d, "reserved_bytes", PyLong_FromSize_t(s.reserved_bytes)) &&
      DictSet(d, "num_allocs", PyLong_FromUnsignedLongLong(s.num_allocs)) &&
      DictSet(d, "num_system_allocs", PyLong_FromUnsignedLongLong(s.num_system_allocs)))
    return d;
  Py_XDECREF(d);
  return nullptr;
}

// ---- one field of GraphOptions / GraphStats <-> a Python value ----
template <typename T>
static PyObject* FieldToPy(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return PyBool_FromLong(v);
  else if constexpr (std::is_same_v<T, loom::MemoryMode>) return PyUnicode_FromString(loom::Name(v));
  else if constexpr (std::is_same_v<T, std::string>) return PyUnicode_FromString(v.c_str());
  else if constexpr (std::is_floating_point_v<T>) return PyFloat_FromDouble(double(v));
  else if constexpr (std::is_signed_v<T>) return PyLong_FromLongLong((long long)v);
  else return PyLong_FromUnsignedLongLong((unsigned long long)v);
}

[[noreturn]] static void WrongFieldType(const char* name, const char* want, PyObject* v) {
  throw loom::ValueError(loom::detail::Cat("[graph] option '", name, "' must be ", want, ", got ",
                                           Py_TYPE(v)->tp_name));
}
static void FieldFromPy(const char* name, PyObject* v, bool& out) {
  if (!PyBool_Check(v)) WrongFieldType(name, "True or False", v);
  out = v == Py_True;
}
static void FieldFromPy(const char* name, PyObject* v, int& out) {
  if (PyBool_Check(v) || !PyLong_Check(v)) WrongFieldType(name, "an int", v);
  long x = PyLong_AsLong(v);
  if (PyErr_Occurred() || x < INT32_MIN || x > INT32_MAX) {
    PyErr_Clear();
    throw loom::ValueError(loom::detail::Cat("[graph] option '", name, "' is out of range"));
  }
  out = int(x);
}
static void FieldFromPy(const char* name, PyObject* v, size_t& out) {
  if (PyBool_Check(v) || !PyLong_Check(v)) WrongFieldType(name, "an int", v);
  unsigned long long x = PyLong_AsUnsignedLongLong(v);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    throw loom::ValueError(loom::detail::Cat("[graph] option '", name, "' must be a non-negative int"));
  }
  out = size_t(x);
}
static void FieldFromPy(const char* name, PyObject* v, loom::MemoryMode& out) {
  if (!PyUnicode_Check(v)) WrongFieldType(name, "'planned' or 'dynamic'", v);
  out = loom::ParseMemoryMode(PyUnicode_AsUTF8(v));
}

static PyObject* OptionsDict(const loom::GraphOptions& o) {
  PyObject* d = PyDict_New();
  bool ok = d != nullptr;
  loom::VisitGraphOptions(o, [&](const char* name, const auto& v, const char*) {
    ok = ok && DictSet(d, name, FieldToPy(v));
  });
  if (ok) return d;
  Py_XDECREF(d);
  throw PythonError();
}

static PyObject* StatsDict(const loom::GraphStats& s) {
  PyObject* d = PyDict_New();
  bool ok = d != nullptr;
  loom::VisitGraphStats(s, [&](const char* name, const auto& v, const char*) {
    ok = ok && DictSet(d, name, FieldToPy(v));
  });
  if (ok) return d;
  Py_XDECREF(d);
  throw PythonError();
}

// {"memory": "dynamic", "num_workers": 2, ...} over `base`; an unknown key is a ValueError that
// lists the known ones.
static loom::GraphOptions OptionsFromDict(PyObject* dict, loom::GraphOptions base = {}) {
  if (dict == Py_None) return base;
  if (!PyDict_Check(dict))
    throw loom::ValueError(loom::detail::Cat("[graph] options must be a dict, got ", Py_TYPE(dict)->tp_name));
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    const char* k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : nullptr;
    bool found = false;
    std::string known;
    loom::VisitGraphOptions(base, [&](const char* name, auto& field, const char*) {
      known += known.empty() ? name : std::string(", ") + name;
      if (k && std::strcmp(k, name) == 0) {
        FieldFromPy(name, value, field);
        found = true;
      }
    });
    if (!found)
      throw loom::ValueError(loom::detail::Cat("[graph] unknown option '", k ? k : "?", "' (options: ", known, ")"));
  }
  loom::CheckGraphOptions(base);
  return base;
}

// [(name, doc)] of a field list, for documentation and the binding test.
template <typename S, typename Visit>
static PyObject* FieldDocs(Visit visit) {
  PyObject* list = PyList_New(0);
  if (!list) throw PythonError();
  S s;
  visit(s, [&](const char* name, const auto&, const char* doc) {
    PyObject* t = Py_BuildValue("(ss)", name, doc);
    if (!t || PyList_Append(list, t) != 0) {
      Py_XDECREF(t);
      throw PythonError();
    }
    Py_DECREF(t);
  });
  return list;
}

}  // namespace loom_py
%}

// GraphOptions arguments (Model.Compile, PyStep) take a dict of the fields to set, or None.
namespace loom { struct GraphOptions; }
%typemap(in) const loom::GraphOptions& (loom::GraphOptions tmp) {
  try {
    tmp = loom_py::OptionsFromDict($input);
  } catch (...) {
    loom_py::SetPythonErrorFromCurrent();
    SWIG_fail;
  }
  $1 = &tmp;
}
%typemap(typecheck, precedence=SWIG_TYPECHECK_POINTER) const loom::GraphOptions& {
  $1 = ($input == Py_None || PyDict_Check($input)) ? 1 : 0;
}

// %shared_ptr(loom::Device) is in loom.i, before tensor.i uses the type.
%shared_ptr(loom::Graph)
%nodefaultctor loom::Device;  // devices come from cpu_device() / cuda_device()
%nodefaultctor loom::Graph;   // graphs come from a capture (new_graph, a Model, dev.EnableGraph)

// Python names (declared before the declarations they rename).
%rename(cpu_device) loom::CpuDevice;
%rename(cuda_device) loom::CudaDevice;
%rename(cuda_available) loom::CudaAvailable;
%rename(cuda_setup_error) loom::CudaSetupError;
%rename(num_threads) loom::NumThreads;
%rename(set_num_threads) loom::SetNumThreads;
%rename(max_threads) loom::MaxThreads;
%rename(summary) loom::Graph::Summary;
%rename(dot) loom::Graph::ToDot;
%rename(trace_json) loom::Graph::TraceJson;
%rename(memory_csv) loom::Graph::MemoryTimelineCsv;
%rename(begin_capture) loom::Graph::BeginCapture;
%rename(end_capture) loom::Graph::EndCapture;
%rename(abort_capture) loom::Graph::AbortCapture;
%rename(run) loom::Graph::Run;

namespace loom {

class Device {
 public:
  virtual ~Device();
  DeviceType type() const;
  int id() const;
  std::string name() const;

  void ResetPeak();
  void EmptyCache();
  void Synchronize();
  uint64_t ops_run() const;

  void SetRandSeed(uint64_t seed);
  uint64_t rng_seed() const;

  bool capturing() const;
  bool buffering() const;
  std::string capture_name() const;

  // Note [Host-transfer trap] in core/device.h.
  void set_trap_host_transfers(bool on);
  bool trap_host_transfers() const;
  uint64_t host_reads() const;
  uint64_t host_writes() const;
};

// A captured graph (graph/graph.h).
class Graph {
 public:
  const std::string& name() const;
  bool finalized() const;
  void BeginCapture();
  void EndCapture();
  void AbortCapture();
  void Run(bool sequential = true);
  std::string Summary() const;
  std::string ToDot() const;
  std::string TraceJson() const;
  std::string MemoryTimelineCsv() const;
  void set_profile(bool on);
};

// Graph dumps: the text is made with the interpreter lock (it reads the graph), the file is
// written without it (Note [The interpreter lock and file I/O] in errors.i).
%extend Graph {
  void write_dot(const std::string& path) const {
    const std::string text = $self->ToDot();
    loom_py::WithoutGil io;
    loom::WriteFileAtomic(path, {text}, "graph");
  }
  void write_trace(const std::string& path) const {
    const std::string text = $self->ProfiledTraceJson();
    loom_py::WithoutGil io;
    loom::WriteFileAtomic(path, {text}, "graph");
  }
}


std::shared_ptr<Device> CpuDevice();
std::shared_ptr<Device> CudaDevice(int id = 0);
bool CudaAvailable();
std::string CudaSetupError();
int NumThreads();
int MaxThreads();
void SetNumThreads(int64_t n);

}  // namespace loom

%extend loom::Graph {
  PyObject* stats() const { return loom_py::StatsDict($self->stats()); }
  PyObject* options() const { return loom_py::OptionsDict($self->options()); }
  std::vector<std::string> op_names() const {
    std::vector<std::string> names;
    for (const loom::OpRecord& op : $self->ops().ops) names.push_back(op.name());
    return names;
  }
  std::string device_name() const { return $self->device().name(); }
}

%extend loom::Device {
  // Identity: every call to CpuDevice() gives a new Python proxy of the same device.
  size_t _address() const { return reinterpret_cast<size_t>($self); }

  PyObject* memory_stats() const {
    PyObject* d = loom_py::MemStatsDict($self->stats());
    if (!d) throw loom_py::PythonError();
    return d;
  }

  // ---- SINGA's keyed calls (graph/registry.h) ----
  void EnableGraph(bool on, const std::string& key = "default") { loom::EnableGraph(*$self, on, key); }
  void RunGraph(bool sequential = true, const std::string& key = "default") { loom::RunGraph(*$self, sequential, key); }
  void ResetGraph(const std::string& key = "") { loom::ResetGraph(*$self, key); }
  bool HasGraph(const std::string& key = "default") { return loom::HasGraph(*$self, key); }
  std::shared_ptr<loom::Graph> graph(const std::string& key = "default") { return loom::GetGraph(*$self, key); }
  // The options of the graphs EnableGraph creates from now on, as a dict; set_graph_options
  // changes the fields it names.
  PyObject* graph_options() { return loom_py::OptionsDict(loom::RegistryGraphOptions(*$self)); }
  void _set_graph_options(PyObject* options) {
    loom::SetRegistryGraphOptions(*$self, loom_py::OptionsFromDict(options, loom::RegistryGraphOptions(*$self)));
  }
}

%rename(set_autocast_precision) loom_py::set_autocast_precision;
%rename(precision_name) loom_py::precision_name;
%rename(set_cuda_float32_math) loom_py::set_cuda_float32_math;
%rename(cuda_float32_math) loom_py::cuda_float32_math;
%inline %{
namespace loom_py {
// Note [Precision policy] (core/autocast.h): this thread's precision, by name ("fp32", "bf16");
// returns the previous one (loom.autocast puts it back).
// The canonical name of a precision ("bfloat16" -> "bf16"); ValueError for anything else.
std::string precision_name(const std::string& name) { return loom::Name(loom::PrecisionFromName(name)); }
std::string set_autocast_precision(const std::string& name) {
  const std::string previous = loom::Name(loom::AutocastPrecision());
  loom::SetAutocastPrecision(loom::PrecisionFromName(name));
  return previous;
}
// Note [Float32 math on the GPU] (core/device.h), by name: "tf32" or "full".
void set_cuda_float32_math(const std::string& name) { loom::SetCudaFloat32Math(loom::Float32MathFromName(name)); }
std::string cuda_float32_math() { return loom::Name(loom::CudaFloat32Math()); }
// A graph of one's own: capture with begin_capture()/end_capture() (or abort_capture()).
std::shared_ptr<loom::Graph> new_graph(const std::shared_ptr<loom::Device>& device, const std::string& name,
                                       PyObject* options) {
  return std::make_shared<loom::Graph>(device, name, OptionsFromDict(options));
}
// The fields of GraphOptions and GraphStats: [(name, doc)], in declaration order.
PyObject* graph_option_fields() {
  return FieldDocs<loom::GraphOptions>([](auto& s, auto&& f) { loom::VisitGraphOptions(s, f); });
}
PyObject* graph_stats_fields() {
  return FieldDocs<loom::GraphStats>([](auto& s, auto&& f) { loom::VisitGraphStats(s, f); });
}
}  // namespace loom_py
%}
