// Layers, optimizers, the C++ Model and the model zoo (src/nn), plus PyStep: graph mode for a
// step function written in Python (loom.model.Model subclasses), built on graph/step.h's
// CapturedStep so that Python and C++ share one capture/replay contract.
//
// The classes come from their headers (Note [Bindings come from the headers] in loom.i): a new
// layer is one %shared_ptr line below (before any signature mentions it), plus a small class in
// loom/layer.py that gives it SINGA's name and argument conventions.

%{
#include <map>
#include <mutex>

#include "graph/graph.h"
#include "graph/step.h"
#include "nn/cnn_layers.h"
#include "nn/layer.h"
#include "nn/model.h"
#include "nn/models.h"
#include "nn/transformer.h"
#include "nn/clip.h"
#include "nn/loss_scale.h"
#include "nn/optimizer.h"
#include "nn/schedule.h"
#include "nn/dist_opt.h"
#include "nn/sync_batch_norm.h"
#include "io/comm/inproc.h"

namespace loom_py {

// Note [Steps run without the interpreter lock] (below, where it is applied).
inline std::recursive_mutex& StepMutex(const loom::Device* device) {
  static std::mutex mu;
  static auto* mutexes = new std::map<const loom::Device*, std::unique_ptr<std::recursive_mutex>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& m = (*mutexes)[device];
  if (!m) m = std::make_unique<std::recursive_mutex>();
  return *m;
}
class StepScope {
 public:
  // Waits for the device's step lock without the interpreter lock, then takes the interpreter
  // lock back unless `replays()` (asked under the step lock) says the step will not capture.
  template <typename Replays>
  StepScope(const loom::Device* device, Replays replays) : mu_(StepMutex(device)), state_(PyEval_SaveThread()) {
    mu_.lock();
    bool keep_released = false;
    try {
      keep_released = replays();
    } catch (...) {  // the step itself reports it, with the lock taken back
    }
    if (!keep_released) {
      PyEval_RestoreThread(state_);
      state_ = nullptr;
    }
  }
  ~StepScope() {
    mu_.unlock();
    if (state_) PyEval_RestoreThread(state_);
  }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  std::recursive_mutex& mu_;
  PyThreadState* state_;
};

// PyStep: CapturedStep around a Python callable fn(list of Tensors) -> sequence of Tensors.
// The first call per input signature captures fn once (Python runs, C++ records ops); later
// calls copy the inputs into the captured placeholders and replay from C++, with no Python
// per op. A Python exception in fn ends the capture, drops the half-built graph and reaches
// the caller unchanged.
class PyStep {
 public:
  PyStep(std::shared_ptr<loom::Device> device, PyObject* fn, const std::string& name, bool recapture,
         bool sequential, const loom::GraphOptions& options = loom::GraphOptions())
      : fn_(fn), device_(device.get()) {
    LOOM_CHECK(PyCallable_Check(fn), ValueError, "[PyStep] the step function is not callable");
    Py_INCREF(fn_);
    PyObject* f = fn_;
    step_ = std::make_unique<loom::CapturedStep>(
        std::move(device), [f](const std::vector<loom::Tensor>& in) { return Invoke(f, in); }, name, recapture,
        sequential, options);
  }
  // Note [Dropping a captured step during a capture]
  // Python frees an object when its last reference goes, also inside `with dev.buffer():`, so a
  // step or a graph-mode Model (Python or C++) can be destroyed while its device captures
  // another graph. Nothing throws out of that destructor, and the capture in progress goes on:
  // a Graph's destructor only ends its own capture (Graph::AbortCapture, noexcept), and
  // Device::EndCapture does nothing for a sink that is not the active one.
  ~PyStep() {
    step_.reset();  // its graphs first: a graph never throws as it goes
    Py_DECREF(fn_);
  }
  PyStep(const PyStep&) = delete;
  PyStep& operator=(const PyStep&) = delete;

  // Note [Steps run without the interpreter lock]: a replay runs without it.
  std::vector<loom::Tensor> run(const std::vector<loom::Tensor>& inputs) {
    StepScope scope(device_, [&] {
      for (const loom::Tensor& t : inputs)
        if (!t.defined()) return false;
      return !step_->Placeholders(inputs).empty();
    });
    return (*step_)(inputs);
  }
  void set_sequential(bool s) { step_->set_sequential(s); }
  size_t num_graphs() const { return step_->num_graphs(); }
  // The graph the last call ran (summary, stats, dumps).
  std::shared_ptr<loom::Graph> last_graph() { return step_->last_graph(); }

 private:
  static std::vector<loom::Tensor> Invoke(PyObject* fn, const std::vector<loom::Tensor>& in) {
    // Note [Steps run without the interpreter lock]: run() keeps it for a capture; taken again anyway.
    struct WithGil {
      PyGILState_STATE s = PyGILState_Ensure();
      ~WithGil() { PyGILState_Release(s); }
    } gil;
    PyObject* args = FromTensorVector(in);
    if (!args) throw PythonError();
    PyObject* r = PyObject_CallOneArg(fn, args);
    Py_DECREF(args);
    if (!r) throw PythonError();
    std::vector<loom::Tensor> out;
    bool ok = ToTensorVector(r, out, "the step function's result");
    Py_DECREF(r);
    if (!ok) throw PythonError();
    return out;
  }
  PyObject* fn_;
  const loom::Device* device_;
  std::unique_ptr<loom::CapturedStep> step_;
};

}  // namespace loom_py
%}

