// Checkpoints and data sets (src/io): named tensors + metadata in one file, optimizer state,
// MNIST / CIFAR-10 loading and the DataLoader. loom/io.py builds the friendly API on these names.
//
// Every failure is a loom::IOError (bad magic, checksum, truncation, missing file...), raised in
// Python as loom.IOError (an OSError) by the global %exception handler of errors.i; a path or a
// name with a NUL byte is a loom.ValueError (Note [Names are C strings] in core/file.h). File
// I/O runs without the interpreter lock (Note [The interpreter lock and file I/O] below).
//
// Arguments cross as plain Python values:
//   named tensors   <- a sequence of (name, Tensor) pairs, or a mapping name -> Tensor
//   metadata        <- a mapping name -> float;   -> a dict
//   file lists      <- a sequence of str
// Every argument is required here; loom/io.py supplies the defaults.

%{
#include <map>
#include "core/file.h"
#include "io/checkpoint.h"
#include "nn/optimizer_checkpoint.h"
#include "io/dataset.h"
#include "nn/optimizer.h"

namespace loom_py {

// A str's UTF-8 bytes, all of them: a NUL byte stays in the string (PyUnicode_AsUTF8 would end
// it there), so that C++ refuses the name instead of using a shortened one (Note [Names are C
// strings] in core/file.h).
static bool Utf8(PyObject* o, std::string& out) {
  Py_ssize_t n = 0;
  const char* s = PyUnicode_AsUTF8AndSize(o, &n);
  if (!s) return false;
  out.assign(s, size_t(n));
  return true;
}

// WithoutGil and Note [The interpreter lock and file I/O] are in errors.i.

static bool ToNamedTensors(PyObject* o, std::vector<std::pair<std::string, loom::Tensor>>& out, const char* what) {
  PyObject* items = nullptr;
  if (PyDict_Check(o)) {
    items = PyDict_Items(o);
  } else if (PyMapping_Check(o) && PyObject_HasAttrString(o, "items") && !PySequence_Check(o)) {
    items = PyMapping_Items(o);
  } else {
    Py_INCREF(o);
    items = o;
  }
  if (!items) return false;
  PyObject* seq = PySequence_Fast(items, "");
  Py_DECREF(items);
  if (!seq) {
    PyErr_Format(g_errors[kType], "[loom] %s must be a mapping or a sequence of (name, Tensor) pairs, got %s", what,
                 Py_TYPE(o)->tp_name);
    return false;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  out.clear();
  out.reserve(size_t(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    void* p = nullptr;
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(item, 0)) ||
        !SWIG_IsOK(SWIG_ConvertPtr(PyTuple_GET_ITEM(item, 1), &p, SWIGTYPE_p_loom__Tensor, 0)) || !p) {
      Py_DECREF(seq);
      PyErr_Format(g_errors[kType], "[loom] %s: item %zd is not a (str, Tensor) pair", what, i);
      return false;
    }
    std::string name;
    if (!Utf8(PyTuple_GET_ITEM(item, 0), name)) { Py_DECREF(seq); return false; }
    out.emplace_back(std::move(name), *static_cast<loom::Tensor*>(p));
  }
  Py_DECREF(seq);
  return true;
}

static bool ToMeta(PyObject* o, std::map<std::string, double>& out, const char* what) {
  out.clear();
  if (o == Py_None) return true;
  if (!PyDict_Check(o)) {
    PyErr_Format(g_errors[kType], "[loom] %s must be a dict of str -> float, got %s", what, Py_TYPE(o)->tp_name);
    return false;
  }
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(o, &pos, &k, &v)) {
    if (!PyUnicode_Check(k)) {
      PyErr_Format(g_errors[kType], "[loom] %s: keys must be str", what);
      return false;
    }
    double d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred()) return false;
    std::string name;
    if (!Utf8(k, name)) return false;
    out[name] = d;
  }
  return true;
}

