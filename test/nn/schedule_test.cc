// Learning-rate schedules and gradient clipping on the device (nn/schedule.h, nn/clip.h).
// Each schedule is checked against its closed form at every one of 50 steps, eagerly and as a
// replayed graph: one capture (CapturedStep::num_graphs), 50 replays (GraphStats::replays),
// no host write at all and no host transfer inside a replay (Note [Host-transfer trap]).
// Clipping is checked against a float64 reference computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "core/ops.h"
#include "core/device.h"
#include "graph/graph.h"
#include "graph/step.h"
#include "io/checkpoint.h"
#include "nn/optimizer_checkpoint.h"
#include "io/comm/inproc.h"
#include "nn/dist_opt.h"
#include "nn/clip.h"
#include "nn/optimizer.h"
#include "nn/schedule.h"

// A test op whose CPU kernel reads its input on the host: what a schedule evaluated on the host
// would do inside a replay. inputs: x (float64 scalar) -> outputs: y = x.
namespace loom {
LOOM_OP(test_host_peek) {
  def.internal = "a test op (test/nn/schedule_test.cc)";
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return std::vector<TensorMeta>{in[0]}; };
}
namespace {
void HostPeekCpu(const OpRecord& op, const KernelContext&) { *op.outputs[0].data<double>() = op.inputs[0].Item(); }
LOOM_KERNEL(test_host_peek, kCPU, HostPeekCpu);
}  // namespace
}  // namespace loom

