// Note [Casts fused into their producers] (graph/fuse_casts.cc): producers that write a 16-bit
// result write the cast op's bits exactly, and the pass folds a cast into its producer only when
// the cast is the float32 result's only reader.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/fused_casts.h"
#include "common/graph_capture.h"
#include "common/harness.h"
#include "graph/graph.h"

LOOM_OP_KIND(cast);
LOOM_OP_KIND(bias_grad);
LOOM_OP_KIND(add_bias);
LOOM_OP_KIND(relu);
LOOM_OP_KIND(gelu);

namespace loom {
namespace test {
namespace {

TEST(FusedCast, ProducersWriteTheCastOpsBitsExactly) { ExpectProducersWriteTheCastOpsBits(CpuDevice()); }

// Note [Attention results kept in bfloat16] (graph/bf16_attention.cc): what the pass relies on.
TEST(Bf16Attention, ResultsKeepTheirBitsInBfloat16) { ExpectAttentionResultsKeepTheirBits(CpuDevice()); }

TEST(FusedCast, OutDtypeIsCheckedAndNeverDifferentiated) {
  const Tensor x = RandomTensor({3, 4}, DType::kFloat32, 1);
  LOOM_EXPECT_THROW_MSG(Call(op_kind::gelu, {x}, Attrs{{"out_dtype", int64_t(DType::kFloat64)}}), DTypeError,
                        "[gelu] out_dtype 1 for a float32 input: only a float32 result rounded to bfloat16");
  LOOM_EXPECT_THROW_MSG(Call(op_kind::add_bias, {ops::Cast(x, DType::kFloat64), ops::Cast(ops::Zeros({4}, DType::kFloat32, CpuDevice()), DType::kFloat64)},
                             Attrs{{"out_dtype", int64_t(DType::kBFloat16)}}),
                        DTypeError, "[add_bias] out_dtype 3 for a float64 input");
  Tensor leaf = RandomTensor({3, 4}, DType::kFloat32, 2);
  leaf.set_requires_grad(true);
  Tensor y = Call(op_kind::relu, {leaf}, Attrs{{"out_dtype", int64_t(DType::kBFloat16)}})[0];
  LOOM_EXPECT_THROW_MSG(Backward(ops::Sum(ops::Cast(y, DType::kFloat32))), DTypeError,
                        "[relu] a result rounded to 16 bits (out_dtype) is not differentiated");
}

// y = gelu(x), c = cast(y): folded when the cast is y's only reader; not when something else
// reads y, the user holds y, or the pass is off. The replay gives eager's bits either way.
TEST(FusedCast, ThePassFoldsOnlyACastThatIsTheOnlyReader) {
  enum class Case { kOnlyReader, kAlsoSummed, kHeld, kPassOff };
  for (Case k : {Case::kOnlyReader, Case::kAlsoSummed, Case::kHeld, Case::kPassOff}) {
    auto dev = CpuDevice();
    Tensor x = AwkwardFloats(11);
    x.block()->set_persistent(true);
    const std::vector<uint16_t> eager = Bits16(ops::Cast(ops::Gelu(x), DType::kBFloat16));
    GraphOptions o;
    if (k == Case::kPassOff) o.passes.Set("fuse_casts", false);
    CapturedGraph g(dev, "fuse", o);
    Tensor held, sum;
    Tensor c = g.Capture([&] {
      Tensor y = ops::Gelu(x);
      if (k == Case::kAlsoSummed) sum = ops::Sum(y);
      if (k == Case::kHeld) held = y;
      return ops::Cast(y, DType::kBFloat16);
    });
    g.Replay();
    EXPECT_EQ(g.graph().stats().counters.Get("fused_casts"), k == Case::kOnlyReader ? 1 : 0) << int(k);
    int casts = 0;
    for (const OpRecord& op : g.graph().ops().ops) casts += op.def == &op_kind::cast;
    EXPECT_EQ(casts, k == Case::kOnlyReader ? 0 : 1) << int(k);
    EXPECT_EQ(Bits16(c), eager) << int(k);
  }
}

// y = gelu(x), read by bias_grad and by its cast: the bias_grad writes the cast's copy as it reads
// y (both before the cast's place); not when the bias_grad comes after the cast, or something
// writes y in between (an in-place op), or the pass is off. The bits are eager's either way.
TEST(FusedCast, ACastWhoseInputABiasGradSumsIsWrittenByThatBiasGrad) {
  enum class Case { kBefore, kAfter, kWrittenBetween, kPassOff };
  for (Case k : {Case::kBefore, Case::kAfter, Case::kWrittenBetween, Case::kPassOff}) {
    auto dev = CpuDevice();
    Tensor x = AwkwardFloats(12);
    x.block()->set_persistent(true);
    auto step = [&](Tensor* db) {
      Tensor y = ops::Gelu(x);
      Tensor c;
      if (k == Case::kAfter) c = ops::Cast(y, DType::kBFloat16);
      *db = Call1(op_kind::bias_grad, {y});
      if (k == Case::kWrittenBetween) CallInto(op_kind::relu, {y}, {y});
      if (k != Case::kAfter) c = ops::Cast(y, DType::kBFloat16);
      return c;
    };
    Tensor eager_db;
    const std::vector<uint16_t> eager = Bits16(step(&eager_db));
    GraphOptions o;
    if (k == Case::kPassOff) o.passes.Set("fuse_casts", false);
    CapturedGraph g(dev, "fuse", o);
    Tensor db;
    Tensor c = g.Capture([&] { return step(&db); });
    g.Replay();
    const bool folded = k == Case::kBefore;
    EXPECT_EQ(g.graph().stats().counters.Get("casts_into_bias_grads"), folded ? 1 : 0) << int(k);
    int casts = 0, copying = 0;
    for (const OpRecord& op : g.graph().ops().ops) {
      casts += op.def == &op_kind::cast;
      copying += op.def == &op_kind::bias_grad && op.outputs.size() == 2;
    }
    EXPECT_EQ(casts, folded ? 0 : 1) << int(k);
    EXPECT_EQ(copying, folded ? 1 : 0) << int(k);
    EXPECT_EQ(Bits16(c), eager) << int(k);
    EXPECT_EQ(HostBytes(db), HostBytes(eager_db)) << int(k);
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