static PyObject* FromMeta(const std::map<std::string, double>& m) {
  PyObject* d = PyDict_New();
  if (!d) return nullptr;
  for (const auto& kv : m) {
    PyObject* k = PyUnicode_FromStringAndSize(kv.first.data(), Py_ssize_t(kv.first.size()));
    PyObject* v = PyFloat_FromDouble(kv.second);
    if (!k || !v || PyDict_SetItem(d, k, v) < 0) {
      Py_XDECREF(k);
      Py_XDECREF(v);
      Py_DECREF(d);
      return nullptr;
    }
    Py_DECREF(k);
    Py_DECREF(v);
  }
  return d;
}

static bool ToStringVector(PyObject* o, std::vector<std::string>& out, const char* what) {
  if (PyUnicode_Check(o)) {
    out.resize(1);
    return Utf8(o, out[0]);
  }
  PyObject* seq = PySequence_Fast(o, "");
  if (!seq) {
    PyErr_Format(g_errors[kType], "[loom] %s must be a sequence of str, got %s", what, Py_TYPE(o)->tp_name);
    return false;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  out.clear();
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    PyObject* path = PyOS_FSPath(item);  // str or os.PathLike
    std::string s;
    if (!path || !PyUnicode_Check(path) || !Utf8(path, s)) {
      Py_XDECREF(path);
      Py_DECREF(seq);
      if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(g_errors[kType], "[loom] %s must be a sequence of str, item %zd is %s", what, i,
                     Py_TYPE(item)->tp_name);
      }
      return false;
    }
    out.push_back(std::move(s));
    Py_DECREF(path);
  }
  Py_DECREF(seq);
  return true;
}

static bool ToFloatVector(PyObject* o, std::vector<float>& out, const char* what) {
  out.clear();
  if (o == Py_None) return true;
  PyObject* seq = PySequence_Fast(o, "");
  if (!seq) {
    PyErr_Format(g_errors[kType], "[loom] %s must be a sequence of floats, got %s", what, Py_TYPE(o)->tp_name);
    return false;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    double d = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
    if (d == -1.0 && PyErr_Occurred()) { Py_DECREF(seq); return false; }
    out.push_back(float(d));
  }
  Py_DECREF(seq);
  return true;
}

static PyObject* FromFloatVector(const std::vector<float>& v) {
  PyObject* t = PyTuple_New(Py_ssize_t(v.size()));
  if (!t) return nullptr;
  for (size_t i = 0; i < v.size(); ++i) PyTuple_SET_ITEM(t, Py_ssize_t(i), PyFloat_FromDouble(v[i]));
  return t;
}

// A checkpoint held in memory; `source` is named in errors.
static loom::io::Checkpoint InMemory(const std::vector<std::pair<std::string, loom::Tensor>>& tensors,
                                     const std::map<std::string, double>& meta, const std::string& source) {
  loom::io::Checkpoint ck;
  ck.path = source;
  ck.tensors = tensors;
  ck.meta = meta;
  return ck;
}

}  // namespace loom_py
%}

// ---- argument conversions (only the io functions use these C++ types) ----
%typemap(in) const std::vector<std::pair<std::string, loom::Tensor>>& (std::vector<std::pair<std::string, loom::Tensor>> tmp) {
  if (!loom_py::ToNamedTensors($input, tmp, "$1_name")) SWIG_fail;
  $1 = &tmp;
}
%typemap(in) const std::map<std::string, double>& (std::map<std::string, double> tmp) {
  if (!loom_py::ToMeta($input, tmp, "$1_name")) SWIG_fail;
  $1 = &tmp;
}
%typemap(in) const std::vector<std::string>& (std::vector<std::string> tmp) {
  if (!loom_py::ToStringVector($input, tmp, "$1_name")) SWIG_fail;
  $1 = &tmp;
}
%typemap(in) const std::vector<float>& (std::vector<float> tmp) {
  if (!loom_py::ToFloatVector($input, tmp, "$1_name")) SWIG_fail;
  $1 = &tmp;
}
%typemap(out) std::map<std::string, double> { $result = loom_py::FromMeta($1); }

%shared_ptr(loom::io::ImageData)

// Reading a data set is file I/O and host work only: the whole call runs without the
// interpreter lock (Note [The interpreter lock and file I/O]).
%define LOOM_WITHOUT_GIL(fn)
%exception fn {
  try {
    loom_py::WithoutGil io;
    $action
  } catch (...) {
    loom_py::SetPythonErrorFromCurrent();
    SWIG_fail;
  }
}
%enddef
LOOM_WITHOUT_GIL(loom::io::LoadMnist)
LOOM_WITHOUT_GIL(loom::io::LoadMnistDir)
LOOM_WITHOUT_GIL(loom::io::LoadCifar10)
LOOM_WITHOUT_GIL(loom::io::LoadCifar10Dir)

