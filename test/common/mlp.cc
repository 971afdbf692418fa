#include "common/mlp.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/harness.h"

namespace loom {
namespace test {

void TrainEager(const Mlp& m, nn::Optimizer& opt, const Blobs& data, int from, int to, TrainRun* run,
                BatchPlan plan, double dropout) {
  const std::shared_ptr<Device>& dev = m.params.front().device_ptr();
  for (int s = from; s < to; ++s) {
    auto batch = data.Batch(plan.batch, plan.seed + uint32_t(s), dev);
    run->losses.push_back(float(m.Step(batch.first, batch.second, opt, dropout).Item()));
  }
  run->params = m.Values();
}

TrainRun TrainReplayed(CapturedGraph& graph, const Mlp& m, nn::Optimizer& opt, const Blobs& data, int steps,
                       BatchPlan plan, double dropout, bool sequential) {
  const std::shared_ptr<Device>& dev = m.params.front().device_ptr();
  auto first = data.Batch(plan.batch, plan.seed, dev);
  Tensor x = first.first, y = first.second;
  Tensor loss = graph.Capture([&] { return m.Step(x, y, opt, dropout); });
  TrainRun run;
  for (int s = 0; s < steps; ++s) {
    auto batch = data.Batch(plan.batch, plan.seed + uint32_t(s), dev);
    x.CopyFrom(batch.first.ToVector<float>());
    y.CopyFrom(batch.second.ToVector<int32_t>());
    graph.Replay(sequential);
    run.losses.push_back(float(loss.Item()));
  }
  run.params = m.Values();
  return run;
}

void ExpectBitwiseRuns(const TrainRun& a, const TrainRun& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  EXPECT_EQ(std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * sizeof(float)), 0) << what;
  EXPECT_TRUE(SameBits(a.params, b.params)) << what;
}

}  // namespace test
}  // namespace loom