%shared_ptr(loom::nn::Layer)
%shared_ptr(loom::nn::Linear)
%shared_ptr(loom::nn::Activation)
%shared_ptr(loom::nn::Dropout)
%shared_ptr(loom::nn::Flatten)
%shared_ptr(loom::nn::Sequential)
%shared_ptr(loom::nn::Conv2d)
%shared_ptr(loom::nn::BatchNorm2d)
%shared_ptr(loom::nn::SyncBatchNorm2d)
%shared_ptr(loom::nn::LayerNorm)
%shared_ptr(loom::nn::MaxPool2d)
%shared_ptr(loom::nn::AvgPool2d)
%shared_ptr(loom::nn::GlobalAvgPool)
%shared_ptr(loom::nn::Embedding)
%shared_ptr(loom::nn::BasicBlock)
%shared_ptr(loom::nn::Bottleneck)
%shared_ptr(loom::nn::MultiHeadAttention)
%shared_ptr(loom::nn::TransformerBlock)
%shared_ptr(loom::nn::Gpt)
%shared_ptr(loom::nn::Optimizer)
%shared_ptr(loom::nn::SGD)
%shared_ptr(loom::nn::Adam)
%shared_ptr(loom::nn::DistOpt)

// ---- nn/layer.h, nn/cnn_layers.h ----
%ignore loom::nn::Layer::operator();
%ignore loom::nn::ReLU;  // C++ shorthand for Activation(Act::kReLU); Python has layer.ReLU
%ignore loom::nn::Sequential::Sequential(std::vector<std::shared_ptr<Layer>>);  // Python adds one by one
%ignore loom::nn::Sequential::Add;  // returns Sequential&; add() below returns nothing
%include "nn/layer.h"
%include "nn/cnn_layers.h"
// Gpt::blocks is a C++ vector of layers; Python reaches the blocks by name (params()).
%ignore loom::nn::Gpt::blocks;
%include "nn/transformer.h"

// ---- nn/schedule.h, nn/clip.h (loom/schedule.py and loom/clip.py give them SINGA's and torch's
// names). The spec is the op's business; Sequential takes a vector Python does not build:
// schedule_then below composes two at a time. ----
%ignore loom::nn::Schedule::spec;
%ignore loom::nn::Schedule::ToAttrs;
%ignore loom::nn::Schedule::Sequential;
%include "nn/schedule.h"
%include "nn/clip.h"
// Note [Loss scaling]: the settings and a reading; the state and its ops stay C++ (loom/precision.py).
%ignore loom::nn::LossScaleState;
%ignore loom::nn::MakeLossScaleState;
%ignore loom::nn::Read;
%ignore loom::nn::Write;
%ignore loom::nn::UnscaleGradients;
%ignore loom::nn::UpdateLossScale;
%include "nn/loss_scale.h"

// ---- nn/optimizer.h ----
// Ignored: references into the optimizer's own tensors (a non-owning Python proxy would outlive
// them) and Step, whose (param, grad) vector Python does not build (optimizer_step below).
%ignore loom::nn::Optimizer::Step;
%ignore loom::nn::Optimizer::LearningRateTensor;
%ignore loom::nn::Optimizer::states;
%ignore loom::nn::Optimizer::EnsureState;
%ignore loom::nn::Optimizer::schedule;
%ignore loom::nn::Optimizer::grad_clip;
%ignore loom::nn::Optimizer::last_grad_norm;
%ignore loom::nn::Optimizer::loss_scaling;
%ignore loom::nn::Optimizer::SetCrossRankReduce;  // DistOpt's, in C++ (Note [Sharded optimizer state])
%ignore loom::nn::Optimizer::SetParameterDims;
%ignore loom::nn::Optimizer::FinishStep;
%ignore loom::nn::Optimizer::AbandonStep;
%ignore loom::nn::DistOpt::FinishStep;
%ignore loom::nn::DistOpt::AbandonStep;
%include "nn/optimizer.h"

