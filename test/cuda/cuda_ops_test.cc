// Every op on CUDA against the CPU result (docs/style.md, "Tests": the harness runs CUDA against the
// CPU where a GPU is visible): the rows of the op-case table (Note [The op-case table] in
// common/op_cases.h), run once on each device from the same inputs, every output compared:
// float32 and float64 within the row's tolerance, everything else (masks, integers,
// float16/bfloat16 casts, fills, exact rows) byte for byte. Also: Philox streams equal bit for
// bit, errors found on the GPU, memory statistics. The kernel coverage needs no GPU: test/ops.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/fused_casts.h"
#include "common/harness.h"
#include "common/op_check.h"
#include "core/ops_cnn.h"
#include "core/ops/update_group.h"

LOOM_OP_KIND(update_group);

namespace loom {
namespace test {
namespace {

bool RunsOnCuda(const OpCase& c) {
  const OpDef& def = GetOp(c.op);
  return c.cpu_only.empty() && (def.view || def.kernels[int(DeviceType::kCUDA)] != nullptr);
}

// Every row of the op-case table (common/op_cases.h) whose op runs on CUDA, against the CPU.
// In full float32 (Note [Float32 math on the GPU] in core/device.h): TF32 is the default, and
// its products differ from the CPU's by more than the rows' float32 tolerances.
TEST(CudaOps, EveryCaseMatchesTheCpu) {
  LOOM_REQUIRE_GPU();
  ScopedFloat32Math full(Float32Math::kFull);
  auto gpu = CudaDevice(0);
  int compared = 0;
  for (const OpCase& c : AllOpCases()) {
    if (!RunsOnCuda(c)) continue;
    CheckAgainstCpu(c, gpu);
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

// Note [Float32 math on the GPU]: a long reduction (K = 4096) as a GEMM and as a convolution,
// against float64 on the CPU. Full float32 stays within float32 rounding; the default, TF32,
// differs from it (Hopper and Ampere run TF32 tensor cores) but stays within TF32's error.
TEST(CudaMath, Tf32ByDefaultFullFloat32OnRequest) {
  LOOM_REQUIRE_GPU();
  auto gpu = CudaDevice(0);
  ScopedFloat32Math restore(CudaFloat32Math());
  SetCudaFloat32Math(Float32Math::kTF32);
  const Tensor a = RandomTensor({32, 4096}, DType::kFloat64, 11, -1, 1, Cpu());
  const Tensor b = RandomTensor({4096, 48}, DType::kFloat64, 12, -1, 1, Cpu());
  const Tensor x = RandomTensor({2, 256, 6, 6}, DType::kFloat64, 13, -1, 1, Cpu());
  const Tensor w = RandomTensor({16, 256, 4, 4}, DType::kFloat64, 14, -1, 1, Cpu());  // K = 256 * 16
  const std::vector<std::vector<double>> want = {ToDoubles(ops::MatMul(a, b)), ToDoubles(ops::Conv2d(x, w))};
  auto on_gpu = [&](Float32Math m) {
    ScopedFloat32Math mode(m);
    auto f32 = [&](const Tensor& t) { return ToDevice(ops::Cast(t, DType::kFloat32), gpu); };
    return std::vector<std::vector<double>>{ToDoubles(ops::MatMul(f32(a), f32(b))), ToDoubles(ops::Conv2d(f32(x), f32(w)))};
  };
  const auto tf32 = on_gpu(CudaFloat32Math()), full = on_gpu(Float32Math::kFull);
  for (size_t r = 0; r < want.size(); ++r) {
    double err_full = 0, err_tf32 = 0, apart = 0;
    for (size_t i = 0; i < want[r].size(); ++i) {
      err_full = std::max(err_full, std::abs(full[r][i] - want[r][i]));
      err_tf32 = std::max(err_tf32, std::abs(tf32[r][i] - want[r][i]));
      apart = std::max(apart, std::abs(tf32[r][i] - full[r][i]));
    }
    // Sums of 4096 products of numbers in [-1, 1]: magnitudes up to ~60, float32 rounding ~1e-4.
    const char* what = r == 0 ? "matmul" : "conv2d";
    EXPECT_LT(err_full, 2e-3) << what << ": full float32 against float64";
    EXPECT_LT(err_tf32, 0.5) << what << ": TF32 against float64";
    EXPECT_GT(apart, err_full) << what << ": TF32 and full float32 agree: TF32 did not run";
  }
}

// Note [Casts fused into their producers]: CUDA's producers write the bits CUDA's cast op writes
// from their float32 results (the CPU's test, test/graph/fuse_casts_test.cc, on the GPU).
TEST(CudaOps, FusedCastProducersWriteTheCastOpsBits) {
  LOOM_REQUIRE_GPU();
  ExpectProducersWriteTheCastOpsBits(CudaDevice(0));
}

// Note [Small updates grouped]: an update_group of more members than one launch takes (24), of
// sizes from 1 to 5,000 values, each with its own learning rate (and step count, clip scale and
// found_inf flag, some set: those members must stay as they were), gives the bits of its members
// run one by one by their own kernels; SGD plain, with momentum, Nesterov's; Adam and AdamW; a
// clip value, a clip scale, a 16-bit copy.
TEST(CudaOps, UpdateGroupsOfManyMembersGiveTheirMembersBits) {
  LOOM_REQUIRE_GPU();
  auto gpu = CudaDevice(0);
  auto scalar64 = [](double v) { return ops::FromVector(std::vector<double>{v}, {}, CpuDevice()); };
  struct Config {
    const char* of;
    Attrs attrs;
    bool buffer, scaled, skip, copy;
  };
  const std::vector<Config> configs = {
      {"sgd_update", Attrs{{"momentum", 0.9}, {"clip_value", 0.5}}, true, false, false, false},
      {"sgd_update", Attrs{{"grad_scaled", int64_t(1)}, {"found_inf", int64_t(1)}}, false, true, true, false},
      {"sgd_update", Attrs{{"momentum", 0.9}, {"nesterov", int64_t(1)}, {"found_inf", int64_t(1)}}, true, false, true,
       true},
      {"adam_update", Attrs{{"decoupled", int64_t(1)}}, false, false, false, true},
      {"adam_update", Attrs{{"grad_scaled", int64_t(1)}, {"found_inf", int64_t(1)}}, false, true, true, false},
  };
  for (const Config& c : configs) {
    const bool adam = std::string(c.of) == "adam_update";
    const int64_t n = 50;
    Attrs a = c.attrs;
    a.Set("of", std::string(c.of)).Set("members", n).Set("weight_decay", 0.01);
    if (adam) a.Set("beta1", 0.9).Set("beta2", 0.999).Set("eps", 1e-8);
    if (c.copy) a.Set("copy_dtype", int64_t(DType::kBFloat16));
    std::vector<Tensor> in;  // on the CPU; each run works on its own copies
    size_t k = 0, m = 0;     // inputs and outputs a member
    for (int64_t i = 0; i < n; ++i) {
      const int64_t size = i == 7 ? 5000 : 1 + 37 * i;
      const uint32_t seed = uint32_t(100 + 10 * i);
      std::vector<Tensor> member = {RandomTensor({size}, DType::kFloat32, seed),
                                    RandomTensor({size}, DType::kFloat32, seed + 1, -2, 2),
                                    scalar64(0.01 * double(1 + i % 5))};
      if (adam || c.buffer) member.push_back(RandomTensor({size}, DType::kFloat32, seed + 2, 0, 0.1));
      if (adam) member.push_back(RandomTensor({size}, DType::kFloat32, seed + 3, 0, 0.1));
      if (adam) member.push_back(scalar64(double(3 + i % 4)));
      if (c.scaled) member.push_back(scalar64(0.2 + 0.1 * double(i % 7)));
      if (c.skip) member.push_back(ops::FromVector(std::vector<float>{i % 3 == 1 ? 1.0f : 0.0f}, {}, CpuDevice()));
      k = member.size();
      m = (adam ? 3 : c.buffer ? 2 : 1) + (c.copy ? 1 : 0);
      in.insert(in.end(), member.begin(), member.end());
    }
    auto run = [&](bool grouped) {
      std::vector<Tensor> args, outs;
      for (const Tensor& t : in) args.push_back(ToDevice(t, gpu));
      for (int64_t i = 0; i < n; ++i) {
        const size_t b = size_t(i) * k;
        outs.push_back(args[b]);
        if (adam || c.buffer) outs.push_back(args[b + 3]);
        if (adam) outs.push_back(args[b + 4]);
        if (c.copy) outs.push_back(ops::Zeros(args[b].shape(), DType::kBFloat16, gpu));
      }
      if (grouped) {
        CallInto(op_kind::update_group, args, outs, a);
      } else {
        const Attrs member = UpdateGroupMemberAttrs(a);
        for (size_t i = 0; i < size_t(n); ++i)
          CallInto(c.of, std::vector<Tensor>(args.begin() + ptrdiff_t(i * k), args.begin() + ptrdiff_t((i + 1) * k)),
                   std::vector<Tensor>(outs.begin() + ptrdiff_t(i * m), outs.begin() + ptrdiff_t((i + 1) * m)), member);
      }
      std::vector<std::vector<uint8_t>> bytes;
      for (const Tensor& t : outs) bytes.push_back(HostBytes(t));
      return bytes;
    };
    const auto one_by_one = run(false), grouped = run(true);
    EXPECT_EQ(grouped, one_by_one) << c.of << " " << a.items().size() << " attributes";
    if (c.skip)  // member 1 skipped: its parameter as it was
      EXPECT_EQ(grouped[m], HostBytes(in[k])) << c.of;
  }
}

// Note [Attention results kept in bfloat16]: cuDNN's attention writes a bfloat16 y and dqkv in
// place with the widened path's bits; bias_grad sums a bfloat16 dy as its float32 copy.
TEST(CudaOps, AttentionResultsKeepTheirBitsInBfloat16) {
  LOOM_REQUIRE_GPU();
  ExpectAttentionResultsKeepTheirBits(CudaDevice(0));
}

TEST(CudaOps, PhiloxUniformEqualsCpuBitwise) {
  LOOM_REQUIRE_GPU();
  auto gpu = CudaDevice(0);
  for (uint64_t seed : {uint64_t(1), uint64_t(0x5eed), uint64_t(0xdeadbeefcafe)}) {
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(4096), int64_t(100003)}) {
      std::vector<std::vector<float>> vals;
      for (const auto& dev : {CpuDevice(), gpu}) {
        dev->SetRandSeed(seed);
        dev->AdvanceRng(12345);  // a base other than 0
        Tensor warm = ops::Uniform({5}, 0, 1, DType::kFloat32, dev);  // and an op offset
        vals.push_back(ops::Uniform({n}, 0, 1, DType::kFloat32, dev).ToVector<float>());
        EXPECT_EQ(dev->rng_counter(), uint64_t(12345 + 2 + (n + 3) / 4));
      }
      ASSERT_EQ(vals[0].size(), vals[1].size());
      EXPECT_EQ(std::memcmp(vals[0].data(), vals[1].data(), vals[0].size() * sizeof(float)), 0)
          << "seed " << seed << ", n " << n;
    }
  }
}

TEST(CudaOps, BadLabelIsReportedAtTheNextHostRead) {
  LOOM_REQUIRE_GPU();
  auto gpu = CudaDevice(0);
  Tensor logits = RandomTensor({4, 3}, DType::kFloat32, 1, -1, 1, gpu);
  Tensor labels = ops::FromVector(std::vector<int32_t>{0, 2, 3, 1}, {4}, gpu);
  Tensor loss = ops::SoftmaxCrossEntropy(logits, labels);  // queued: nothing thrown yet
  LOOM_EXPECT_THROW_MSG(loss.Item(), ValueError, "label 3 in row 2 is outside [0, 3)");
  // The error was cleared: the device goes on working, and the loss shows the bad row.
  EXPECT_TRUE(std::isnan(loss.Item()));
  Tensor good = ops::SoftmaxCrossEntropy(logits, ops::FromVector(std::vector<int32_t>{0, 2, 1, 1}, {4}, gpu));
  EXPECT_TRUE(std::isfinite(good.Item()));
}

// Many threads find bad labels at once; the error names the first row, as the CPU does.
TEST(CudaOps, TheFirstBadLabelIsTheOneReported) {
  LOOM_REQUIRE_GPU();
  auto gpu = CudaDevice(0);
  const int64_t rows = 4096;
  std::vector<int32_t> bad(size_t(rows), 7);  // every row outside [0, 3) but the first 1000
  for (int64_t i = 0; i < 1000; ++i) bad[size_t(i)] = int32_t(i % 3);
  Tensor logits = RandomTensor({rows, 3}, DType::kFloat32, 1, -1, 1, gpu);
  Tensor labels = ops::FromVector(bad, {rows}, gpu);
  for (int i = 0; i < 5; ++i)
    LOOM_EXPECT_THROW_MSG(ops::SoftmaxCrossEntropy(logits, labels).Item(), ValueError,
                          "label 7 in row 1000 is outside [0, 3)");
}

TEST(CudaOps, BadEmbeddingIndexIsReportedAtTheNextHostRead) {
  LOOM_REQUIRE_GPU();
  auto gpu = CudaDevice(0);
  Tensor table = RandomTensor({5, 3}, DType::kFloat32, 1, -1, 1, gpu);
  Tensor y = ops::Embedding(table, ops::FromVector(std::vector<int64_t>{1, 4, -2}, {3}, gpu));
  LOOM_EXPECT_THROW_MSG(y.ToVector<float>(), ValueError, "index -2 at position 2 is out of range for a table of 5 rows");
  std::vector<float> v = y.ToVector<float>();
  EXPECT_TRUE(std::isnan(v[6]) && std::isnan(v[8]));  // the bad row, not a plausible value
  EXPECT_FALSE(std::isnan(v[0]));
}

// Note [Embedding gradient by sorted rows]: a table of GPT-2's width with repeated, unsorted
// indices gives the CPU's bits (the same additions in the same order), rows no token names are
// zero, and a bad index is reported at the next host read with every element NaN.
TEST(CudaOps, EmbeddingGradientAddsEachRowsTokensInTheCpusOrder) {
  LOOM_REQUIRE_GPU();
  auto gpu = CudaDevice(0);
  std::vector<int32_t> idx(3000);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t((i * 7919 + i / 3) % 997) * 5;  // rows 0, 5, ... 4980
  const Attrs rows{{"num_rows", int64_t(5003)}};
  const Tensor dy = RandomTensor({3000, 768}, DType::kFloat32, 3, -1, 1);
  const Tensor want = Call("embedding_grad", {ops::FromVector(idx, {3000}, CpuDevice()), dy}, rows)[0];
  const Tensor got = Call("embedding_grad", {ops::FromVector(idx, {3000}, gpu), ToDevice(dy, gpu)}, rows)[0];
  EXPECT_TRUE(HostBytes(want) == HostBytes(got));
  const std::vector<float> g = got.ToVector<float>();
  EXPECT_EQ(g[size_t(1 * 768)], 0.0f);     // row 1: no token
  EXPECT_EQ(g[size_t(5002 * 768)], 0.0f);  // the last row: none either
  idx[1234] = 5003;
  const Tensor bad = Call("embedding_grad", {ops::FromVector(idx, {3000}, gpu), ToDevice(dy, gpu)}, rows)[0];
  LOOM_EXPECT_THROW_MSG(bad.ToVector<float>(), ValueError, "index 5003 at position 1234 is out of range");
  const std::vector<float> b = bad.ToVector<float>();
  EXPECT_TRUE(std::isnan(b[0]) && std::isnan(b.back()));
}

TEST(CudaDevice, MemoryStatisticsCountTensors) {
  LOOM_REQUIRE_GPU();
  auto gpu = CudaDevice(0);
  gpu->Synchronize();
  MemStats s0 = gpu->stats();
  {
    Tensor t = ops::Zeros({1000, 1000}, DType::kFloat32, gpu);
    EXPECT_EQ(gpu->stats().live_bytes, s0.live_bytes + t.nbytes());
    EXPECT_GE(gpu->stats().peak_bytes, s0.live_bytes + t.nbytes());
    EXPECT_EQ(gpu->stats().num_allocs, s0.num_allocs + 1);
  }
  EXPECT_EQ(gpu->stats().live_bytes, s0.live_bytes);
  EXPECT_EQ(gpu->name(), "cuda:0");
  EXPECT_EQ(CudaDevice(0).get(), gpu.get());  // one device object per GPU
}

TEST(CudaDevice, AbsentGpuIsAClearError) {
  if (CudaAvailable()) GTEST_SKIP() << "a GPU is visible: this checks the error without one";
  LOOM_EXPECT_THROW_MSG(CudaDevice(0), DeviceError, "cuda:0");
}

}  // namespace
}  // namespace test
}  // namespace loom
