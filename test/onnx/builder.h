// ONNX models written in tests with the generated classes: a ModelProto builder and attribute
// setters, shared by test/onnx's suites.
#pragma once

#include <string>
#include <vector>

#include "common/harness.h"
#include "io/onnx/import.h"
#include "io/onnx/tensor_proto.h"

namespace loom {
namespace onnx_test {

using onnx_pb::AttributeProto;
using onnx_pb::ModelProto;
using onnx_pb::NodeProto;
using onnx_pb::TensorProto;

struct Builder {
  ModelProto m;
  explicit Builder(int64_t opset = 13) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m.mutable_graph()->set_name("g");
  }
  NodeProto* Node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                  const std::string& name) {
    NodeProto* n = m.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& s : in) n->add_input(s);
    for (auto& s : out) n->add_output(s);
    return n;
  }
  void Value(onnx_pb::ValueInfoProto* v, const std::string& name, int32_t elem, const std::vector<int64_t>& dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void Input(const std::string& name, const std::vector<int64_t>& dims, int32_t elem = TensorProto::FLOAT) {
    Value(m.mutable_graph()->add_input(), name, elem, dims);
  }
  void Output(const std::string& name, int32_t elem = TensorProto::FLOAT) {
    Value(m.mutable_graph()->add_output(), name, elem, {});
  }
  void Init(const std::string& name, const Tensor& t) { io::onnx::TensorToProto(t, name, m.mutable_graph()->add_initializer()); }
  std::string Bytes() const { return m.SerializeAsString(); }
  io::OnnxModel Import() const { return io::ImportOnnxFromBytes(Bytes(), test::Cpu()); }
};

inline void SetInts(NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
inline void SetInt(NodeProto* n, const std::string& name, int64_t v) {
  AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(AttributeProto::INT);
  a->set_i(v);
}
inline void SetFloat(NodeProto* n, const std::string& name, float v) {
  AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(AttributeProto::FLOAT);
  a->set_f(v);
}

}  // namespace onnx_test
}  // namespace loom
