// SINGA's keyed graph calls (graph/registry.h): several graphs per device, misuse, options for
// the graphs it creates, and a reset from another thread while a replay runs.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/harness.h"
#include "graph/registry.h"

namespace loom {
namespace test {
namespace {

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = CpuDevice();
    ResetGraph(*dev_);
    SetRegistryGraphOptions(*dev_, GraphOptions());
  }
  void TearDown() override {
    ResetGraph(*dev_);
    SetRegistryGraphOptions(*dev_, GraphOptions());
  }
  std::shared_ptr<Device> dev_;
};

TEST_F(RegistryTest, SeveralKeyedGraphsCoexist) {
  Tensor x = RandomTensor({4}, DType::kFloat32, 1);
  EnableGraph(*dev_, true, "a");
  Tensor ya = ops::MulScalar(x, 2);
  EnableGraph(*dev_, false);
  EnableGraph(*dev_, true, "b");
  Tensor yb = ops::MulScalar(x, 3);
  EnableGraph(*dev_, false);
  RunGraph(*dev_, true, "a");
  RunGraph(*dev_, true, "b");
  std::vector<float> xv = x.ToVector<float>(), av = ya.ToVector<float>(), bv = yb.ToVector<float>();
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(av[i], 2 * xv[i]);
    EXPECT_EQ(bv[i], 3 * xv[i]);
  }
  EXPECT_TRUE(HasGraph(*dev_, "a") && HasGraph(*dev_, "b"));
  ResetGraph(*dev_, "a");
  EXPECT_FALSE(HasGraph(*dev_, "a"));
  EXPECT_TRUE(HasGraph(*dev_, "b"));
  ResetGraph(*dev_);
  EXPECT_FALSE(HasGraph(*dev_, "b"));
}

TEST_F(RegistryTest, MisuseRaisesGraphErrors) {
  LOOM_EXPECT_THROW_MSG(RunGraph(*dev_, true, "nope"), GraphError, "has no graph 'nope'");
  LOOM_EXPECT_THROW_MSG(EnableGraph(*dev_, false), GraphError, "without a capture in progress");
  EnableGraph(*dev_, true, "x");
  LOOM_EXPECT_THROW_MSG(EnableGraph(*dev_, true, "y"), GraphError, "already capturing graph 'x'");
  LOOM_EXPECT_THROW_MSG(RunGraph(*dev_, true, "x"), GraphError, "still being captured");
  LOOM_EXPECT_THROW_MSG(ResetGraph(*dev_, "x"), GraphError, "while graph 'x' is being captured");
  EnableGraph(*dev_, false);
  RunGraph(*dev_, true, "x");
}

TEST_F(RegistryTest, OptionsApplyToTheGraphsCreatedAfterThem) {
  Tensor x = RandomTensor({64}, DType::kFloat32, 1);
  GraphOptions dynamic;
  dynamic.memory = MemoryMode::kDynamic;
  SetRegistryGraphOptions(*dev_, dynamic);
  EXPECT_EQ(RegistryGraphOptions(*dev_).memory, MemoryMode::kDynamic);
  EnableGraph(*dev_, true, "dyn");
  Tensor y = ops::Exp(ops::Relu(x));
  EnableGraph(*dev_, false);
  SetRegistryGraphOptions(*dev_, GraphOptions());
  EnableGraph(*dev_, true, "planned");
  Tensor z = ops::Exp(ops::Relu(x));
  EnableGraph(*dev_, false);
  EXPECT_EQ(GetGraph(*dev_, "dyn")->stats().memory, MemoryMode::kDynamic);
  EXPECT_EQ(GetGraph(*dev_, "planned")->stats().memory, MemoryMode::kPlanned);
  EXPECT_EQ(GetGraph(*dev_, "dyn")->stats().arena_bytes, 0u);
  EXPECT_GT(GetGraph(*dev_, "planned")->stats().arena_bytes, 0u);
}

TEST_F(RegistryTest, AnOpThatThrowsDuringCaptureIsNotRecorded) {
  Tensor a = RandomTensor({2, 3}, DType::kFloat32, 1), b = RandomTensor({4, 5}, DType::kFloat32, 2);
  EnableGraph(*dev_, true, "bad");
  EXPECT_THROW(ops::MatMul(a, b), ShapeError);
  EnableGraph(*dev_, false);
  EXPECT_EQ(GetGraph(*dev_, "bad")->stats().num_ops, 0u);
  RunGraph(*dev_, true, "bad");
}

// A replay holds its own reference to the graph: ResetGraph and a new capture under the same key
// from another thread never pull it from under the running replay. The replaying thread sees
// either a replay or a typed error (the key names a graph being captured), never a crash.
TEST_F(RegistryTest, ResetFromAnotherThreadDuringReplays) {
  Tensor x = RandomTensor({256, 256}, DType::kFloat32, 1);
  auto capture = [&] {
    EnableGraph(*dev_, true, "k");
    ops::Tanh(ops::MatMul(x, x));
    EnableGraph(*dev_, false);
  };
  capture();
  std::atomic<bool> stop{false};
  std::atomic<int> replays{0}, errors{0};
  std::thread replayer([&] {
    while (!stop) {
      try {
        RunGraph(*dev_, true, "k");
        ++replays;
      } catch (const GraphError&) {
        ++errors;
      }
    }
  });
  // Each reset waits for the replaying thread to have tried again (bounded: never a hang).
  auto tried = [&] { return replays + errors; };
  for (int i = 0; i < 20; ++i) {
    const int before = tried();
    for (long spin = 0; tried() == before && spin < 100000000; ++spin) std::this_thread::yield();
    ResetGraph(*dev_, "k");
    capture();
  }
  stop = true;
  replayer.join();
  EXPECT_GT(replays + errors, 0);
}

}  // namespace
}  // namespace test
}  // namespace loom