namespace loom {
namespace test {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kSteps = 50;

struct Case {
  const char* name;
  std::function<nn::Schedule()> make;
  std::function<double(int)> closed_form;  // the rate of step k (k = 0, 1, ...)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

double Cosine(double base, double lo, int t, int total) {
  return lo + (base - lo) * (1 + std::cos(kPi * std::min(t, total) / total)) / 2;
}

std::vector<Case> Cases() {
  return {
      {"constant", [] { return nn::Schedule::Constant(0.25); }, [](int) { return 0.25; }},
      {"step", [] { return nn::Schedule::Step(0.1, 7, 0.5); }, [](int k) { return 0.1 * std::pow(0.5, k / 7); }},
      {"multistep", [] { return nn::Schedule::MultiStep(0.2, {5, 12, 30}, 0.1); },
       [](int k) { return 0.2 * std::pow(0.1, (k >= 5) + (k >= 12) + (k >= 30)); }},
      {"exponential", [] { return nn::Schedule::Exponential(0.3, 0.9); },
       [](int k) { return 0.3 * std::pow(0.9, k); }},
      {"exponential_staircase", [] { return nn::Schedule::Exponential(0.3, 0.8, 4, true); },
       [](int k) { return 0.3 * std::pow(0.8, k / 4); }},
      {"cosine", [] { return nn::Schedule::Cosine(0.1, 40, 0.001); }, [](int k) { return Cosine(0.1, 0.001, k, 40); }},
      {"warmup", [] { return nn::Schedule::LinearWarmup(0.4, 10, 0.04); },
       [](int k) { return 0.04 + (0.4 - 0.04) * std::min(k, 10) / 10.0; }},
      {"warmup_cosine",
       [] {
         return nn::Schedule::Sequential({nn::Schedule::LinearWarmup(0.1, 5), nn::Schedule::Cosine(0.1, 30)}, {5});
       },
       [](int k) { return k < 5 ? 0.1 * k / 5.0 : Cosine(0.1, 0, k - 5, 30); }},
      {"three_parts_nested",
       [] {
         auto warm_step = nn::Schedule::Sequential({nn::Schedule::LinearWarmup(0.2, 4), nn::Schedule::Step(0.2, 6, 0.5)},
                                                   {4});
         return nn::Schedule::Sequential({warm_step, nn::Schedule::MultiStep(0.05, {3, 8}, 0.5)}, {20});
       },
       [](int k) {
         if (k < 4) return 0.2 * k / 4.0;
         if (k < 20) return 0.2 * std::pow(0.5, (k - 4) / 6);
         return 0.05 * std::pow(0.5, (k - 20 >= 3) + (k - 20 >= 8));
       }},
  };
}

class ScheduleCase : public ::testing::TestWithParam<Case> {};

// The host value (ValueAt) is the device formula; the closed form is written out above.
TEST_P(ScheduleCase, HostValueMatchesTheClosedForm) {
  nn::Schedule s = GetParam().make();
  for (int k = 0; k < kSteps; ++k) EXPECT_NEAR(s.ValueAt(k), GetParam().closed_form(k), 1e-12) << "step " << k;
}

// SGD on a float64 parameter with gradient 1: after step k the parameter has moved by the sum
// of the rates of steps 0..k, and the rate tensor holds the rate of step k.
void CheckTrajectory(bool graph) {
  const Case& c = ScheduleCase::GetParam();
  auto dev = CpuDevice();
  Tensor w = ops::Full({3}, 1.0, DType::kFloat64, dev);
  Tensor g = ops::Full({3}, 1.0, DType::kFloat64, dev);
  nn::SGD opt(/*lr=*/123.0);  // never used: the schedule sets every rate
  opt.SetSchedule(c.make());
  CapturedStep step(dev, [&](const std::vector<Tensor>& in) {
    opt.Apply(in[0], w);
    return std::vector<Tensor>{};
  });
  const uint64_t writes = dev->host_writes();
  dev->set_trap_host_transfers(true);
  double moved = 0;
  for (int k = 0; k < kSteps; ++k) {
    if (graph) {
      step({g});
    } else {
      opt.Apply(g, w);
    }
    moved += c.closed_form(k);
    EXPECT_NEAR(opt.LearningRateTensor(dev).Item(), c.closed_form(k), 1e-12) << c.name << " step " << k;
    EXPECT_NEAR(w.ToVector<double>()[1], 1.0 - moved, 1e-12) << c.name << " step " << k;
  }
  dev->set_trap_host_transfers(false);
  EXPECT_EQ(dev->host_writes(), writes) << "a host write fed the schedule";
  EXPECT_EQ(opt.schedule_step(dev), kSteps);
  if (graph) {
    EXPECT_EQ(step.num_graphs(), 1u);
    EXPECT_EQ(step.last_graph()->stats().replays, uint64_t(kSteps));
  }
}

TEST_P(ScheduleCase, EagerStepsFollowTheClosedForm) { CheckTrajectory(false); }
TEST_P(ScheduleCase, GraphReplaysFollowTheClosedForm) { CheckTrajectory(true); }

INSTANTIATE_TEST_SUITE_P(Schedules, ScheduleCase, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(Schedule, AdamReadsTheScheduledRateInGraphAsEagerly) {
  auto dev = CpuDevice();
  auto run = [&](bool graph) {
    Tensor w = ops::FromVector<float>({0.5f, -1.0f, 2.0f, 0.25f}, {4}, dev);
    Tensor g = ops::FromVector<float>({0.1f, -0.3f, 0.2f, 1.0f}, {4}, dev);
    nn::Adam opt(1.0);
    opt.SetSchedule(nn::Schedule::Sequential({nn::Schedule::LinearWarmup(0.01, 3), nn::Schedule::Cosine(0.01, 10)},
                                             {3}));
    CapturedStep step(dev, [&](const std::vector<Tensor>& in) {
      opt.Apply(in[0], w, "w");
      return std::vector<Tensor>{};
    });
    for (int k = 0; k < 15; ++k) graph ? (void)step({g}) : opt.Apply(g, w, "w");
    return w.ToVector<float>();
  };
  EXPECT_EQ(run(false), run(true));  // docs/design.md invariant 5: bitwise
}

TEST(Schedule, SchedulesResumeFromASetStep) {
  auto dev = CpuDevice();
  Tensor w = ops::Full({2}, 0.0, DType::kFloat64, dev);
  Tensor g = ops::Full({2}, 1.0, DType::kFloat64, dev);
  nn::SGD opt(0.1);
  nn::Schedule s = nn::Schedule::Exponential(0.5, 0.5);
  opt.SetSchedule(s);
  opt.SetScheduleStep(dev, 7);
  opt.Apply(g, w);
  EXPECT_DOUBLE_EQ(opt.LearningRateTensor(dev).Item(), s.ValueAt(7));
  EXPECT_EQ(opt.schedule_step(dev), 8);
  opt.ClearSchedule();  // back to the constant rate
  opt.Apply(g, w);
  EXPECT_DOUBLE_EQ(opt.LearningRateTensor(dev).Item(), 0.1);
}

TEST(Schedule, PlainOptimizerSubmitsNoScheduleOrClipOps) {
  auto dev = CpuDevice();
  Tensor w = ops::Full({2}, 0.0, DType::kFloat32, dev);
  Tensor g = ops::Full({2}, 1.0, DType::kFloat32, dev);
  nn::SGD opt(0.1, 0.9);
  auto graph = Graph::Capture(dev, "plain", [&] { opt.Step({{w, g}}); });
  ASSERT_EQ(graph->ops().ops.size(), 1u);
  EXPECT_EQ(graph->ops().ops[0].name(), "sgd_update");
  EXPECT_EQ(graph->ops().ops[0].attrs.Has("grad_scaled"), false);
}

TEST(Schedule, BadArgumentsNameTheScheduleAndTheValue) {
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no ValueError");
  };
  EXPECT_NE(message([] { nn::Schedule::LinearWarmup(0.1, -1); }).find("[schedule linear warm-up] warmup_steps -1"),
            std::string::npos);
  EXPECT_NE(message([] { nn::Schedule::MultiStep(0.1, {10, 5}, 0.1); })
                .find("[schedule multistep] milestones must increase: 5 after 10"),
            std::string::npos);
  EXPECT_NE(message([] { nn::Schedule::Step(0.1, 0, 0.5); }).find("[schedule step] step_size 0"), std::string::npos);
  EXPECT_NE(message([] { nn::Schedule::Cosine(-0.1, 10); }).find("[schedule cosine] base -0.1"), std::string::npos);
  EXPECT_NE(message([] { nn::Schedule::Exponential(0.1, -2); }).find("[schedule exponential] gamma -2"),
            std::string::npos);
  EXPECT_NE(message([] { nn::Schedule::Sequential({nn::Schedule::Constant(1), nn::Schedule::Constant(2)}, {3, 4}); })
                .find("[schedule sequential] 2 schedules need 1 milestones, got 2"),
            std::string::npos);
  EXPECT_NE(message([] { nn::SGD(0.1).SetGradClip({-1.0, 0, 1e-6}); }).find("[clip] max_norm -1"), std::string::npos);
  EXPECT_NE(message([] { nn::SGD(0.1).SetGradClip({0, -0.5, 1e-6}); }).find("[clip] clip_value -0.5"),
            std::string::npos);
}

// ---- the host-transfer trap ----

TEST(HostTransferTrap, AHostReadInsideAReplayIsAGraphError) {
  auto dev = CpuDevice();
  Tensor x = ops::Full({}, 2.0, DType::kFloat64, dev);
  Tensor y = ops::Full({}, 0.0, DType::kFloat64, dev);
  auto graph = Graph::Capture(dev, "peek", [&] { CallInto("test_host_peek", {x}, {y}); });
  graph->Run();  // trap off: the read is allowed
  EXPECT_EQ(y.Item(), 2.0);
  dev->set_trap_host_transfers(true);
  EXPECT_THROW(graph->Run(), GraphError);
  EXPECT_NO_THROW(y.Item());  // between replays: allowed
  dev->set_trap_host_transfers(false);
}

// ---- clipping ----

std::vector<Tensor> RandomGrads(std::mt19937& gen, const std::shared_ptr<Device>& dev, float scale) {
  std::normal_distribution<float> d(0, scale);
  std::vector<Tensor> out;
  for (Shape s : {Shape{7}, Shape{3, 5}, Shape{2, 2, 4}}) {
    std::vector<float> v(size_t(NumElements(s)));
    for (float& x : v) x = d(gen);
    out.push_back(ops::FromVector(v, s, dev));
  }
  return out;
}

double ReferenceNorm(const std::vector<Tensor>& grads) {
  double s = 0;
  for (const Tensor& g : grads)
    for (float x : g.ToVector<float>()) s += double(x) * double(x);
  return std::sqrt(s);
}

TEST(Clip, GlobalGradNormMatchesADoubleReference) {
  std::mt19937 gen(1);
  auto dev = CpuDevice();
  auto grads = RandomGrads(gen, dev, 3.0f);
  EXPECT_NEAR(nn::GlobalGradNorm(grads).Item(), ReferenceNorm(grads), 1e-12 * ReferenceNorm(grads));
  EXPECT_THROW(nn::GlobalGradNorm({}), ValueError);
}

struct ClipCase {
  const char* name;
  nn::GradClip clip;
  double momentum;
};

void PrintTo(const ClipCase& c, std::ostream* os) { *os << c.name; }

class ClipSgd : public ::testing::TestWithParam<std::tuple<ClipCase, bool>> {};

// SGD (with or without momentum) under clipping, fed new gradients every step, against the
// update computed in double from the clipped gradient; eagerly and as one replayed graph.
TEST_P(ClipSgd, MatchesADoubleReference) {
  const ClipCase& c = std::get<0>(GetParam());
  const bool graph = std::get<1>(GetParam());
  auto dev = CpuDevice();
  std::mt19937 gen(2);
  std::vector<Tensor> params = RandomGrads(gen, dev, 1.0f);
  std::vector<std::vector<double>> ref, buf;
  for (const Tensor& p : params) {
    auto v = p.ToVector<float>();
    ref.emplace_back(v.begin(), v.end());
    buf.emplace_back(v.size(), 0.0);
  }
  const double lr = 0.05;
  nn::SGD opt(lr, c.momentum);
  opt.SetGradClip(c.clip);
  CapturedStep step(dev, [&](const std::vector<Tensor>& grads) {
    std::vector<std::pair<Tensor, Tensor>> pg;
    for (size_t i = 0; i < params.size(); ++i) pg.emplace_back(params[i], grads[i]);
    opt.Step(pg);
    return std::vector<Tensor>{};
  });
  dev->set_trap_host_transfers(true);
  for (int k = 0; k < 6; ++k) {
    // Alternate large gradients (clipped) and small ones (a norm below max_norm: scale 1).
    auto grads = RandomGrads(gen, dev, k % 2 ? 0.05f : 4.0f);
    double scale = 1;
    if (c.clip.max_norm > 0) scale = std::min(1.0, c.clip.max_norm / (ReferenceNorm(grads) + c.clip.eps));
    if (graph) {
      step(grads);
    } else {
      std::vector<std::pair<Tensor, Tensor>> pg;
      for (size_t i = 0; i < params.size(); ++i) pg.emplace_back(params[i], grads[i]);
      opt.Step(pg);
    }
    for (size_t i = 0; i < params.size(); ++i) {
      auto gv = grads[i].ToVector<float>();
      auto pv = params[i].ToVector<float>();
      for (size_t j = 0; j < gv.size(); ++j) {
        double gj = double(gv[j]) * scale;
        if (c.clip.clip_value > 0) gj = std::max(-c.clip.clip_value, std::min(c.clip.clip_value, gj));
        buf[i][j] = c.momentum > 0 ? c.momentum * buf[i][j] + gj : gj;
        ref[i][j] -= lr * buf[i][j];
        ASSERT_NEAR(pv[j], ref[i][j], 1e-5) << c.name << " step " << k << " tensor " << i << " element " << j;
      }
    }
    if (c.clip.max_norm > 0) EXPECT_NEAR(opt.last_grad_norm().Item(), ReferenceNorm(grads), 1e-9);
  }
  dev->set_trap_host_transfers(false);
  if (graph) {
    EXPECT_EQ(step.num_graphs(), 1u);
    EXPECT_EQ(step.last_graph()->stats().replays, 6u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Clipping, ClipSgd,
    ::testing::Combine(::testing::Values(ClipCase{"norm", {1.0, 0, 1e-6}, 0}, ClipCase{"norm_momentum", {0.5, 0, 1e-6}, 0.9},
                                         ClipCase{"value", {0, 0.3, 1e-6}, 0},
                                         ClipCase{"value_momentum", {0, 0.3, 1e-6}, 0.9}),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<ClipCase, bool>>& i) {
      return std::string(std::get<0>(i.param).name) + (std::get<1>(i.param) ? "_graph" : "_eager");
    });

// Adam clipped by norm equals Adam fed the gradients scaled beforehand (in float64, rounded).
TEST(Clip, AdamByNormEqualsAdamOnPrescaledGradients) {
  auto dev = CpuDevice();
  std::mt19937 gen(4);
  std::vector<Tensor> a = RandomGrads(gen, dev, 1.0f), b;
  for (const Tensor& t : a) b.push_back(ops::FromVector(t.ToVector<float>(), t.shape(), dev));
  nn::Adam clipped(0.01), plain(0.01);
  clipped.SetGradClip({0.7, 0, 1e-6});
  for (int k = 0; k < 4; ++k) {
    auto grads = RandomGrads(gen, dev, 2.0f);
    const double scale = std::min(1.0, 0.7 / (ReferenceNorm(grads) + 1e-6));
    std::vector<std::pair<Tensor, Tensor>> pa, pb;
    for (size_t i = 0; i < a.size(); ++i) {
      pa.emplace_back(a[i], grads[i]);
      std::vector<float> s;
      for (float x : grads[i].ToVector<float>()) s.push_back(float(double(x) * scale));
      pb.emplace_back(b[i], ops::FromVector(s, grads[i].shape(), dev));
    }
    clipped.Step(pa);
    plain.Step(pb);
  }
  for (size_t i = 0; i < a.size(); ++i) {
    auto va = a[i].ToVector<float>(), vb = b[i].ToVector<float>();
    for (size_t j = 0; j < va.size(); ++j) EXPECT_NEAR(va[j], vb[j], 1e-6);
  }
}

// Backward, then the updates after the norm of every gradient (Model::Step's path).
TEST(Clip, BackwardAndUpdateClipsByTheGlobalNorm) {
  auto dev = CpuDevice();
  Tensor w = ops::FromVector<float>({3.0f, -4.0f}, {2}, dev);
  Tensor v = ops::FromVector<float>({0.0f}, {1}, dev);
  w.set_requires_grad(true);
  v.set_requires_grad(true);
  nn::SGD opt(0.5);
  opt.SetGradClip({1.0, 0, 0});
  // loss = sum(w * w) + 0 * v: gradients (6, -8) and (0), global norm 10, scale 0.1
  opt.BackwardAndUpdate(ops::Add(ops::Sum(ops::Mul(w, w)), ops::Sum(ops::MulScalar(v, 0.0))));
  EXPECT_NEAR(opt.last_grad_norm().Item(), 10.0, 1e-6);
  auto got = w.ToVector<float>();
  EXPECT_NEAR(got[0], 3.0 - 0.5 * 0.6, 1e-6);
  EXPECT_NEAR(got[1], -4.0 + 0.5 * 0.8, 1e-6);
}

// The schedule's counter travels in the optimizer's checkpoint meta and resumes the schedule.
TEST(Schedule, CheckpointCarriesTheScheduleStep) {
  auto dev = CpuDevice();
  Tensor w = ops::Full({2}, 0.0, DType::kFloat32, dev);
  Tensor g = ops::Full({2}, 1.0, DType::kFloat32, dev);
  const nn::Schedule s = nn::Schedule::Step(0.1, 2, 0.5);
  nn::SGD a(0.1), b(0.1);
  a.SetSchedule(s);
  b.SetSchedule(s);
  for (int k = 0; k < 5; ++k) a.Apply(g, w);
  io::Checkpoint ckpt;
  nn::AddOptimizerState(a, &ckpt.tensors, &ckpt.meta);
  EXPECT_EQ(ckpt.meta.at("optimizer/schedule_step"), 5.0);
  nn::RestoreOptimizerState(ckpt, b, dev);
  EXPECT_EQ(b.schedule_step(dev), 5);
  b.Apply(g, w);
  EXPECT_DOUBLE_EQ(b.LearningRateTensor(dev).Item(), s.ValueAt(5));
  ckpt.meta["optimizer/schedule_step"] = -2;
  EXPECT_THROW(nn::RestoreOptimizerState(ckpt, b, dev), IOError);
}

// A DistOpt hands a schedule and clipping to the optimizer it wraps (which updates after the
// all-reduce; Note [Clipping under DistOpt]).
TEST(Schedule, DistOptHandsScheduleAndClipToTheWrappedOptimizer) {
  auto inner = std::make_shared<nn::SGD>(0.1);
  nn::DistOpt dist(inner, MakeInProcGroup(1)[0]);
  dist.SetSchedule(nn::Schedule::Constant(0.5));
  ASSERT_NE(inner->schedule(), nullptr);
  dist.SetGradClip({0, 0.25, 1e-6});
  EXPECT_EQ(inner->grad_clip().clip_value, 0.25);
  dist.SetGradClip({1.0, 0, 1e-6});
  EXPECT_EQ(inner->grad_clip().max_norm, 1.0);
  EXPECT_TRUE(dist.clips_by_norm());
  EXPECT_THROW(dist.SetGradClip({-1.0, 0, 1e-6}), ValueError);
}

TEST(Clip, ClippingByNormNeedsStep) {
  auto dev = CpuDevice();
  Tensor w = ops::Full({2}, 0.0, DType::kFloat32, dev);
  nn::SGD opt(0.1);
  opt.SetGradClip({1.0, 0, 1e-6});
  EXPECT_THROW(opt.Apply(w, w), ValueError);
}

}  // namespace
}  // namespace test
}  // namespace loom
