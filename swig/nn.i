// Layers, optimizers, the C++ Model and the model zoo (src/nn), plus PyStep: graph mode for a
// step function written in Python (loom.model.Model subclasses), built on graph/step.h's
// CapturedStep so that Python and C++ share one capture/replay contract.
//
// A layer is one %shared_ptr line and its constructor; loom/layer.py gives it SINGA's name.

%{
#include "graph/graph.h"
#include "graph/step.h"
#include "nn/layer.h"
#include "nn/model.h"
#include "nn/models.h"
#include "nn/optimizer.h"

namespace loom_py {

// PyStep: CapturedStep around a Python callable fn(list of Tensors) -> sequence of Tensors.
// The first call per input signature captures fn once (Python runs, C++ records ops); later
// calls copy the inputs into the captured placeholders and replay from C++, with no Python
// per op. A Python exception in fn ends the capture, drops the half-built graph and reaches
// the caller unchanged.
class PyStep {
 public:
  PyStep(std::shared_ptr<loom::Device> device, PyObject* fn, const std::string& name, bool recapture,
         bool sequential)
      : fn_(fn), device_(device) {
    LOOM_CHECK(PyCallable_Check(fn), ValueError, "[PyStep] the step function is not callable");
    Py_INCREF(fn_);
    PyObject* f = fn_;
    step_ = std::make_unique<loom::CapturedStep>(
        std::move(device), [f](const std::vector<loom::Tensor>& in) { return Invoke(f, in); }, name, recapture,
        sequential);
  }
  ~PyStep() {
    SafeDelete(step_.release(), device_.get());
    Py_DECREF(fn_);
  }

  // Note [Dropping a captured step during a capture]
  // ~CapturedStep resets its graphs, and ResetGraph throws while the device is capturing; out of
  // a destructor that is std::terminate. Python frees objects whenever their last reference
  // goes, also inside `with dev.buffer():`, so such a step is left alive instead (its graphs
  // stay until dev.ResetGraph()). Used for C++ Models too.
  template <typename T>
  static void SafeDelete(T* p, loom::Device* device) {
    if (device && device->buffering()) return;
    delete p;
  }
  PyStep(const PyStep&) = delete;
  PyStep& operator=(const PyStep&) = delete;

  std::vector<loom::Tensor> run(const std::vector<loom::Tensor>& inputs) { return (*step_)(inputs); }
  void set_sequential(bool s) { step_->set_sequential(s); }
  size_t num_graphs() const { return step_->num_graphs(); }
  // The key of the graph the last call ran (for dev.graph_summary(key) and the dumps).
  std::string last_graph_key() { return step_->last_graph().key(); }

 private:
  static std::vector<loom::Tensor> Invoke(PyObject* fn, const std::vector<loom::Tensor>& in) {
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
  std::shared_ptr<loom::Device> device_;
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
%shared_ptr(loom::nn::Optimizer)
%shared_ptr(loom::nn::SGD)
%shared_ptr(loom::nn::Adam)

%rename(forward) loom::nn::Layer::Forward;
%rename(params) loom::nn::Layer::Params;
%rename(states) loom::nn::Layer::States;
%rename(train) loom::nn::Layer::Train;
%rename(type_name) loom::nn::Layer::TypeName;
%rename(apply) loom::nn::Optimizer::Apply;
%rename(set_learning_rate) loom::nn::Optimizer::SetLearningRate;
%rename(make_mlp) loom::nn::MakeMlp;

namespace loom {
namespace nn {

typedef std::vector<std::pair<std::string, Tensor>> NamedTensors;

class Layer {
 public:
  virtual ~Layer();
  virtual Tensor Forward(const Tensor& x);  // pure in C++; declared plain so subclasses get constructors
  virtual std::string TypeName() const;
  NamedTensors Params() const;
  NamedTensors States() const;
  void Train(bool on = true);
  bool training() const;
 private:
  Layer();
};

struct LayerOptions {
  std::shared_ptr<Device> device;
  DType dtype;
};

class Linear : public Layer {
 public:
  Linear(int64_t in, int64_t out, bool bias, LayerOptions o);
};

enum class Act { kReLU, kLeakyReLU, kSigmoid, kTanh, kGELU, kSoftplus };
class Activation : public Layer {
 public:
  Activation(Act kind, double slope = 0.01);
};

class Dropout : public Layer {
 public:
  explicit Dropout(double p);
};

class Flatten : public Layer {
 public:
  explicit Flatten(int64_t start_axis = 1);
};

class Sequential : public Layer {
 public:
  Sequential();
  size_t size() const;
};

std::shared_ptr<Layer> MakeMlp(const std::vector<int64_t>& dims, LayerOptions o);

class Optimizer {
 public:
  virtual ~Optimizer();
  virtual void Apply(const Tensor& grad, const Tensor& param, const std::string& name = "");
  void SetLearningRate(double lr);
  double learning_rate() const;
 private:
  Optimizer();
};

class SGD : public Optimizer {
 public:
  SGD(double lr, double momentum = 0, double weight_decay = 0, bool nesterov = false, double dampening = 0);
};

class Adam : public Optimizer {
 public:
  Adam(double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8, double weight_decay = 0,
       bool decoupled = false);
  int64_t steps_taken(const std::shared_ptr<Device>& dev);
};

enum class LossKind { kSoftmaxCrossEntropy, kMse };

class Model {
 public:
  Model(std::shared_ptr<Layer> net, std::shared_ptr<Optimizer> optimizer, LossKind loss);
  void Compile(const std::vector<Tensor>& inputs, bool is_train = true, bool use_graph = false,
               bool sequential = true);
  Tensor Forward(const Tensor& x);
  void Train(bool on = true);
  void Eval();
  NamedTensors Params() const;
  NamedTensors States() const;
  bool compiled() const;
  bool use_graph() const;
  void set_recapture(bool on);
  int64_t steps() const;
};

}  // namespace nn
}  // namespace loom

%extend loom::nn::Sequential {
  void add(std::shared_ptr<loom::nn::Layer> layer) {
    LOOM_CHECK(layer, ValueError, "[Sequential] cannot add None");
    $self->Add(std::move(layer));
  }
}

%extend loom::nn::Model {
  // Note [Dropping a captured step during a capture]: a graph-mode Model dropped while its
  // device captures is left alive rather than ending the process.
  ~Model() {
    loom::nn::NamedTensors params = $self->Params();
    loom_py::PyStep::SafeDelete($self, params.empty() ? nullptr : params[0].second.device());
  }
  // (output, loss): tensors the graph rewrites on every replay; read them before the next call.
  PyObject* TrainOneBatch(const loom::Tensor& x, const loom::Tensor& y) {
    loom::nn::Model::StepResult r = $self->TrainOneBatch(x, y);
    PyObject* out = loom_py::WrapTensor(r.output);
    PyObject* loss = loom_py::WrapTensor(r.loss);
    if (!out || !loss) {
      Py_XDECREF(out);
      Py_XDECREF(loss);
      throw loom_py::PythonError();
    }
    PyObject* t = PyTuple_Pack(2, out, loss);
    Py_DECREF(out);
    Py_DECREF(loss);
    if (!t) throw loom_py::PythonError();
    return t;
  }
  std::string train_graph_key() { return $self->train_graph().key(); }
}

%inline %{
namespace loom_py {
// Backward from `loss` with each gradient handed to `opt` as soon as it is final (the memory-
// friendly order: a gradient dies right after its update). Optimizer state is keyed by the
// parameter's storage, so two parameters that share a name never share momentum.
void optimizer_step(loom::nn::Optimizer& opt, const loom::Tensor& loss) {
  loom::Backward(loss, [&](const loom::Tensor& p, const loom::Tensor& g) { opt.Apply(g, p, ""); });
}
}  // namespace loom_py
%}

namespace loom_py {
class PyStep {
 public:
  PyStep(std::shared_ptr<loom::Device> device, PyObject* fn, const std::string& name, bool recapture,
         bool sequential);
  ~PyStep();
  std::vector<loom::Tensor> run(const std::vector<loom::Tensor>& inputs);
  void set_sequential(bool s);
  size_t num_graphs() const;
  std::string last_graph_key();
};
}  // namespace loom_py