%rename(restore_into) loom::io::RestoreInto;
%rename(check_restore_into) loom::io::CheckRestoreInto;
%rename(restore_optimizer_state) loom::nn::RestoreOptimizerState;
%rename(load_mnist) loom::io::LoadMnist;
%rename(load_mnist_dir) loom::io::LoadMnistDir;
%rename(load_cifar10) loom::io::LoadCifar10;
%rename(load_cifar10_dir) loom::io::LoadCifar10Dir;
%rename(has) loom::io::Checkpoint::Has;
%rename(ImageData) loom::io::ImageData;
%rename(next_into) loom::io::DataLoader::NextInto;
%rename(seek) loom::io::DataLoader::Seek;

namespace loom {
namespace io {

struct Checkpoint {
  bool Has(const std::string& name) const;
};

void RestoreInto(const Checkpoint& ckpt, const std::vector<std::pair<std::string, loom::Tensor>>& targets);
void CheckRestoreInto(const Checkpoint& ckpt, const std::vector<std::pair<std::string, loom::Tensor>>& targets);

%immutable;
struct ImageData {
  int64_t n, channels, height, width;
};
%mutable;

std::shared_ptr<ImageData> LoadMnist(const std::string& images_path, const std::string& labels_path);
std::shared_ptr<ImageData> LoadMnistDir(const std::string& dir, bool train);
std::shared_ptr<ImageData> LoadCifar10(const std::vector<std::string>& batch_files);
std::shared_ptr<ImageData> LoadCifar10Dir(const std::string& dir, bool train);

class DataLoader {
 public:
  ~DataLoader();
  bool NextInto(const Tensor& x, const Tensor& y);
  int64_t batches_per_epoch() const;
  int64_t size() const;
  int64_t samples_per_epoch() const;
  void Seek(int64_t epoch, int64_t index);
};

}  // namespace io
}  // namespace loom

namespace loom {
namespace nn {
void RestoreOptimizerState(const loom::io::Checkpoint& ckpt, loom::nn::Optimizer& opt,
                           const std::shared_ptr<loom::Device>& dev, const std::string& prefix);
}  // namespace nn
}  // namespace loom

%extend loom::io::Checkpoint {
  std::string path() const { return $self->path; }
  // [(name, Tensor)] in file order; the tensors are on the CPU.
  std::vector<std::pair<std::string, loom::Tensor>> tensors() const { return $self->tensors; }
  std::map<std::string, double> meta() const { return $self->meta; }
  loom::Tensor get(const std::string& name) const { return $self->Get(name); }
  double meta_value(const std::string& name) const { return $self->Meta(name); }
}

%extend loom::io::ImageData {
  // The raw uint8 pixels (n, channels, height, width) and the int32 labels, as bytes.
  PyObject* images_bytes() const {
    return PyBytes_FromStringAndSize(reinterpret_cast<const char*>($self->images.data()),
                                     Py_ssize_t($self->images.size()));
  }
  PyObject* labels_bytes() const {
    return PyBytes_FromStringAndSize(reinterpret_cast<const char*>($self->labels.data()),
                                     Py_ssize_t($self->labels.size() * sizeof(int32_t)));
  }
}

