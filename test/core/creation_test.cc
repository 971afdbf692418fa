// Creation beyond the op-case table (common/op_cases.cc, run by test/ops, holds fill, cast,
// copy and the random fills against their references): the wrappers, float16/bfloat16 bit
// patterns and the scalar conversions exhaustively, Contiguous and CopyInto, and the random
// fills' distributions, reproducibility and counter.
#include <cmath>
#include <cstring>
#include <limits>

#include "common/harness.h"

namespace loom {
namespace test {
namespace {

// Every dtype that holds the small integers the wrappers are checked with (bool does not).
const DType kNumericDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                                DType::kInt32,   DType::kInt64,   DType::kUInt8};

// The raw 16-bit patterns of a float16/bfloat16 tensor.
std::vector<uint16_t> Bits16(const Tensor& t) {
  EXPECT_EQ(SizeOf(t.dtype()), 2u);
  Tensor c = t.Contiguous();
  std::vector<uint16_t> out(size_t(c.numel()));
  c.device()->Synchronize();
  c.device()->MemcpyToHost(out.data(), c.raw_data(), out.size() * 2);
  return out;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The wrappers over fill (the op itself is the op-case table's, for every dtype and value).
TEST(Creation, FillWrappersEveryDType) {
  auto dev = Cpu();
  for (DType dt : kNumericDTypes) {
    SCOPED_TRACE(Name(dt));
    Tensor z = ops::Zeros({2, 3}, dt, dev), o = ops::Ones({2, 3}, dt, dev), f = ops::Full({4}, 7, dt, dev);
    EXPECT_EQ(z.dtype(), dt);
    EXPECT_EQ(z.shape(), (Shape{2, 3}));
    EXPECT_EQ(ToDoubles(z), std::vector<double>(6, 0.0));
    EXPECT_EQ(ToDoubles(o), std::vector<double>(6, 1.0));
    EXPECT_EQ(ToDoubles(f), std::vector<double>(4, 7.0));
    EXPECT_EQ(ToDoubles(ops::ZerosLike(f)), std::vector<double>(4, 0.0));
    EXPECT_EQ(ToDoubles(ops::OnesLike(f)), std::vector<double>(4, 1.0));
    ops::Fill(f, 3);
    EXPECT_EQ(ToDoubles(f), std::vector<double>(4, 3.0));
    Tensor s = ops::Full({}, 5, dt, dev);  // a scalar
    EXPECT_EQ(s.numel(), 1);
    EXPECT_EQ(s.Item(), 5.0);
  }
}

TEST(Creation, FromVectorAndEmpty) {
  auto dev = Cpu();
  Tensor t = ops::FromVector<int64_t>({1, -2, 3, 1LL << 40}, {2, 2}, dev);
  EXPECT_EQ(t.ToVector<int64_t>(), (std::vector<int64_t>{1, -2, 3, 1LL << 40}));
  Tensor e = ops::Empty({3, 2}, DType::kFloat64, dev);
  EXPECT_EQ(e.shape(), (Shape{3, 2}));
  EXPECT_FALSE(e.block()->allocated());
  LOOM_EXPECT_THROW_MSG(ops::FromVector<float>({1, 2, 3}, {2, 2}, dev), ShapeError,
                        "[from_vector] 3 values do not fill shape (2, 2)");
}

// float32 -> float16 -> float32, and the bits in between.
TEST(Creation, CastFloat16RoundTrip) {
  auto dev = Cpu();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case { float in; uint16_t bits; float back; };
  const float sub_min = std::ldexp(1.0f, -24);  // smallest float16 subnormal
  const Case cases[] = {
      {0.0f, 0x0000, 0.0f},
      {-0.0f, 0x8000, -0.0f},
      {1.0f, 0x3c00, 1.0f},
      {-2.5f, 0xc100, -2.5f},
      {65504.0f, 0x7bff, 65504.0f},                         // largest finite
      {65519.0f, 0x7bff, 65504.0f},                         // rounds down to it
      {65520.0f, 0x7c00, inf},                              // halfway to 65536: ties to even -> inf
      {1e6f, 0x7c00, inf},                                  // overflow
      {inf, 0x7c00, inf},
      {-inf, 0xfc00, -inf},
      {std::ldexp(1.0f, -14), 0x0400, std::ldexp(1.0f, -14)},  // smallest normal
      {sub_min, 0x0001, sub_min},                               // smallest subnormal
      {std::ldexp(1.0f, -20), 0x0010, std::ldexp(1.0f, -20)},   // a subnormal
      {std::ldexp(1023.0f, -24), 0x03ff, std::ldexp(1023.0f, -24)},  // largest subnormal
      {std::ldexp(1.0f, -25), 0x0000, 0.0f},                    // half the smallest: ties to even -> 0
      {std::ldexp(3.0f, -25), 0x0002, 2 * sub_min},             // 1.5 ulp: ties to even -> 2
      {std::ldexp(3.0f, -26), 0x0001, sub_min},                 // 0.75 ulp: up
      {std::ldexp(1.0f, -26), 0x0000, 0.0f},                    // underflow
      {1.0f + std::ldexp(1.0f, -11), 0x3c00, 1.0f},             // halfway: ties to even (down)
      {1.0f + std::ldexp(3.0f, -11), 0x3c02, 1.0f + std::ldexp(1.0f, -9)},  // halfway: ties to even (up)
      {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20), 0x3c01, 1.0f + std::ldexp(1.0f, -10)},  // above half
      {0.1f, 0x2e66, 0.0999755859375f},
      {2049.0f, 0x6800, 2048.0f},  // spacing 2 above 2048: tie to even
      {2051.0f, 0x6802, 2052.0f},
  };
  std::vector<float> in;
  for (const Case& c : cases) in.push_back(c.in);
  Tensor x = ops::FromVector(in, {int64_t(in.size())}, dev);
  Tensor h = ops::Cast(x, DType::kFloat16);
  EXPECT_EQ(h.dtype(), DType::kFloat16);
  std::vector<uint16_t> bits = Bits16(h);
  std::vector<float> back = ops::Cast(h, DType::kFloat32).ToVector<float>();
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(bits[i], cases[i].bits) << "float16 bits of " << in[i];
    EXPECT_EQ(back[i], cases[i].back) << "float16 round trip of " << in[i];
    EXPECT_EQ(std::signbit(back[i]), std::signbit(cases[i].back)) << in[i];
    EXPECT_EQ(FloatToHalf(in[i]), cases[i].bits) << in[i];  // the scalar conversion agrees
  }
  // nan stays nan.
  Tensor n = ops::Cast(ops::Cast(ops::Full({2}, std::nan(""), DType::kFloat32, dev), DType::kFloat16),
                       DType::kFloat32);
  for (float v : n.ToVector<float>()) EXPECT_TRUE(std::isnan(v));
  // Every float16 value survives float16 -> float32 -> float16 exactly (nan aside).
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7c00) == 0x7c00 && (b & 0x3ff)) continue;
    ASSERT_EQ(FloatToHalf(HalfToFloat(uint16_t(b))), b) << std::hex << b;
  }
}

