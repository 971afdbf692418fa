// Schedules and clipping on CUDA, replayed as a device graph (CUDA graph): the rate comes from a
// device step counter and the clip scale from device ops, so a recorded graph follows both on
// every launch (Note [Schedules on the device], Note [Clipping folded into the update]). The
// op-table (test/ops) checks each kernel against the CPU's; this checks them in a recording.
#include <cmath>

#include "common/graph_capture.h"
#include "common/harness.h"
#include "graph/graph.h"
#include "nn/optimizer.h"
#include "nn/schedule.h"

namespace loom {
namespace test {
namespace {

TEST(CudaSchedule, DeviceGraphLaunchesFollowTheSchedule) {
  LOOM_REQUIRE_GPU();
  auto dev = CudaDevice(0);
  Tensor w = ops::Full({5}, 1.0, DType::kFloat64, dev);
  Tensor g = ops::Full({5}, 1.0, DType::kFloat64, dev);
  const nn::Schedule s =
      nn::Schedule::Sequential({nn::Schedule::LinearWarmup(0.1, 4), nn::Schedule::Cosine(0.1, 20, 0.01)}, {4});
  nn::SGD opt(7.0);
  opt.SetSchedule(s);
  GraphOptions options;
  options.device_graph = true;
  CapturedGraph graph(dev, "schedule", options);
  graph.Capture([&] { opt.Apply(g, w); });
  double before = 1.0;
  for (int k = 0; k < 30; ++k) {  // warm-up, record + launch, then launches
    graph.Replay();
    const double now = w.ToVector<double>()[2];
    EXPECT_NEAR(before - now, s.ValueAt(k), 1e-12) << "step " << k;
    before = now;
  }
  EXPECT_EQ(opt.schedule_step(dev), 30);
}

// The same SGD steps clipped by global norm on CUDA (a device graph) and on the CPU (eagerly).
TEST(CudaSchedule, ClippedStepsMatchTheCpu) {
  LOOM_REQUIRE_GPU();
  auto cuda = CudaDevice(0), cpu = CpuDevice();
  std::vector<float> p0(300), grads(300 * 4);
  for (size_t i = 0; i < p0.size(); ++i) p0[i] = std::sin(0.1 * double(i));
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = float(3 * std::cos(0.37 * double(i)) * (i % 600 < 300 ? 1 : 0.01));
  auto run = [&](const std::shared_ptr<Device>& dev, bool graphed) {
    Tensor w = ops::FromVector(p0, {300}, dev);
    Tensor g = ops::Zeros({300}, DType::kFloat32, dev);
    nn::SGD opt(0.05, 0.9);
    opt.SetGradClip({1.0, 0, 1e-6});
    GraphOptions options;
    options.device_graph = graphed;
    CapturedGraph graph(dev, "clip", options);
    if (graphed) graph.Capture([&] { opt.Step({{w, g}}); });
    for (int k = 0; k < 4; ++k) {
      ops::CopyInto(g, ops::FromVector(std::vector<float>(grads.begin() + 300 * k, grads.begin() + 300 * (k + 1)),
                                       {300}, dev));
      graphed ? graph.Replay() : opt.Step({{w, g}});
    }
    return w.ToVector<float>();
  };
  std::vector<float> got = run(cuda, true), want = run(cpu, false);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "element " << i;
}

// Note [Gradient norms in few launches]: more tensors than one launch's table, float32 and
// float64 in turn, some of 0 values, one over kNormBlocks x 512 x 8 values: the CPU's norm.
TEST(CudaSchedule, GradNormOverManyTensorsMatchesTheCpu) {
  LOOM_REQUIRE_GPU();
  auto cuda = CudaDevice(0);
  std::vector<Tensor> on_cpu, on_gpu;
  for (int k = 0; k < 110; ++k) {
    const int64_t n = k == 7 ? 2500000 : k % 13 == 0 ? 0 : 1 + (k * 97) % 3000;
    const DType t = (k / 40) % 2 ? DType::kFloat64 : DType::kFloat32;  // 40 float32, 40 float64, 30 float32
    on_cpu.push_back(RandomTensor({n}, t, uint32_t(100 + k), -1, 1, CpuDevice()));
    on_gpu.push_back(ToDevice(on_cpu.back(), cuda));
  }
  const double want = Call("grad_norm", on_cpu)[0].Item(), got = Call("grad_norm", on_gpu)[0].Item();
  EXPECT_NEAR(got, want, 1e-12 * want);
  // The same tensors again: the same bits (the partials' layout and order are the shapes').
  EXPECT_EQ(Call("grad_norm", on_gpu)[0].Item(), got);
}

}  // namespace
}  // namespace test
}  // namespace loom
