// Graphs on CUDA: serial replay against eager execution (the MLP of test/common/mlp.h), CUDA
// against the CPU end to end, and device-graph (CUDA graph) replay against serial replay,
// dropout included so that the Philox base must advance on every launch. Plus the device-graph
// contract on the CPU, which needs no GPU.
#include <cmath>
#include <cstring>
#include <map>

#include "common/cnn.h"
#include "common/gpt.h"
#include "common/graph_capture.h"
#include "common/harness.h"
#include "common/mlp.h"
#include "graph/graph.h"

namespace loom {
namespace test {
namespace {

constexpr int64_t kBatch = 16;

std::unique_ptr<nn::Optimizer> MakeOptimizer(bool adam) {
  if (adam) return std::make_unique<nn::Adam>(0.01);
  return std::make_unique<nn::SGD>(0.05, 0.9, 1e-4);
}

TrainRun Eager(const std::shared_ptr<Device>& dev, const Blobs& data, int steps, double dropout = 0,
               bool adam = false) {
  Mlp m({32, 64, 64, 10}, 5, dev);
  std::unique_ptr<nn::Optimizer> opt = MakeOptimizer(adam);
  TrainRun r;
  TrainEager(m, *opt, data, 0, steps, &r, BatchPlan{kBatch, 100}, dropout);
  return r;
}

// Captures one step, then replays it `steps` times with new batches fed into its inputs.
TrainRun Graphed(const std::shared_ptr<Device>& dev, const Blobs& data, int steps, bool device_graph,
                 double dropout = 0, bool adam = false, MemoryMode mode = MemoryMode::kPlanned) {
  Mlp m({32, 64, 64, 10}, 5, dev);
  std::unique_ptr<nn::Optimizer> opt = MakeOptimizer(adam);
  GraphOptions options;
  options.memory = mode;
  options.device_graph = device_graph;
  CapturedGraph graph(dev, "train", options);
  return TrainReplayed(graph, m, *opt, data, steps, BatchPlan{kBatch, 100}, dropout);
}

void ExpectNear(const TrainRun& got, const TrainRun& want, double rtol, const std::string& what) {
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
  TrainRun e = Eager(dev_, data, 5);
  for (MemoryMode mode : {MemoryMode::kPlanned, MemoryMode::kDynamic}) {
    TrainRun g = Graphed(dev_, data, 5, false, 0, false, mode);
    ExpectNear(g, e, 1e-5, std::string("memory ") + Name(mode));
  }
}

TEST_F(CudaGraphTest, SerialReplayWithDropoutAndAdamAgreesWithEager) {
  Blobs data(32, 10);
  TrainRun e = Eager(dev_, data, 4, 0.3, true);
  TrainRun g = Graphed(dev_, data, 4, false, 0.3, true);
  ExpectNear(g, e, 1e-5, "dropout + adam");
  EXPECT_NE(e.losses[0], e.losses[1]);
}

TEST_F(CudaGraphTest, CudaTrainingAgreesWithCpu) {
  ScopedFloat32Math full(Float32Math::kFull);  // TF32 (the default) rounds products to 10-bit mantissas
  Blobs data(32, 10);
  TrainRun cpu = Eager(CpuDevice(), data, 5);
  TrainRun gpu = Eager(dev_, data, 5);
  ExpectNear(gpu, cpu, 1e-4, "cuda vs cpu");
}

TEST_F(CudaGraphTest, DeviceGraphReplayEqualsSerialReplay) {
  Blobs data(32, 10);
  TrainRun serial = Graphed(dev_, data, 6, false);
  TrainRun captured = Graphed(dev_, data, 6, true);
  ExpectNear(captured, serial, 1e-5, "device graph");
  EXPECT_LT(captured.losses.back(), captured.losses.front());
}

TEST_F(CudaGraphTest, DeviceGraphDrawsFreshRandomNumbersEveryLaunch) {
  Blobs data(32, 10);
  TrainRun serial = Graphed(dev_, data, 5, false, 0.3, true);
  TrainRun captured = Graphed(dev_, data, 5, true, 0.3, true);
  // Equal step for step: each launch read the base its replay would have used, and the Adam step
  // count and learning rate came from device memory.
  ExpectNear(captured, serial, 1e-5, "device graph with dropout");
  TrainRun eager = Eager(dev_, data, 5, 0.3, true);
  ExpectNear(captured, eager, 1e-5, "device graph with dropout vs eager");
}

// SetRandSeed between launches reaches the recorded kernels: the seed lives in device memory
// beside the base, as a kernel argument it would stay the one of the recording.
TEST_F(CudaGraphTest, DeviceGraphSeesNewRandomSeed) {
  Tensor x = ops::Ones({64, 33}, DType::kFloat32, dev_);
  GraphOptions device_graph, serial;
  device_graph.device_graph = true;
  CapturedGraph recorded(dev_, "recorded", device_graph), plain(dev_, "plain", serial);
  auto step = [&] { return ops::Add(ops::Uniform({64, 33}, 0, 1, DType::kFloat32, dev_), ops::Dropout(x, 0.5)); };
  Tensor a = recorded.Capture(step);
  Tensor b = plain.Capture(step);
  for (int i = 0; i < 3; ++i) recorded.Replay();  // warm-up, record + launch, launch
  plain.Replay();
  for (uint64_t seed : {77u, 78u}) {
    dev_->SetRandSeed(seed);
    recorded.Replay();
    std::vector<double> got = ToDoubles(a);
    dev_->SetRandSeed(seed);
    plain.Replay();
    EXPECT_EQ(got, ToDoubles(b)) << "seed " << seed;
  }
}

TEST_F(CudaGraphTest, DeviceGraphSeesNewLearningRate) {
  Blobs data(32, 10);
  Mlp m({32, 64, 10}, 5, dev_);
  nn::SGD opt(0.05);
  auto b = data.Batch(kBatch, 1, dev_);
  GraphOptions device_graph;
  device_graph.device_graph = true;
  CapturedGraph graph(dev_, "lr", device_graph);
  Tensor loss = graph.Capture([&] { return m.Step(b.first, b.second, opt); });
  for (int i = 0; i < 3; ++i) graph.Replay();  // warm-up, record + launch, launch
  std::vector<std::vector<float>> before = m.Values();
  opt.SetLearningRate(0);
  graph.Replay();
  std::vector<std::vector<float>> after = m.Values();
  for (size_t p = 0; p < before.size(); ++p)
    EXPECT_EQ(std::memcmp(before[p].data(), after[p].data(), before[p].size() * sizeof(float)), 0) << "param " << p;
  opt.SetLearningRate(0.05);
  graph.Replay();
  EXPECT_NE(std::memcmp(before[0].data(), m.Values()[0].data(), before[0].size() * sizeof(float)), 0);
}

TEST_F(CudaGraphTest, DeviceGraphNeedsPlannedMemory) {
  Tensor x = RandomTensor({8, 8}, DType::kFloat32, 1, -1, 1, dev_);
  GraphOptions options;
  options.device_graph = true;
  options.memory = MemoryMode::kDynamic;
  CapturedGraph graph(dev_, "dyn", options);
  Tensor y = graph.Capture([&] { return ops::Relu(x); });
  LOOM_EXPECT_THROW_MSG(graph.Replay(), GraphError, "planned memory");
}

// No GPU needed: the CPU refuses device graphs before running anything.
// Note [bfloat16 convolutions on cuDNN]: at bf16 the policy lowers the convolutions and their
// gradients on CUDA too; the CNN trains to the same bits eagerly and in a graph, differently
// from float32, and close to the CPU's bf16 run (oneDNN's, whose gradients stay float32 where
// cuDNN rounds them to bfloat16 first).
TEST_F(CudaGraphTest, Bf16ConvolutionsOnCudnnGraphEqualsEagerAndTracksTheCpu) {
  const CnnRun g = TrainSmallCnn(dev_, true, Precision::kBFloat16);
  const auto eager = TrainSmallCnn(dev_, false, Precision::kBFloat16).params, graph = g.params;
  const auto f32 = TrainSmallCnn(dev_, true, Precision::kFloat32).params;
  const auto cpu = TrainSmallCnn(CpuDevice(), true, Precision::kBFloat16).params;
  EXPECT_EQ(g.bf16_convs, (std::map<std::string, int>{{"conv2d", 2}, {"conv2d_grad_input", 1}, {"conv2d_grad_weight", 2}}));
  ASSERT_EQ(eager.size(), graph.size());
  ASSERT_EQ(eager.size(), cpu.size());
  bool differs = false;
  for (size_t i = 0; i < eager.size(); ++i) {
    ASSERT_EQ(eager[i].size(), graph[i].size());
    EXPECT_EQ(std::memcmp(eager[i].data(), graph[i].data(), eager[i].size() * sizeof(float)), 0) << "param " << i;
    differs |= std::memcmp(graph[i].data(), f32[i].data(), graph[i].size() * sizeof(float)) != 0;
    for (size_t k = 0; k < graph[i].size(); ++k)
      ASSERT_NEAR(graph[i][k], cpu[i][k], 0.05 * std::abs(cpu[i][k]) + 2e-3) << "param " << i << " element " << k;
  }
  EXPECT_TRUE(differs) << "bf16 trained to float32's bits: nothing was lowered";
}

// Note [Attention on cuDNN]: at bf16 the policy lowers the GPT's attention on CUDA too, to
// cuDNN's fused attention (forward and gradient of every layer, the gradient reading the
// forward's bfloat16 qkv); eager steps and the graph (serial and device-graph replay) give the
// same bits, and the run tracks the CPU's bf16 run. Note [Attention results kept in bfloat16]:
// y and dqkv are written in bfloat16 by cuDNN itself, no cast of them left.
TEST_F(CudaGraphTest, Bf16AttentionOnCudnnGraphEqualsEagerAndTracksTheCpu) {
  GraphOptions device_graph;
  device_graph.device_graph = true;
  const GptRun eager = TrainTinyGpt(dev_, false, 12, {}, 1, Precision::kBFloat16);
  const GptRun graph = TrainTinyGpt(dev_, true, 12, {}, 1, Precision::kBFloat16);
  const GptRun replayed = TrainTinyGpt(dev_, true, 12, device_graph, 1, Precision::kBFloat16);
  const GptRun cpu = TrainTinyGpt(CpuDevice(), true, 12, {}, 1, Precision::kBFloat16);
  int forward = 0, backward = 0;
  for (const OpRecord& op : graph.graph->ops().ops) {
    if (op.name() == "attention_qkv") forward += op.inputs[0].dtype() == DType::kBFloat16;
    if (op.name() == "attention_qkv_grad") backward += op.inputs[0].dtype() == DType::kBFloat16;
  }
  EXPECT_EQ(forward, 2) << "cuDNN refused the tiny GPT's attention (LOOM_DEBUG=1 prints why)";
  EXPECT_EQ(backward, 2);
  EXPECT_EQ(graph.graph->stats().counters.Get("bf16_attention_results"), 4);
  EXPECT_EQ(graph.graph->stats().counters.Get("casts_into_bias_grads"), 6);  // Note [Casts fused into their producers]
  // Note [Small updates grouped]: at least the 18 biases and layer-norm parameters (no decay, no copy)
  EXPECT_GE(graph.graph->stats().counters.Get("grouped_updates"), 18);
  EXPECT_EQ(eager.losses, graph.losses);
  EXPECT_EQ(eager.params, graph.params);
  EXPECT_EQ(graph.losses, replayed.losses);
  EXPECT_EQ(graph.params, replayed.params);
  ASSERT_EQ(graph.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) EXPECT_NEAR(graph.losses[i], cpu.losses[i], 0.02 * cpu.losses[i]);
  EXPECT_LT(graph.losses.back(), graph.losses.front() - 0.3) << "the chain is learnable";
}

TEST(DeviceGraphContract, CpuRefusesDeviceGraphs) {
  auto cpu = CpuDevice();
  Tensor x = RandomTensor({4, 4}, DType::kFloat32, 1);
  GraphOptions device_graph;
  device_graph.device_graph = true;
  CapturedGraph graph(cpu, "dg", device_graph);
  Tensor y = graph.Capture([&] { return ops::Relu(x); });
  LOOM_EXPECT_THROW_MSG(graph.Replay(), DeviceError, "device graphs are not supported on cpu:0");
  EXPECT_FALSE(y.block()->allocated());  // nothing ran
  LOOM_EXPECT_THROW_MSG(cpu->BeginDeviceGraphCapture(&x), DeviceError, "not supported on cpu:0");
}

}  // namespace
}  // namespace test
}  // namespace loom