TEST(Creation, CastBFloat16RoundTrip) {
  auto dev = Cpu();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case { float in; uint16_t bits; float back; };
  const Case cases[] = {
      {0.0f, 0x0000, 0.0f},
      {-0.0f, 0x8000, -0.0f},
      {1.0f, 0x3f80, 1.0f},
      {-2.0f, 0xc000, -2.0f},
      {1.0f + std::ldexp(1.0f, -8), 0x3f80, 1.0f},                        // halfway: ties to even (down)
      {1.0f + std::ldexp(3.0f, -8), 0x3f82, 1.0f + std::ldexp(1.0f, -6)},  // halfway: ties to even (up)
      {1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20), 0x3f81, 1.0f + std::ldexp(1.0f, -7)},
      {0.1f, 0x3dcd, FromBits(0x3dcd0000)},
      {inf, 0x7f80, inf},
      {-inf, 0xff80, -inf},
      {std::numeric_limits<float>::max(), 0x7f80, inf},         // rounds past the largest bfloat16
      {FromBits(0x7f7f0000), 0x7f7f, FromBits(0x7f7f0000)},     // the largest bfloat16
      {std::numeric_limits<float>::min(), 0x0080, std::numeric_limits<float>::min()},  // smallest normal
      {FromBits(0x00010000), 0x0001, FromBits(0x00010000)},     // smallest subnormal
      {FromBits(0x00018000), 0x0002, FromBits(0x00020000)},     // subnormal halfway: ties to even (up)
      {FromBits(0x00008000), 0x0000, 0.0f},                     // half the smallest: ties to even -> 0
      {FromBits(0x00000001), 0x0000, 0.0f},                     // float's smallest subnormal underflows
      {3.0e38f, 0x7f62, FromBits(0x7f620000)},
  };
  std::vector<float> in;
  for (const Case& c : cases) in.push_back(c.in);
  Tensor b = ops::Cast(ops::FromVector(in, {int64_t(in.size())}, dev), DType::kBFloat16);
  std::vector<uint16_t> bits = Bits16(b);
  std::vector<float> back = ops::Cast(b, DType::kFloat32).ToVector<float>();
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(bits[i], cases[i].bits) << "bfloat16 bits of " << in[i];
    EXPECT_EQ(back[i], cases[i].back) << "bfloat16 round trip of " << in[i];
    EXPECT_EQ(std::signbit(back[i]), std::signbit(cases[i].back)) << in[i];
  }
  Tensor n = ops::Cast(ops::Cast(ops::Full({2}, std::nan(""), DType::kFloat32, dev), DType::kBFloat16),
                       DType::kFloat32);
  for (float v : n.ToVector<float>()) EXPECT_TRUE(std::isnan(v));
  for (uint32_t v = 0; v < 0x10000; ++v) {
    if ((v & 0x7f80) == 0x7f80 && (v & 0x7f)) continue;
    ASSERT_EQ(FloatToBFloat16(BFloat16ToFloat(uint16_t(v))), v) << std::hex << v;
  }
}

