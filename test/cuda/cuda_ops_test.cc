// Every op on CUDA against the CPU result (docs/style.md, "Tests": the harness runs CUDA against the
// CPU where a GPU is visible): the rows of the op-case table (Note [The op-case table] in
// common/op_cases.h), run once on each device from the same inputs, every output compared:
// float32 and float64 within the row's tolerance, everything else (masks, integers,
// float16/bfloat16 casts, fills, exact rows) byte for byte. Also: Philox streams equal bit for
// bit, errors found on the GPU, memory statistics. The kernel coverage needs no GPU: test/ops.
#include <cmath>
#include <cstring>

#include "common/harness.h"
#include "common/op_check.h"
#include "core/ops_cnn.h"

namespace loom {
namespace test {
namespace {

bool RunsOnCuda(const OpCase& c) {
  const OpDef& def = GetOp(c.op);
  return def.view || def.kernels[int(DeviceType::kCUDA)] != nullptr;
}

// Every row of the op-case table (common/op_cases.h) whose op runs on CUDA, against the CPU.
TEST(CudaOps, EveryCaseMatchesTheCpu) {
  LOOM_REQUIRE_GPU();
  auto gpu = CudaDevice(0);
  int compared = 0;
  for (const OpCase& c : AllOpCases()) {
    if (!RunsOnCuda(c)) continue;
    CheckAgainstCpu(c, gpu);
    ++compared;
  }
  EXPECT_GT(compared, 0);
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
