// ONNX import (src/io/onnx/import.h): models written here with the generated classes import and
// run as loom ops (bitwise equal to the same ops called directly), also inside a graph capture;
// every error path is an OnnxError naming the node (or the initializer, input or file) and is
// raised at import, before anything runs.
#include "io/onnx/import.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "common/harness.h"
#include "core/ops.h"
#include "core/autograd.h"
#include "core/ops_cnn.h"
#include "graph/graph.h"
#include "io/onnx/tensor_proto.h"
#include "onnx/builder.h"

namespace loom {
namespace {

using io::ImportOnnxFromBytes;
using io::OnnxModel;
using onnx_pb::AttributeProto;
using onnx_pb::ModelProto;
using onnx_pb::NodeProto;
using onnx_pb::TensorProto;
using test::Cpu;
using onnx_test::Builder;
using onnx_test::SetFloat;
using onnx_test::SetInt;
using onnx_test::SetInts;

std::vector<float> Values(const Tensor& t) { return t.Contiguous().ToVector<float>(); }

// x (2, 3, 8, 8) -> Conv(4, 3x3, pad 1) -> BatchNormalization -> Relu -> MaxPool 2 -> Flatten
// -> Gemm(transB) -> (2, 10)
struct ConvNet {
  Tensor w = test::RandomTensor({4, 3, 3, 3}, DType::kFloat32, 1), b = test::RandomTensor({4}, DType::kFloat32, 2);
  Tensor gamma = test::RandomTensor({4}, DType::kFloat32, 3, 0.5, 1.5), beta = test::RandomTensor({4}, DType::kFloat32, 4);
  Tensor mean = test::RandomTensor({4}, DType::kFloat32, 5), var = test::RandomTensor({4}, DType::kFloat32, 6, 0.5, 2);
  Tensor fw = test::RandomTensor({10, 64}, DType::kFloat32, 7), fb = test::RandomTensor({10}, DType::kFloat32, 8);

  Builder Model() const {
    Builder b0;
    b0.Input("x", {2, 3, 8, 8});
    for (auto& kv : std::vector<std::pair<std::string, Tensor>>{
             {"w", w}, {"b", b}, {"gamma", gamma}, {"beta", beta}, {"mean", mean}, {"var", var}, {"fw", fw}, {"fb", fb}})
      b0.Init(kv.first, kv.second);
    NodeProto* conv = b0.Node("Conv", {"x", "w", "b"}, {"c"}, "conv1");
    SetInts(conv, "pads", {1, 1, 1, 1});
    SetInts(conv, "kernel_shape", {3, 3});
    SetFloat(b0.Node("BatchNormalization", {"c", "gamma", "beta", "mean", "var"}, {"n"}, "bn1"), "epsilon", 1e-3f);
    b0.Node("Relu", {"n"}, {"r"}, "relu1");
    NodeProto* pool = b0.Node("MaxPool", {"r"}, {"p"}, "pool1");
    SetInts(pool, "kernel_shape", {2, 2});
    SetInts(pool, "strides", {2, 2});
    b0.Node("Flatten", {"p"}, {"f"}, "flat");
    SetInt(b0.Node("Gemm", {"f", "fw", "fb"}, {"y"}, "fc"), "transB", 1);
    b0.Output("y");
    return b0;
  }
  Tensor Reference(const Tensor& x) const {
    ops::Conv2dOptions o;
    o.padding = {1, 1};
    Tensor h = ops::Conv2d(x, w, b, o);
    h = ops::Relu(ops::BatchNorm(h, gamma, beta, mean, var, false, 0.1, double(1e-3f)));
    ops::Pool2dOptions po;
    po.kernel = {2, 2};
    po.stride = {2, 2};
    h = ops::Reshape(ops::MaxPool2d(h, po), {2, 64});
    return ops::AddBias(ops::MatMul(h, ops::Transpose(fw)), fb);
  }
};

TEST(OnnxImport, ConvNetRunsAsLoomOpsBitwise) {
  ConvNet net;
  OnnxModel m = net.Model().Import();
  EXPECT_EQ(m.opset(), 13);
  EXPECT_EQ(m.num_nodes(), 6u);
  ASSERT_EQ(m.inputs().size(), 1u);
  EXPECT_EQ(m.inputs()[0].name, "x");
  EXPECT_EQ(m.inputs()[0].shape, (std::vector<int64_t>{2, 3, 8, 8}));
  Tensor x = test::RandomTensor({2, 3, 8, 8}, DType::kFloat32, 9);
  std::vector<Tensor> y = m.Forward({x});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].shape(), (Shape{2, 10}));
  EXPECT_EQ(Values(y[0]), Values(net.Reference(x)));
}