// ops::Cast to the tensor's own dtype is the tensor itself (the op's values, for every pair of
// dtypes, are the op-case table's).
// The CPU cast from float32 to 16 bits (a fast path, F16C's conversion where the build has it)
// gives exactly FloatToHalf's and FloatToBFloat16's bits for every kind of float32: a sweep over
// the whole bit space (every exponent, both signs, subnormals, infinities and NaNs with
// payloads), in groups of 8 that mix NaNs with numbers and ones that do not.
TEST(Creation, CastFromFloat32IsBitForBitTheConversionFunctions) {
  std::vector<uint32_t> bits;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 2047) bits.push_back(uint32_t(b));
  for (uint32_t b : {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x33000000u, 0x33000001u, 0x387fe000u,
                     0x477fefffu, 0x477ff000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                     0xffffffffu, 0x7fbfffffu, 0x38800000u, 0x3f800000u})
    bits.push_back(b);
  while (bits.size() % 8 != 3) bits.push_back(0x3f800001u);  // a tail after the groups of 8
  std::vector<float> f(bits.size());
  std::memcpy(f.data(), bits.data(), bits.size() * 4);
  Tensor x = ops::FromVector(f, {int64_t(f.size())}, CpuDevice());
  const std::vector<uint8_t> half = HostBytes(ops::Cast(x, DType::kFloat16)), bf = HostBytes(ops::Cast(x, DType::kBFloat16));
  size_t bad_half = 0, bad_bf = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    uint16_t h, b;
    std::memcpy(&h, &half[2 * i], 2);
    std::memcpy(&b, &bf[2 * i], 2);
    bad_half += h != FloatToHalf(f[i]);
    bad_bf += b != FloatToBFloat16(f[i]);
  }
  EXPECT_GT(f.size(), 1000000u);
  EXPECT_EQ(bad_half, 0u);
  EXPECT_EQ(bad_bf, 0u);
}

TEST(Creation, CastToTheSameDTypeIsTheTensor) {
  Tensor f = ops::FromVector<float>({2.7f, -2.7f, 0.5f}, {3}, Cpu());
  EXPECT_EQ(ops::Cast(f, DType::kFloat32).block(), f.block());
  EXPECT_NE(ops::Cast(f, DType::kFloat64).block(), f.block());
}

TEST(Creation, CopyOfStridedViews) {
  auto dev = Cpu();
  Tensor x = RandomTensor({3, 5}, DType::kFloat64, 4);
  std::vector<double> v = x.ToVector<double>();
  Tensor t = x.Transpose();
  ASSERT_FALSE(t.is_contiguous());
  Tensor c = t.Contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.block(), x.block());
  EXPECT_EQ(c.shape(), (Shape{5, 3}));
  std::vector<double> cv = c.ToVector<double>();
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(cv[size_t(i * 3 + j)], v[size_t(j * 5 + i)]);
  EXPECT_EQ(x.Contiguous().block(), x.block());  // already contiguous: no copy

  // CopyInto a contiguous target, and into a strided one.
  Tensor dst = ops::Zeros({5, 3}, DType::kFloat64, dev);
  ops::CopyInto(dst, t);
  EXPECT_EQ(dst.ToVector<double>(), cv);
  Tensor dst2 = ops::Zeros({3, 5}, DType::kFloat64, dev);
  ops::CopyInto(dst2.Transpose(), c);
  EXPECT_EQ(dst2.ToVector<double>(), v);
  LOOM_EXPECT_THROW_MSG(ops::CopyInto(dst, x), ShapeError, "[copy] cannot copy float64 (3, 5)");
}

