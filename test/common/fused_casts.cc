#include "common/fused_casts.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/harness.h"

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

Tensor AwkwardFloats(uint32_t seed) {
  std::vector<float> v = RandomTensor({4, 300}, DType::kFloat32, seed, -6, 6).ToVector<float>();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> odd = {0.0f, -0.0f, inf, -inf, nan, 1e-40f, -1e-40f, 3e38f, -3e38f, 1.00390625f,
                                  1.0f + 0x1p-8f + 0x1p-20f, 65504.0f, 65520.0f, 1e-8f};
  for (size_t i = 0; i < odd.size(); ++i) v[i * 37 % v.size()] = odd[i];
  return ops::FromVector(v, {4, 300}, CpuDevice());
}

std::vector<uint16_t> Bits16(const Tensor& t) {
  EXPECT_EQ(t.nbytes(), size_t(t.numel()) * 2);
  const Tensor host = ToDevice(t, CpuDevice());
  std::vector<uint16_t> b(size_t(host.numel()));
  std::memcpy(b.data(), host.raw_data(), host.nbytes());
  return b;
}

void ExpectProducersWriteTheCastOpsBits(const std::shared_ptr<Device>& dev) {
  auto on = [&](const Tensor& t) { return ToDevice(t, dev); };
  const Tensor x = on(AwkwardFloats(5)), bias = on(RandomTensor({300}, DType::kFloat32, 6, -2, 2));
  const Tensor gamma = on(RandomTensor({300}, DType::kFloat32, 7, 0.5, 2)),
               beta = on(RandomTensor({300}, DType::kFloat32, 8));
  const Tensor plain_x = on(RandomTensor({4, 300}, DType::kFloat32, 9, -3, 3));  // layer_norm: finite rows
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
  // The bf16 policy's GELUs from a bfloat16 x (Note [Precision policy]): their float32 result and
  // its fused bfloat16 rounding.
  const Tensor x16 = ops::Cast(x, DType::kBFloat16);
  for (const OpDef* gelu : {&op_kind::gelu, &op_kind::gelu_erf}) {
    const std::string what = gelu->name + " from bfloat16 on " + dev->name();
    const Tensor plain = Call1(*gelu, {x16}, Attrs{{"out_dtype", int64_t(DType::kFloat32)}});
    const Tensor fused = Call1(*gelu, {x16}, Attrs{{"out_dtype", int64_t(DType::kBFloat16)}});
    ASSERT_EQ(plain.dtype(), DType::kFloat32) << what;
    EXPECT_EQ(Bits16(fused), Bits16(ops::Cast(plain, DType::kBFloat16))) << what;
  }
  for (DType to : {DType::kBFloat16, DType::kFloat16})
    for (const Producer& p : producers) {
      const std::string what = p.def->name + " -> " + Name(to) + " on " + dev->name();
      const std::vector<Tensor> plain = Call(*p.def, p.in, p.attrs);
      std::vector<Tensor> fused = Call(*p.def, p.in, Attrs(p.attrs).Set("out_dtype", int64_t(to)));
      ASSERT_EQ(fused[0].dtype(), to) << what;
      EXPECT_EQ(Bits16(fused[0]), Bits16(ops::Cast(plain[0], to))) << what;
      for (size_t k = 1; k < plain.size(); ++k)  // layer_norm's statistics stay float32, unchanged
        EXPECT_EQ(fused[k].ToVector<float>(), plain[k].ToVector<float>()) << what << " output " << k;
    }
}

}  // namespace test
}  // namespace loom