TEST(OnnxImport, FloatInitializersTrainButRunningStatisticsDoNot) {
  OnnxModel m = ConvNet().Model().Import();
  std::vector<std::string> names;
  for (const auto& kv : m.parameters()) {
    names.push_back(kv.first);
    EXPECT_TRUE(kv.second.requires_grad()) << kv.first;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"w", "b", "gamma", "beta", "fw", "fb"}));
  EXPECT_EQ(m.initializers().size(), 8u);
  // A backward pass reaches the imported weights.
  Tensor loss = ops::Sum(m.Forward({test::RandomTensor({2, 3, 8, 8}, DType::kFloat32, 9)})[0]);
  std::vector<std::pair<Tensor, Tensor>> grads = Backward(loss);
  EXPECT_EQ(grads.size(), 6u);
  for (const auto& pg : grads) {
    EXPECT_TRUE(pg.first.requires_grad());
    EXPECT_EQ(pg.first.shape(), pg.second.shape());
  }
}

TEST(OnnxImport, RunsInsideAGraphCaptureAndReplaysWithNewInputs) {
  ConvNet net;
  OnnxModel m = net.Model().Import();
  Tensor x = test::RandomTensor({2, 3, 8, 8}, DType::kFloat32, 10);
  Graph g(Cpu(), "onnx");
  Tensor y;
  {
    NoGradGuard no_grad;
    g.BeginCapture();
    y = m.Forward({x})[0];
    g.EndCapture();
  }
  for (uint32_t seed : {11u, 12u}) {
    Tensor fresh = test::RandomTensor({2, 3, 8, 8}, DType::kFloat32, seed);
    ops::CopyInto(x, fresh);
    g.Run();
    EXPECT_EQ(Values(y), Values(net.Reference(fresh))) << seed;
  }
}

// A shape computed in the graph (PyTorch's x.view(x.size(0), -1)): Shape -> Gather -> Unsqueeze
// -> Concat -> Reshape stays on the host, so it runs inside a capture too.
TEST(OnnxImport, ShapeChainsAreKnownOnTheHost) {
  Builder b;
  b.Input("x", {2, 3, 4});
  b.Init("zero", ops::FromVector<int64_t>({0}, {}, Cpu()));
  b.Init("minus1", ops::FromVector<int64_t>({-1}, {1}, Cpu()));
  b.Node("Shape", {"x"}, {"s"}, "shape");
  b.Node("Gather", {"s", "zero"}, {"n"}, "gather");
  b.Init("axes0", ops::FromVector<int64_t>({0}, {1}, Cpu()));
  b.Node("Unsqueeze", {"n", "axes0"}, {"n1"}, "unsqueeze");
  b.Node("Concat", {"n1", "minus1"}, {"shape2"}, "concat");
  b.m.mutable_graph()->mutable_node(3)->add_attribute()->CopyFrom([] {
    AttributeProto a;
    a.set_name("axis");
    a.set_type(AttributeProto::INT);
    a.set_i(0);
    return a;
  }());
  b.Node("Reshape", {"x", "shape2"}, {"y"}, "reshape");
  b.Output("y");
  OnnxModel m = b.Import();
  Tensor x = test::RandomTensor({2, 3, 4}, DType::kFloat32, 3);
  Graph g(Cpu(), "shape");
  g.BeginCapture();
  Tensor y = m.Forward({x})[0];
  g.EndCapture();
  g.Run();
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_EQ(Values(y), Values(x));
}

