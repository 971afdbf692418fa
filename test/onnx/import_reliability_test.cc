// ONNX import against hostile models (issue 36): attributes and shapes that used to crash the
// process (SIGFPE, SIGSEGV), hang it, or answer silently now end in a typed error naming the node;
// each case failed before its fix.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "onnx/builder.h"

namespace loom {
namespace {

using io::OnnxModel;
using onnx_test::Builder;
using onnx_test::NodeProto;
using onnx_test::SetInt;
using onnx_test::TensorProto;
using test::Cpu;
using test::FromDoubles;
using test::ToDoubles;

constexpr int64_t P(int k) { return int64_t(1) << k; }

// x (float32, dims) -> op -> y, with int attributes.
Builder OneOp(const std::string& op, const std::vector<int64_t>& dims,
              const std::vector<std::pair<std::string, int64_t>>& attrs, int64_t opset = 13) {
  Builder b(opset);
  b.Input("x", dims);
  NodeProto* n = b.Node(op, {"x"}, {"y"}, "n1");
  for (const auto& kv : attrs) SetInt(n, kv.first, kv.second);
  b.Output("y");
  return b;
}

TEST(OnnxImportReliability, DepthToSpaceBlockSizesThatOverflowAreNodeErrors) {
  // blocksize^2 was 0 in int64: C % 0 died of SIGFPE.
  OnnxModel m = OneOp("DepthToSpace", {1, 4, 2, 2}, {{"blocksize", P(32)}}).Import();
  LOOM_EXPECT_THROW_MSG(m.Forward({ops::Zeros({1, 4, 2, 2}, DType::kFloat32, Cpu())}), OnnxError,
                        "[onnx] node 'n1' (DepthToSpace): blocksize 4294967296 times 4294967296 overflows");
  // No channels: C % b^2 holds for any b, and H * b overflowed instead.
  m = OneOp("DepthToSpace", {1, 0, 2, 2}, {{"blocksize", P(62)}}).Import();
  LOOM_EXPECT_THROW_MSG(m.Forward({ops::Zeros({1, 0, 2, 2}, DType::kFloat32, Cpu())}), OnnxError, "overflows");
  m = OneOp("SpaceToDepth", {1, 3, 0, 0}, {{"blocksize", P(40)}}).Import();
  LOOM_EXPECT_THROW_MSG(m.Forward({ops::Zeros({1, 3, 0, 0}, DType::kFloat32, Cpu())}), OnnxError,
                        "[onnx] node 'n1' (SpaceToDepth): blocksize");
  // A valid block size still rearranges: (1, 4, 1, 1) -> (1, 1, 2, 2) in DCR order.
  m = OneOp("DepthToSpace", {1, 4, 1, 1}, {{"blocksize", 2}}).Import();
  EXPECT_EQ(ToDoubles(m.Forward({FromDoubles({1, 2, 3, 4}, {1, 4, 1, 1}, DType::kFloat32)})[0]),
            (std::vector<double>{1, 2, 3, 4}));
}

// CumSum's reference: a running sum along the last axis of a (rows, n) tensor.
std::vector<double> RunningSums(const std::vector<double>& x, int64_t rows, int64_t n, bool exclusive, bool reverse) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t j = reverse ? n - 1 - k : k;
      const double v = x[size_t(r * n + j)];
      if (!exclusive) acc += v;
      y[size_t(r * n + j)] = acc;
      if (exclusive) acc += v;
    }
  }
  return y;
}

TEST(OnnxImportReliability, CumSumOfAnyLengthWithoutAnNByNMatrix) {
  // (0, 2^33) along axis 1: the n x n matrix of ones overflowed to 0 elements and was written
  // past its end (SIGSEGV).
  Builder b;
  b.Input("x", {0, P(33)});
  b.Init("axis", FromDoubles({1}, {}, DType::kInt64));
  b.Node("CumSum", {"x", "axis"}, {"y"}, "cs");
  b.Output("y");
  Tensor y = b.Import().Forward({ops::Zeros({0, P(33)}, DType::kFloat32, Cpu())})[0];
  EXPECT_EQ(y.shape(), (Shape{0, P(33)}));
  // Values, in every mode, against running sums on the host (integers: exact).
  std::vector<double> x;
  for (int i = 0; i < 3 * 37; ++i) x.push_back(double((i * 7) % 11) - 5);
  for (int exclusive = 0; exclusive < 2; ++exclusive)
    for (int reverse = 0; reverse < 2; ++reverse) {
      Builder c;
      c.Input("x", {3, 37}, TensorProto::INT64);
      c.Init("axis", FromDoubles({-1}, {}, DType::kInt64));
      NodeProto* n = c.Node("CumSum", {"x", "axis"}, {"y"}, "cs");
      SetInt(n, "exclusive", exclusive);
      SetInt(n, "reverse", reverse);
      c.Output("y", TensorProto::INT64);
      Tensor out = c.Import().Forward({FromDoubles(x, {3, 37}, DType::kInt64)})[0];
      EXPECT_EQ(out.dtype(), DType::kInt64);
      EXPECT_EQ(ToDoubles(out), RunningSums(x, 3, 37, exclusive, reverse)) << exclusive << reverse;
    }
}