TEST(Creation, UniformRangeAndMean) {
  auto dev = Cpu();
  const int64_t n = 100000;
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    std::vector<double> v = ToDoubles(ops::Uniform({n}, -2, 3, dt, dev));
    double mean = 0;
    for (double x : v) {
      ASSERT_GE(x, -2);
      ASSERT_LT(x, 3);
      mean += x;
    }
    mean /= double(n);
    double var = 0;
    for (double x : v) var += (x - mean) * (x - mean);
    var /= double(n - 1);
    double sd = 5 / std::sqrt(12.0);
    EXPECT_NEAR(mean, 0.5, 5 * sd / std::sqrt(double(n))) << Name(dt);
    EXPECT_NEAR(std::sqrt(var), sd, 0.01 * sd) << Name(dt);
  }
  // UniformInto overwrites in place; lo == hi gives a constant.
  Tensor t = ops::Zeros({10}, DType::kFloat32, dev);
  ops::UniformInto(t, 4, 4);
  EXPECT_EQ(t.ToVector<float>(), std::vector<float>(10, 4.0f));
  LOOM_EXPECT_THROW_MSG(ops::Uniform({2}, 1, 0, DType::kFloat32, dev), ValueError, "[uniform] low 1 is above high 0");
}

TEST(Creation, NormalMeanAndStd) {
  auto dev = Cpu();
  const int64_t n = 100000;
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    std::vector<double> v = ToDoubles(ops::Normal({n}, 1.5, 2.0, dt, dev));
    double mean = 0, var = 0, within1 = 0;
    for (double x : v) mean += x;
    mean /= double(n);
    for (double x : v) {
      var += (x - mean) * (x - mean);
      within1 += std::abs(x - 1.5) < 2.0;
    }
    double sd = std::sqrt(var / double(n - 1));
    EXPECT_NEAR(mean, 1.5, 5 * 2.0 / std::sqrt(double(n))) << Name(dt);
    EXPECT_NEAR(sd, 2.0, 0.02) << Name(dt);  // se of the sd is sd / sqrt(2n) = 0.0045
    EXPECT_NEAR(within1 / double(n), 0.6827, 0.01) << Name(dt);  // the shape, not just two moments
  }
  LOOM_EXPECT_THROW_MSG(ops::Normal({2}, 0, -1, DType::kFloat32, dev), ValueError,
                        "[normal] standard deviation -1 is negative");
}

TEST(Creation, BernoulliRate) {
  auto dev = Cpu();
  const int64_t n = 100000;
  for (double p : {0.0, 0.3, 1.0}) {
    for (DType dt : {DType::kUInt8, DType::kFloat32}) {
      std::vector<double> v = ToDoubles(ops::Bernoulli({n}, p, dt, dev));
      double ones = 0;
      for (double x : v) {
        ASSERT_TRUE(x == 0 || x == 1);
        ones += x;
      }
      EXPECT_NEAR(ones / double(n), p, 5 * std::sqrt(p * (1 - p) / double(n)) + 1e-12) << p << " " << Name(dt);
    }
  }
  LOOM_EXPECT_THROW_MSG(ops::Bernoulli({2}, 1.5, DType::kUInt8, dev), ValueError,
                        "[bernoulli] probability 1.5 is outside [0, 1]");
}

TEST(Creation, SameSeedSameNumbersAndCounterAdvances) {
  auto dev = Cpu();
  dev->SetRandSeed(42);
  EXPECT_EQ(dev->rng_counter(), 0u);
  std::vector<float> a = ops::Uniform({1000}, 0, 1, DType::kFloat32, dev).ToVector<float>();
  EXPECT_EQ(dev->rng_counter(), 250u);
  std::vector<double> an = ops::Normal({1001}, 0, 1, DType::kFloat64, dev).ToVector<double>();
  EXPECT_EQ(dev->rng_counter(), 250u + 251u);
  std::vector<float> b = ops::Uniform({1000}, 0, 1, DType::kFloat32, dev).ToVector<float>();
  EXPECT_NE(a, b);  // the counter moved on
  dev->SetRandSeed(42);
  EXPECT_EQ(ops::Uniform({1000}, 0, 1, DType::kFloat32, dev).ToVector<float>(), a);
  EXPECT_EQ(ops::Normal({1001}, 0, 1, DType::kFloat64, dev).ToVector<double>(), an);
  EXPECT_EQ(ops::Uniform({1000}, 0, 1, DType::kFloat32, dev).ToVector<float>(), b);
  dev->SetRandSeed(43);
  EXPECT_NE(ops::Uniform({1000}, 0, 1, DType::kFloat32, dev).ToVector<float>(), a);
  // Bernoulli too.
  dev->SetRandSeed(7);
  std::vector<uint8_t> m1 = ops::Bernoulli({512}, 0.5, DType::kUInt8, dev).ToVector<uint8_t>();
  std::vector<uint8_t> m2 = ops::Bernoulli({512}, 0.5, DType::kUInt8, dev).ToVector<uint8_t>();
  EXPECT_NE(m1, m2);
  dev->SetRandSeed(7);
  EXPECT_EQ(ops::Bernoulli({512}, 0.5, DType::kUInt8, dev).ToVector<uint8_t>(), m1);
}

}  // namespace
}  // namespace test
}  // namespace loom
