// Graphs on CUDA: serial replay against eager execution (the MLP of test/common/mlp.h), CUDA
// against the CPU end to end, and device-graph (CUDA graph) replay against serial replay,
// dropout included so that the Philox base must advance on every launch. Plus the device-graph
// contract on the CPU, which needs no GPU.
#include <cmath>
#include <cstring>

#include "common/harness.h"
#include "common/mlp.h"
#include "cuda/cuda_util.h"
#include "graph/graph.h"

namespace loom {
namespace test {
namespace {

struct RunResult {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
};

constexpr int64_t kBatch = 16;

RunResult Eager(const std::shared_ptr<Device>& dev, const Blobs& data, int steps, double dropout = 0,
                bool adam = false) {
  Mlp m({32, 64, 64, 10}, 5, dev);
  std::unique_ptr<nn::Optimizer> opt;
  if (adam) opt = std::make_unique<nn::Adam>(0.01);
  else opt = std::make_unique<nn::SGD>(0.05, 0.9, 1e-4);
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    auto batch = data.Batch(kBatch, 100 + uint32_t(s), dev);
    r.losses.push_back(float(m.Step(batch.first, batch.second, *opt, dropout).Item()));
  }
  r.params = m.Values();
  return r;
}

// Captures one step, then replays it `steps` times with new batches fed into its inputs.
RunResult Graphed(const std::shared_ptr<Device>& dev, const Blobs& data, int steps, bool device_graph,
                  double dropout = 0, bool adam = false, MemoryMode mode = MemoryMode::kPlanned) {
  Mlp m({32, 64, 64, 10}, 5, dev);
  std::unique_ptr<nn::Optimizer> opt;
  if (adam) opt = std::make_unique<nn::Adam>(0.01);
  else opt = std::make_unique<nn::SGD>(0.05, 0.9, 1e-4);
  auto first = data.Batch(kBatch, 100, dev);
  Tensor x = first.first, y = first.second;
  GraphOptions options;
  options.memory = mode;
  options.device_graph = device_graph;
  Tensor loss;
  auto graph = Graph::Capture(dev, "train", [&] { loss = m.Step(x, y, *opt, dropout); }, options);
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    auto batch = data.Batch(kBatch, 100 + uint32_t(s), dev);
    x.CopyFrom(batch.first.ToVector<float>());
    y.CopyFrom(batch.second.ToVector<int32_t>());
    graph->Run(/*sequential=*/true);
    r.losses.push_back(float(loss.Item()));
  }
  r.params = m.Values();
  return r;
}

void ExpectNear(const RunResult& got, const RunResult& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], rtol * std::abs(want.losses[i]) + 1e-6) << what << ", step " << i;
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  for (size_t p = 0; p < want.params.size(); ++p)
    for (size_t k = 0; k < want.params[p].size(); ++k)
      ASSERT_NEAR(got.params[p][k], want.params[p][k], rtol * std::abs(want.params[p][k]) + 1e-6)
          << what << ", parameter " << p << " element " << k;
}

class CudaGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LOOM_REQUIRE_GPU();
    dev_ = CudaDevice(0);
  }
  std::shared_ptr<Device> dev_;
};

TEST_F(CudaGraphTest, SerialReplayAgreesWithEager) {
  Blobs data(32, 10);
  RunResult e = Eager(dev_, data, 5);
  for (MemoryMode mode : {MemoryMode::kPlanned, MemoryMode::kDynamic}) {
    RunResult g = Graphed(dev_, data, 5, false, 0, false, mode);
    ExpectNear(g, e, 1e-5, std::string("memory ") + Name(mode));
  }
}

TEST_F(CudaGraphTest, SerialReplayWithDropoutAndAdamAgreesWithEager) {
  Blobs data(32, 10);
  RunResult e = Eager(dev_, data, 4, 0.3, true);
  RunResult g = Graphed(dev_, data, 4, false, 0.3, true);
  ExpectNear(g, e, 1e-5, "dropout + adam");
  EXPECT_NE(e.losses[0], e.losses[1]);
}