%extend loom::nn::Optimizer {
  bool has_schedule() const { return $self->schedule() != nullptr; }
  // A copy of the schedule (the optimizer keeps its own).
  loom::nn::Schedule get_schedule() const {
    LOOM_CHECK($self->schedule(), ValueError, "[optimizer] has no schedule");
    return *$self->schedule();
  }
  loom::nn::GradClip get_grad_clip() const { return $self->grad_clip(); }
  // A copy of the loss-scaling settings (ValueError when it does not scale losses).
  loom::nn::LossScaling get_loss_scaling() const {
    LOOM_CHECK($self->loss_scaling(), ValueError, "[optimizer] does not scale losses");
    return *$self->loss_scaling();
  }
  // The rate the last update on `dev` used (a host read: synchronises).
  double current_learning_rate(const std::shared_ptr<loom::Device>& dev) {
    return $self->LearningRateTensor(dev).Item();
  }
  // The global norm of the last step that clipped by norm (a handle on the device scalar).
  loom::Tensor grad_norm() const {
    LOOM_CHECK($self->last_grad_norm().defined(), ValueError, "[optimizer] no step has clipped by norm yet");
    return $self->last_grad_norm();
  }
}

// ---- nn/dist_opt.h ----
// Made by make_dist_opt below (compression by name); the C++ references stay in C++.
%ignore loom::nn::DistOpt::DistOpt;
%ignore loom::nn::DistOpt::StepBucketed;
%ignore loom::nn::DistOpt::communicator;
%ignore loom::nn::DistOpt::optimizer;
%ignore loom::nn::DistOpt::BroadcastParameters;
// Note [Gradients on the wire], by name (precision_name below).
%ignore loom::nn::DistOpt::SetModelPrecision;
%ignore loom::nn::DistOpt::SetCompression;
%ignore loom::nn::DistOpt::compression;
%extend loom::nn::DistOpt {
  void set_model_precision_name(const std::string& p) { $self->SetModelPrecision(loom::PrecisionFromName(p)); }
  // "auto" follows the model's precision; "none"/"fp32", "fp16", "bf16" fix the wire type.
  void set_compression_name(const std::string& c) {
    if (c == "auto") $self->SetCompression(std::nullopt);
    else $self->SetCompression(loom::ParseCompression(c));
  }
  std::string compression_name() const { return loom::Name($self->compression()); }
}
%include "nn/dist_opt.h"
%include "nn/sync_batch_norm.h"

// Note [Steps run without the interpreter lock]
// A step that replays a captured graph or runs eagerly (a C++ Model's TrainOneBatch, or its
// Forward when it runs eagerly; a PyStep's run that finds its graph) runs without the interpreter
// lock, so that Python threads run meanwhile: loom.data's reading thread (Note [Reading ahead on a
// thread] in loom/data.py) prepares the next batches while a step replays. A step that captures
// keeps the lock, as before: Python's own threads then cannot submit ops into the middle of it
// (Note [Capture sink] refuses another thread's op during a capture). Steps on one device take
// turns through a step lock per device (StepScope), which is waited for without the interpreter
// lock and taken before it, never the other way round, so no thread holds one while waiting for
// the other: two Python threads training one model (or two models on one device) run their
// steps one after the other, as the interpreter lock made them before, and a capture never starts
// while another thread's replay copies its inputs. Nothing in a step touches Python without the
// interpreter lock: arguments are converted before and results wrapped after (SWIG's code around
// $action), a capture calls the Python step function through PyStep::Invoke, which takes the lock
// (PyGILState_Ensure), as Note [External ops]'s backward dispatcher does, and tensors hold no
// Python objects. Other Python threads' own ops meanwhile wait for the device (Note [One user at a
// time]). The scope takes the interpreter lock back also while an exception unwinds, before the
// handler makes it a Python error.
%exception loom::nn::Model::TrainOneBatch {
  try {
    loom_py::StepScope step(arg2->defined() ? arg2->device() : nullptr, [&] {
      return !arg1->use_graph() ||
             (arg2->defined() && arg3->defined() && !arg1->GraphInputs(*arg2, *arg3).empty());
    });
    $action
  } catch (...) {
    loom_py::SetPythonErrorFromCurrent();
    SWIG_fail;
  }
}
%exception loom::nn::Model::Forward {
  try {
    loom_py::StepScope step(arg2->defined() ? arg2->device() : nullptr, [&] { return !arg1->use_graph(); });
    $action
  } catch (...) {
    loom_py::SetPythonErrorFromCurrent();
    SWIG_fail;
  }
}