TEST(OnnxImportReliability, EyeLikeAndTriluVisitOnlyTheCellsThereAre) {
  // (2^50, 0): the loop ran 2^50 empty rows (a hang).
  for (const char* op : {"EyeLike", "Trilu"}) {
    OnnxModel m = OneOp(op, {P(50), 0}, {}, 14).Import();
    Tensor y = m.Forward({ops::Zeros({P(50), 0}, DType::kFloat32, Cpu())})[0];
    EXPECT_EQ(y.shape(), (Shape{P(50), 0})) << op;
  }
  // Diagonals off the matrix, and huge offsets, give zeros; an ordinary one its ones.
  for (int64_t k : {int64_t(-3), int64_t(3), std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    OnnxModel m = OneOp("EyeLike", {2, 3}, {{"k", k}}).Import();
    EXPECT_EQ(ToDoubles(m.Forward({ops::Zeros({2, 3}, DType::kFloat32, Cpu())})[0]), std::vector<double>(6, 0.0)) << k;
  }
  OnnxModel m = OneOp("EyeLike", {2, 3}, {{"k", 1}}).Import();
  EXPECT_EQ(ToDoubles(m.Forward({ops::Zeros({2, 3}, DType::kFloat32, Cpu())})[0]),
            (std::vector<double>{0, 1, 0, 0, 0, 1}));
}

TEST(OnnxImportReliability, HostIndexArraysAreBoundedBeforeTheyAreBuilt) {
  // Found by fuzz_onnx_ops: Hardmax over (0, 2^34) built an iota of 2^34 doubles (out of memory),
  // and a OneHot depth of 2^40 did the same (Note [Host-built index arrays]).
  OnnxModel m = OneOp("Hardmax", {0, P(34)}, {}).Import();
  EXPECT_EQ(m.Forward({ops::Zeros({0, P(34)}, DType::kFloat32, Cpu())})[0].shape(), (Shape{0, P(34)}));
  Builder b;
  b.Input("i", {2}, TensorProto::INT64);
  b.Init("depth", FromDoubles({double(P(40))}, {}, DType::kInt64));
  b.Init("values", FromDoubles({0, 1}, {2}, DType::kFloat32));
  b.Node("OneHot", {"i", "depth", "values"}, {"y"}, "oh");
  b.Output("y");
  LOOM_EXPECT_THROW_MSG(b.Import().Forward({FromDoubles({0, 1}, {2}, DType::kInt64)}), OnnxError,
                        "[onnx] node 'oh' (OneHot): depth needs 1099511627776 values built on the host, more than");
}

TEST(OnnxImportReliability, TheHostValueLimitBoundsNonZerosIndicesBeforeTheyAreBuilt) {
  // NonZero's indices depend on the values: counted first, then checked against the limit
  // (found by fuzz_onnx_ops: a chain of NonZero doubled them at each node, out of memory).
  EXPECT_EQ(io::OnnxHostValueLimit(), int64_t(1) << 26);
  Builder b;
  b.Input("x", {2, 100});
  b.Node("NonZero", {"x"}, {"y"}, "n1");
  b.Output("y", TensorProto::INT64);
  OnnxModel m = b.Import();
  const Tensor ones = ops::Ones({2, 100}, DType::kFloat32, Cpu());
  EXPECT_EQ(m.Forward({ones})[0].shape(), (Shape{2, 200}));
  io::SetOnnxHostValueLimit(399);
  LOOM_EXPECT_THROW_MSG(m.Forward({ones}), OnnxError,
                        "[onnx] node 'n1' (NonZero): NonZero's indices needs 400 values built on the host, more than the 399");
  EXPECT_EQ(m.Forward({ops::Zeros({2, 100}, DType::kFloat32, Cpu())})[0].shape(), (Shape{2, 0}));
  io::SetOnnxHostValueLimit(int64_t(1) << 26);
  LOOM_EXPECT_THROW_MSG(io::SetOnnxHostValueLimit(0), ValueError, "[onnx] host value limit 0 must be in [1, 67108864]");
  LOOM_EXPECT_THROW_MSG(io::SetOnnxHostValueLimit((int64_t(1) << 26) + 1), ValueError, "must be in [1,");
  EXPECT_EQ(io::OnnxHostValueLimit(), int64_t(1) << 26);
}

// scores (2, 3) -> op(scores, target) -> loss, the target an initializer (known on the host) or a
// graph input (computed: checked on the device).
Builder LossModel(const std::string& op, const std::vector<double>& target, bool target_known,
                  const std::vector<std::pair<std::string, int64_t>>& attrs) {
  Builder b;
  b.Input("s", {2, 3});
  if (target_known) b.Init("t", FromDoubles(target, {2}, DType::kInt64));
  else b.Input("t", {2}, TensorProto::INT64);
  NodeProto* n = b.Node(op, {"s", "t"}, {"loss"}, "loss1");
  for (const auto& kv : attrs) SetInt(n, kv.first, kv.second);
  b.Output("loss");
  return b;
}

TEST(OnnxImportReliability, LossTargetsOutsideTheClassesAreErrors) {
  // Target 7 of 3 classes and target -5 came out as a loss of 0 for their rows.
  const Tensor s = FromDoubles({-1.0, -2.0, -0.5, -1.5, -0.2, -3.0}, {2, 3}, DType::kFloat32);
  for (const char* op : {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"})
    for (double bad : {7.0, -5.0})
      for (bool known : {true, false}) {
        const std::vector<double> target{1, bad};
        OnnxModel m = LossModel(op, target, known, {}).Import();
        std::vector<Tensor> in{s};
        if (!known) in.push_back(FromDoubles(target, {2}, DType::kInt64));
        try {
          m.Forward(in)[0].Item();
          ADD_FAILURE() << op << " with target " << bad << (known ? " (initializer)" : " (input)") << " ran";
        } catch (const Error& e) {  // OnnxError (known targets) or ValueError (the device check)
          const std::string msg = e.what();
          EXPECT_EQ(msg.rfind(std::string("[onnx] node 'loss1' (") + op + ")", 0), 0u) << msg;
          EXPECT_NE(msg.find(detail::Cat(int64_t(bad))), std::string::npos) << msg;
        }
      }
  // ignore_index still skips its rows, whatever its value: -5 here, mean over the other row.
  for (bool known : {true, false}) {
    OnnxModel m = LossModel("NegativeLogLikelihoodLoss", {1, -5}, known, {{"ignore_index", -5}}).Import();
    std::vector<Tensor> in{s};
    if (!known) in.push_back(FromDoubles({1, -5}, {2}, DType::kInt64));
    EXPECT_EQ(m.Forward(in)[0].Item(), 2.0) << known;
  }
}

TEST(OnnxImportReliability, RangeRefusesNonFiniteAndHugeCounts) {
  // 1e30 and inf elements came out as an empty tensor (the count's cast to int64 is undefined),
  // and so did a NaN delta.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    double start, limit, delta;
    const char* needle;
  };
  for (const Case& k : {Case{0, 1e30, 1, "1e+30 elements, more than the 67108864"}, Case{0, inf, 1, "must be finite"},
                        Case{0, 10, nan, "must be finite"}, Case{-1e308, 1e308, 1e-308, "more than"}}) {
    Builder b;
    b.Init("start", FromDoubles({k.start}, {}, DType::kFloat64));
    b.Init("limit", FromDoubles({k.limit}, {}, DType::kFloat64));
    b.Init("delta", FromDoubles({k.delta}, {}, DType::kFloat64));
    b.Node("Range", {"start", "limit", "delta"}, {"y"}, "r");
    b.Output("y", TensorProto::DOUBLE);
    LOOM_EXPECT_THROW_MSG(b.Import().Forward({}), OnnxError, k.needle);
  }
  Builder b;
  b.Init("start", FromDoubles({1}, {}, DType::kFloat64));
  b.Init("limit", FromDoubles({2}, {}, DType::kFloat64));
  b.Init("delta", FromDoubles({0.25}, {}, DType::kFloat64));
  b.Node("Range", {"start", "limit", "delta"}, {"y"}, "r");
  b.Output("y", TensorProto::DOUBLE);
  EXPECT_EQ(ToDoubles(b.Import().Forward({})[0]), (std::vector<double>{1, 1.25, 1.5, 1.75}));
}

TEST(OnnxImportReliability, InputsAHandlerReadsMustExistAndHoldOneValue) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Found by fuzz_onnx_ops: an empty start was read past its end (std::out_of_range, not a loom
  // error); a float OneHot depth of NaN was converted to int64 (undefined).
  {
    Builder e;
    e.Init("start", FromDoubles({}, {0}, DType::kFloat64));
    e.Init("limit", FromDoubles({2}, {}, DType::kFloat64));
    e.Init("delta", FromDoubles({1}, {}, DType::kFloat64));
    e.Node("Range", {"start", "limit", "delta"}, {"y"}, "r");
    e.Output("y", TensorProto::DOUBLE);
    LOOM_EXPECT_THROW_MSG(e.Import().Forward({}), OnnxError, "input 0 (start) must hold one value, it holds 0");
    Builder h;
    h.Input("i", {2}, TensorProto::INT64);
    h.Input("depth", {}, TensorProto::DOUBLE);
    h.Init("values", FromDoubles({0, 1}, {2}, DType::kFloat32));
    h.Node("OneHot", {"i", "depth", "values"}, {"y"}, "oh");
    h.Output("y");
    LOOM_EXPECT_THROW_MSG(h.Import().Forward({FromDoubles({0, 1}, {2}, DType::kInt64), FromDoubles({nan}, {}, DType::kFloat64)}),
                          OnnxError, "input 1 (depth) holds nan, not a number an int64 can hold");
  }
  // Found by fuzz_onnx_ops: Pad at opset 11 given no pads input read past the node's inputs.
  {
    Builder p(11);
    p.Input("x", {2, 2});
    p.Node("Pad", {"x"}, {"y"}, "pad");
    p.Output("y");
    LOOM_EXPECT_THROW_MSG(p.Import().Forward({ops::Zeros({2, 2}, DType::kFloat32, Cpu())}), OnnxError,
                          "[onnx] node 'pad' (Pad): input 1 (pads) is required");
  }
}

TEST(OnnxImportReliability, NarrowIntegerInitializersOutOfRangeAreRefused) {
  // A uint8 value 300 in int32_data was stored as 44.
  for (auto [elem, value, ok] : std::vector<std::tuple<int32_t, int32_t, bool>>{
           {TensorProto::UINT8, 300, false}, {TensorProto::UINT8, -1, false}, {TensorProto::UINT8, 255, true},
           {TensorProto::BOOL, 2, false}, {TensorProto::BOOL, 1, true}, {TensorProto::FLOAT16, 70000, false}}) {
    Builder b;
    TensorProto* t = b.m.mutable_graph()->add_initializer();
    t->set_name("c");
    t->set_data_type(elem);
    t->add_dims(1);
    t->add_int32_data(value);
    b.Node("Identity", {"c"}, {"y"}, "id");
    b.Output("y", elem);
    if (ok) {
      EXPECT_EQ(ToDoubles(b.Import().Forward({})[0]), std::vector<double>{double(value)});
    } else {
      LOOM_EXPECT_THROW_MSG(b.Import(), OnnxError, detail::Cat("tensor 'c' holds ", value, " at position 0"));
    }
  }
}

TEST(OnnxImportReliability, DeepChainWithATrainableInitializerAndItsBackward) {
  // 100,000 nodes y = y + w, w trainable: the history's release recursed once per node (SIGSEGV).
  constexpr int kNodes = 100000;
  Builder b;
  b.Input("x", {1});
  b.Init("w", FromDoubles({0.5}, {1}, DType::kFloat32));
  std::string prev = "x";
  for (int i = 0; i < kNodes; ++i) {
    const std::string out = "h" + std::to_string(i);
    b.Node("Add", {prev, "w"}, {out}, "add" + std::to_string(i));
    prev = out;
  }
  b.Output(prev);
  double grad = 0, value = 0;
  test::RunOnSmallStack([&] {
    OnnxModel m = b.Import();
    ASSERT_EQ(m.parameters().size(), 1u);
    Tensor y = m.Forward({FromDoubles({1.0}, {1}, DType::kFloat32)})[0];
    value = ToDoubles(y)[0];
    auto grads = Backward(ops::Sum(y));
    ASSERT_EQ(grads.size(), 1u);
    grad = ToDoubles(grads[0].second)[0];
  });
  EXPECT_EQ(value, 1.0 + 0.5 * kNodes);
  EXPECT_EQ(grad, double(kNodes));
}

}  // namespace
}  // namespace loom
