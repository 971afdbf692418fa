// Note [Casts fused into their producers] (graph/fuse_casts.cc): producers that write a 16-bit
// result write the cast op's bits exactly, and the pass folds a cast into its producer only when
// the cast is the float32 result's only reader.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/graph_capture.h"
#include "common/harness.h"
#include "graph/graph.h"

LOOM_OP_KIND(cast);
LOOM_OP_KIND(add_bias);
LOOM_OP_KIND(layer_norm);
LOOM_OP_KIND(relu);
LOOM_OP_KIND(leaky_relu);
LOOM_OP_KIND(sigmoid);
LOOM_OP_KIND(tanh);
LOOM_OP_KIND(gelu);
LOOM_OP_KIND(gelu_erf);
LOOM_OP_KIND(softplus);

namespace loom {
namespace test {
namespace {

// 4 rows of 300 (more than one store tile): random values with the awkward ones mixed in.
Tensor Awkward(uint32_t seed) {
  std::vector<float> v = RandomTensor({4, 300}, DType::kFloat32, seed, -6, 6).ToVector<float>();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> odd = {0.0f, -0.0f, inf, -inf, nan, 1e-40f, -1e-40f, 3e38f, -3e38f, 1.00390625f,
                                  1.0f + 0x1p-8f + 0x1p-20f, 65504.0f, 65520.0f, 1e-8f};
  for (size_t i = 0; i < odd.size(); ++i) v[i * 37 % v.size()] = odd[i];
  return ops::FromVector(v, {4, 300}, CpuDevice());
}

std::vector<uint16_t> Bits(const Tensor& t) {
  EXPECT_EQ(t.nbytes(), size_t(t.numel()) * 2);
  std::vector<uint16_t> b(size_t(t.numel()));
  std::memcpy(b.data(), t.raw_data(), t.nbytes());
  return b;
}

TEST(FusedCast, ProducersWriteTheCastOpsBitsExactly) {
  const Tensor x = Awkward(5), bias = RandomTensor({300}, DType::kFloat32, 6, -2, 2);
  const Tensor gamma = RandomTensor({300}, DType::kFloat32, 7, 0.5, 2), beta = RandomTensor({300}, DType::kFloat32, 8);
  const Tensor plain_x = RandomTensor({4, 300}, DType::kFloat32, 9, -3, 3);  // layer_norm: finite rows
  struct Producer {
    const OpDef* def;
    std::vector<Tensor> in;
    Attrs attrs;
  };
  const std::vector<Producer> producers = {
      {&op_kind::relu, {x}, {}},
      {&op_kind::leaky_relu, {x}, Attrs{{"slope", 0.1}}},
      {&op_kind::sigmoid, {x}, {}},
      {&op_kind::tanh, {x}, {}},
      {&op_kind::gelu, {x}, {}},
      {&op_kind::gelu_erf, {x}, {}},
      {&op_kind::softplus, {x}, {}},
      {&op_kind::add_bias, {x, bias}, {}},
      {&op_kind::layer_norm, {plain_x, gamma, beta}, Attrs{{"eps", 1e-5}}},
  };
  for (DType to : {DType::kBFloat16, DType::kFloat16})
    for (const Producer& p : producers) {
      const std::string what = p.def->name + " -> " + Name(to);
      const std::vector<Tensor> plain = Call(*p.def, p.in, p.attrs);
      std::vector<Tensor> fused = Call(*p.def, p.in, Attrs(p.attrs).Set("out_dtype", int64_t(to)));
      ASSERT_EQ(fused[0].dtype(), to) << what;
      EXPECT_EQ(Bits(fused[0]), Bits(ops::Cast(plain[0], to))) << what;
      for (size_t k = 1; k < plain.size(); ++k)  // layer_norm's statistics stay float32, unchanged
        EXPECT_EQ(fused[k].ToVector<float>(), plain[k].ToVector<float>()) << what << " output " << k;
    }
}

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
    Tensor x = Awkward(11);
    x.block()->set_persistent(true);
    const std::vector<uint16_t> eager = Bits(ops::Cast(ops::Gelu(x), DType::kBFloat16));
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
    EXPECT_EQ(Bits(c), eager) << int(k);
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
