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
LOOM_OP_KIND(attention_qkv);
LOOM_OP_KIND(attention_qkv_grad);
LOOM_OP_KIND(bias_grad);

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
  // bias_grad writing its dy's copy (Note [Casts fused into their producers]): the cast's bits,
  // the same column sums; at one slab of rows and several (Note [Column sums by slabs]).
  for (DType to : {DType::kBFloat16, DType::kFloat16})
    for (const Tensor& dy : {x, on(RandomTensor({8192, 96}, DType::kFloat32, 10, -3, 3))}) {
      const std::string what = "bias_grad " + ToString(dy.shape()) + " -> " + Name(to) + " copy on " + dev->name();
      const Tensor plain = Call1(op_kind::bias_grad, {dy});
      const std::vector<Tensor> fused = Call(op_kind::bias_grad, {dy}, Attrs{{"copy_dtype", int64_t(to)}});
      ASSERT_EQ(fused.size(), 2u) << what;
      EXPECT_EQ(HostBytes(fused[0]), HostBytes(plain)) << what;
      EXPECT_EQ(Bits16(fused[1]), Bits16(ops::Cast(dy, to))) << what;
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

void ExpectAttentionResultsKeepTheirBits(const std::shared_ptr<Device>& dev) {
  const DType f32 = DType::kFloat32, bf16 = DType::kBFloat16;
  auto on = [&](const Tensor& t) { return ToDevice(t, dev); };
  auto floats = [](const Tensor& t) { return ToDevice(t, CpuDevice()).ToVector<float>(); };
  // A head width cuDNN's fused attention takes (16), rows not a multiple of its tiles.
  const Tensor qkv = ops::Cast(on(RandomTensor({2, 70, 96}, f32, 11, -2, 2)), bf16);
  const Attrs a{{"heads", int64_t(2)}, {"causal", int64_t(1)}, {"scale", 0.0}};
  auto with = [&](DType out) { return Attrs(a).Set("out_dtype", int64_t(out)); };
  const std::string where = " on " + dev->name();
  const std::vector<Tensor> f = Call(op_kind::attention_qkv, {qkv}, with(f32));
  const std::vector<Tensor> h = Call(op_kind::attention_qkv, {qkv}, with(bf16));
  ASSERT_EQ(h[0].dtype(), bf16);
  ASSERT_EQ(h[1].dtype(), f32);
  EXPECT_EQ(floats(ops::Cast(h[0], f32)), floats(f[0])) << "y's float32 values are bfloat16s" << where;
  EXPECT_EQ(Bits16(h[0]), Bits16(ops::Cast(f[0], bf16))) << where;
  EXPECT_EQ(floats(h[1]), floats(f[1])) << "lse" << where;
  // The gradient as attention_qkv's backward makes it (dlse zeros it knows of).
  const Tensor dy = on(RandomTensor({2, 70, 32}, f32, 12, -1, 1)), dlse = ops::Zeros({2, 2, 70}, f32, dev);
  const Attrs ga = with(f32).Set("zero_dlse", int64_t(1));
  const Tensor ref = Call1(op_kind::attention_qkv_grad, {qkv, f[0], f[1], dy, dlse}, ga);
  ASSERT_EQ(ref.dtype(), f32);
  EXPECT_EQ(floats(ops::Cast(ops::Cast(ref, bf16), f32)), floats(ref)) << "dqkv's values are bfloat16s" << where;
  for (const Tensor& y : {f[0], h[0]})
    for (DType out : {f32, bf16}) {
      const Tensor d = Call1(op_kind::attention_qkv_grad, {qkv, y, f[1], dy, dlse}, Attrs(ga).Set("out_dtype", int64_t(out)));
      ASSERT_EQ(d.dtype(), out);
      EXPECT_EQ(Bits16(out == bf16 ? d : ops::Cast(d, bf16)), Bits16(ops::Cast(ref, bf16)))
          << "y " << Name(y.dtype()) << ", dqkv " << Name(out) << where;
    }
  // bias_grad of bfloat16 values: one slab and several (Note [Column sums by slabs]), one column.
  for (const Shape& s : {Shape{2, 70, 96}, Shape{8192, 96}, Shape{3000, 1}}) {
    const Tensor dy16 = ops::Cast(on(RandomTensor(s, f32, 13, -3, 3)), bf16);
    const Tensor low = Call1(op_kind::bias_grad, {dy16}, Attrs{{"out_dtype", int64_t(f32)}});
    ASSERT_EQ(low.dtype(), f32);
    EXPECT_EQ(floats(low), floats(Call1(op_kind::bias_grad, {ops::Cast(dy16, f32)}))) << ToString(s) << where;
  }
}

}  // namespace test
}  // namespace loom
