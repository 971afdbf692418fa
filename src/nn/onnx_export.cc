// ONNX export of a network or a model (onnx_export.h).
#include "nn/onnx_export.h"

#include <memory>

#include "graph/graph.h"
#include "nn/layer.h"
#include "nn/model.h"

namespace loom {
namespace nn {
namespace {

// net.Forward(example) captured in eval mode without gradients; the training flag restored.
std::unique_ptr<Graph> CaptureEval(Layer& net, const Tensor& example, const std::string& name, Tensor* out) {
  LOOM_CHECK(example.defined(), OnnxError, "[onnx] export needs an example input");
  const bool was_training = net.training();
  net.Train(false);
  std::unique_ptr<Graph> g;
  try {
    NoGradGuard no_grad;
    g = Graph::Capture(example.device_ptr(), name + ".onnx_export", [&] { *out = net.Forward(example); });
  } catch (...) {
    net.Train(was_training);
    throw;
  }
  net.Train(was_training);
  return g;
}

io::OnnxExportOptions WithNetNames(const Layer& net, io::OnnxExportOptions options) {
  for (auto& p : net.Params()) options.names.push_back(p);
  for (auto& s : net.States()) options.names.push_back(s);
  return options;
}

}  // namespace

std::string ExportOnnxBytes(Layer& net, const Tensor& example, io::OnnxExportOptions options) {
  Tensor y;
  std::unique_ptr<Graph> g = CaptureEval(net, example, options.model_name, &y);
  return io::ExportOnnxBytes(*g, {example}, {y}, WithNetNames(net, std::move(options)));
}

void ExportOnnx(Layer& net, const Tensor& example, const std::string& path, io::OnnxExportOptions options) {
  Tensor y;
  std::unique_ptr<Graph> g = CaptureEval(net, example, options.model_name, &y);
  io::ExportOnnx(*g, {example}, {y}, path, WithNetNames(net, std::move(options)));
}

void ExportOnnx(Model& model, const Tensor& example, const std::string& path, io::OnnxExportOptions options) {
  ExportOnnx(model.net(), example, path, std::move(options));
}

}  // namespace nn
}  // namespace loom
