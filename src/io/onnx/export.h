// ONNX export: a captured inference graph written as an ONNX model
// (IR version 8, default-domain opset 17) that onnxruntime and ONNX's checker accept.
//
//   auto g = Graph::Capture(dev, "export", [&] { y = net->Forward(x); });
//   io::ExportOnnx(*g, {x}, {y}, "net.onnx");  // a network in eval mode: nn/onnx_export.h
//
// What is written (Note [What an exported graph holds] in export.cc):
//   graph inputs   the given input tensors, named by OnnxExportOptions::input_names (else the
//                  tensor's own name, else "input_<i>"), with their dtypes and shapes;
//   initializers   every other tensor the graph reads but does not write (parameters, BatchNorm
//                  statistics, constants), values as they are now, named by `names` (a net's
//                  parameter paths: "layer1.0.conv1.weight"), else "const_<n>";
//   nodes          one or a few ONNX nodes per loom op the outputs depend on, from the table in
//                  export_ops.cc (fused ops such as dense_bias_act and conv2d_relu unfold);
//                  views (reshape, transpose, permute) become Reshape / Transpose nodes;
//   graph outputs  the given output tensors, named like the inputs ("output_<j>").
// Ops the outputs do not depend on are left out. An op without an ONNX counterpart (a gradient,
// an optimizer update, a random op such as training-mode dropout), or one whose attributes ONNX
// cannot express, is an OnnxError naming the op and its node, raised before any file is
// written; files are written atomically (core/file.h). This header includes no generated code.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace loom {
class Graph;
namespace io {

struct OnnxExportOptions {
  std::string model_name = "loom";      // the ONNX graph's name
  // Dimension 0 of every graph input and output becomes the symbolic "batch", and reshapes keep
  // the batch dimension symbolic; an op that bakes the batch size into an attribute (a fill or a
  // broadcast to a shape that starts with it), and a view that mixes the batch with other
  // dimensions or moves it, are then OnnxErrors (Note [A symbolic batch is the leading dimension]).
  bool dynamic_batch = false;
  std::vector<std::string> input_names;   // one per input, or empty
  std::vector<std::string> output_names;  // one per output, or empty
  // Names of the tensors that become initializers (parameters and states), matched by storage.
  std::vector<std::pair<std::string, Tensor>> names;
  std::string doc;                        // the model's doc_string
};

// The ONNX model (a serialized ModelProto) computing `outputs` from `inputs` with the ops of
// `graph`, a finalised capture that wrote every output.
std::string ExportOnnxBytes(const Graph& graph, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                            const OnnxExportOptions& options = {});
// The same, written atomically to `path`.
void ExportOnnx(const Graph& graph, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                const std::string& path, const OnnxExportOptions& options = {});

// The loom ops the exporter maps, with what each becomes: {"conv2d_relu", "Conv + Relu"}, ...
std::vector<std::pair<std::string, std::string>> OnnxExportableOps();

}  // namespace io
}  // namespace loom
