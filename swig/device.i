// Devices, buffering (graph capture and replay), memory statistics and graph dumps.
//
// Graphs are reached through their device by key, never as Graph objects: a Python handle on a
// Graph would dangle once ResetGraph drops it. SINGA's spellings (SetBufferFlag, ExecBuffOps)
// and the context manager `with dev.buffer():` are added in loom/device.py.

%{
#include "device/cpu/parallel.h"
#include "device/device.h"
#include "graph/graph.h"

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

static PyObject* GraphStatsDict(const loom::GraphStats& s) {
  PyObject* d = PyDict_New();
  if (d && DictSet(d, "num_ops", PyLong_FromSize_t(s.num_ops)) &&
      DictSet(d, "num_blocks", PyLong_FromSize_t(s.num_blocks)) &&
      DictSet(d, "num_intermediate", PyLong_FromSize_t(s.num_intermediate)) &&
      DictSet(d, "persistent_bytes", PyLong_FromSize_t(s.persistent_bytes)) &&
      DictSet(d, "lower_bound_bytes", PyLong_FromSize_t(s.lower_bound_bytes)) &&
      DictSet(d, "arena_bytes", PyLong_FromSize_t(s.arena_bytes)) &&
      DictSet(d, "dynamic_peak_bytes", PyLong_FromSize_t(s.dynamic_peak_bytes)) &&
      DictSet(d, "plan_strategy", PyUnicode_FromString(s.plan_strategy.c_str())) &&
      DictSet(d, "memory", PyUnicode_FromString(loom::Name(s.memory))) &&
      DictSet(d, "replays", PyLong_FromUnsignedLongLong(s.replays)) &&
      DictSet(d, "random_draws", PyLong_FromUnsignedLongLong(s.random_draws)))
    return d;
  Py_XDECREF(d);
  return nullptr;
}

}  // namespace loom_py
%}

// %shared_ptr(loom::Device) is in loom.i, before tensor.i uses the type.
%nodefaultctor loom::Device;  // devices come from cpu_device() / cuda_device()

// Python names (declared before the declarations they rename).
%rename(cpu_device) loom::CpuDevice;
%rename(cuda_device) loom::CudaDevice;
%rename(cuda_available) loom::CudaAvailable;
%rename(num_threads) loom::NumThreads;
%rename(set_num_threads) loom::SetNumThreads;

namespace loom {

enum class DeviceType { kCPU = 0, kCUDA = 1 };

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

  void EnableGraph(bool on, const std::string& key = "default");
  void RunGraph(bool sequential = true, const std::string& key = "default");
  void ResetGraph(const std::string& key = "");
  bool HasGraph(const std::string& key = "default") const;
  bool buffering() const;
  const std::string& capture_key() const;
};

std::shared_ptr<Device> CpuDevice();
std::shared_ptr<Device> CudaDevice(int id = 0);
bool CudaAvailable();
int NumThreads();
void SetNumThreads(int n);

}  // namespace loom

%extend loom::Device {
  // Identity: every call to CpuDevice() gives a new Python proxy of the same device.
  size_t _address() const { return reinterpret_cast<size_t>($self); }

  PyObject* memory_stats() const {
    PyObject* d = loom_py::MemStatsDict($self->stats());
    if (!d) throw loom_py::PythonError();
    return d;
  }

  // ---- options for graphs finalised from now on ----
  void set_graph_memory(const std::string& mode) {
    if (mode == "planned") $self->graph_options().memory = loom::MemoryMode::kPlanned;
    else if (mode == "dynamic") $self->graph_options().memory = loom::MemoryMode::kDynamic;
    else throw loom::ValueError("[graph] memory mode must be 'planned' or 'dynamic', got '" + mode + "'");
  }
  std::string graph_memory() { return loom::Name($self->graph_options().memory); }
  void set_graph_workers(int n) {
    LOOM_CHECK(n >= 0, ValueError, "[graph] number of replay workers must not be negative, got ", n);
    $self->graph_options().num_workers = n;
  }
  void set_graph_profile_default(bool on) { $self->graph_options().profile = on; }

  // ---- one graph, by key ----
  PyObject* graph_stats(const std::string& key = "default") {
    PyObject* d = loom_py::GraphStatsDict($self->GetGraph(key).stats());
    if (!d) throw loom_py::PythonError();
    return d;
  }
  std::string graph_summary(const std::string& key = "default") { return $self->GetGraph(key).Summary(); }
  std::string graph_dot(const std::string& key = "default") { return $self->GetGraph(key).ToDot(); }
  std::string graph_trace_json(const std::string& key = "default") { return $self->GetGraph(key).TraceJson(); }
  std::string graph_memory_csv(const std::string& key = "default") {
    return $self->GetGraph(key).MemoryTimelineCsv();
  }
  void write_graph_dot(const std::string& path, const std::string& key = "default") {
    $self->GetGraph(key).WriteDot(path);
  }
  void write_graph_trace(const std::string& path, const std::string& key = "default") {
    $self->GetGraph(key).WriteTrace(path);
  }
  void set_graph_profile(bool on, const std::string& key = "default") { $self->GetGraph(key).set_profile(on); }
  std::vector<std::string> graph_op_names(const std::string& key = "default") {
    std::vector<std::string> names;
    for (const loom::OpRecord& op : $self->GetGraph(key).ops()) names.push_back(op.name());
    return names;
  }
}
