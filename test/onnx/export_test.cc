// ONNX export (src/io/onnx/export.h): exported models re-read as ONNX messages and checked node
// by node; refusals raised before any file exists; atomic writes. The numbers (onnxruntime
// against loom on MLP, CNN, ResNet-18/50) are checked in test/python/test_onnx_export.py.
#include "io/onnx/export.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/graph_capture.h"
#include "common/harness.h"
#include "core/ops.h"
#include "core/ops_cnn.h"
#include "io/onnx/tensor_proto.h"
#include "nn/model.h"
#include "nn/onnx_export.h"
#include "nn/models.h"
#include "nn/optimizer.h"

namespace loom {
namespace {

using onnx_pb::ModelProto;
using onnx_pb::NodeProto;
using test::CapturedGraph;
using test::Cpu;
using test::RandomTensor;

ModelProto Parse(const std::string& bytes) {
  ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  return m;
}

std::vector<std::string> NodeTypes(const ModelProto& m) {
  std::vector<std::string> types;
  for (const NodeProto& n : m.graph().node()) types.push_back(n.op_type());
  return types;
}

const NodeProto* FindNode(const ModelProto& m, const std::string& type, int nth = 0) {
  for (const NodeProto& n : m.graph().node())
    if (n.op_type() == type && nth-- == 0) return &n;
  return nullptr;
}

std::vector<int64_t> Ints(const NodeProto& n, const std::string& attr) {
  for (const auto& a : n.attribute())
    if (a.name() == attr) return std::vector<int64_t>(a.ints().begin(), a.ints().end());
  ADD_FAILURE() << n.op_type() << " has no attribute " << attr;
  return {};
}

double Attr(const NodeProto& n, const std::string& attr) {
  for (const auto& a : n.attribute())
    if (a.name() == attr) return a.type() == onnx_pb::AttributeProto::FLOAT ? double(a.f()) : double(a.i());
  ADD_FAILURE() << n.op_type() << " has no attribute " << attr;
  return 0;
}

std::map<std::string, const onnx_pb::TensorProto*> Initializers(const ModelProto& m) {
  std::map<std::string, const onnx_pb::TensorProto*> out;
  for (const auto& t : m.graph().initializer()) out[t.name()] = &t;
  return out;
}

// The values of an int64 initializer (Reshape's shape, Slice's starts).
std::vector<int64_t> Int64Init(const ModelProto& m, const std::string& name) {
  auto inits = Initializers(m);
  EXPECT_TRUE(inits.count(name)) << name;
  if (!inits.count(name)) return {};
  return io::onnx::TensorFromProto(*inits[name], Cpu(), "test").ToVector<int64_t>();
}

std::vector<int64_t> Dims(const onnx_pb::ValueInfoProto& v) {
  std::vector<int64_t> d;
  for (const auto& dim : v.type().tensor_type().shape().dim()) d.push_back(dim.has_dim_param() ? -1 : dim.dim_value());
  return d;
}

TEST(OnnxExport, MlpIsMatMulsAndReluWithNamedInitializers) {
  auto net = nn::MakeMlp({6, 5, 3});
  Tensor x = RandomTensor({4, 6}, DType::kFloat32, 1);
  io::OnnxExportOptions opt;
  opt.model_name = "mlp";
  ModelProto m = Parse(nn::ExportOnnxBytes(*net, x, opt));
  EXPECT_EQ(m.ir_version(), 8);
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).domain(), "");
  EXPECT_EQ(m.opset_import(0).version(), 17);
  EXPECT_EQ(m.graph().name(), "mlp");
  // The capture fuses matmul + add_bias (+ relu) into dense_bias_act, unfolded again here.
  EXPECT_EQ(NodeTypes(m), (std::vector<std::string>{"Gemm", "Relu", "Gemm"}));
  ASSERT_EQ(m.graph().input_size(), 1);
  EXPECT_EQ(m.graph().input(0).name(), "input_0");
  EXPECT_EQ(Dims(m.graph().input(0)), (std::vector<int64_t>{4, 6}));
  ASSERT_EQ(m.graph().output_size(), 1);
  EXPECT_EQ(Dims(m.graph().output(0)), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(m.graph().node(2).output(0), "output_0");
  EXPECT_EQ(m.graph().node(0).input(0), "input_0");
  // Parameters keep their names, shapes and values, bit for bit.
  auto inits = Initializers(m);
  for (const auto& [name, p] : net->Params()) {
    ASSERT_TRUE(inits.count(name)) << name;
    Tensor back = io::onnx::TensorFromProto(*inits[name], Cpu(), "test");
    EXPECT_EQ(back.shape(), p.shape()) << name;
    EXPECT_EQ(back.ToVector<float>(), p.ToVector<float>()) << name;
  }
  EXPECT_EQ(m.graph().node(0).input(1), net->Params()[0].first);
}

TEST(OnnxExport, UnfusedMatMulTransposesStoredTransposedOperandsAndAddsBias) {
  Tensor x = RandomTensor({2, 3}, DType::kFloat32, 2), w = RandomTensor({4, 3}, DType::kFloat32, 3);
  Tensor b = RandomTensor({4}, DType::kFloat32, 4);
  GraphOptions no_fuse;
  no_fuse.run_passes = false;
  CapturedGraph g(Cpu(), "t", no_fuse);
  Tensor y = g.Capture([&] { return ops::Sigmoid(ops::AddBias(ops::MatMul(x, ops::Transpose(w, 0, 1)), b)); });
  io::OnnxExportOptions opt;
  opt.names = {{"w", w}, {"b", b}};
  ModelProto m = Parse(io::ExportOnnxBytes(g.graph(), {x}, {y}, opt));
  // The transposed weight is a view of w: the copy the matmul's contiguous input needs becomes
  // Transpose(w) + Identity.
  EXPECT_EQ(NodeTypes(m), (std::vector<std::string>{"Transpose", "Identity", "MatMul", "Add", "Sigmoid"}));
  EXPECT_EQ(Ints(*FindNode(m, "Transpose"), "perm"), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(FindNode(m, "Transpose")->input(0), "w");
  EXPECT_EQ(FindNode(m, "Add")->input(1), "b");
}

TEST(OnnxExport, ConvolutionAttributesBatchNormAndPooling) {
  Tensor x = RandomTensor({2, 4, 9, 9}, DType::kFloat32, 5);
  Tensor w = RandomTensor({6, 2, 3, 3}, DType::kFloat32, 6), bias = RandomTensor({6}, DType::kFloat32, 7);
  Tensor gamma = RandomTensor({6}, DType::kFloat32, 8), beta = RandomTensor({6}, DType::kFloat32, 9);
  Tensor mean = RandomTensor({6}, DType::kFloat32, 10), var = RandomTensor({6}, DType::kFloat32, 11, 0.5, 2);
  GraphOptions no_fuse;
  no_fuse.run_passes = false;
  CapturedGraph g(Cpu(), "cnn", no_fuse);
  Tensor y = g.Capture([&] {
    ops::Conv2dOptions c;
    c.stride = {2, 1};
    c.padding = {1, 2};
    c.dilation = {1, 2};
    c.groups = 2;
    Tensor h = ops::Conv2d(x, w, bias, c);
    h = ops::BatchNorm(h, gamma, beta, mean, var, /*training=*/false, 0.1, 1e-3);
    h = ops::Relu(h);
    ops::Pool2dOptions p;
    p.kernel = {2, 2};
    Tensor a = ops::AvgPool2d(ops::MaxPool2d(h, p), p);
    return ops::Flatten(a, 1);
  });
  ModelProto m = Parse(io::ExportOnnxBytes(g.graph(), {x}, {y}));
  EXPECT_EQ(NodeTypes(m), (std::vector<std::string>{"Conv", "BatchNormalization", "Relu", "MaxPool", "AveragePool",
                                                    "Reshape"}));
  const NodeProto& conv = *FindNode(m, "Conv");
  EXPECT_EQ(conv.input_size(), 3);
  EXPECT_EQ(Ints(conv, "strides"), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(Ints(conv, "pads"), (std::vector<int64_t>{1, 2, 1, 2}));
  EXPECT_EQ(Ints(conv, "dilations"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Ints(conv, "kernel_shape"), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(Attr(conv, "group"), 2);
  EXPECT_NEAR(Attr(*FindNode(m, "BatchNormalization"), "epsilon"), 1e-3, 1e-9);
  EXPECT_EQ(Ints(*FindNode(m, "MaxPool"), "kernel_shape"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Ints(*FindNode(m, "AveragePool"), "strides"), (std::vector<int64_t>{2, 2}));
  // Flatten is a view: a Reshape to the output's shape. Conv (2, 6, 5, 9), pooled twice by 2:
  // (2, 6, 1, 2), flattened (2, 12).
  EXPECT_EQ(Int64Init(m, FindNode(m, "Reshape")->input(1)), (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(Dims(m.graph().output(0)), (std::vector<int64_t>{2, 12}));
  // Intermediate values keep their shapes.
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& v : m.graph().value_info()) shapes[v.name()] = Dims(v);
  EXPECT_EQ(shapes[conv.output(0)], (std::vector<int64_t>{2, 6, 5, 9}));
}

TEST(OnnxExport, FusedConvReluUnfolds) {
  Tensor x = RandomTensor({1, 3, 6, 6}, DType::kFloat32, 12), w = RandomTensor({4, 3, 3, 3}, DType::kFloat32, 13);
  CapturedGraph g(Cpu(), "fused");  // the passes make conv2d_relu
  Tensor y = g.Capture([&] { return ops::Relu(ops::Conv2d(x, w)); });
  ASSERT_EQ(g.graph().ops().ops.size(), 1u);
  ASSERT_EQ(g.graph().ops().ops[0].name(), "conv2d_relu");
  ModelProto m = Parse(io::ExportOnnxBytes(g.graph(), {x}, {y}));
  EXPECT_EQ(NodeTypes(m), (std::vector<std::string>{"Conv", "Relu"}));
  EXPECT_EQ(FindNode(m, "Conv")->input_size(), 2);
  EXPECT_EQ(FindNode(m, "Relu")->output(0), "output_0");
}

TEST(OnnxExport, PermutedViewsBecomeReshapeThenTranspose) {
  Tensor x = RandomTensor({2, 3, 4}, DType::kFloat32, 14);
  CapturedGraph g(Cpu(), "views");
  Tensor y = g.Capture([&] {
    Tensor r = ops::Reshape(ops::Exp(x), {6, 4});       // a view: no op
    return ops::Neg(ops::Permute(ops::Reshape(r, {2, 12}), {1, 0}));  // a copy of a permuted view
  });
  ModelProto m = Parse(io::ExportOnnxBytes(g.graph(), {x}, {y}));
  EXPECT_EQ(NodeTypes(m), (std::vector<std::string>{"Exp", "Reshape", "Transpose", "Identity", "Neg"}));
  EXPECT_EQ(Int64Init(m, FindNode(m, "Reshape")->input(1)), (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(Ints(*FindNode(m, "Transpose"), "perm"), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(Dims(m.graph().output(0)), (std::vector<int64_t>{12, 2}));
}

TEST(OnnxExport, DynamicBatchMakesDimensionZeroSymbolic) {
  auto net = nn::MakeSmallCnn(3, 10);
  Tensor x = RandomTensor({2, 3, 32, 32}, DType::kFloat32, 15);
  io::OnnxExportOptions opt;
  opt.dynamic_batch = true;
  ModelProto m = Parse(nn::ExportOnnxBytes(*net, x, opt));
  EXPECT_EQ(m.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(m.graph().output(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(Dims(m.graph().output(0)), (std::vector<int64_t>{-1, 10}));
  const NodeProto* reshape = FindNode(m, "Reshape");
  ASSERT_NE(reshape, nullptr);
  EXPECT_EQ(Int64Init(m, reshape->input(1))[0], 0);  // keeps the input's batch
  EXPECT_EQ(m.graph().value_info_size(), 0);      // no intermediate shape pins the batch
  // Without it every dimension is fixed.
  ModelProto fixed = Parse(nn::ExportOnnxBytes(*net, x));
  EXPECT_EQ(Dims(fixed.graph().input(0)), (std::vector<int64_t>{2, 3, 32, 32}));
  EXPECT_EQ(Int64Init(fixed, FindNode(fixed, "Reshape")->input(1))[0], 2);
}

// Issue 36: a (4, 6) -> (2, 12) reshape was exported as Reshape(-1, 12) under an output declared
// (batch, 12), which at batch 8 computed (4, 12); a transpose or a sum over the batch declared a
// batch dimension that was not one (Note [A symbolic batch is the leading dimension]).
TEST(OnnxExport, DynamicBatchRefusesValuesWhoseFirstDimensionIsNotTheBatch) {
  Tensor x = RandomTensor({4, 6}, DType::kFloat32, 18), other = RandomTensor({3, 6}, DType::kFloat32, 19);
  io::OnnxExportOptions opt;
  opt.dynamic_batch = true;
  struct Case {
    std::function<Tensor()> fn;
    const char* message;
  };
  const Case cases[] = {
      // Inside the graph, back to (4, 6) before the output.
      {[&] { return ops::Reshape(ops::Neg(ops::Reshape(ops::Exp(x), {2, 12})), {4, 6}); },
       "reshapes (4, 6) to (2, 12), mixing the batch dimension (4) with others"},
      {[&] { return ops::Reshape(ops::Neg(ops::Reshape(ops::Exp(x), {24})), {4, 6}); },
       "reshapes (4, 6) to (24,), mixing the batch"},
      {[&] { return ops::Neg(ops::Permute(ops::Neg(ops::Permute(ops::Exp(x), {1, 0})), {1, 0})); },
       "a permutation that moves the batch axis"},
      // At the output.
      {[&] { return ops::Neg(ops::Reshape(ops::Exp(x), {2, 12})); }, "output 0 is float32 (2, 12)"},
      {[&] { return ops::Neg(ops::Permute(ops::Exp(x), {1, 0})); }, "output 0 is float32 (6, 4)"},
      {[&] { return ops::Sum(ops::Exp(x), {0}, true); }, "output 0 is float32 (1, 6)"},
  };
  for (const Case& c : cases) {
    CapturedGraph g(Cpu(), "dyn");
    Tensor y = g.Capture(c.fn);
    LOOM_EXPECT_THROW_MSG(io::ExportOnnxBytes(g.graph(), {x}, {y}, opt), OnnxError, c.message);
    io::ExportOnnxBytes(g.graph(), {x}, {y});  // a fixed batch exports them all
  }
  CapturedGraph g(Cpu(), "two");
  Tensor y = g.Capture([&] { return ops::Add(ops::Exp(x), ops::Sum(other, {0}, true)); });
  LOOM_EXPECT_THROW_MSG(io::ExportOnnxBytes(g.graph(), {x, other}, {y}, opt), OnnxError,
                        "input 1 is float32 (3, 6) on cpu:0: with dynamic_batch its first dimension is declared the batch");
  // Keeping the batch leading still exports: (4, 6) -> (4, 2, 3) -> permuted behind it.
  CapturedGraph ok(Cpu(), "ok");
  Tensor z = ok.Capture([&] { return ops::Neg(ops::Permute(ops::Reshape(ops::Exp(x), {4, 2, 3}), {0, 2, 1})); });
  ModelProto m = Parse(io::ExportOnnxBytes(ok.graph(), {x}, {z}, opt));
  EXPECT_EQ(Int64Init(m, FindNode(m, "Reshape")->input(1)), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(Ints(*FindNode(m, "Transpose"), "perm"), (std::vector<int64_t>{0, 2, 1}));
}

TEST(OnnxExport, ResNetBlocksExportEveryOp) {
  auto net = nn::MakeResNet18(10);
  Tensor x = RandomTensor({1, 3, 32, 32}, DType::kFloat32, 16);
  ModelProto m = Parse(nn::ExportOnnxBytes(*net, x));
  std::map<std::string, int> count;
  for (const std::string& t : NodeTypes(m)) ++count[t];
  EXPECT_EQ(count["Conv"], 20);  // 17 3x3 convolutions and 3 projection shortcuts
  EXPECT_EQ(count["BatchNormalization"], 20);
  EXPECT_EQ(count["Add"], 8);    // one per basic block
  EXPECT_EQ(count["GlobalAveragePool"], 1);
  // Every parameter and running statistic is an initializer under its own name.
  auto inits = Initializers(m);
  for (const auto& [name, t] : net->Params()) EXPECT_TRUE(inits.count(name)) << name;
  for (const auto& [name, t] : net->States()) EXPECT_TRUE(inits.count(name)) << name;
}

TEST(OnnxExport, AnOpWithoutCounterpartIsRefusedBeforeTheFileExists) {
  test::TempDir dir;
  const std::string path = dir / "train.onnx";
  Tensor x = RandomTensor({4, 5}, DType::kFloat32, 17);
  Tensor labels(Shape{4}, DType::kInt32, Cpu());
  labels.CopyFrom(std::vector<int32_t>{0, 1, 2, 3});
  CapturedGraph g(Cpu(), "train");
  // A loss maps (SoftmaxCrossEntropy); training-mode dropout, a random op, does not.
  Tensor loss = g.Capture(
      [&] { return ops::SoftmaxCrossEntropy(ops::Dropout(ops::Tanh(x), 0.5, /*training=*/true), labels); });
  try {
    io::ExportOnnx(g.graph(), {x, labels}, {loss}, path);
    FAIL() << "exported dropout";
  } catch (const OnnxError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("op 'dropout'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("node 'dropout_1'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("graph 'loom'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no ONNX counterpart"), std::string::npos) << msg;
  }
  EXPECT_TRUE(dir.List().empty());
  // Without the dropout the same loss exports: LogSoftmax + NegativeLogLikelihoodLoss, and
  // ReduceLogSumExp for the op's second output, each row's log-sum-exp.
  CapturedGraph ok(Cpu(), "eval");
  Tensor eval_loss = ok.Capture([&] { return ops::SoftmaxCrossEntropy(ops::Tanh(x), labels); });
  io::ExportOnnx(ok.graph(), {x, labels}, {eval_loss}, path);
  ModelProto m;
  io::onnx::ReadProtoFile(path, &m, "ONNX model");
  EXPECT_EQ(NodeTypes(m), (std::vector<std::string>{"Tanh", "ReduceLogSumExp", "LogSoftmax", "Cast", "NegativeLogLikelihoodLoss"}));
}

TEST(OnnxExport, AFailedExportLeavesAnExistingFileAlone) {
  test::TempDir dir;
  const std::string path = dir / "model.onnx";
  { std::ofstream(path) << "old contents"; }
  Tensor x = RandomTensor({2, 8}, DType::kFloat32, 18);
  CapturedGraph g(Cpu(), "random");
  Tensor y = g.Capture([&] { return ops::Dropout(ops::Relu(x), 0.5, /*training=*/true); });
  EXPECT_THROW(io::ExportOnnx(g.graph(), {x}, {y}, path), OnnxError);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "old contents");
  // A successful export replaces it whole and leaves no temporary file beside it. (A Model
  // exports its network in eval mode, and keeps training after.)
  nn::Model model(nn::MakeMlp({8, 2}), std::make_shared<nn::SGD>(0.1));
  model.Compile({x});
  nn::ExportOnnx(model, x, path);
  EXPECT_TRUE(model.net().training());
  EXPECT_EQ(dir.List(), (std::vector<std::string>{"model.onnx"}));
  ModelProto m;
  io::onnx::ReadProtoFile(path, &m, "ONNX model");
  EXPECT_EQ(NodeTypes(m), (std::vector<std::string>{"Gemm"}));
}

TEST(OnnxExport, OutputsAndInputsMustBelongToTheGraph) {
  Tensor x = RandomTensor({2, 3}, DType::kFloat32, 19);
  CapturedGraph g(Cpu(), "g");
  Tensor y = g.Capture([&] { return ops::Relu(x); });
  Tensor eager = ops::Relu(x);
  EXPECT_THROW(io::ExportOnnxBytes(g.graph(), {x}, {eager}), OnnxError);  // not computed by the graph
  Tensor other = RandomTensor({2, 3}, DType::kFloat32, 20);
  try {
    io::ExportOnnxBytes(g.graph(), {other}, {y});  // x would be baked in as a constant
    FAIL() << "exported with an input the graph does not read";
  } catch (const OnnxError& e) {
    EXPECT_NE(std::string(e.what()).find("input 0"), std::string::npos) << e.what();
  }
  io::OnnxExportOptions opt;
  opt.input_names = {"a", "b"};
  EXPECT_THROW(io::ExportOnnxBytes(g.graph(), {x}, {y}, opt), OnnxError);
  // Named inputs and outputs, and an output that is the input itself (an Identity).
  opt.input_names = {"x"};
  opt.output_names = {"y", "same"};
  ModelProto m = Parse(io::ExportOnnxBytes(g.graph(), {x}, {y, x}, opt));
  EXPECT_EQ(NodeTypes(m), (std::vector<std::string>{"Relu", "Identity"}));
  EXPECT_EQ(m.graph().node(0).output(0), "y");
  EXPECT_EQ(m.graph().node(1).input(0), "x");
  EXPECT_EQ(m.graph().node(1).output(0), "same");
}

TEST(OnnxExport, EveryTableRowIsARegisteredOp) {
  auto rows = io::OnnxExportableOps();
  EXPECT_GE(rows.size(), 40u);
  for (const auto& [op, onnx] : rows) {
    EXPECT_NO_THROW(GetOp(op)) << op;
    EXPECT_FALSE(onnx.empty()) << op;
  }
}

}  // namespace
}  // namespace loom
