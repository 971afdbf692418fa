// The importer's own form of an ONNX graph and its op registry: an internal header of
// src/io/onnx (no generated types in it either). import.cc parses the file into ImportedGraph
// and checks it; the handlers in import_ops_*.cc run one node each with loom's ops.
//
// Note [ONNX handlers]
// A registry entry is one ONNX op_type: the opset range [since, until] its handler implements,
// the attribute names it understands, `infer`, run at import, which checks the attribute values
// and the input dtypes and returns the output dtypes (so that an unsupported case is an error
// before anything runs), and `run`, which computes the outputs with loom's ops. An attribute
// outside the entry's list is an error: a handler never silently ignores what it does not do.
// Inputs that ONNX passes as tensors but that loom needs as numbers (Reshape's shape, Slice's
// starts, Pad's pads...) are read with RunContext::Ints: initializers and Constant outputs are
// known on the host at import; anything computed is read from the device, which works in eager
// mode and raises loom's GraphError during a capture (docs/design.md invariant 4).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/onnx/import.h"

namespace loom {
namespace io {
namespace onnx {

struct Attr {
  enum Kind { kInt, kFloat, kString, kInts, kFloats, kTensor, kOther } kind = kOther;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  Tensor t;
  std::shared_ptr<const std::vector<int64_t>> t_ints;  // kTensor of an integer dtype: its values
  std::string type_name;                               // ONNX's AttributeType name, for messages
};

struct NodeSpec {
  std::string name, op_type;
  std::vector<std::string> inputs, outputs;  // "" marks an omitted optional input or output
  std::map<std::string, Attr> attrs;
  int64_t opset = 0;

  std::string Where() const;  // "[onnx] node 'name' (OpType)"
  bool Has(const std::string& key) const { return attrs.count(key) != 0; }
  bool HasInput(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
  int64_t Int(const std::string& key, int64_t dflt) const;
  double Float(const std::string& key, double dflt) const;
  std::string Str(const std::string& key, const std::string& dflt) const;
  std::vector<int64_t> Ints(const std::string& key, const std::vector<int64_t>& dflt) const;
  std::vector<double> Floats(const std::string& key, const std::vector<double>& dflt) const;
  const Attr& Get(const std::string& key) const;  // must exist
};

// One value flowing through the graph: its tensor, and its integer values when they are known on
// the host (initializers, Constant, Shape and what is computed from them on the host).
struct Value {
  Tensor t;
  std::shared_ptr<const std::vector<int64_t>> host;
};

class RunContext {
 public:
  RunContext(const NodeSpec& n, std::vector<Value> in, std::shared_ptr<Device> dev)
      : node(n), in_(std::move(in)), dev_(std::move(dev)) {}
  const NodeSpec& node;
  bool Has(size_t i) const { return node.HasInput(i) && i < in_.size() && in_[i].t.defined(); }
  const Tensor& T(size_t i) const;
  const Value& V(size_t i) const;  // an input the node does not have is the node's error
  size_t size() const { return in_.size(); }
  // An input's values as integers on the host (see Note [ONNX handlers]); floats are truncated.
  std::vector<int64_t> Ints(size_t i, const char* what) const;
  std::vector<double> Doubles(size_t i, const char* what) const;
  // The one value of an input that must hold exactly one (Range's start, OneHot's depth...): any
  // other count is the node's error, not an out-of-range read.
  int64_t Int(size_t i, const char* what) const;
  double Double(size_t i, const char* what) const;
  const std::shared_ptr<Device>& dev() const { return dev_; }
  // "[onnx] node 'n' (Op)": for errors raised while running.
  std::string Where() const { return node.Where(); }

