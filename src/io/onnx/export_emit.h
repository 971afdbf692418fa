// The exporter's inside (src/io/onnx only): what one entry of the op table (export_ops.cc) is
// handed to turn one loom op into ONNX nodes. export.cc walks the graph and implements Emitter;
// export_ops.cc holds the table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/op.h"
#include "io/onnx/tensor_proto.h"

namespace loom {
namespace io {
namespace onnx {

// One loom op as the exporter sees it while it emits that op's nodes.
class Emitter {
 public:
  virtual ~Emitter() = default;
  virtual const OpRecord& op() const = 0;
  // The ONNX value holding input i as the op reads it (a view of another value gets its
  // Reshape / Transpose nodes here), and the name output i must be written under. An output
  // nothing reads still gets a name; an op may leave outputs nobody reads unwritten, and a
  // later read of one is an OnnxError.
  virtual std::string In(size_t i) = 0;
  virtual std::string Out(size_t i) = 0;
  // A fresh name for a value between the nodes of one op.
  virtual std::string Temp(const std::string& hint) = 0;
  // Appends a node of ONNX type `type` (default domain), named after the loom op.
  virtual onnx_pb::NodeProto* Node(const std::string& type, const std::vector<std::string>& inputs,
                                   const std::vector<std::string>& outputs) = 0;
  // Constant initializers: a scalar of `dtype`, and an int64 vector (shapes, axes).
  virtual std::string Scalar(double value, DType dtype) = 0;
  virtual std::string Int64s(const std::vector<int64_t>& values) = 0;
  // Whether dimension 0 of graph inputs is symbolic (OnnxExportOptions::dynamic_batch), and the
  // batch size the graph was captured with (dimension 0 of input 0).
  virtual bool dynamic_batch() const = 0;
  virtual int64_t batch() const = 0;
  // Throws the OnnxError "[onnx] op '<op>' (node '<node>' of graph '<graph>'): <why>".
  [[noreturn]] virtual void Fail(const std::string& why) const = 0;
};

// Attributes of a node.
void SetAttr(onnx_pb::NodeProto* n, const std::string& name, int64_t v);
void SetAttr(onnx_pb::NodeProto* n, const std::string& name, double v);
void SetAttr(onnx_pb::NodeProto* n, const std::string& name, const std::vector<int64_t>& v);
void SetAttr(onnx_pb::NodeProto* n, const std::string& name, const std::string& v);

// One row of the table: a loom op, what it becomes in ONNX (for messages and
// OnnxExportableOps), and the function that writes it. `onnx` is also the node type that the
// one-node emitters (EmitSame...) write.
struct OpMapping {
  const char* loom_op;
  const char* onnx;
  void (*emit)(Emitter& e, const OpMapping& m);
};

// The table (export_ops.cc), and the row for an op kind (null when the op has none).
const std::vector<OpMapping>& OpMappings();
const OpMapping* FindOpMapping(const OpDef& def);

}  // namespace onnx
}  // namespace io
}  // namespace loom
