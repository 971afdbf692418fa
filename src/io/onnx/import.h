// Importing an ONNX model into loom: the file's initializers become loom tensors (float ones
// trainable leaves) and its nodes run as loom ops, so an imported model works in eager mode and
// inside a graph capture alike (it is just ops) and can be fine-tuned.
//
// Everything that can be checked without running is checked at import, before anything runs:
// the file parses, every node's op_type is in the registry for the model's opset, its attributes
// are ones the handler knows with values it supports, its inputs exist and their dtypes (inferred
// through the graph from the declared inputs and the initializers) are ones loom's ops take.
// Every failure is an OnnxError naming the node: "[onnx] node 'conv1' (Conv): ...".
// A public header: no generated ONNX types in it (the schema stays inside src/io/onnx/*.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace loom {
class Device;
namespace io {

namespace onnx {
struct ImportedGraph;  // src/io/onnx/import_graph.h
}

// A graph input or output: its name, dtype and shape (-1 for a dimension the file leaves
// symbolic or unset; an empty shape with has_shape false when the file gives none).
struct OnnxValueInfo {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  bool has_shape = false;
};

class OnnxModel {
 public:
  OnnxModel() = default;
  // The graph inputs that are not initializers, in file order (what Forward takes).
  const std::vector<OnnxValueInfo>& inputs() const;
  const std::vector<OnnxValueInfo>& outputs() const;
  // Initializers in file order. Float ones are leaves with requires_grad set, except those used
  // only as BatchNormalization's running statistics (they are state, not parameters).
  const std::vector<std::pair<std::string, Tensor>>& initializers() const;
  // The initializers that train (requires_grad), in file order.
  std::vector<std::pair<std::string, Tensor>> parameters() const;
  int64_t opset() const;      // the default domain's opset the model imports
  int64_t ir_version() const;
  size_t num_nodes() const;
  std::vector<std::string> node_op_types() const;  // in graph order

  // Runs the graph: `inputs` in the order of inputs() (the trailing ones may be left out when the
  // graph does not use them), outputs in the order of outputs(). An input of another dtype than
  // declared is an OnnxError; declared shapes are not enforced, the ops check shapes (naming the node).
  // BatchNormalization uses its running statistics and Dropout is the identity: an ONNX file
  // describes inference, and fine-tuning keeps those semantics.
  std::vector<Tensor> Forward(const std::vector<Tensor>& inputs) const;

 private:
  friend OnnxModel ImportOnnxFromBytes(const std::string&, const std::shared_ptr<Device>&);
  std::shared_ptr<const onnx::ImportedGraph> graph_;
};

// Parses and checks a serialized ModelProto (file contents) or a file; initializers go to `device`.
OnnxModel ImportOnnxFromBytes(const std::string& bytes, const std::shared_ptr<Device>& device);
OnnxModel ImportOnnx(const std::string& path, const std::shared_ptr<Device>& device);

// Why a model cannot be imported ("" when it can): the OnnxError's message, for callers that
// want a yes/no (ONNX's backend test runner asks `is_compatible`). Other errors propagate.
std::string OnnxImportProblem(const std::string& bytes, const std::shared_ptr<Device>& device);

// Note [Host-built index arrays] (onnx/import_graph.h): the most values one node builds on the host
// (default 2^26, 512 MB of int64). A lower limit suits a server importing models it does not
// trust, or a fuzzer; n >= 1. Process-wide; a Forward reads it as it runs.
void SetOnnxHostValueLimit(int64_t n);
int64_t OnnxHostValueLimit();

// The registry's ops, generated from it (never a hand-typed list): op_type and the opset range
// [since, until] its handler implements, sorted by op_type.
struct OnnxOpSupport {
  std::string op_type;
  int64_t since = 1;
  int64_t until = 17;
};
std::vector<OnnxOpSupport> SupportedOnnxOpRanges();
std::vector<std::string> SupportedOnnxOps();

}  // namespace io
}  // namespace loom