// Each mutation of a valid model, and the error it must raise at import.
struct Broken {
  const char* what;
  std::function<void(Builder&)> mutate;
  const char* message;
};

Builder AddModel(int64_t opset = 13) {
  Builder b(opset);
  b.Input("a", {2, 3});
  b.Input("b", {2, 3});
  b.Node("Add", {"a", "b"}, {"s"}, "add1");
  b.Node("Relu", {"s"}, {"y"}, "relu1");
  b.Output("y");
  return b;
}

TEST(OnnxImport, EveryErrorIsAnOnnxErrorNamingTheNode) {
  const std::vector<Broken> cases = {
      {"unknown op", [](Builder& b) { b.m.mutable_graph()->mutable_node(1)->set_op_type("Frobnicate"); },
       "[onnx] node 'relu1' (Frobnicate): op Frobnicate is not supported by loom's importer"},
      {"opset too old", [](Builder& b) { b.m.mutable_opset_import(0)->set_version(5); },
       "[onnx] node 'add1' (Add): Add at opset 5 is not supported (loom implements it for opsets 7 to 17)"},
      {"unsupported attribute", [](Builder& b) { SetInt(b.m.mutable_graph()->mutable_node(1), "bogus", 1); },
       "[onnx] node 'relu1' (Relu): attribute 'bogus' is not supported"},
      {"attribute of the wrong type",
       [](Builder& b) {
         NodeProto* n = b.m.mutable_graph()->mutable_node(1);
         n->set_op_type("LeakyRelu");
         SetInt(n, "alpha", 2);
       },
       "[onnx] node 'relu1' (LeakyRelu): attribute 'alpha' must be FLOAT, got INT"},
      {"unsupported dtype",
       [](Builder& b) {
         b.m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::INT8);
       },
       "[onnx] graph input 'a': ONNX type INT8 (3) has no loom dtype"},
      {"dtype an op does not take",
       [](Builder& b) {
         for (int i = 0; i < 2; ++i)
           b.m.mutable_graph()->mutable_input(i)->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::INT64);
       },
       "[onnx] node 'relu1' (Relu): input 0 's' is int64; loom runs this op on float32 and float64 only"},
      {"mixed dtypes",
       [](Builder& b) {
         b.m.mutable_graph()->mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::DOUBLE);
       },
       "[onnx] node 'add1' (Add): inputs 0 and 1 have different dtypes (float32, float64)"},
      {"undefined input", [](Builder& b) { b.m.mutable_graph()->mutable_node(1)->set_input(0, "nope"); },
       "[onnx] node 'relu1' (Relu): input 0 'nope' is not defined before the node"},
      {"nodes out of order", [](Builder& b) { b.m.mutable_graph()->mutable_node()->SwapElements(0, 1); },
       "[onnx] node 'relu1' (Relu): input 0 's' is not defined before the node"},
      {"output defined twice", [](Builder& b) { b.m.mutable_graph()->mutable_node(1)->set_output(0, "s"); },
       "[onnx] node 'relu1' (Relu): output 's' is defined twice"},
      {"wrong input count", [](Builder& b) { b.m.mutable_graph()->mutable_node(0)->mutable_input()->RemoveLast(); },
       "[onnx] node 'add1' (Add): 1 inputs, expected 2 to 2"},
      {"missing graph output", [](Builder& b) { b.m.mutable_graph()->mutable_output(0)->set_name("z"); },
       "[onnx] graph output 'z' is not computed by the graph"},
      {"foreign domain", [](Builder& b) { b.m.mutable_graph()->mutable_node(0)->set_domain("com.example"); },
       "[onnx] node 'add1' (Add): domain 'com.example' is not one loom implements"},
      {"no graph", [](Builder& b) { b.m.clear_graph(); }, "[onnx] the model has no graph"},
      {"no opset", [](Builder& b) { b.m.clear_opset_import(); }, "[onnx] the model imports no version of the default operator set"},
      {"initializer of the wrong size",
       [](Builder& b) {
         b.Init("w", ops::Zeros({2, 3}, DType::kFloat32, Cpu()));
         b.m.mutable_graph()->mutable_initializer(0)->add_dims(5);
       },
       "[onnx] initializer 'w'"},
      {"bad Constant tensor",
       [](Builder& b) {
         NodeProto* n = b.Node("Constant", {}, {"k"}, "const1");
         AttributeProto* a = n->add_attribute();
         a->set_name("value");
         a->set_type(AttributeProto::TENSOR);
         a->mutable_t()->set_data_type(TensorProto::FLOAT);
         a->mutable_t()->add_dims(4);
         a->mutable_t()->add_float_data(1.f);
       },
       "[onnx] node 'const1' (Constant) attribute 'value'"},
      {"unsupported attribute value",
       [](Builder& b) {
         NodeProto* n = b.Node("Pad", {"y", "pads"}, {"q"}, "pad1");
         AttributeProto* a = n->add_attribute();
         a->set_name("mode");
         a->set_type(AttributeProto::STRING);
         a->set_s("wrap");
         b.Init("pads", ops::FromVector<int64_t>({0, 0, 0, 0}, {4}, Cpu()));
       },
       "[onnx] node 'pad1' (Pad): mode 'wrap' is not one of constant, reflect, edge"},
  };
  for (const Broken& c : cases) {
    Builder b = AddModel();
    c.mutate(b);
    try {
      b.Import();
      ADD_FAILURE() << c.what << ": imported";
    } catch (const OnnxError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << c.what << ": " << e.what();
    }
  }
  AddModel().Import();  // the unbroken model imports
}