%extend loom::io::DataLoader {
  DataLoader(std::shared_ptr<loom::io::ImageData> data, int64_t batch_size, bool shuffle, uint64_t seed,
             bool drop_last, bool flat, const std::vector<float>& mean, const std::vector<float>& stddev,
             int prefetch, std::shared_ptr<loom::Device> device, int64_t shard_rank = 0,
             int64_t shard_world = 1, int64_t crop_padding = 0, bool hflip = false, uint64_t augment_seed = 0) {
    LOOM_CHECK(data, ValueError, "[DataLoader] no data");
    loom::io::DataLoaderOptions o;
    o.batch_size = batch_size;
    o.shuffle = shuffle;
    o.seed = seed;
    o.drop_last = drop_last;
    o.flat = flat;
    o.mean = mean;
    o.stddev = stddev;
    o.prefetch = prefetch;
    o.device = std::move(device);
    o.shard_rank = shard_rank;
    o.shard_world = shard_world;
    o.crop_padding = crop_padding;
    o.hflip = hflip;
    o.augment_seed = augment_seed;
    return new loom::io::DataLoader(std::move(data), std::move(o));
  }
  // (epoch, index) of the batch the next call returns (io::LoaderPosition).
  PyObject* position() const {
    loom::io::LoaderPosition p = $self->position();
    return Py_BuildValue("(LL)", (long long)p.epoch, (long long)p.index);
  }
  // (x, y, epoch, index) of the next batch, or None at the end of an epoch (the call after
  // that starts the next epoch).
  PyObject* next_batch() {
    loom::io::Batch b;
    bool more;
    {
      // The background thread never calls Python: waiting for it without the GIL is safe.
      loom_py::WithoutGil wait;
      more = $self->Next(&b);
    }
    if (!more) Py_RETURN_NONE;
    PyObject* x = loom_py::WrapTensor(b.x);
    PyObject* y = loom_py::WrapTensor(b.y);
    if (!x || !y) {
      Py_XDECREF(x);
      Py_XDECREF(y);
      throw loom_py::PythonError();
    }
    PyObject* t = Py_BuildValue("(NNLL)", x, y, (long long)b.epoch, (long long)b.index);
    if (!t) throw loom_py::PythonError();
    return t;
  }
  std::vector<int64_t> x_shape(int64_t batch) const { return $self->x_shape(batch); }
}

%inline %{
namespace loom_py {

// io::SaveCheckpoint / LoadCheckpoint / SaveOptimizer / LoadOptimizer, with the file I/O
// outside the interpreter lock (Note [The interpreter lock and file I/O]).
void save_checkpoint(const std::string& path, const std::vector<std::pair<std::string, loom::Tensor>>& tensors,
                     const std::map<std::string, double>& meta) {
  loom::CheckNoNulByte(path, "checkpoint", "the path");
  loom::io::EncodedCheckpoint enc = loom::io::EncodeCheckpointOf(tensors, meta);
  WithoutGil io;
  loom::io::WriteCheckpointFile(path, enc);
}
loom::io::Checkpoint load_checkpoint(const std::string& path) {
  std::string bytes;
  {
    WithoutGil io;
    bytes = loom::io::ReadCheckpointFile(path);
  }
  return loom::io::DecodeCheckpointBytes(bytes, path);
}
void save_optimizer(const std::string& path, loom::nn::Optimizer& opt) {
  loom::io::NamedTensors tensors;
  std::map<std::string, double> meta;
  loom::nn::AddOptimizerState(opt, &tensors, &meta);
  save_checkpoint(path, tensors, meta);
}
void load_optimizer(const std::string& path, loom::nn::Optimizer& opt, const std::shared_ptr<loom::Device>& dev) {
  loom::nn::RestoreOptimizerFile(load_checkpoint(path), opt, dev);
}

// The state tensors ([(key, Tensor)], keys "<prefix><param key>/<slot>") and metadata
// ("<prefix>lr", ...) of an optimizer: nn::AddOptimizerState's output.
PyObject* optimizer_state(loom::nn::Optimizer& opt, const std::string& prefix) {
  loom::io::NamedTensors tensors;
  std::map<std::string, double> meta;
  loom::nn::AddOptimizerState(opt, &tensors, &meta, prefix);
  PyObject* t = FromNamedTensors(tensors);
  PyObject* m = FromMeta(meta);
  if (!t || !m) {
    Py_XDECREF(t);
    Py_XDECREF(m);
    throw PythonError();
  }
  return Py_BuildValue("(NN)", t, m);
}

// nn::RestoreOptimizerState from tensors and metadata in memory (keys as optimizer_state gives
// them), e.g. a checkpoint's entries renamed to this process's parameter keys.
void restore_optimizer_state_from(loom::nn::Optimizer& opt,
                                  const std::vector<std::pair<std::string, loom::Tensor>>& tensors,
                                  const std::map<std::string, double>& meta, const std::shared_ptr<loom::Device>& dev,
                                  const std::string& prefix, const std::string& source) {
  loom::nn::RestoreOptimizerState(InMemory(tensors, meta, source), opt, dev, prefix);
}
// nn::CheckOptimizerState on the same arguments: what restore_optimizer_state_from would refuse,
// raised before anything changes (Note [Check everything, then copy] in io/checkpoint.h).
void check_optimizer_state_from(const loom::nn::Optimizer& opt,
                                const std::vector<std::pair<std::string, loom::Tensor>>& tensors,
                                const std::map<std::string, double>& meta, const std::string& prefix,
                                const std::string& source) {
  loom::nn::CheckOptimizerState(InMemory(tensors, meta, source), opt, prefix);
}

// io::DecodeCheckpointBytes from a bytes-like object; `source` is named in errors.
loom::io::Checkpoint decode_checkpoint_bytes(PyObject* data, const std::string& source) {
  Py_buffer view;
  if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) throw PythonError();
  std::string bytes(static_cast<const char*>(view.buf), size_t(view.len));
  PyBuffer_Release(&view);
  return loom::io::DecodeCheckpointBytes(bytes, source);
}

// The usual per-channel statistics of pixel / 255: {"mnist": (mean, std), "cifar10": (mean, std)}.
PyObject* dataset_stats() {
  return Py_BuildValue("{s(NN)s(NN)}", "mnist", FromFloatVector(loom::io::kMnistMean),
                       FromFloatVector(loom::io::kMnistStd), "cifar10", FromFloatVector(loom::io::kCifar10Mean),
                       FromFloatVector(loom::io::kCifar10Std));
}

}  // namespace loom_py
%}