 private:
  std::vector<Value> in_;
  std::shared_ptr<Device> dev_;
};

// What `infer` sees: the node and its inputs' dtypes (meaningless where !node.HasInput(i)).
struct InferArgs {
  const NodeSpec& node;
  std::vector<DType> in;
  std::vector<bool> constant;  // input i is an initializer or a Constant's output
  DType operator[](size_t i) const { return in.at(i); }
  size_t size() const { return in.size(); }
};

struct OpEntry {
  std::string op_type;
  int64_t since = 1, until = 17;
  int min_inputs = 1, max_inputs = 1;  // max -1: variadic
  int min_outputs = 1, max_outputs = 1;
  std::vector<std::string> attrs;  // the attribute names the handler understands
  std::vector<DType> (*infer)(const InferArgs&) = nullptr;
  std::vector<Value> (*run)(RunContext&) = nullptr;
};

// An entry with 1 output (set min/max_outputs after for more) and the default opset end.
OpEntry MakeOp(const char* op_type, int64_t since, int min_inputs, int max_inputs, std::vector<std::string> attrs,
               std::vector<DType> (*infer)(const InferArgs&), std::vector<Value> (*run)(RunContext&));

void AddMathOps(std::vector<OpEntry>* r);   // import_ops_math.cc
void AddNnOps(std::vector<OpEntry>* r);     // import_ops_nn.cc
void AddShapeOps(std::vector<OpEntry>* r);  // import_ops_shape.cc
void AddIndexOps(std::vector<OpEntry>* r);  // import_ops_index.cc
void AddLossOps(std::vector<OpEntry>* r);   // import_ops_loss.cc
const std::vector<OpEntry>& OpRegistry();   // import.cc: all of them, sorted by op_type

struct ImportedGraph {
  std::shared_ptr<Device> device;
  int64_t opset = 0, ir_version = 0;
  std::vector<OnnxValueInfo> inputs, outputs;
  std::vector<std::pair<std::string, Tensor>> initializers;
  std::map<std::string, Value> constants;  // initializer name -> value (with host ints)
  std::vector<NodeSpec> nodes;             // in topological (file) order
  std::vector<const OpEntry*> handlers;    // one per node
};

// ---- helpers the handlers share (import.cc) ----

// Note [Host-built index arrays]
// Handlers build index patterns on the host (iotas, one-hot depths, Range's values) sized by a
// dimension or by a value. A dimension of an empty tensor ((0, 2^40) holds nothing) or a value
// (OneHot's depth) can ask for more than memory holds, and the allocation then ends the process
// (std::bad_alloc, or a sanitizer's out-of-memory report). So every such size passes HostCount
// first: more than OnnxHostValueLimit() values (kMaxHostValues unless SetOnnxHostValueLimit
// lowered it, onnx/import.h) is the node's OnnxError. Values whose count depends on the data
// (NonZero's indices) are counted before they are built.
constexpr int64_t kMaxHostValues = int64_t(1) << 26;
size_t HostCount(const RunContext& c, int64_t n, const char* what);
[[noreturn]] void Fail(const NodeSpec& n, const std::string& what);  // throws OnnxError
[[noreturn]] void Fail(const RunContext& c, const std::string& what);
void CheckFloatInput(const InferArgs& a, size_t i);   // float32 or float64
void CheckSameDType(const InferArgs& a, size_t i, size_t j);
// Normalises an axis in [-rank, rank) (or [-rank-1, rank] with `extra`) for node errors.
int64_t Axis(const RunContext& c, int64_t axis, int64_t rank, const char* what);
Value V(const Tensor& t);
Value HostInts(const std::vector<int64_t>& values, const Shape& shape, DType dtype, const std::shared_ptr<Device>& dev);
std::vector<DType> Same0(const InferArgs& a);          // every output: in[0]'s dtype (no checks)
std::vector<DType> FloatUnary(const InferArgs& a);     // float in, same out
std::vector<DType> FloatAllSame(const InferArgs& a);   // every given input float, one dtype
// The elements of x at positions `idx` (int64, any shape I, each in [0, x.shape[axis])) along
// `axis`: shape x.shape[:axis] + I + x.shape[axis+1:] (import_ops_shape.cc, from Embedding).
Tensor Take(const Tensor& x, int64_t axis, const Tensor& idx);
Tensor TakeHost(const Tensor& x, int64_t axis, const std::vector<int64_t>& idx);  // 1-D positions
// x padded by `begin`/`end` elements per axis with `value` (import_ops_shape.cc); negative: cropped.
Tensor PadConstant(const Tensor& x, const std::vector<int64_t>& begin, const std::vector<int64_t>& end, double value);

}  // namespace onnx
}  // namespace io
}  // namespace loom