TEST(OnnxImport, CorruptBytesAndRunTimeErrorsNameWhereTheyHappen) {
  const std::string good = AddModel().Bytes();
  EXPECT_THROW(ImportOnnxFromBytes(good.substr(0, good.size() / 2) + "\xff\xff", Cpu()), OnnxError);
  EXPECT_THROW(ImportOnnxFromBytes("not an onnx file at all", Cpu()), OnnxError);
  EXPECT_EQ(io::OnnxImportProblem(good, Cpu()), "");
  EXPECT_NE(io::OnnxImportProblem("\x0a\xff", Cpu()), "");
  OnnxModel m = AddModel().Import();
  // Shapes are the ops' to check: the error keeps its kind and names the node.
  try {
    m.Forward({ops::Zeros({2, 3}, DType::kFloat32, Cpu()), ops::Zeros({4, 5}, DType::kFloat32, Cpu())});
    ADD_FAILURE() << "ran";
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[onnx] node 'add1' (Add): ", 0), 0u) << e.what();
  }
  EXPECT_THROW(m.Forward({ops::Zeros({2, 3}, DType::kFloat64, Cpu())}), OnnxError);  // declared float32
  EXPECT_THROW(m.Forward({ops::Zeros({2, 3}, DType::kFloat32, Cpu())}), OnnxError);  // 'b' missing
  EXPECT_THROW(OnnxModel().Forward({}), OnnxError);
}

TEST(OnnxImport, SupportedOpsComeFromTheRegistry) {
  std::vector<std::string> ops = io::SupportedOnnxOps();
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  EXPECT_EQ(std::adjacent_find(ops.begin(), ops.end()), ops.end());
  EXPECT_GE(ops.size(), 75u);
  for (const char* op : {"Conv", "Gemm", "MatMul", "BatchNormalization", "MaxPool", "Softmax", "Reshape", "Gather",
                         "Slice", "Concat", "Where", "ReduceMean", "ArgMax", "Erf", "Pad", "Expand", "Tile"})
    EXPECT_TRUE(std::binary_search(ops.begin(), ops.end(), op)) << op;
  for (const auto& r : io::SupportedOnnxOpRanges()) {
    EXPECT_LE(r.since, r.until) << r.op_type;
    EXPECT_TRUE(std::binary_search(ops.begin(), ops.end(), r.op_type));
  }
}

}  // namespace
}  // namespace loom
