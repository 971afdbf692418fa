// ONNX export of a network or a model (io/onnx/export.h exports a captured graph).
//   nn::ExportOnnx(*net, x, "net.onnx", options);  // captures net.Forward(x) in eval mode itself
#pragma once

#include <string>

#include "core/tensor.h"
#include "io/onnx/export.h"

namespace loom {
namespace nn {

class Layer;
class Model;

// A network in eval mode: net.Forward(example) captured (nothing runs) with gradients off, the
// net's training flag restored after; its parameters and states give the initializers' names
// (options.names, when given, come first). `example`: an input batch (its values are not used).
std::string ExportOnnxBytes(Layer& net, const Tensor& example, io::OnnxExportOptions options = {});
void ExportOnnx(Layer& net, const Tensor& example, const std::string& path, io::OnnxExportOptions options = {});
void ExportOnnx(Model& model, const Tensor& example, const std::string& path, io::OnnxExportOptions options = {});

}  // namespace nn
}  // namespace loom