// ---- nn/model.h, nn/models.h ----
// TrainOneBatch's result, (output, loss): tensors the graph rewrites on every replay; read them
// before the next call.
%ignore loom::nn::Model::StepResult;
%typemap(out) loom::nn::Model::StepResult {
  // None for the output of a model that keeps none (Note [A step that keeps no output]).
  PyObject* out = $1.output.defined() ? loom_py::WrapTensor($1.output) : (Py_INCREF(Py_None), Py_None);
  PyObject* loss = loom_py::WrapTensor($1.loss);
  $result = out && loss ? PyTuple_Pack(2, out, loss) : nullptr;
  Py_XDECREF(out);
  Py_XDECREF(loss);
  if (!$result) SWIG_fail;
}
// References into the model (net, optimizer) would be non-owning proxies; the net and optimizer
// are reached from Python's own handles. train_graph is a shared handle (device.i).
%ignore loom::nn::Model::net;
%ignore loom::nn::Model::optimizer;
// Note [Precision policy] (core/autocast.h), by name: "fp32", "bf16" or "fp16".
%ignore loom::nn::Model::set_precision;
%ignore loom::nn::Model::precision;
%extend loom::nn::Model {
  void set_precision_name(const std::string& name) { $self->set_precision(loom::PrecisionFromName(name)); }
  std::string precision_name() const { return loom::Name($self->precision()); }
}
%include "nn/model.h"
// Exceptions to the naming rule: SINGA's zoo spells ResNet as one word.
%rename(make_resnet18) loom::nn::MakeResNet18;
%rename(make_resnet50) loom::nn::MakeResNet50;
%include "nn/models.h"

%extend loom::nn::Sequential {
  void add(std::shared_ptr<loom::nn::Layer> layer) {
    LOOM_CHECK(layer, ValueError, "[Sequential] cannot add None");
    $self->Add(std::move(layer));
  }
}

%inline %{
namespace loom_py {
// Backward from `loss` with each gradient handed to `opt` as soon as it is final (the memory-
// friendly order: a gradient dies right after its update). Optimizer state is keyed by the
// parameter's storage, so two parameters that share a name never share momentum.
// (With clipping by global norm, after backward: Optimizer::BackwardAndUpdate.)
void optimizer_step(loom::nn::Optimizer& opt, const loom::Tensor& loss) {
  opt.BackwardAndUpdate(loss, /*key_by_name=*/false);
}
// Optimizer.Step over parallel lists (Python's form of the (param, grad) pairs).
void optimizer_step_pairs(loom::nn::Optimizer& opt, const std::vector<loom::Tensor>& params,
                          const std::vector<loom::Tensor>& grads) {
  LOOM_CHECK(params.size() == grads.size(), ValueError, "[optimizer] ", params.size(), " parameters and ",
             grads.size(), " gradients");
  std::vector<std::pair<loom::Tensor, loom::Tensor>> pairs;
  for (size_t i = 0; i < params.size(); ++i) pairs.emplace_back(params[i], grads[i]);
  opt.Step(pairs);
}
// Sequential({first, next}, {at}): compositions of more parts are built two at a time (the
// spec is flattened, so the result is the same).
loom::nn::Schedule schedule_then(const loom::nn::Schedule& first, const loom::nn::Schedule& next, int64_t at) {
  return loom::nn::Schedule::Sequential({first, next}, {at});
}
// opt.DistOpt: compression "auto" (the model's precision: Note [Gradients on the wire]), "none"
// or "fp32", "fp16" or "bf16"; shard: Note [Sharded optimizer state].
std::shared_ptr<loom::nn::DistOpt> make_dist_opt(std::shared_ptr<loom::nn::Optimizer> opt,
                                                 std::shared_ptr<loom::Communicator> comm,
                                                 const std::string& compression, int64_t bucket_bytes,
                                                 bool shard) {
  LOOM_CHECK(bucket_bytes > 0, ValueError, "[DistOpt] bucket_bytes ", bucket_bytes, " must be positive");
  std::optional<loom::Compression> c;
  if (compression != "auto") c = loom::ParseCompression(compression);
  return std::make_shared<loom::nn::DistOpt>(std::move(opt), std::move(comm), c, size_t(bucket_bytes), shard);
}
// A 1-rank in-process communicator (io/comm/inproc.h): DistOpt without MPI, for tests.
std::shared_ptr<loom::Communicator> inproc_communicator_of_one() { return loom::MakeInProcGroup(1)[0]; }
// Every rank ends with rank `root`'s values of `params` (start from the same weights).
void broadcast_parameters(loom::nn::DistOpt& opt, const std::vector<loom::Tensor>& params, int root) {
  opt.BroadcastParameters(params, root);
}
}  // namespace loom_py
%}

namespace loom_py {
class PyStep {
 public:
  PyStep(std::shared_ptr<loom::Device> device, PyObject* fn, const std::string& name, bool recapture,
         bool sequential, const loom::GraphOptions& options = loom::GraphOptions());
  ~PyStep();
  std::vector<loom::Tensor> run(const std::vector<loom::Tensor>& inputs);
  void set_sequential(bool s);
  size_t num_graphs() const;
  std::shared_ptr<loom::Graph> last_graph();
};
}  // namespace loom_py