// ---- training runs: evaluation, the step monitor, run state and checkpoint folders ----
// (nn/evaluate.h, nn/step_monitor.h, nn/trainer.h, io/checkpoint_dir.h). Here rather than in
// nn.i because they take DataLoaders and (name, Tensor) lists, whose conversions are above.
// loom/trainer.py builds loom.trainer.Trainer on them; the C++ nn::Trainer itself is not bound
// (its loop calls back into C++ models only).
%{
#include "io/checkpoint_dir.h"
#include "nn/evaluate.h"
#include "nn/step_monitor.h"
#include "nn/trainer.h"
%}

%ignore loom::nn::Trainer;
%ignore loom::nn::TrainerOptions;
%ignore loom::nn::TrainResult;
%ignore loom::nn::NonFiniteError;  // loom.trainer.NonFiniteError is raised by the Python loop
%ignore loom::nn::StepMonitor::StepMonitor(std::shared_ptr<Device>, NamedTensors, bool, GraphOptions);
%ignore loom::nn::StepMonitor::Read;
%ignore loom::nn::StepMonitor::Reading;
%ignore loom::io::CheckpointDir::Save;      // the Python trainer writes through Model.save_states
%ignore loom::io::CheckpointDir::SaveBest;
%rename(top_k_correct) loom::nn::TopKCorrect;
%rename(top1_correct) loom::nn::Top1Correct;
%include "io/checkpoint_dir.h"
%include "nn/evaluate.h"
%include "nn/step_monitor.h"
%include "nn/trainer.h"

%extend loom::nn::StepMonitor {
  // watched: the tensors whose non-finite values mark a bad step (the parameters).
  StepMonitor(std::shared_ptr<loom::Device> dev, const std::vector<loom::Tensor>& watched, bool use_graph,
              const loom::GraphOptions& options = loom::GraphOptions()) {
    loom::nn::NamedTensors named;
    for (size_t i = 0; i < watched.size(); ++i) named.emplace_back(std::to_string(i), watched[i]);
    return new loom::nn::StepMonitor(std::move(dev), std::move(named), use_graph, options);
  }
  // {"steps", "first_bad", "loss_sum", "losses"}: one host read.
  PyObject* read(bool restart_loss_sum = true) {
    loom::nn::StepMonitor::Reading r = $self->Read(restart_loss_sum);
    return Py_BuildValue("{sLsLsdsL}", "steps", (long long)r.steps, "first_bad", (long long)r.first_bad,
                         "loss_sum", r.loss_sum, "losses", (long long)r.losses);
  }
}