TEST_F(CudaGraphTest, CudaTrainingAgreesWithCpu) {
  Blobs data(32, 10);
  RunResult cpu = Eager(CpuDevice(), data, 5);
  RunResult gpu = Eager(dev_, data, 5);
  ExpectNear(gpu, cpu, 1e-4, "cuda vs cpu");
}

TEST_F(CudaGraphTest, DeviceGraphReplayEqualsSerialReplay) {
  Blobs data(32, 10);
  RunResult serial = Graphed(dev_, data, 6, false);
  RunResult captured = Graphed(dev_, data, 6, true);
  ExpectNear(captured, serial, 1e-5, "device graph");
  EXPECT_LT(captured.losses.back(), captured.losses.front());
}

TEST_F(CudaGraphTest, DeviceGraphDrawsFreshRandomNumbersEveryLaunch) {
  Blobs data(32, 10);
  RunResult serial = Graphed(dev_, data, 5, false, 0.3, true);
  RunResult captured = Graphed(dev_, data, 5, true, 0.3, true);
  // Equal step for step: each launch read the base its replay would have used, and the Adam step
  // count and learning rate came from device memory.
  ExpectNear(captured, serial, 1e-5, "device graph with dropout");
  RunResult eager = Eager(dev_, data, 5, 0.3, true);
  ExpectNear(captured, eager, 1e-5, "device graph with dropout vs eager");
}

TEST_F(CudaGraphTest, DeviceGraphSeesNewLearningRate) {
  Blobs data(32, 10);
  Mlp m({32, 64, 10}, 5, dev_);
  nn::SGD opt(0.05);
  auto b = data.Batch(kBatch, 1, dev_);
  GraphOptions options;
  options.device_graph = true;
  auto graph = Graph::Capture(dev_, "lr", [&] { m.Step(b.first, b.second, opt); }, options);
  for (int i = 0; i < 3; ++i) graph->Run();  // warm-up, record + launch, launch
  std::vector<std::vector<float>> before = m.Values();
  opt.SetLearningRate(0);
  graph->Run();
  std::vector<std::vector<float>> after = m.Values();
  for (size_t p = 0; p < before.size(); ++p)
    EXPECT_EQ(std::memcmp(before[p].data(), after[p].data(), before[p].size() * sizeof(float)), 0) << "param " << p;
  opt.SetLearningRate(0.05);
  graph->Run();
  EXPECT_NE(std::memcmp(before[0].data(), m.Values()[0].data(), before[0].size() * sizeof(float)), 0);
}

TEST_F(CudaGraphTest, DeviceGraphNeedsPlannedMemory) {
  Tensor x = RandomTensor({8, 8}, DType::kFloat32, 1, -1, 1, dev_);
  GraphOptions options;
  options.device_graph = true;
  options.memory = MemoryMode::kDynamic;
  auto graph = Graph::Capture(dev_, "dyn", [&] { ops::Relu(x); }, options);
  LOOM_EXPECT_THROW_MSG(graph->Run(), GraphError, "planned memory");
}

// No GPU needed: the CPU refuses device graphs before running anything.
TEST(DeviceGraphContract, CpuRefusesDeviceGraphs) {
  auto cpu = CpuDevice();
  Tensor x = RandomTensor({4, 4}, DType::kFloat32, 1);
  GraphOptions options;
  options.device_graph = true;
  Tensor y;
  auto graph = Graph::Capture(cpu, "dg", [&] { y = ops::Relu(x); }, options);
  LOOM_EXPECT_THROW_MSG(graph->Run(), DeviceError, "device graphs are not supported on cpu:0");
  EXPECT_FALSE(y.block()->allocated());  // nothing ran
  LOOM_EXPECT_THROW_MSG(cpu->BeginDeviceGraphCapture(&x), DeviceError, "not supported on cpu:0");
}

}  // namespace
}  // namespace test
}  // namespace loom
